package controlplane

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/client-go/tools/clientcmd"
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
	// open is closed while bytes may pass; held, it is a channel nobody closes until Release.
	open chan struct{}
}

func forward(ip net.IP, target string) (*forwarder, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		return nil, fmt.Errorf("failed to listen on %s: %w", ip, err)
	}
	f := &forwarder{addr: ln.Addr().String(), ln: ln, conns: map[net.Conn]bool{}, open: make(chan struct{})}
	close(f.open)
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
		f.waitOpen()
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

// waitOpen waits while the forwarder is held.
func (f *forwarder) waitOpen() {
	f.mu.Lock()
	open := f.open
	f.mu.Unlock()
	<-open
}

// hold stops every byte either way and every new connection until release: the connections
// stay open and the requests on them unanswered, as with an API server whose etcd stalls.
func (f *forwarder) hold() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.open:
		f.open = make(chan struct{})
	default: // held already
	}
}

func (f *forwarder) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.open:
	default:
		close(f.open)
	}
}

func (f *forwarder) pipe(dst, src net.Conn) {
	defer f.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			// What arrived while held is passed on only once released.
			f.waitOpen()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
	f.mu.Lock()
	delete(f.conns, dst)
	delete(f.conns, src)
	f.mu.Unlock()
}

// stop closes the listener and every connection, and waits for them.
func (f *forwarder) stop() {
	f.release()
	f.ln.Close()
	f.mu.Lock()
	for c := range f.conns {
		c.Close()
	}
	f.conns = nil
	f.mu.Unlock()
	f.wg.Wait()
}

// StallPoint is a second address of a cluster's API server for the clients a test points at
// it, which the test can stall: Hold leaves every request through it unanswered and every new
// connection hanging, as an API server whose etcd stalls does; Release lets them through.
type StallPoint struct {
	fwd *forwarder
	// KubeconfigPath is the cluster's admin kubeconfig through the stall point.
	KubeconfigPath string
}

// Hold stalls every connection through the stall point.
func (s *StallPoint) Hold() { s.fwd.hold() }

// Release lets what was held through.
func (s *StallPoint) Release() { s.fwd.release() }

// Close closes the stall point and every connection through it.
func (s *StallPoint) Close() { s.fwd.stop() }

// NewStallPoint opens a stall point to the cluster's API server on loopback, stopped with the
// cluster.
func (c *Cluster) NewStallPoint(name string) (*StallPoint, error) {
	fwd, err := forward(net.IPv4(127, 0, 0, 1), strings.TrimPrefix(c.Host, "https://"))
	if err != nil {
		return nil, err
	}
	c.cleanups = append(c.cleanups, fwd.stop)
	cfg, err := clientcmd.LoadFromFile(c.KubeconfigPath)
	if err != nil {
		fwd.stop()
		return nil, err
	}
	for _, cl := range cfg.Clusters {
		cl.Server = "https://" + fwd.addr
	}
	path := filepath.Join(c.dir, "kubeconfig-"+name)
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		fwd.stop()
		return nil, err
	}
	return &StallPoint{fwd: fwd, KubeconfigPath: path}, nil
}
