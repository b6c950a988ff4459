package bundle

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
)

// A template is a program: a chart's templates, and the ${ } templates of its values, can
// loop over a range of a billion, repeat a string until memory runs out, or recurse. Go cannot
// stop a goroutine that does so, so a Sandbox runs both template engines in a child process of
// the running binary, which it kills when the render passes its deadline, its memory limit or
// its output limit. A repository that renders forever or blows up then costs one failed render
// of its own, and every other GitRepo keeps rendering.
//
// The child is this same binary started with sandboxEnv set: the package's init serves
// length-framed requests on standard input until it closes, and exits before main runs. Every binary that links this package
// (the hub, the CLI, tests) can therefore be its own sandbox; nothing else is installed.

// sandboxEnv marks the child process.
const sandboxEnv = "FLOTILLA_RENDER_SANDBOX"

// Sandbox limits.
const (
	DefaultRenderTimeout = 60 * time.Second
	// DefaultRenderMemory is the child's memory: well under the hub container's own limit
	// (1 GiB in the chart), so that no repository's render can run the hub out of memory.
	DefaultRenderMemory = 256 << 20
)

// runtimeOverhead is the memory the child's Go runtime maps beside its heap (stacks, GC
// metadata), allowed on top of the render's limit.
const runtimeOverhead = 64 << 20

// Sandbox runs template renders in child processes.
type Sandbox struct {
	// Timeout bounds one render; default DefaultRenderTimeout.
	Timeout time.Duration
	// Memory bounds the child's memory in bytes, enforced by the kernel (RLIMIT_DATA: every
	// allocation past it fails, however fast it comes); default DefaultRenderMemory.
	Memory int64
	// Output bounds the rendered manifests in bytes; default 64 MiB.
	Output int64
	// Executable is the binary to start; default the running one.
	Executable string
}

func init() {
	if os.Getenv(sandboxEnv) == "" {
		return
	}
	os.Exit(serveSandbox(os.Stdin, os.Stdout))
}

// LimitError says a render passed one of the sandbox's limits.
type LimitError struct {
	// Limit names it: "deadline", "memory" or "output".
	Limit string
	Value string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("the render passed its %s limit of %s and was stopped", e.Limit, e.Value)
}

// sandboxRequest is one render: a Helm chart with values, or values templates with a target.
type sandboxRequest struct {
	Output int64 `json:"output"`
	// Helm.
	Chart                []byte         `json:"chart,omitempty"`
	Values               map[string]any `json:"values,omitempty"`
	Release              string         `json:"release,omitempty"`
	Namespace            string         `json:"namespace,omitempty"`
	KubeVersion          string         `json:"kubeVersion,omitempty"`
	SkipSchemaValidation bool           `json:"skipSchemaValidation,omitempty"`
	// Values templates.
	Template map[string]any `json:"template,omitempty"`
	Target   *Target        `json:"target,omitempty"`
	// Kustomize.
	Kustomize *kustomizeRequest `json:"kustomize,omitempty"`
}

// kustomizeRequest is a Kustomize build: the child reads the checkout at Checkout itself
// (through the same confined root and checks as the renderer), once per checkout, and lays
// Files over it for this build.
type kustomizeRequest struct {
	Checkout string            `json:"checkout"`
	Dir      string            `json:"dir"`
	Files    map[string][]byte `json:"files,omitempty"`
	// Refused are files a build may not read, with why (SOPS files the parent could not
	// decrypt).
	Refused map[string]string `json:"refused,omitempty"`
}

type sandboxResponse struct {
	Manifest string         `json:"manifest,omitempty"`
	Values   map[string]any `json:"values,omitempty"`
	Error    string         `json:"error,omitempty"`
	// OutputLimit: the render wrote more than the output limit.
	OutputLimit bool `json:"outputLimit,omitempty"`
}

func outputLimit(limit int64) *LimitError {
	return &LimitError{Limit: "output", Value: fmt.Sprintf("%d KiB", limit>>10)}
}

// exitOutOfMemory is the Go runtime's exit code when the kernel refused it memory.
const exitOutOfMemory = 2

// sandboxSession is one child process serving a Renderer's template renders in turn, started
// on first use: a commit's renders pay for one process start, not one each. A render past a
// limit kills the child, and the next render starts another.
type sandboxSession struct {
	s  *Sandbox
	mu sync.Mutex
	w  *sandboxWorker
}

