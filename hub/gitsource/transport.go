package gitsource

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport/client"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
)

// A git server that hangs must cost a poll worker seconds, not the whole of a fetch's budget: a
// large repository on a slow link may take minutes to fetch, a server that stopped answering
// is known as soon as nothing came for a while. So each remote operation has two bounds: the
// whole of it (Client.Timeout, long) and the silence within it (Client.StallTimeout, short):
// connecting, the TLS handshake, the response's headers and every read of its body must make
// progress within it, or the operation fails naming the stall.

// DefaultStallTimeout is how long a git server may send nothing before its operation is
// abandoned.
const DefaultStallTimeout = 15 * time.Second

// DefaultTimeout bounds one remote operation as a whole.
const DefaultTimeout = 10 * time.Minute

// ErrStalled is a remote operation abandoned because the server sent nothing for the stall
// timeout.
var ErrStalled = errors.New("the git server sent nothing")

// stallKey carries an operation's stall timeout to the connections it dials.
type stallKey struct{}

// withStallTimeout is ctx for a remote operation whose connections give up after stall of
// silence.
func withStallTimeout(ctx context.Context, stall time.Duration) context.Context {
	return context.WithValue(ctx, stallKey{}, stall)
}

func stallTimeoutOf(ctx context.Context) time.Duration {
	if d, ok := ctx.Value(stallKey{}).(time.Duration); ok && d > 0 {
		return d
	}
	return DefaultStallTimeout
}

var installTransports sync.Once

// useStallBoundTransports makes go-git's HTTP and HTTPS transports, for the whole process,
// the stall-bound one. go-git clones the transport for a repository with a CA bundle or a proxy
// of its own, which keeps its dialer and timeouts.
func useStallBoundTransports() {
	installTransports.Do(func() {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// Proxies are the operator's (the environment of the hub), as before.
		// The TLS handshake and the response's headers are reads of the connection: bound by
		// the operation's stall timeout like the body.
		t.DialContext = dialStallBound
		t.ExpectContinueTimeout = time.Second
		t.IdleConnTimeout = 90 * time.Second
		c := githttp.NewClient(&http.Client{Transport: t})
		client.InstallProtocol("http", c)
		client.InstallProtocol("https", c)
	})
}

// dialStallBound dials with the operation's stall timeout as the connect timeout, and returns
// a connection whose every read and write must progress within it.
func dialStallBound(ctx context.Context, network, addr string) (net.Conn, error) {
	stall := stallTimeoutOf(ctx)
	d := net.Dialer{Timeout: stall, KeepAlive: 30 * time.Second}
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, fmt.Errorf("%w for %s while connecting to %s: %w", ErrStalled, stall, addr, err)
		}
		return nil, err
	}
	return &stallBoundConn{Conn: conn, stall: stall}, nil
}

// stallBoundConn fails a read or write that makes no progress within stall.
type stallBoundConn struct {
	net.Conn
	stall time.Duration
}

func (c *stallBoundConn) Read(p []byte) (int, error) {
	_ = c.SetReadDeadline(time.Now().Add(c.stall))
	n, err := c.Conn.Read(p)
	return n, c.explain(err)
}

func (c *stallBoundConn) Write(p []byte) (int, error) {
	_ = c.SetWriteDeadline(time.Now().Add(c.stall))
	n, err := c.Conn.Write(p)
	return n, c.explain(err)
}

func (c *stallBoundConn) explain(err error) error {
	var ne net.Error
	if err != nil && errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%w for %s (%s): %w", ErrStalled, c.stall, c.RemoteAddr(), err)
	}
	return err
}
