package controlplane

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// forwarder passes TCP connections from a listening address to a target unchanged (TLS end to
// end): a second address of an API server, as another cluster reaches it.
type forwarder struct {
	addr        string
	ln          net.Listener
	connections atomic.Int64

	mu    sync.Mutex
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func forward(ip net.IP, target string) (*forwarder, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		return nil, fmt.Errorf("failed to listen on %s: %w", ip, err)
	}
	f := &forwarder{addr: ln.Addr().String(), ln: ln, conns: map[net.Conn]bool{}}
	f.wg.Add(1)
	go f.serve(target)
	return f, nil
}

func (f *forwarder) serve(target string) {
	defer f.wg.Done()
	for {
		in, err := f.ln.Accept()
		if err != nil {
			return // stopped
		}
		f.connections.Add(1)
		out, err := net.Dial("tcp", target)
		if err != nil {
			in.Close()
			continue
		}
		if !f.track(in, out) {
			return
		}
		f.wg.Add(2)
		go f.pipe(out, in)
		go f.pipe(in, out)
	}
}

// track records a pair of connections to close at stop; false when stopped already.
func (f *forwarder) track(conns ...net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conns == nil {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		f.conns[c] = true
	}
	return true
}

func (f *forwarder) pipe(dst, src net.Conn) {
	defer f.wg.Done()
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
	f.mu.Lock()
	delete(f.conns, dst)
	delete(f.conns, src)
	f.mu.Unlock()
}

// stop closes the listener and every connection, and waits for them.
func (f *forwarder) stop() {
	f.ln.Close()
	f.mu.Lock()
	for c := range f.conns {
		c.Close()
	}
	f.conns = nil
	f.mu.Unlock()
	f.wg.Wait()
}