// sandboxWorker is a running child.
type sandboxWorker struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    io.Reader
	stderr *limitedBuffer
	exited chan struct{} // closed once the child has exited
	err    error         // how it exited
}

func (s *Sandbox) session() *sandboxSession { return &sandboxSession{s: s} }

func (s *Sandbox) limits() (timeout time.Duration, memory, output int64) {
	timeout, memory, output = s.Timeout, s.Memory, s.Output
	if timeout <= 0 {
		timeout = DefaultRenderTimeout
	}
	if memory <= 0 {
		memory = DefaultRenderMemory
	}
	if output <= 0 {
		output = maxRendered
	}
	return timeout, memory, output
}

// helm renders a chart in the child.
func (ss *sandboxSession) helm(ctx context.Context, archive []byte, vals map[string]any, release, namespace string, h *Helm, kubeVersion string) (string, error) {
	req := sandboxRequest{Chart: archive, Values: vals, Release: release, Namespace: namespace, KubeVersion: kubeVersion,
		SkipSchemaValidation: h != nil && h.SkipSchemaValidation}
	resp, err := ss.run(ctx, req)
	if err != nil {
		return "", err
	}
	return resp.Manifest, nil
}

// values evaluates values templates in the child.
func (ss *sandboxSession) values(ctx context.Context, vals map[string]any, t Target) (map[string]any, error) {
	resp, err := ss.run(ctx, sandboxRequest{Template: vals, Target: &t})
	if err != nil {
		return nil, err
	}
	return resp.Values, nil
}

// kustomize builds the kustomization in dir of the checkout at root in the child.
func (ss *sandboxSession) kustomize(ctx context.Context, root, dir string, files map[string][]byte, refused map[string]string) ([]byte, error) {
	resp, err := ss.run(ctx, sandboxRequest{Kustomize: &kustomizeRequest{Checkout: root, Dir: dir, Files: files, Refused: refused}})
	if err != nil {
		return nil, err
	}
	return []byte(resp.Manifest), nil
}

// close ends the child.
func (ss *sandboxSession) close() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.w != nil {
		ss.w.stop()
		ss.w = nil
	}
}

func (ss *sandboxSession) run(ctx context.Context, req sandboxRequest) (*sandboxResponse, error) {
	timeout, memory, output := ss.s.limits()
	req.Output = output
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.w == nil {
		w, err := startWorker(ss.s.Executable, memory)
		if err != nil {
			return nil, err
		}
		ss.w = w
	}
	w := ss.w
	in, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("render sandbox: %w", err)
	}
	type answer struct {
		data []byte
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		if err := writeFrame(w.in, in); err != nil {
			answered <- answer{err: err}
			return
		}
		data, err := readFrame(w.out, output+1<<20)
		answered <- answer{data, err}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var a answer
	select {
	case a = <-answered:
	case <-timer.C:
		ss.kill()
		return nil, &LimitError{Limit: "deadline", Value: timeout.String()}
	case <-ctx.Done():
		ss.kill()
		return nil, ctx.Err()
	}
	switch {
	case errors.Is(a.err, errFrameTooLarge):
		ss.kill()
		return nil, outputLimit(output)
	case a.err != nil:
		ss.kill()
		var exit *exec.ExitError
		if errors.As(w.err, &exit) && exit.ExitCode() == exitOutOfMemory && outOfMemory(w.stderr.Bytes()) {
			return nil, &LimitError{Limit: "memory", Value: fmt.Sprintf("%d MiB", memory>>20)}
		}
		return nil, fmt.Errorf("render sandbox: %v: %s", w.err, lastLine(w.stderr.Bytes()))
	}
	var resp sandboxResponse
	if err := json.Unmarshal(a.data, &resp); err != nil {
		ss.kill()
		return nil, fmt.Errorf("render sandbox: invalid answer: %w", err)
	}
	switch {
	case resp.OutputLimit:
		return nil, outputLimit(output)
	case resp.Error != "":
		return nil, errors.New(resp.Error)
	}
	return &resp, nil
}

// kill ends the child after a render went wrong; the next render starts another.
func (ss *sandboxSession) kill() {
	ss.w.stop()
	ss.w = nil
}

