package gitsource

import (
	"errors"
	"net"
	"net/url"
	"regexp"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
	"golang.org/x/crypto/ssh"
)

var userinfo = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@`)

// Sanitize removes credentials from URLs in a message: anything that reaches a log, an event or
// a status passes through it.
func Sanitize(s string) string {
	return userinfo.ReplaceAllString(s, "${1}")
}

// SanitizeURL removes the user info of one URL.
func SanitizeURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return Sanitize(raw)
	}
	u.User = nil
	return u.String()
}

// Cause names why talking to a repository failed, for the GitRepo's SourceReady condition.
type Cause string

const (
	CauseAuthentication Cause = "AuthenticationFailed"
	CauseUnreachable    Cause = "Unreachable"
	CauseRefNotFound    Cause = "RefNotFound"
	CauseOther          Cause = "FetchFailed"
)

// ErrRefNotFound is returned when the wanted branch, tag or commit does not exist.
var ErrRefNotFound = errors.New("not found in the repository")

// Classify names the cause of an error from Resolve or Checkout.
func Classify(err error) Cause {
	var hk *HostKeyError
	var netErr net.Error
	var opErr *net.OpError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrRefNotFound):
		return CauseRefNotFound
	case errors.Is(err, transport.ErrAuthenticationRequired), errors.Is(err, transport.ErrAuthorizationFailed),
		errors.As(err, &hk), strings.Contains(err.Error(), "ssh: handshake failed"), strings.Contains(err.Error(), "unable to authenticate"):
		return CauseAuthentication
	case errors.As(err, &opErr), errors.As(err, &netErr), strings.Contains(err.Error(), "connection refused"),
		strings.Contains(err.Error(), "no such host"), errors.Is(err, transport.ErrRepositoryNotFound):
		return CauseUnreachable
	}
	var ke *ssh.ExitError
	if errors.As(err, &ke) {
		return CauseUnreachable
	}
	return CauseOther
}
