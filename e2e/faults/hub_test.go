package faults

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/e2e/hubmetrics"
)

// The hub's timings in the suite: an election short enough that a stall of a few seconds costs
// the Lease, agents judged offline 6 s after their last renewal, a hung git server found in 2 s.
var hubTimings = []string{
	"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms",
	"--heartbeat-interval=1s", "--heartbeat-deadline=6s", "--git-stall-timeout=2s",
}

// supervisedHub is the hub binary run as a kubelet runs a container: started again at once
// whenever its process ends (the first restart of a crash loop is immediate), until the test
// ends. It samples the resident memory of every process it runs.
type supervisedHub struct {
	t                      *testing.T
	webhook, metrics, logs string

	mu       sync.Mutex
	proc     *os.Process
	starts   int
	stopping bool
	// peak is the largest resident size (VmHWM) a process of the hub reached since peakSince.
	peak uint64
	// ended says how each process the test did not SIGKILL ended, with the last line it logged.
	ended []string
	done  chan struct{}
}

// startHub starts the hub under a supervisor with the suite's timings and args; it stops with
// the test.
func startHub(t *testing.T, args ...string) *supervisedHub {
	t.Helper()
	h := &supervisedHub{t: t, webhook: freeAddr(t), metrics: freeAddr(t), logs: filepath.Join(t.TempDir(), "hub.log"), done: make(chan struct{})}
	logs, err := os.Create(h.logs)
	if err != nil {
		t.Fatal(err)
	}
	argv := append([]string{"--kubeconfig=" + apiServer.KubeconfigPath, "--namespace=flotilla-system",
		"--leader-elect-identity=hub-0", "--metrics-secure=false", "--metrics-addr=" + h.metrics,
		"--webhook-addr=" + h.webhook, "--cache-dir=" + t.TempDir(), "--allowed-provider-addresses=127.0.0.1"}, hubTimings...)
	argv = append(argv, args...)
	go h.supervise(argv, logs)
	t.Cleanup(func() {
		h.stop()
		logs.Close()
		if t.Failed() {
			if out, err := os.ReadFile(h.logs); err == nil {
				t.Logf("the hub's log (last 200 lines):\n%s", lastLines(out, 200))
			}
		}
	})
	return h
}

func (h *supervisedHub) supervise(argv []string, logs *os.File) {
	defer close(h.done)
	for {
		cmd := exec.Command(hubBinary, argv...)
		cmd.Stdout, cmd.Stderr = logs, logs
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		h.mu.Lock()
		if h.stopping {
			h.mu.Unlock()
			return
		}
		err := cmd.Start()
		if err == nil {
			h.proc = cmd.Process
			h.starts++
		}
		h.mu.Unlock()
		if err != nil {
			h.t.Errorf("the supervisor could not start the hub: %v", err)
			return
		}
		sampled := make(chan struct{})
		go h.sample(cmd.Process.Pid, sampled)
		_ = cmd.Wait()
		close(sampled)
		h.mu.Lock()
		if status, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !status.Signaled() || status.Signal() != syscall.SIGKILL {
			out, _ := os.ReadFile(h.logs)
			h.ended = append(h.ended, cmd.ProcessState.String()+", its last lines:\n"+lastLines(out, 8))
		}
		h.mu.Unlock()
	}
}

// endings says how the processes the test did not kill ended.
func (h *supervisedHub) endings() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ended)
}

// sample records the process's high-water mark of resident memory until it ends. An exec of
// a new image starts a new mark: sampled often enough, the peak of each is seen.
func (h *supervisedHub) sample(pid int, ended <-chan struct{}) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if hwm, ok := procStatus(pid, "VmHWM"); ok {
			h.mu.Lock()
			h.peak = max(h.peak, hwm)
			h.mu.Unlock()
		}
		select {
		case <-ended:
			return
		case <-tick.C:
		}
	}
}

// procStatus reads a size field of the process's status (VmHWM, VmRSS), in bytes.
func procStatus(pid int, field string) (uint64, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

// resident is the hub's resident size now, in bytes.
func (h *supervisedHub) resident() uint64 {
	h.mu.Lock()
	pid := h.proc.Pid
	h.mu.Unlock()
	rss, _ := procStatus(pid, "VmRSS")
	return rss
}

// peakSince is the largest resident size since the last call (and resets it to now's).
func (h *supervisedHub) peakSince() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.peak
	h.peak = 0
	return p
}

// kill SIGKILLs the hub's process, as a node failure or the OOM killer would; the supervisor
// starts it again.
func (h *supervisedHub) kill() {
	h.mu.Lock()
	defer h.mu.Unlock()
	_ = h.proc.Kill()
}

// processes is how many processes of the hub the supervisor started.
func (h *supervisedHub) processes() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.starts
}

func (h *supervisedHub) stop() {
	h.mu.Lock()
	h.stopping = true
	if h.proc != nil {
		_ = h.proc.Kill()
	}
	h.mu.Unlock()
	<-h.done
}

// leads reads the hub's metrics: whether it holds its Lease.
func (h *supervisedHub) leads() bool { return hubmetrics.Leads(h.metrics) }

// logged counts the lines of the hub's log that hold s.
func (h *supervisedHub) logged(s string) int {
	out, _ := os.ReadFile(h.logs)
	return bytes.Count(out, []byte(s))
}

func lastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// freeAddr is a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
