package notify

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/e2e/hostile"
	"github.com/flotilla-dev/flotilla/e2e/wait"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/endpoint"
	"github.com/flotilla-dev/flotilla/hub/events"
)

// receiver is a loopback endpoint that records what it is sent and answers with the codes it
// is given, in order (200 once they run out).
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	requests []received
	codes    []int
}

type received struct {
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T, codes ...int) *receiver {
	r := &receiver{codes: codes}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.requests = append(r.requests, received{header: req.Header.Clone(), body: body})
		code := http.StatusOK
		if len(r.codes) > 0 {
			code, r.codes = r.codes[0], r.codes[1:]
		}
		r.mu.Unlock()
		w.WriteHeader(code)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) got() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.requests...)
}

// directory is a Directory of namespaces held in memory: the alerts and providers a test
// defines, and what the dispatcher reports of them.
type directory struct {
	mu        sync.Mutex
	alerts    map[string][]v1alpha1.Alert
	providers map[string]*Endpoint // "ns/name"
	lineage   map[string][]Subject // "Kind/name"
	failed    map[string]error     // what ReportProvider said last, by "ns/name"
	reports   map[string]int       // how many times
	problems  map[string]string    // ReportAlert's last problem, by "ns/name"
}

func newDirectory() *directory {
	return &directory{alerts: map[string][]v1alpha1.Alert{}, providers: map[string]*Endpoint{}, lineage: map[string][]Subject{},
		failed: map[string]error{}, reports: map[string]int{}, problems: map[string]string{}}
}

func (d *directory) Alerts(_ context.Context, ns string) ([]v1alpha1.Alert, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.alerts[ns], nil
}

func (d *directory) Lineage(_ context.Context, t events.Told) []Subject {
	return d.lineage[t.Kind+"/"+t.Name]
}

func (d *directory) Provider(_ context.Context, ns, name string) (*Endpoint, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if ep := d.providers[ns+"/"+name]; ep != nil {
		return ep, nil
	}
	return nil, errNotFound(ns + "/" + name)
}

type errNotFound string

func (e errNotFound) Error() string { return "NotificationProvider " + string(e) + " not found" }

func (d *directory) ReportProvider(_ context.Context, ns, name string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failed[ns+"/"+name] = err
	d.reports[ns+"/"+name]++
}

func (d *directory) ReportAlert(_ context.Context, ns, name, _, problem string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.problems[ns+"/"+name] = problem
}

func (d *directory) provider(ns, name string, typ v1alpha1.NotificationProviderType, url string) *Endpoint {
	hc, _ := endpoint.NewClient(context.Background(), nil, ns, endpoint.Options{Allowed: endpoint.Policy{endpoint.MustParseAddressList("the test", "127.0.0.1")}})
	ep := &Endpoint{Type: typ, URL: url, Client: hc, Timeout: 5 * time.Second, HMACKey: []byte("k3y")}
	d.mu.Lock()
	d.providers[ns+"/"+name] = ep
	d.mu.Unlock()
	return ep
}

func alert(ns, name, provider string, spec func(*v1alpha1.AlertSpec)) v1alpha1.Alert {
	a := v1alpha1.Alert{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name), ResourceVersion: "1"},
		Spec: v1alpha1.AlertSpec{ProviderRef: v1alpha1.LocalSecretReference{Name: provider}, EventSources: []v1alpha1.EventSource{{Kind: "Bundle"}}}}
	if spec != nil {
		spec(&a.Spec)
	}
	return a
}

// start runs a dispatcher on dir until the test ends, with a short backoff.
func start(t *testing.T, dir Directory) *Dispatcher {
	d := NewDispatcher(dir, nil)
	d.Backoff = 10 * time.Millisecond
	d.DashboardURL = "https://dash.example/"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = d.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return d
}

var at = time.Date(2026, 12, 5, 9, 30, 0, 0, time.UTC)

func told(kind, name, typ, reason, note string) events.Told {
	return events.Told{Kind: kind, Namespace: "shop", Name: name, Type: typ, Reason: reason, Note: note, Time: at}
}