// startWorker starts a child of the running binary (or exe) in sandbox mode.
func startWorker(exe string, memory int64) (*sandboxWorker, error) {
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("render sandbox: %w", err)
		}
	}
	cmd := exec.Command(exe)
	// Nothing of the hub's environment (credentials, proxies, kubeconfig) reaches the child.
	cmd.Env = []string{sandboxEnv + "=" + fmt.Sprint(memory), "GOMEMLIMIT=" + fmt.Sprint(memory), "GOMAXPROCS=1"}
	w := &sandboxWorker{cmd: cmd, stderr: &limitedBuffer{limit: 64 << 10}, exited: make(chan struct{})}
	cmd.Stderr = w.stderr
	// The child dies with the hub; and when the hub closes its input, it exits by itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var err error
	if w.in, err = cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("render sandbox: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("render sandbox: %w", err)
	}
	w.out = bufio.NewReader(stdout)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("render sandbox: failed to start: %w", err)
	}
	go func() {
		w.err = cmd.Wait()
		close(w.exited)
	}()
	return w, nil
}

// stop kills the child and waits for it.
func (w *sandboxWorker) stop() {
	_ = w.in.Close()
	_ = w.cmd.Process.Kill()
	<-w.exited
}

// Frames are a length (8 bytes, big-endian) and as many bytes of JSON.
var errFrameTooLarge = errors.New("frame larger than the limit")

func writeFrame(w io.Writer, data []byte) error {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(data)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	_, err := w.Write(data)
	return err
}

func readFrame(r io.Reader, limit int64) ([]byte, error) {
	var n [8]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint64(n[:])
	if size > uint64(limit) {
		return nil, errFrameTooLarge
	}
	data := make([]byte, size)
	_, err := io.ReadFull(r, data)
	return data, err
}

// serveSandbox is the child: it answers requests until its input ends, and returns its exit code.
func serveSandbox(in io.Reader, out io.Writer) int {
	memory, err := strconv.ParseInt(os.Getenv(sandboxEnv), 10, 64)
	if err != nil || memory <= 0 {
		memory = DefaultRenderMemory
	}
	if err := limitMemory(memory); err != nil {
		fmt.Fprintln(os.Stderr, "render sandbox:", err)
		return 1
	}
	// A render runs behind the hub's own work: a chart that loops until its deadline must not
	// take the CPU the hub and its API server need.
	_ = syscall.Setpriority(syscall.PRIO_PROCESS, 0, sandboxNice)
	r, w := bufio.NewReader(in), bufio.NewWriter(out)
	for {
		data, err := readFrame(r, maxSandboxRequest)
		if errors.Is(err, io.EOF) {
			return 0
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "render sandbox: invalid request:", err)
			return 1
		}
		var req sandboxRequest
		var resp sandboxResponse
		if err := json.Unmarshal(data, &req); err != nil {
			resp.Error = "invalid request: " + err.Error()
		} else if err := answer(&req, &resp); err != nil {
			resp = sandboxResponse{Error: err.Error()}
		}
		if int64(len(resp.Manifest)) > req.Output {
			resp = sandboxResponse{Error: outputLimit(req.Output).Error(), OutputLimit: true}
		}
		answerData, err := json.Marshal(resp)
		if err != nil {
			return 1
		}
		if err := writeFrame(w, answerData); err != nil || w.Flush() != nil {
			return 1
		}
	}
}

// sandboxNice is the child's scheduling priority (nice value).
const sandboxNice = 10

// maxSandboxRequest bounds a request: a chart archive and its values.
const maxSandboxRequest = maxChartArchive + maxRendered

func answer(req *sandboxRequest, resp *sandboxResponse) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the template engine failed: %v", r)
		}
	}()
	if req.Target != nil {
		resp.Values, err = templateValues(req.Template, *req.Target)
		return err
	}
	if k := req.Kustomize; k != nil {
		fsys, err := childCheckouts.open(k.Checkout)
		if err != nil {
			return err
		}
		refused := fsys.refused
		if len(k.Refused) > 0 {
			refused = maps.Clone(refused)
			for p, why := range k.Refused {
				refused[p] = errors.New(why)
			}
		}
		data, err := buildKustomize(&overlayFS{FileSystem: fsys.mem, refused: refused, files: k.Files}, k.Dir)
		resp.Manifest = string(data)
		return err
	}
	ch, err := loader.LoadArchive(bytes.NewReader(req.Chart))
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	resp.Manifest, err = helmManifest(context.Background(), ch, req.Values, req.Release, req.Namespace, &Helm{SkipSchemaValidation: req.SkipSchemaValidation}, req.KubeVersion)
	return err
}

