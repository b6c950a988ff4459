// Package browser drives a headless Chromium (Debian's, which `go run ./e2e/prepare` installs)
// from tests and benchmarks: one tab per Page, waited on by JavaScript conditions, never by
// sleeps. Every Chromium it starts it stops when the test ends.
package browser

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Chromium is Debian's browser.
const Chromium = "/usr/bin/chromium"

// Page is one headless Chromium tab.
type Page struct {
	tb  testing.TB
	ctx context.Context
}

// startAttempts is how many times Open starts Chromium before it gives up: a Chromium that
// exits before it listens (seen once in a CI run: a crash at start-up, with nothing in its
// output but D-Bus and cpufreq complaints) is started again with a fresh profile.
const startAttempts = 3

// Open starts a headless Chromium of its own (profile in a temporary directory, no background
// traffic, a laptop's window) and stops it when the test ends.
func Open(tb testing.TB) *Page {
	tb.Helper()
	if _, err := exec.LookPath(Chromium); err != nil {
		tb.Fatalf("%s is missing: run `go run ./e2e/prepare`, which installs it (%v)", Chromium, err)
	}
	var failures []string
	for attempt := 1; attempt <= startAttempts; attempt++ {
		page, err := start(tb)
		if err == nil {
			return page
		}
		failures = append(failures, fmt.Sprintf("attempt %d: %v", attempt, err))
		tb.Logf("starting chromium, attempt %d of %d: %v", attempt, startAttempts, err)
	}
	tb.Fatalf("starting chromium failed %d times:\n%s", startAttempts, strings.Join(failures, "\n"))
	return nil
}

// start starts one Chromium with a profile of its own; the test's cleanup stops it.
func start(tb testing.TB) (*Page, error) {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(Chromium), chromedp.UserDataDir(tb.TempDir()),
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.WindowSize(1366, 900))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		cancelAlloc()
		return nil, err
	}
	tb.Cleanup(func() { cancel(); cancelAlloc() })
	return &Page{tb: tb, ctx: ctx}, nil
}

// Do runs steps in the page, failing the test with the page's text when they fail.
func (p *Page) Do(what string, timeout time.Duration, steps ...chromedp.Action[chromedp.Void]) {
	p.tb.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, timeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		p.tb.Fatalf("in the page: %s: %v\npage text:\n%s", what, err, p.Text("body"))
	}
}

// Eval evaluates a JavaScript expression in the page and returns its value.
func Eval[T any](p *Page, js string) (T, error) {
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](js))
}

// Text is the text of the first element sel selects ("" if none).
func (p *Page) Text(sel string) string {
	s, _ := Eval[string](p, fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ''`, sel))
	return s
}

// Script runs JavaScript in the page for its effect.
func Script(js string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[any](js)(ctx, t)
		return err
	})
}

// Until waits for a JavaScript condition to hold in the page.
func (p *Page) Until(what, js string, timeout time.Duration) {
	p.tb.Helper()
	p.Do(what, timeout+5*time.Second, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Poll[any](js, chromedp.WithPollingTimeout(timeout))(ctx, t)
		return err
	}))
}

// Navigate loads url in the tab.
func (p *Page) Navigate(url string) { p.Do("open "+url, 30*time.Second, chromedp.Navigate(url)) }

// GoTo follows a route of the page as a link does, without reloading it.
func (p *Page) GoTo(hash string) {
	p.Do("go to "+hash, 10*time.Second, Script(fmt.Sprintf("location.hash = %q", hash)))
}

// Mark leaves a value in the page's JavaScript state, which a reload would lose: a page that
// still has it at the end (StillLive) followed what changed live.
func (p *Page) Mark() { p.Do("mark", 5*time.Second, Script(`window.__notReloaded = true`)) }

// StillLive fails the test when the page was reloaded since Mark.
func (p *Page) StillLive() {
	p.tb.Helper()
	if marked, err := Eval[bool](p, `window.__notReloaded === true`); err != nil || !marked {
		p.tb.Errorf("the page was reloaded (%v): it should have changed live", err)
	}
}

// Act clicks an action's button, fills the confirmation dialog's fields (by id; "select:ID"
// sets a select's value), confirms, and returns what the page answers: its result ("ok", or
// the API server's reason) and text.
func (p *Page) Act(button string, fields map[string]string) (string, string) {
	p.tb.Helper()
	steps := []chromedp.Action[chromedp.Void]{
		Script(`(() => { const t = document.getElementById('toast'); t.textContent = ''; delete t.dataset.result; })()`),
		chromedp.WaitVisible(chromedp.CSS(button)),
		chromedp.Click(chromedp.CSS(button)),
		chromedp.WaitVisible(chromedp.CSS("#confirm-ok")),
	}
	for id, value := range fields {
		if sel, ok := strings.CutPrefix(id, "select:"); ok {
			steps = append(steps, chromedp.SetValue(chromedp.CSS("#"+sel), value))
		} else {
			steps = append(steps, chromedp.SendKeys(chromedp.CSS("#"+id), value))
		}
	}
	steps = append(steps, chromedp.Click(chromedp.CSS("#confirm-ok")))
	p.Do("act with "+button, 30*time.Second, steps...)
	p.Until("the answer to "+button, `document.getElementById('toast').dataset.result !== undefined`, 30*time.Second)
	result, _ := Eval[string](p, `document.getElementById('toast').dataset.result`)
	return result, p.Text("#toast")
}

// Screenshot writes the page as a PNG to $FLOTILLA_SCREENSHOTS (the README's come from there),
// else to the test's temporary directory.
func (p *Page) Screenshot(name string) {
	p.tb.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.tb.Fatalf("screenshot: %v", err)
	}
	dir := os.Getenv("FLOTILLA_SCREENSHOTS")
	if dir == "" {
		dir = p.tb.TempDir()
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		p.tb.Fatal(err)
	}
	if len(png) < 10000 {
		p.tb.Errorf("screenshot %s is %d bytes: an empty page?", name, len(png))
	}
}