// Each provider type gets the payload its service documents: Slack's text and mrkdwn section
// (with what a repository named escaped, so a name cannot become a link or a mention), a
// Teams workflow's Adaptive Card, generic JSON whose HMAC-SHA256 verifies under the key, and a
// structured CloudEvent 1.0.
func TestEachProviderGetsThePayloadItsServiceDocuments(t *testing.T) {
	dir := newDirectory()
	recv := map[v1alpha1.NotificationProviderType]*receiver{}
	for _, typ := range []v1alpha1.NotificationProviderType{v1alpha1.ProviderSlack, v1alpha1.ProviderMSTeams, v1alpha1.ProviderGenericHMAC, v1alpha1.ProviderCloudEvents} {
		recv[typ] = newReceiver(t)
		dir.provider("shop", string(typ), typ, recv[typ].URL)
		dir.alerts["shop"] = append(dir.alerts["shop"], alert("shop", "to-"+string(typ), string(typ), nil))
	}
	d := start(t, dir)
	d.Tell(told("Bundle", "web", corev1.EventTypeWarning, "RolloutFailed", "revision 3 failed (R5.3) on <!channel> & <https://evil.example|click>"))
	for typ, r := range recv {
		wait.Until(t, string(typ)+" receives the message", 10*time.Second, func() bool { return len(r.got()) == 1 })
	}

	slack := recv[v1alpha1.ProviderSlack].got()[0]
	var sp struct {
		Text   string `json:"text"`
		Blocks []struct {
			Type string `json:"type"`
			Text struct{ Type, Text string }
		} `json:"blocks"`
	}
	if err := json.Unmarshal(slack.body, &sp); err != nil || len(sp.Blocks) != 1 || sp.Blocks[0].Type != "section" || sp.Blocks[0].Text.Type != "mrkdwn" {
		t.Fatalf("slack payload %s: %v", slack.body, err)
	}
	section := sp.Blocks[0].Text.Text
	if !strings.Contains(section, "*Bundle shop/web: RolloutFailed*") || !strings.Contains(section, "&lt;!channel&gt; &amp; &lt;https:\u200b//evil.example|click&gt;") ||
		strings.Contains(section, "<!channel>") || !strings.Contains(section, "<https://dash.example/#/shop/bundle/web|Open in the dashboard>") {
		t.Errorf("slack section %q: want the title, the message escaped, and the dashboard link", section)
	}
	if !strings.Contains(sp.Text, "RolloutFailed") || strings.Contains(sp.Text, "<!channel>") {
		t.Errorf("slack text %q", sp.Text)
	}

	teams := recv[v1alpha1.ProviderMSTeams].got()[0]
	var tp struct {
		Type        string `json:"type"`
		Attachments []struct {
			ContentType string `json:"contentType"`
			Content     struct {
				Type    string           `json:"type"`
				Version string           `json:"version"`
				Body    []map[string]any `json:"body"`
				Actions []map[string]any `json:"actions"`
			} `json:"content"`
		} `json:"attachments"`
	}
	if err := json.Unmarshal(teams.body, &tp); err != nil || tp.Type != "message" || len(tp.Attachments) != 1 {
		t.Fatalf("teams payload %s: %v", teams.body, err)
	}
	card := tp.Attachments[0]
	if card.ContentType != "application/vnd.microsoft.card.adaptive" || card.Content.Type != "AdaptiveCard" || len(card.Content.Body) < 2 ||
		runOf(card.Content.Body[0])["text"] != "Bundle shop/web: RolloutFailed" || runOf(card.Content.Body[0])["color"] != "Attention" ||
		len(card.Content.Actions) != 1 || card.Content.Actions[0]["url"] != "https://dash.example/#/shop/bundle/web" {
		t.Errorf("teams card %s", teams.body)
	}

	generic := recv[v1alpha1.ProviderGenericHMAC].got()[0]
	if sig := generic.header.Get(SignatureHeader); sig != Sign([]byte("k3y"), generic.body) || !strings.HasPrefix(sig, "sha256=") {
		t.Errorf("signature %q does not verify under the provider's key", sig)
	}
	var m Message
	if err := json.Unmarshal(generic.body, &m); err != nil || m.Kind != "Bundle" || m.Name != "web" || m.Namespace != "shop" || m.Reason != "RolloutFailed" ||
		m.Severity != "error" || !m.Time.Equal(at) || !strings.HasPrefix(m.Message, "revision 3 failed") {
		t.Errorf("generic payload %s: %v", generic.body, err)
	}

	ce := recv[v1alpha1.ProviderCloudEvents].got()[0]
	var cp map[string]any
	if err := json.Unmarshal(ce.body, &cp); err != nil {
		t.Fatal(err)
	}
	if ce.header.Get("Content-Type") != "application/cloudevents+json" || cp["specversion"] != "1.0" || cp["type"] != "dev.flotilla.bundle.RolloutFailed" ||
		cp["source"] != "flotilla.dev/hub/shop" || cp["subject"] != "Bundle/web" || cp["id"] == "" || cp["datacontenttype"] != "application/json" {
		t.Errorf("cloudevent %s (content type %s)", ce.body, ce.header.Get("Content-Type"))
	}
	if data, _ := cp["data"].(map[string]any); data["reason"] != "RolloutFailed" {
		t.Errorf("cloudevent data %v", cp["data"])
	}
}