// childCheckouts is the child's in-memory copy of the checkout it builds Kustomize from: a
// child serves one Renderer, so one checkout, read on its first build.
var childCheckouts checkoutCopy

type checkoutCopy struct {
	root string
	fsys *kustomizeFS
}

func (c *checkoutCopy) open(root string) (*kustomizeFS, error) {
	if c.fsys != nil && c.root == root {
		return c.fsys, nil
	}
	checkout, err := OpenCheckout(root)
	if err != nil {
		return nil, err
	}
	defer checkout.Close()
	// The child has no keys: the parent lays the SOPS files it decrypted over this copy.
	fsys, err := checkout.memFS(false, false)
	if err != nil {
		return nil, err
	}
	c.root, c.fsys = root, fsys
	return fsys, nil
}

// limitMemory has the kernel bound the child's memory before it renders anything. Two limits,
// because the runtime reserves address space before it writes to it: RLIMIT_DATA fails every
// writable mapping past the limit, but the kernel checks a mapping laid over a reservation
// only against what the reservation already counted, so one large allocation would pass it
// once; RLIMIT_AS counts the reservation itself, and is set to what the child has reserved
// now plus the same allowance. The collector works to stay under both meanwhile (the soft
// limit). The hard limits go down with the soft ones: nothing the templates do can raise them.
func limitMemory(limit int64) error {
	debug.SetMemoryLimit(limit)
	reserved, err := addressSpace()
	if err != nil {
		return fmt.Errorf("failed to limit its memory: %w", err)
	}
	for _, l := range []struct {
		resource int
		bytes    uint64
	}{
		{syscall.RLIMIT_DATA, uint64(limit + runtimeOverhead)},
		{syscall.RLIMIT_AS, reserved + uint64(limit+runtimeOverhead)},
	} {
		if err := syscall.Setrlimit(l.resource, &syscall.Rlimit{Cur: l.bytes, Max: l.bytes}); err != nil {
			return fmt.Errorf("failed to limit its memory: %w", err)
		}
	}
	return nil
}

// addressSpace is the address space the process has mapped, in bytes (VmSize).
func addressSpace() (uint64, error) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(status)) {
		if kb, ok := strings.CutPrefix(line, "VmSize:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/self/status: VmSize: %w", err)
			}
			return n << 10, nil
		}
	}
	return 0, errors.New("/proc/self/status has no VmSize")
}

// outOfMemory reports whether the child's error output is the runtime's report of memory
// the kernel refused it: "out of memory" where the heap could not grow, "cannot allocate
// memory" where the runtime's own metadata could not.
func outOfMemory(stderr []byte) bool {
	for line := range bytes.Lines(stderr) {
		report, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("fatal error: "))
		if !ok {
			continue
		}
		report = bytes.TrimPrefix(report, []byte("runtime: "))
		return string(report) == "out of memory" || string(report) == "cannot allocate memory"
	}
	return false
}

// limitedBuffer keeps the first limit bytes written to it and drops the rest: the child's
// error output, for the message of a failed render, never grows without bound and never
// blocks the child.
type limitedBuffer struct {
	bytes.Buffer
	limit int64
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.limit - int64(b.Len()); room > 0 {
		b.Buffer.Write(p[:min(int64(len(p)), room)])
	}
	return len(p), nil
}

func lastLine(b []byte) string {
	b = bytes.TrimSpace(b)
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	return string(b)
}

// packChart archives a loaded chart, with the dependencies added to it, for the sandbox.
func packChart(ch *chart.Chart) ([]byte, error) {
	dir, err := os.MkdirTemp("", "flotilla-chart-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path, err := chartutil.Save(ch, dir)
	if err != nil {
		return nil, fmt.Errorf("failed to pack chart %s: %w", ch.Name(), err)
	}
	return os.ReadFile(path)
}
