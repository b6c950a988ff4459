package gitsource

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"

	"github.com/go-git/go-git/v5/plumbing"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// ErrServerUnavailable is a sync that failed because the repository's server did not answer
// (it could not be reached, stalled, broke off or answered 5xx), not because of the repository
// (a missing branch, refused credentials, a bad commit). The poller retries a repository that
// failed so as soon as another repository of the same server synced: its server answers again.
var ErrServerUnavailable = errors.New("the repository's server is unavailable")

// ServerUnavailable reports whether err says the server did not answer.
func ServerUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrServerUnavailable) || errors.Is(err, ErrStalled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	// A connection refused, reset or unreachable is a *net.OpError, whichever call saw it.
	var dns *net.DNSError
	var op *net.OpError
	if errors.As(err, &dns) || errors.As(err, &op) {
		return true
	}
	// go-git's error for any other status carries the response, behind a type without Unwrap.
	var unexpected *plumbing.UnexpectedError
	if errors.As(err, &unexpected) {
		var status *githttp.Err
		if errors.As(unexpected.Err, &status) && status.Response != nil && status.Response.StatusCode >= http.StatusInternalServerError {
			return true
		}
	}
	var registry *transport.Error
	return errors.As(err, &registry) && registry.StatusCode >= http.StatusInternalServerError
}

// MarkUnavailable keeps, on an error rewritten for people (scrubbed of secrets), that the
// server did not answer; its text is err's.
func MarkUnavailable(err error) error {
	if err == nil {
		return nil
	}
	return unavailableError{err}
}

type unavailableError struct{ error }

func (e unavailableError) Unwrap() error        { return e.error }
func (e unavailableError) Is(target error) bool { return target == ErrServerUnavailable }