// A provider answering 500 is tried again with backoff until it takes the message; one that
// keeps failing is given up after Attempts tries and its status says why; a 400 is not tried
// again; a redirect is not followed and its target receives nothing.
func TestRetriesAfterServerErrorsAndGivesUpAfterTheLimit(t *testing.T) {
	dir := newDirectory()
	flaky := newReceiver(t, 500, 503)
	down := newReceiver(t, 500, 500, 500, 500, 500, 500)
	refuses := newReceiver(t, 400)
	elsewhere := newReceiver(t)
	redirects := httptest.NewServer(http.RedirectHandler(elsewhere.URL, http.StatusTemporaryRedirect))
	defer redirects.Close()
	for name, url := range map[string]string{"flaky": flaky.URL, "down": down.URL, "refuses": refuses.URL, "redirects": redirects.URL} {
		dir.provider("shop", name, v1alpha1.ProviderGenericHMAC, url)
		dir.alerts["shop"] = append(dir.alerts["shop"], alert("shop", name, name, nil))
	}
	d := start(t, dir)
	d.Tell(told("Bundle", "web", corev1.EventTypeNormal, "RolloutCompleted", "revision 2 completed"))
	reported := func(name string) bool {
		dir.mu.Lock()
		defer dir.mu.Unlock()
		return dir.reports["shop/"+name] > 0
	}
	for _, name := range []string{"flaky", "down", "refuses", "redirects"} {
		wait.Until(t, name+" is reported", 10*time.Second, func() bool { return reported(name) })
	}
	dir.mu.Lock()
	defer dir.mu.Unlock()
	if n := len(flaky.got()); n != 3 || dir.failed["shop/flaky"] != nil {
		t.Errorf("flaky: %d requests, report %v; want 3 and delivered", n, dir.failed["shop/flaky"])
	}
	if n := len(down.got()); n != Attempts || dir.failed["shop/down"] == nil || !strings.Contains(dir.failed["shop/down"].Error(), "500") {
		t.Errorf("down: %d requests, report %v; want %d and the 500 said", n, dir.failed["shop/down"], Attempts)
	}
	if n := len(refuses.got()); n != 1 || dir.failed["shop/refuses"] == nil {
		t.Errorf("refuses: %d requests, report %v; want 1 and a failure", n, dir.failed["shop/refuses"])
	}
	if n := len(elsewhere.got()); n != 0 || dir.failed["shop/redirects"] == nil || !strings.Contains(dir.failed["shop/redirects"].Error(), "not followed") {
		t.Errorf("redirect: its target got %d requests, report %v", n, dir.failed["shop/redirects"])
	}
}

