package gitsource

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func sign(secret, body string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(body))
	return hex.EncodeToString(mac.Sum(nil))
}

type delivery struct {
	provider string
	headers  func(secret, body string) map[string]string
	body     string
}

var deliveries = []delivery{
	{"github", func(s, b string) map[string]string {
		return map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + sign(s, b)}
	}, `{"ref":"refs/heads/main","after":"deadbeef","repository":{"clone_url":"https://github.com/acme/fleet.git","ssh_url":"git@github.com:acme/fleet.git","html_url":"https://github.com/acme/fleet"}}`},
	{"gitlab", func(s, _ string) map[string]string {
		return map[string]string{"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": s}
	}, `{"ref":"refs/heads/main","checkout_sha":"deadbeef","project":{"git_http_url":"https://gitlab.com/acme/fleet.git","git_ssh_url":"git@gitlab.com:acme/fleet.git","web_url":"https://gitlab.com/acme/fleet"}}`},
	{"bitbucket", func(s, b string) map[string]string {
		return map[string]string{"X-Event-Key": "repo:push", "X-Hub-Signature": "sha256=" + sign(s, b)}
	}, `{"repository":{"full_name":"acme/fleet","links":{"html":{"href":"https://bitbucket.org/acme/fleet"}}},"push":{"changes":[{"new":{"type":"branch","name":"main","target":{"hash":"deadbeef"}}}]}}`},
	{"bitbucket-server", func(s, b string) map[string]string {
		return map[string]string{"X-Event-Key": "repo:refs_changed", "X-Hub-Signature": "sha256=" + sign(s, b)}
	}, `{"repository":{"links":{"clone":[{"href":"ssh://git@bitbucket.acme.internal:7999/acme/fleet.git","name":"ssh"},{"href":"https://bitbucket.acme.internal/scm/acme/fleet.git","name":"http"}]}},"changes":[{"ref":{"id":"refs/heads/main"},"toHash":"deadbeef","type":"UPDATE"}]}`},
	{"gitea", func(s, b string) map[string]string {
		return map[string]string{"X-Gitea-Event": "push", "X-Gitea-Signature": sign(s, b)}
	}, `{"ref":"refs/heads/main","repository":{"clone_url":"https://gitea.acme.io/acme/fleet.git","ssh_url":"git@gitea.acme.io:acme/fleet.git","html_url":"https://gitea.acme.io/acme/fleet"}}`},
	{"gogs", func(s, b string) map[string]string {
		return map[string]string{"X-Gogs-Event": "push", "X-Gogs-Signature": sign(s, b)}
	}, `{"ref":"refs/heads/main","repository":{"clone_url":"https://gogs.acme.io/acme/fleet.git","ssh_url":"git@gogs.acme.io:acme/fleet.git","html_url":"https://gogs.acme.io/acme/fleet"}}`},
}

// receiverFor subscribes one GitRepo, by an SSH URL, to every provider's repository; with no
// secret, the GitRepo opts out of verification or not as allowUnsigned says.
func receiverFor(secret string, allowUnsigned bool, notified *[]string) *Receiver {
	subs := map[string]Subscriber{}
	for _, u := range []string{"git@github.com:acme/fleet.git", "https://gitlab.com/acme/fleet", "git@bitbucket.org:acme/fleet.git",
		"https://bitbucket.acme.internal/scm/acme/fleet.git", "ssh://git@gitea.acme.io:2222/acme/fleet.git", "https://gogs.acme.io/acme/fleet.git"} {
		subs[NormalizeURL(u)] = Subscriber{Key: "fleet-default/" + NormalizeURL(u), Repo: Repo{URL: u, Branch: "main"}, Secret: secret, AllowUnsigned: allowUnsigned}
	}
	return &Receiver{
		Subscribers: func(n string) []Subscriber {
			if s, ok := subs[n]; ok {
				return []Subscriber{s}
			}
			return nil
		},
		Notify: func(s Subscriber, p Push) { *notified = append(*notified, s.Key+"@"+p.Ref) },
	}
}

func post(rc *Receiver, headers map[string]string, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/webhook", strings.NewReader(body))
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	rc.ServeHTTP(rec, req)
	return rec
}

