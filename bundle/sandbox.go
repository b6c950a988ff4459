package bundle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/debug"
	"runtime/metrics"
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
// The child is this same binary started with sandboxEnv set: the package's init serves one
// request on standard input and exits before main runs. Every binary that links this package
// (the hub, the CLI, tests) can therefore be its own sandbox; nothing else is installed.

// sandboxEnv marks the child process.
const sandboxEnv = "FLOTILLA_RENDER_SANDBOX"

// Sandbox limits.
const (
	DefaultRenderTimeout = 60 * time.Second
	DefaultRenderMemory  = 1 << 30 // bytes of Go heap in the child
)

// Sandbox runs template renders in child processes.
type Sandbox struct {
	// Timeout bounds one render; default DefaultRenderTimeout.
	Timeout time.Duration
	// Memory bounds the child's heap in bytes; default DefaultRenderMemory.
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
	Memory int64 `json:"memory"`
	Output int64 `json:"output"`
	// Helm.
	Chart                []byte         `json:"chart,omitempty"`
	Values               map[string]any `json:"values,omitempty"`
	Release, Namespace   string
	KubeVersion          string `json:"kubeVersion,omitempty"`
	SkipSchemaValidation bool   `json:"skipSchemaValidation,omitempty"`
	// Values templates.
	Template map[string]any `json:"template,omitempty"`
	Target   *Target        `json:"target,omitempty"`
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

// Exit codes of the child beyond 0 (answered) and 1 (could not answer).
const exitMemory = 3

// helm renders a chart in a child process.
func (s *Sandbox) helm(ctx context.Context, archive []byte, vals map[string]any, release, namespace string, h *Helm, kubeVersion string) (string, error) {
	req := sandboxRequest{Chart: archive, Values: vals, Release: release, Namespace: namespace, KubeVersion: kubeVersion,
		SkipSchemaValidation: h != nil && h.SkipSchemaValidation}
	resp, err := s.run(ctx, req)
	if err != nil {
		return "", err
	}
	return resp.Manifest, nil
}

// values evaluates values templates in a child process.
func (s *Sandbox) values(ctx context.Context, vals map[string]any, t Target) (map[string]any, error) {
	resp, err := s.run(ctx, sandboxRequest{Template: vals, Target: &t})
	if err != nil {
		return nil, err
	}
	return resp.Values, nil
}

func (s *Sandbox) run(ctx context.Context, req sandboxRequest) (*sandboxResponse, error) {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultRenderTimeout
	}
	req.Memory = s.Memory
	if req.Memory <= 0 {
		req.Memory = DefaultRenderMemory
	}
	req.Output = s.Output
	if req.Output <= 0 {
		req.Output = maxRendered
	}
	exe := s.Executable
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("render sandbox: %w", err)
		}
	}
	in, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("render sandbox: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	// Nothing of the hub's environment (credentials, proxies, kubeconfig) reaches the child.
	cmd.Env = []string{sandboxEnv + "=1", "GOMEMLIMIT=" + fmt.Sprint(req.Memory), "GOMAXPROCS=1"}
	cmd.Stdin = bytes.NewReader(in)
	out := &limitedBuffer{limit: req.Output + 1<<20}
	var stderr limitedBuffer
	stderr.limit = 64 << 10
	cmd.Stdout, cmd.Stderr = out, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	switch {
	case ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && (err != nil || out.full):
		return nil, &LimitError{Limit: "deadline", Value: timeout.String()}
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case out.full:
		return nil, outputLimit(req.Output)
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == exitMemory {
		return nil, &LimitError{Limit: "memory", Value: fmt.Sprintf("%d MiB", req.Memory>>20)}
	}
	if err != nil {
		return nil, fmt.Errorf("render sandbox: %w: %s", err, lastLine(stderr.Bytes()))
	}
	var resp sandboxResponse
	if err := json.Unmarshal(out.Bytes(), &resp); err != nil {
		return nil, fmt.Errorf("render sandbox: invalid answer: %w", err)
	}
	switch {
	case resp.OutputLimit:
		return nil, outputLimit(req.Output)
	case resp.Error != "":
		return nil, errors.New(resp.Error)
	}
	return &resp, nil
}

// serveSandbox is the child: it answers one request and returns its exit code.
func serveSandbox(in io.Reader, out io.Writer) int {
	var req sandboxRequest
	if err := json.NewDecoder(in).Decode(&req); err != nil {
		fmt.Fprintln(os.Stderr, "render sandbox: invalid request:", err)
		return 1
	}
	go watchMemory(req.Memory)
	var resp sandboxResponse
	if err := answer(&req, &resp); err != nil {
		resp = sandboxResponse{Error: err.Error()}
	}
	if int64(len(resp.Manifest)) > req.Output {
		resp = sandboxResponse{Error: outputLimit(req.Output).Error(), OutputLimit: true}
	}
	if err := json.NewEncoder(out).Encode(resp); err != nil {
		return 1
	}
	return 0
}

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
	ch, err := loader.LoadArchive(bytes.NewReader(req.Chart))
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	resp.Manifest, err = helmManifest(context.Background(), ch, req.Values, req.Release, req.Namespace, &Helm{SkipSchemaValidation: req.SkipSchemaValidation}, req.KubeVersion)
	return err
}

// watchMemory ends the child when its heap passes limit: GOMEMLIMIT only makes the collector
// work harder, and a template that keeps what it allocates would run the machine out of memory.
func watchMemory(limit int64) {
	debug.SetMemoryLimit(limit)
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	for {
		metrics.Read(sample)
		if v := sample[0].Value; v.Kind() == metrics.KindUint64 && int64(v.Uint64()) > limit {
			os.Exit(exitMemory)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// limitedBuffer keeps at most limit bytes and reports when more came.
type limitedBuffer struct {
	bytes.Buffer
	limit int64
	full  bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.limit - int64(b.Len()); int64(len(p)) > room {
		b.full = true
		if room > 0 {
			b.Buffer.Write(p[:room])
		}
		return 0, errors.New("output limit reached")
	}
	return b.Buffer.Write(p)
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