// What an alert selects: its sources (a GitRepo's takes its bundles' and runs' events through
// their lineage, labels must all match), its severity, its reasons; the same event once per
// DedupeWindow; at most its rate limit; nothing of another namespace; a suspended alert
// nothing; a summary line rendered before the message.
func TestAnAlertSendsWhatItSelectsOnce(t *testing.T) {
	dir := newDirectory()
	r := newReceiver(t)
	dir.provider("shop", "hook", v1alpha1.ProviderGenericHMAC, r.URL)
	dir.lineage["StagedUpdateRun/web-r2"] = []Subject{{Kind: "Bundle", Name: "web"}, {Kind: "GitRepo", Name: "shop", Labels: map[string]string{"team": "a"}}}
	dir.lineage["Bundle/db"] = []Subject{{Kind: "GitRepo", Name: "other"}}
	dir.alerts["shop"] = []v1alpha1.Alert{
		alert("shop", "repo", "hook", func(s *v1alpha1.AlertSpec) {
			s.EventSources = []v1alpha1.EventSource{{Kind: "GitRepo", Name: "shop", MatchLabels: map[string]string{"team": "a"}}}
			s.ExclusionList = []v1alpha1.EventReason{v1alpha1.EventStageStarted}
			s.Summary = `{{if .Reason}}[{{.Severity}}] {{.Kind}} {{.Name}}{{end}}`
		}),
		alert("shop", "suspended", "hook", func(s *v1alpha1.AlertSpec) { s.Suspend = true }),
		alert("shop", "errors-of-clusters", "hook", func(s *v1alpha1.AlertSpec) {
			s.EventSources = []v1alpha1.EventSource{{Kind: "Cluster", Name: "*"}}
			s.EventSeverity = v1alpha1.SeverityError
			s.RateLimit = 2
		}),
	}
	dir.alerts["other-tenant"] = []v1alpha1.Alert{alert("other-tenant", "all", "hook", func(s *v1alpha1.AlertSpec) {
		s.EventSources = []v1alpha1.EventSource{{Kind: "Bundle"}, {Kind: "Cluster"}}
	})}
	d := start(t, dir)
	for _, e := range []events.Told{
		told("StagedUpdateRun", "web-r2", corev1.EventTypeNormal, "ApprovalRequested", "stage prod, before it needs 1 approval(s)"),
		told("StagedUpdateRun", "web-r2", corev1.EventTypeNormal, "ApprovalRequested", "stage prod, before it needs 1 approval(s)"), // again: deduplicated
		told("StagedUpdateRun", "web-r2", corev1.EventTypeNormal, "StageStarted", "stage canary started"),                           // excluded
		told("Bundle", "db", corev1.EventTypeNormal, "RolloutCompleted", "another repo's bundle"),                                   // not of GitRepo shop
		told("Cluster", "c1", corev1.EventTypeNormal, "ClusterOnline", "back"),                                                      // not an error
		told("Cluster", "c1", corev1.EventTypeWarning, "ClusterOffline", "c1 offline"),
		told("Cluster", "c2", corev1.EventTypeWarning, "ClusterOffline", "c2 offline"),
		told("Cluster", "c3", corev1.EventTypeWarning, "ClusterOffline", "c3 offline"), // past the rate limit of 2
	} {
		d.Tell(e)
	}
	// The last event told is the rate-limited one: once the two before it arrived, wait until
	// the dispatcher has matched everything (its queue is empty) and the workers are idle.
	wait.Until(t, "three messages arrive", 10*time.Second, func() bool { return len(r.got()) >= 3 })
	wait.Until(t, "the queues drain", 10*time.Second, func() bool { return len(d.told) == 0 && len(d.jobs) == 0 })
	var got []string
	for _, req := range r.got() {
		var m Message
		_ = json.Unmarshal(req.body, &m)
		got = append(got, m.Reason+" "+m.Name+" | "+m.Summary)
	}
	want := map[string]bool{"ApprovalRequested web-r2 | [info] StagedUpdateRun web-r2": true, "ClusterOffline c1 | ": true, "ClusterOffline c2 | ": true}
	if len(got) != len(want) {
		t.Fatalf("got %d messages %q, want %d", len(got), got, len(want))
	}
	for _, g := range got {
		if !want[g] {
			t.Errorf("unexpected message %q (all: %q)", g, got)
		}
	}
}