func TestWebhookProviders(t *testing.T) {
	for _, d := range deliveries {
		t.Run(d.provider, func(t *testing.T) {
			var notified []string
			rc := receiverFor("s3cret", false, &notified)
			if rec := post(rc, d.headers("s3cret", d.body), d.body); rec.Code != http.StatusAccepted || len(notified) != 1 || !strings.HasSuffix(notified[0], "@refs/heads/main") {
				t.Fatalf("valid delivery: %d %s, notified %v", rec.Code, rec.Body, notified)
			}
			notified = nil
			if rec := post(rc, d.headers("wrong", d.body), d.body); rec.Code != http.StatusUnauthorized || len(notified) != 0 {
				t.Errorf("bad signature: %d, notified %v", rec.Code, notified)
			}
			// GitLab sends the secret itself, not a signature of the body: only the others can
			// detect a changed body.
			tampered := strings.Replace(d.body, "main", "evil", 1)
			if rec := post(rc, d.headers("s3cret", d.body), tampered); d.provider != "gitlab" && rec.Code != http.StatusUnauthorized {
				t.Errorf("tampered body: %d", rec.Code)
			}
			// Without a secret, an unsigned delivery is refused unless the GitRepo opted out.
			var closed, open []string
			if rec := post(receiverFor("", false, &closed), d.headers("", d.body), d.body); rec.Code != http.StatusUnauthorized || len(closed) != 0 {
				t.Errorf("no secret, no opt-out: %d, notified %v", rec.Code, closed)
			}
			// Opted out: triggered, and answered as any unverified delivery is, so that the
			// answer does not tell which repositories take unsigned deliveries.
			if rec := post(receiverFor("", true, &open), d.headers("", d.body), d.body); rec.Code != http.StatusUnauthorized || len(open) != 1 {
				t.Errorf("no secret, opted out: %d, notified %v; want triggered and 401", rec.Code, open)
			}
			// No response names a GitRepo.
			if rec := post(rc, d.headers("s3cret", d.body), d.body); strings.Contains(rec.Body.String(), "fleet-default") {
				t.Errorf("the response names a GitRepo: %s", rec.Body)
			}
		})
	}
}

func TestWebhookMatchingAndLimits(t *testing.T) {
	var notified []string
	semver := Subscriber{Key: "ns/channel", Repo: Repo{URL: "https://github.com/acme/fleet.git", Semver: "~1.2"}, AllowUnsigned: true}
	branch := Subscriber{Key: "ns/staging", Repo: Repo{URL: "git@github.com:acme/fleet", Branch: "staging"}, AllowUnsigned: true}
	rc := &Receiver{
		Subscribers: func(n string) []Subscriber {
			if n == "github.com/acme/fleet" {
				return []Subscriber{semver, branch}
			}
			return nil
		},
		Notify:  func(s Subscriber, p Push) { notified = append(notified, s.Key) },
		MaxBody: 4096,
	}
	gh := map[string]string{"X-GitHub-Event": "push"}
	post(rc, gh, `{"ref":"refs/tags/v1.2.7","repository":{"clone_url":"https://github.com/acme/fleet.git"}}`)
	post(rc, gh, `{"ref":"refs/heads/main","repository":{"clone_url":"https://github.com/acme/fleet.git"}}`)
	post(rc, gh, `{"ref":"refs/heads/staging","repository":{"ssh_url":"git@github.com:ACME/fleet.git"}}`)
	if diff := cmp.Diff([]string{"ns/channel", "ns/staging"}, notified); diff != "" {
		t.Errorf("tag push reaches the semver channel, main push nobody, staging push its branch (-want +got):\n%s", diff)
	}
	for _, c := range []struct {
		name    string
		headers map[string]string
		body    string
		code    int
	}{
		{"too large", gh, `{"ref":"` + strings.Repeat("x", 5000) + `"}`, http.StatusRequestEntityTooLarge},
		{"malformed", gh, `{"ref":`, http.StatusBadRequest},
		{"no ref", gh, `{"repository":{"clone_url":"https://github.com/acme/fleet.git"}}`, http.StatusBadRequest},
		{"unknown provider", map[string]string{"X-Custom": "1"}, `{}`, http.StatusBadRequest},
		{"ping", map[string]string{"X-GitHub-Event": "ping"}, `{"zen":"hi"}`, http.StatusOK},
	} {
		if rec := post(rc, c.headers, c.body); rec.Code != c.code {
			t.Errorf("%s: %d %s, want %d", c.name, rec.Code, rec.Body, c.code)
		}
	}
}

