package gitserver

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"
)

// Fault is how a faulty git server misbehaves on the requests it picks: the pack transfer
// (git-upload-pack's POST) by default, or every request.
type Fault struct {
	// Status, when set, answers with this HTTP status (a 500, a 503) and nothing else.
	Status int
	// Hang, once After bytes of the answer were sent (0: before the headers), sends nothing
	// more until the client goes away.
	Hang  bool
	After int
	// Pause, when set, sends the answer Chunk bytes (default 64) at a time with Pause between:
	// a slow link that keeps making progress.
	Pause time.Duration
	Chunk int
	// EveryRequest applies the fault to the listing of references too.
	EveryRequest bool
}

// ServeFaulty serves the repository over HTTP with fault, until the test ends. Faulted counts
// the requests the fault was applied to.
func (u *Upstream) ServeFaulty(fault Fault) (*httptest.Server, *atomic.Int64) {
	u.t.Helper()
	srv, faults := u.ServeSwitchable()
	faults.Set(fault)
	return srv, &faults.Faulted
}

// Faults is the fault of a server ServeSwitchable started, changed while it serves.
type Faults struct {
	current atomic.Pointer[Fault]
	// Faulted counts the requests served under the fault set: the pack transfers (every
	// request, with EveryRequest).
	Faulted atomic.Int64
}

// Set makes fault apply from the next request on; the zero Fault serves as a healthy server.
func (f *Faults) Set(fault Fault) { f.current.Store(&fault) }

// ServeSwitchable serves the repository over HTTP, healthy until the test sets a fault, until
// the test ends.
func (u *Upstream) ServeSwitchable() (*httptest.Server, *Faults) {
	u.t.Helper()
	plain := u.ServeHTTP("", "")
	plain.Close()
	faults := &Faults{}
	faults.Set(Fault{})
	next := plain.Config.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fault := *faults.current.Load()
		if !fault.EveryRequest && !(r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-upload-pack")) {
			next.ServeHTTP(w, r)
			return
		}
		faults.Faulted.Add(1)
		if fault.Status != 0 {
			http.Error(w, http.StatusText(fault.Status), fault.Status)
			return
		}
		if fault.Hang && fault.After == 0 {
			<-r.Context().Done()
			return
		}
		next.ServeHTTP(&faultyWriter{ResponseWriter: w, fault: fault, done: r.Context().Done()}, r)
	}))
	srv.URL += pathOf(plain)
	u.t.Cleanup(srv.Close)
	return srv, faults
}

// faultyWriter passes an answer on as its Fault says.
type faultyWriter struct {
	http.ResponseWriter
	fault Fault
	done  <-chan struct{}
	sent  int
	hung  bool
}

func (w *faultyWriter) Write(p []byte) (int, error) {
	if w.hung {
		return len(p), nil // swallowed: the client sees silence
	}
	chunk := w.fault.Chunk
	if chunk <= 0 {
		chunk = 64
	}
	written := 0
	for written < len(p) {
		n := len(p) - written
		if w.fault.Pause > 0 {
			n = min(n, chunk)
		}
		if w.fault.Hang && w.sent+n > w.fault.After {
			n = w.fault.After - w.sent
		}
		if n > 0 {
			m, err := w.ResponseWriter.Write(p[written : written+n])
			written, w.sent = written+m, w.sent+m
			if err != nil {
				return written, err
			}
			if f, ok := w.ResponseWriter.(http.Flusher); ok {
				f.Flush()
			}
		}
		if w.fault.Hang && w.sent >= w.fault.After {
			w.hung = true
			<-w.done
			return len(p), nil
		}
		if w.fault.Pause > 0 {
			select {
			case <-time.After(w.fault.Pause):
			case <-w.done:
				return written, http.ErrHandlerTimeout
			}
		}
	}
	return written, nil
}

func (w *faultyWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok && !w.hung {
		f.Flush()
	}
}