// A summary is a tenant's template run in the hub: only the event's fields and {{if}}.
func TestASummaryAdmitsOnlyTheEventsFields(t *testing.T) {
	for _, ok := range []string{"", "plain", "{{.Reason}} on {{.Kind}} {{.Namespace}}/{{.Name}}: {{.Message}}", "{{if .Severity}}!{{else}}.{{end}}"} {
		if _, err := ParseSummary(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"{{range .Name}}x{{end}}", "{{printf \"%999999999d\" 1}}", "{{template \"x\"}}", "{{define \"x\"}}y{{end}}", "{{.Labels}}",
		"{{$x := .Name}}", "{{len .Name}}", "{{.Name.Other}}", "{{with .Name}}{{.}}{{end}}", "{{(.Name)}}", "{{.Name | html}}", "{{if eq .Name \"a\"}}{{end}}"} {
		if _, err := ParseSummary(bad); err == nil {
			t.Errorf("%q admitted", bad)
		}
	}
}

// FuzzSummary searches for a summary the allow-list admits that does not render at once, or
// renders past MaxSummary: an alert is a tenant's, and runs in the hub for every message.
func FuzzSummary(f *testing.F) {
	for _, s := range []string{"{{.Reason}}", "{{if .Kind}}{{.Message}}{{else}}-{{end}}", "{{range .Name}}{{end}}", "{{.Message}}{{.Message}}{{.Message}}"} {
		f.Add(s, strings.Repeat("m", 1024))
	}
	f.Fuzz(func(t *testing.T, source, note string) {
		tmpl, err := ParseSummary(source)
		if err != nil || tmpl == nil {
			return
		}
		start := time.Now()
		out, err := compiledSummary{t: tmpl}.render(events.Told{Kind: "Bundle", Name: "web", Namespace: "shop", Reason: "RolloutFailed", Note: truncate(note, 1024)})
		if err != nil {
			return
		}
		if len(out) > MaxSummary+len("…") {
			t.Errorf("%q rendered %d bytes", source, len(out))
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%q took %s to render", source, d)
		}
	})
}

// runOf is the first TextRun of a RichTextBlock.
func runOf(block map[string]any) map[string]any {
	inlines, _ := block["inlines"].([]any)
	if len(inlines) == 0 {
		return nil
	}
	run, _ := inlines[0].(map[string]any)
	return run
}

// The same hostile strings, as a bundle's name and an event's message, in every channel: Slack's
// mrkdwn opens no link, mention or markup of theirs; Teams gets them in TextRuns (never
// Markdown) with no bare URL or @name; the generic and CloudEvents bodies carry them as JSON
// data, HTML-escaped; a commit status's description is plain text within its limit. None keeps
// a bare URL, www. host or @name a renderer would link by itself.
func TestRepositoryTextIsInertInEveryChannel(t *testing.T) {
	linkable := regexp.MustCompile(`(?i)://|www\.|@\w`)
	for _, s := range hostile.Texts {
		m := Message{Kind: "Bundle", Namespace: "shop", Name: "web" + s, Reason: "RolloutFailed", Message: "failed: " + s, Severity: "error", Time: at}
		for _, typ := range []v1alpha1.NotificationProviderType{v1alpha1.ProviderSlack, v1alpha1.ProviderMSTeams, v1alpha1.ProviderGenericHMAC, v1alpha1.ProviderCloudEvents} {
			body, _, err := payload(typ, m)
			if err != nil {
				t.Fatal(err)
			}
			var tree any
			if err := json.Unmarshal(body, &tree); err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
			for _, text := range shownTexts(typ, tree) {
				if typ == v1alpha1.ProviderSlack {
					// mrkdwn's own markup is <…>: only the escaped forms may stand.
					if strings.ContainsAny(text, "<>") && !strings.Contains(text, "|Open in the dashboard>") {
						t.Errorf("%s, %q: mrkdwn %q holds < or > raw", typ, s, text)
					}
				}
				if loc := linkable.FindStringIndex(text); loc != nil {
					t.Errorf("%s, %q: %q holds %q, which a renderer links", typ, s, text, text[loc[0]:loc[1]])
				}
			}
			if typ == v1alpha1.ProviderGenericHMAC || typ == v1alpha1.ProviderCloudEvents {
				if strings.ContainsAny(string(body), "<>") {
					t.Errorf("%s, %q: the body holds < or > raw: %s", typ, s, body)
				}
				if !strings.Contains(string(body), strings.Trim(jsonString(t, "failed: "+s), `"`)) {
					t.Errorf("%s, %q: the data is not the event's message as it is", typ, s)
				}
			}
		}
		if d := describe("does not render: " + s); len([]rune(d)) > MaxDescription || linkable.MatchString(d) {
			t.Errorf("commit status %q: %d characters, or a link a forge makes", d, len([]rune(d)))
		}
	}
}

// shownTexts are the strings of a payload a person reads: Slack's text and section, a Teams
// card's TextRuns (and any TextBlock, which must hold none of the repository's text).
func shownTexts(typ v1alpha1.NotificationProviderType, tree any) []string {
	var out []string
	var walk func(any, string)
	walk = func(v any, kind string) {
		switch v := v.(type) {
		case map[string]any:
			k, _ := v["type"].(string)
			for key, child := range v {
				if text, ok := child.(string); ok && key == "text" {
					out = append(out, text)
					continue
				}
				walk(child, k)
			}
		case []any:
			for _, c := range v {
				walk(c, kind)
			}
		}
	}
	if typ == v1alpha1.ProviderSlack || typ == v1alpha1.ProviderMSTeams {
		walk(tree, "")
	}
	return out
}

func jsonString(t *testing.T, s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