// Two GitRepos of different tenants follow one repository, each with its own secret: a
// delivery signed with one secret triggers that GitRepo alone, the other's secret never gets in
// its way, and a delivery signed with neither, or for a repository nobody follows, gets the same
// 401 as one nobody may send.
func TestWebhookEachGitRepoChecksItsOwnSecret(t *testing.T) {
	var notified []string
	url := "https://github.com/acme/fleet.git"
	subs := []Subscriber{
		{Key: "team-a/fleet", Repo: Repo{URL: url, Branch: "main"}, Secret: "secret-a"},
		{Key: "team-b/fleet", Repo: Repo{URL: url, Branch: "main"}, Secret: "secret-b"},
		{Key: "team-c/fleet", Repo: Repo{URL: url, Branch: "main"}}, // neither secret nor opt-out
	}
	rc := &Receiver{
		Subscribers: func(n string) []Subscriber {
			if n == NormalizeURL(url) {
				return subs
			}
			return nil
		},
		Notify: func(s Subscriber, p Push) { notified = append(notified, s.Key) },
	}
	body := `{"ref":"refs/heads/main","repository":{"clone_url":"` + url + `"}}`
	signed := func(secret string) map[string]string {
		return map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + sign(secret, body)}
	}
	for _, c := range []struct {
		secret string
		code   int
		want   []string
	}{
		{"secret-a", http.StatusAccepted, []string{"team-a/fleet"}},
		{"secret-b", http.StatusAccepted, []string{"team-b/fleet"}},
		{"guess", http.StatusUnauthorized, nil},
	} {
		notified = nil
		rec := post(rc, signed(c.secret), body)
		if rec.Code != c.code || !cmp.Equal(notified, c.want) {
			t.Errorf("signed with %s: %d, notified %v; want %d, %v", c.secret, rec.Code, notified, c.code, c.want)
		}
		if strings.Contains(rec.Body.String(), "team-") {
			t.Errorf("signed with %s: the response names a GitRepo: %s", c.secret, rec.Body)
		}
	}
	other := `{"ref":"refs/heads/main","repository":{"clone_url":"https://github.com/acme/nobody.git"}}`
	if rec := post(rc, map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + sign("x", other)}, other); rec.Code != http.StatusUnauthorized {
		t.Errorf("a repository nobody follows: %d, want the same 401", rec.Code)
	}
}

func TestNormalizeURL(t *testing.T) {
	want := "github.com/acme/fleet"
	for _, u := range []string{"https://github.com/acme/fleet.git", "https://user:tok@GitHub.com/acme/fleet/", "git@github.com:acme/fleet.git",
		"ssh://git@github.com:22/acme/fleet.git", "http://github.com/acme/fleet"} {
		if got := NormalizeURL(u); got != want {
			t.Errorf("NormalizeURL(%q) = %q, want %q", u, got, want)
		}
	}
	if got := NormalizeURL("https://bitbucket.acme.internal/scm/proj/repo.git"); got != "bitbucket.acme.internal/proj/repo" {
		t.Errorf("bitbucket server: %q", got)
	}
}

func FuzzWebhookPayload(f *testing.F) {
	for _, d := range deliveries {
		f.Add(d.provider, d.body)
	}
	f.Fuzz(func(t *testing.T, provider, body string) {
		var notified []string
		rc := receiverFor("", true, &notified)
		var headers map[string]string
		for _, d := range deliveries {
			if d.provider == provider {
				headers = d.headers("", body)
			}
		}
		if headers == nil {
			headers = map[string]string{"X-GitHub-Event": "push"}
		}
		rec := post(rc, headers, body)
		if rec.Code >= 500 {
			t.Fatalf("server error %d for %q", rec.Code, body)
		}
	})
}

// A registry's push notification (distribution's format) triggers the artifact sources of the
// pushed repository that follow the tag: a semver range, that tag, or latest; its secret is in
// the Authorization header, and a delivery without it, or with another, triggers nothing.
func TestRegistryPushNotificationsTriggerArtifactSources(t *testing.T) {
	const repo = "oci://registry.acme.io:5000/fleet/shop"
	subs := []Subscriber{
		{Key: "ns/semver", Repo: Repo{URL: repo, Semver: "~1.0"}, Secret: "s3cret"},
		{Key: "ns/pinned", Repo: Repo{URL: repo, Revision: "1.0.0"}, Secret: "s3cret"},
		{Key: "ns/latest", Repo: Repo{URL: repo}, Secret: "s3cret"},
		{Key: "ns/other-secret", Repo: Repo{URL: repo, Semver: ">=1"}, Secret: "theirs"},
	}
	var notified []string
	rc := &Receiver{
		Subscribers: func(n string) []Subscriber {
			if n == NormalizeURL(repo) {
				return subs
			}
			return nil
		},
		Notify: func(s Subscriber, p Push) { notified = append(notified, s.Key+"@"+p.Ref) },
	}
	event := func(action, tag string) string {
		return `{"events":[{"action":"pull","target":{"repository":"fleet/shop","tag":"0.9.0"},"request":{"host":"registry.acme.io:5000"}},` +
			`{"action":"` + action + `","target":{"repository":"fleet/shop","tag":"` + tag + `","digest":"sha256:00"},"request":{"host":"registry.acme.io:5000"}}]}`
	}
	headers := func(auth string) map[string]string {
		return map[string]string{"Content-Type": distributionEvents + "; charset=utf-8", "Authorization": auth}
	}
	for _, tc := range []struct {
		name, auth, body string
		code             int
		want             []string
	}{
		{"a tag in the range", "Bearer s3cret", event("push", "1.0.1"), http.StatusAccepted, []string{"ns/semver@refs/tags/1.0.1"}},
		{"the pinned tag", "s3cret", event("push", "1.0.0"), http.StatusAccepted, []string{"ns/semver@refs/tags/1.0.0", "ns/pinned@refs/tags/1.0.0"}},
		{"latest", "Bearer s3cret", event("push", "latest"), http.StatusAccepted, []string{"ns/semver@refs/tags/latest", "ns/latest@refs/tags/latest"}},
		{"another secret", "Bearer nope", event("push", "1.0.1"), http.StatusUnauthorized, nil},
		{"no secret", "", event("push", "1.0.1"), http.StatusUnauthorized, nil},
		{"a pull only", "Bearer s3cret", event("pull", "1.0.1"), http.StatusOK, nil},
	} {
		notified = nil
		if rec := post(rc, headers(tc.auth), tc.body); rec.Code != tc.code || !cmp.Equal(notified, tc.want) {
			t.Errorf("%s: %d %s, notified %v; want %d, %v", tc.name, rec.Code, rec.Body, notified, tc.code, tc.want)
		}
	}
}

// A signed delivery sent again triggers its GitRepo once per replay window, answered as the
// first was: replaying what one saw on the wire buys no polls. The same body signed for another
// GitRepo (the forge sends one delivery per configured hook) triggers that one; a GitRepo that
// takes unsigned deliveries is open to anyone anyway and is triggered each time; past the window
// the body triggers again.
func TestWebhookReplaysTriggerOncePerWindow(t *testing.T) {
	url := "https://github.com/acme/fleet.git"
	subs := []Subscriber{
		{Key: "team-a/fleet", Repo: Repo{URL: url, Branch: "main"}, Secret: "secret-a"},
		{Key: "team-b/fleet", Repo: Repo{URL: url, Branch: "main"}, Secret: "secret-b"},
		{Key: "team-c/open", Repo: Repo{URL: url, Branch: "main"}, AllowUnsigned: true},
	}
	var notified []string
	now := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	rc := &Receiver{Subscribers: func(string) []Subscriber { return subs }, Notify: func(s Subscriber, p Push) { notified = append(notified, s.Key) },
		Now: func() time.Time { return now }}
	body := `{"ref":"refs/heads/main","after":"4b825dc642cb6eb9a060e54bf8d69288fbee4904","repository":{"clone_url":"` + url + `"}}`
	signed := func(secret string) map[string]string {
		return map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + sign(secret, body)}
	}
	for i, step := range []struct {
		secret  string
		advance time.Duration
		want    []string
	}{
		{"secret-a", 0, []string{"team-a/fleet", "team-c/open"}},
		{"secret-a", time.Minute, []string{"team-c/open"}},
		{"secret-a", DefaultReplayWindow - 2*time.Minute, []string{"team-c/open"}},
		{"secret-b", 0, []string{"team-b/fleet", "team-c/open"}},
		{"secret-b", 0, []string{"team-c/open"}},
		{"secret-a", 2 * time.Minute, []string{"team-a/fleet", "team-c/open"}},
	} {
		notified, now = nil, now.Add(step.advance)
		if rec := post(rc, signed(step.secret), body); rec.Code != http.StatusAccepted {
			t.Errorf("delivery %d: %d, want 202 as the first was", i, rec.Code)
		}
		if diff := cmp.Diff(step.want, notified); diff != "" {
			t.Errorf("delivery %d (signed with %s) triggered (-want +got):\n%s", i, step.secret, diff)
		}
	}
}

func TestHostOf(t *testing.T) {
	for url, want := range map[string]string{
		"https://GitHub.com/acme/fleet.git":          "github.com",
		"https://git.example:8443/acme/fleet":        "git.example:8443",
		"ssh://git@forge.internal:2222/acme/fleet":   "forge.internal:2222",
		"git@github.com:acme/fleet.git":              "github.com",
		"oci://registry.example/acme/fleet":          "registry.example",
		"http://user:token@127.0.0.1:34567/repo.git": "127.0.0.1:34567",
		"not a url": "",
	} {
		if got := HostOf(url); got != want {
			t.Errorf("HostOf(%q) = %q, want %q", url, got, want)
		}
	}
}
