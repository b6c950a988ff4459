package dashboard

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/e2e/testpki"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

func TestChipOf(t *testing.T) {
	readyUnknown := &v1alpha1.BundleDeployment{Status: v1alpha1.BundleDeploymentStatus{Conditions: []metav1.Condition{{Type: v1alpha1.ReadyCondition, Status: metav1.ConditionUnknown}}}}
	readyFalse := &v1alpha1.BundleDeployment{Status: v1alpha1.BundleDeploymentStatus{Conditions: []metav1.Condition{{Type: v1alpha1.ReadyCondition, Status: metav1.ConditionFalse}}}}
	rollback := &v1alpha1.BundleDeployment{Spec: v1alpha1.BundleDeploymentSpec{Rollback: true}}
	pausedBD := &v1alpha1.BundleDeployment{Spec: v1alpha1.BundleDeploymentSpec{Paused: true}}
	for _, tc := range []struct {
		name  string
		state v1alpha1.ClusterState
		bd    *v1alpha1.BundleDeployment
		facts clusterFacts
		run   v1alpha1.RunState
		want  Chip
	}{
		{"no deployment yet", v1alpha1.StatePending, nil, clusterFacts{}, "", ChipPending},
		{"out of sync waits for the rollout", v1alpha1.StateOutOfSync, nil, clusterFacts{}, "", ChipPending},
		{"released, not applied", v1alpha1.StateWaitApplied, &v1alpha1.BundleDeployment{}, clusterFacts{}, "", ChipReleased},
		{"applied, readiness unknown", v1alpha1.StateNotReady, readyUnknown, clusterFacts{}, "", ChipApplied},
		{"applied, no Ready condition", v1alpha1.StateNotReady, &v1alpha1.BundleDeployment{}, clusterFacts{}, "", ChipApplied},
		{"applied, not ready", v1alpha1.StateNotReady, readyFalse, clusterFacts{}, "", ChipNotReady},
		{"apply failed", v1alpha1.StateErrApplied, &v1alpha1.BundleDeployment{}, clusterFacts{}, "", ChipFailed},
		{"drifted", v1alpha1.StateModified, &v1alpha1.BundleDeployment{}, clusterFacts{}, "", ChipModified},
		{"ready", v1alpha1.StateReady, &v1alpha1.BundleDeployment{}, clusterFacts{}, "", ChipReady},
		// R1.11: an offline cluster shows offline whatever it last reported, Ready included.
		{"R1_11 offline beats ready", v1alpha1.StateReady, &v1alpha1.BundleDeployment{}, clusterFacts{Offline: true}, "", ChipOffline},
		{"R5_4 rolled back", v1alpha1.StateReady, rollback, clusterFacts{}, "", ChipRolledBack},
		{"R3_11 skipped", v1alpha1.StatePending, nil, clusterFacts{}, v1alpha1.RunSkipped, ChipSkipped},
		{"R1_13 paused cluster holds", v1alpha1.StateOutOfSync, &v1alpha1.BundleDeployment{}, clusterFacts{Paused: true}, "", ChipPaused},
		{"R1_13 paused deployment holds", v1alpha1.StateWaitApplied, pausedBD, clusterFacts{}, "", ChipPaused},
		{"R1_13 a paused cluster that is ready shows ready", v1alpha1.StateReady, &v1alpha1.BundleDeployment{}, clusterFacts{Paused: true}, "", ChipReady},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := chipOf(tc.state, tc.bd, tc.facts, tc.run); got != tc.want {
				t.Errorf("chipOf = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestAttentionListsEveryChipOnce(t *testing.T) {
	all := []Chip{ChipFailed, ChipNotReady, ChipOffline, ChipRolledBack, ChipPaused, ChipModified, ChipReleased, ChipApplied, ChipPending, ChipSkipped, ChipReady}
	for _, c := range all {
		if n := slices.Index(attention, c); n < 0 || slices.Index(attention[n+1:], c) >= 0 {
			t.Errorf("chip %s is in the attention order %d times, want once", c, strings.Count(fmt.Sprint(attention), string(c)))
		}
	}
	if len(attention) != len(all) {
		t.Errorf("attention has %d chips, want %d", len(attention), len(all))
	}
}

// chips makes n clusters named c00000…, every k-th one failed and the rest ready.
func chips(n, k int) []ClusterChip {
	out := make([]ClusterChip, n)
	for i := range out {
		out[i] = ClusterChip{Name: fmt.Sprintf("c%05d", i), Chip: ChipReady}
		if i%k == 0 {
			out[i].Chip = ChipFailed
		}
	}
	return out
}

func TestLaneAtFleetScaleIsCountsAndAttentionFirst(t *testing.T) {
	var l Lane
	l.fill(chips(10000, 100))
	if l.Total != 10000 || l.Counts[ChipFailed] != 100 || l.Counts[ChipReady] != 9900 {
		t.Fatalf("counts = total %d %v, want 10000 with 100 failed and 9900 ready", l.Total, l.Counts)
	}
	if len(l.Clusters) != laneChips || l.More != 10000-laneChips {
		t.Fatalf("lane carries %d chips and %d more, want %d and %d", len(l.Clusters), l.More, laneChips, 10000-laneChips)
	}
	for i, c := range l.Clusters[:100] {
		if c.Chip != ChipFailed {
			t.Fatalf("chip %d is %s (%s): the 100 failed clusters come first", i, c.Chip, c.Name)
		}
	}
	if l.Clusters[100].Chip != ChipReady {
		t.Errorf("after the failed ones, chip 100 is %s, want ready", l.Clusters[100].Chip)
	}
}

func TestClusterTablePages(t *testing.T) {
	all := chips(250, 10) // 25 failed
	for _, tc := range []struct {
		name                    string
		state                   Chip
		page                    int
		wantTotal, wantPages    int
		wantPage, wantRows      int
		wantFirst, wantFirstRow string
	}{
		{"first page, failed first", "", 0, 250, 3, 0, 100, "c00000", "failed"},
		{"last page is partial", "", 2, 250, 3, 2, 50, "", "ready"},
		{"a page past the end is the last one", "", 9, 250, 3, 2, 50, "", "ready"},
		{"a negative page is the first", "", -4, 250, 3, 0, 100, "c00000", "failed"},
		{"filtered by state", ChipFailed, 0, 25, 1, 0, 25, "c00000", "failed"},
		{"a state nobody is in has one empty page", ChipOffline, 0, 0, 1, 0, 0, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := page(all, tc.state, tc.page)
			if got.Total != tc.wantTotal || got.Pages != tc.wantPages || got.Page != tc.wantPage || len(got.Rows) != tc.wantRows {
				t.Fatalf("page = total %d pages %d page %d rows %d, want %d %d %d %d", got.Total, got.Pages, got.Page, len(got.Rows), tc.wantTotal, tc.wantPages, tc.wantPage, tc.wantRows)
			}
			if got.Rows == nil {
				t.Error("rows are nil: the page would send null, not an empty table")
			}
			if tc.wantFirst != "" && got.Rows[0].Name != tc.wantFirst {
				t.Errorf("first row %s, want %s", got.Rows[0].Name, tc.wantFirst)
			}
			if tc.wantFirstRow != "" && string(got.Rows[0].Chip) != tc.wantFirstRow {
				t.Errorf("first row is %s, want %s", got.Rows[0].Chip, tc.wantFirstRow)
			}
		})
	}
}

func TestSideBySide(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b []string
		want string // one op per row
	}{
		{"equal", []string{"a", "b"}, []string{"a", "b"}, "=="},
		{"one line changed", []string{"a", "b", "c"}, []string{"a", "B", "c"}, "=~="},
		{"added at the end", []string{"a"}, []string{"a", "b"}, "=+"},
		{"removed at the start", []string{"a", "b"}, []string{"b"}, "-="},
		{"from nothing", nil, []string{"a", "b"}, "++"},
		{"to nothing", []string{"a", "b"}, nil, "--"},
		{"two removed, one added", []string{"x", "a", "b", "y"}, []string{"x", "c", "y"}, "=~-="},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows := sideBySide(tc.a, tc.b)
			var ops strings.Builder
			var left, right []string
			for _, r := range rows {
				ops.WriteString(r.Op)
				if r.Op != "+" {
					left = append(left, r.Left)
				}
				if r.Op != "-" {
					right = append(right, r.Right)
				}
			}
			if ops.String() != tc.want {
				t.Errorf("ops = %q, want %q (%+v)", ops.String(), tc.want, rows)
			}
			// Whatever the alignment, each side reads as its own text, in order.
			if !slices.Equal(left, tc.a) && !(len(left) == 0 && len(tc.a) == 0) {
				t.Errorf("left side = %q, want %q", left, tc.a)
			}
			if !slices.Equal(right, tc.b) && !(len(right) == 0 && len(tc.b) == 0) {
				t.Errorf("right side = %q, want %q", right, tc.b)
			}
		})
	}
}

func TestSplitObjectsMasksSecretValues(t *testing.T) {
	stream := []byte(`apiVersion: v1
kind: Secret
metadata:
  name: db
  namespace: app
data:
  password: aHVudGVyMg==
stringData:
  token: s3cr3t-token-value
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  mode: fast
---
# an empty document
`)
	objs, err := splitObjects(stream)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 {
		t.Fatalf("objects = %v, want the Secret and the ConfigMap", slices.Collect(mapsKeys(objs)))
	}
	secret, ok := objs["Secret app/db"]
	if !ok {
		t.Fatalf("no Secret app/db among %v", slices.Collect(mapsKeys(objs)))
	}
	for _, value := range []string{"aHVudGVyMg==", "hunter2", "s3cr3t-token-value"} {
		if strings.Contains(secret, value) {
			t.Errorf("the Secret's value %q is shown:\n%s", value, secret)
		}
	}
	if strings.Count(secret, "(masked, sha256 ") != 2 {
		t.Errorf("want both values masked with their digest:\n%s", secret)
	}
	if !strings.Contains(objs["ConfigMap settings"], "mode: fast") {
		t.Errorf("a ConfigMap's data is shown as it is:\n%s", objs["ConfigMap settings"])
	}
	if _, err := splitObjects([]byte("kind: [unclosed")); err == nil {
		t.Error("a broken stream gave no error")
	}
}

func mapsKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func TestLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1:8585":            true,
		"localhost:8585":            true,
		"[::1]:8585":                true,
		"127.0.0.1":                 true,
		"127.1.2.3:80":              true,
		"rebind.example.com:8585":   false,
		"localhost.example.com":     false,
		"10.0.0.1:8585":             false,
		"0.0.0.0:8585":              false,
		"":                          false,
		"127.0.0.1.nip.io:8585":     false,
		"[::ffff:10.0.0.1]:8585":    false,
		"2130706433:8585":           false, // 127.0.0.1 as a number: not what a browser sends for a name
		"localhost:8585@evil.test":  false,
		"LOCALHOST.evil.test:8585":  false,
		"[fe80::1%25lo]:8585":       false,
		"127.0.0.1:8585:8585":       false,
		"127.0.0.1 :8585":           false,
		"::1":                       true,
		"localhost:":                true,
		"[::1]":                     true,
		"evil.test:8585/127.0.0.1":  false,
		"127.0.0.1.:8585":           false,
		"0x7f.0.0.1:8585":           false,
		"127.000.000.001:8585":      false,
		"localhost\x00.evil.test:1": false,
	} {
		if got := LoopbackHost(host); got != want {
			t.Errorf("LoopbackHost(%q) = %t, want %t", host, got, want)
		}
	}
}

// localServer is a local-mode server with no API server behind it: enough for what is decided
// before a request reaches the hub.
func localServer() *Server {
	return &Server{opts: Options{Namespace: "fleet-default", Version: "test"}, key: []byte("0123456789abcdef0123456789abcdef"), loginToken: "the-login-token",
		loginUntil: time.Now().Add(time.Minute), localIdentity: Identity{User: "alice"}, now: time.Now}
}

func TestLocalModeRefusesWhatIsNotThePersonsPage(t *testing.T) {
	s := localServer()
	h := s.Handler()
	do := func(method, target string, header http.Header, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, target, strings.NewReader(body))
		r.Host = "127.0.0.1:8585"
		for k, v := range header {
			r.Header[k] = v
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	// The login link, used once here, opens the session the subtests present.
	signedIn := do("GET", s.LoginPath(), nil, "")
	if len(signedIn.Result().Cookies()) != 1 {
		t.Fatalf("the login link: status %d, cookies %v", signedIn.Code, signedIn.Result().Cookies())
	}
	loginCookie := signedIn.Result().Cookies()[0]
	cookie := loginCookie.String()

	t.Run("every answer carries the content policy", func(t *testing.T) {
		w := do("GET", "/assets/app.js", nil, "")
		if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Errorf("Content-Security-Policy = %q", csp)
		}
		if w.Header().Get("X-Frame-Options") != "DENY" || w.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("headers = %v", w.Header())
		}
	})
	t.Run("DNS rebinding: a name that is not loopback", func(t *testing.T) {
		r := httptest.NewRequest("GET", "/api/session", nil)
		r.Host = "rebind.evil.test:8585"
		r.Header.Set("Cookie", cookie)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusMisdirectedRequest || strings.Contains(w.Body.String(), "csrf") {
			t.Errorf("status %d body %q, want 421 and no session", w.Code, w.Body.String())
		}
	})
	for _, path := range []string{"/", "/api/session", "/api/view?view=fleet", "/api/stream?view=fleet"} {
		t.Run("no session: "+path, func(t *testing.T) {
			w := do("GET", path, nil, "")
			if w.Code != http.StatusUnauthorized || strings.Contains(w.Body.String(), "csrf") {
				t.Errorf("status %d body %q, want 401", w.Code, w.Body.String())
			}
		})
	}
	t.Run("a forged session cookie", func(t *testing.T) {
		w := do("GET", "/api/session", http.Header{"Cookie": {sessionCookie + "=" + s.loginToken}}, "")
		if w.Code != http.StatusUnauthorized {
			t.Errorf("status %d, want 401", w.Code)
		}
	})
	t.Run("a wrong login token sets no cookie", func(t *testing.T) {
		w := do("GET", "/login?token=guess", nil, "")
		if w.Code != http.StatusUnauthorized || len(w.Result().Cookies()) != 0 {
			t.Errorf("status %d cookies %v, want 401 and none", w.Code, w.Result().Cookies())
		}
	})
	t.Run("the login link signs in once", func(t *testing.T) {
		if signedIn.Code != http.StatusSeeOther || !loginCookie.HttpOnly || loginCookie.SameSite != http.SameSiteStrictMode {
			t.Fatalf("status %d cookie %+v, want a redirect with one HttpOnly SameSite=Strict cookie", signedIn.Code, loginCookie)
		}
		if strings.Contains(loginCookie.Value, s.loginToken) || loginCookie.Value == s.mac("session", s.loginToken) {
			t.Errorf("the session cookie %q is derived from the link alone", loginCookie.Value)
		}
		w := do("GET", "/api/session", http.Header{"Cookie": {cookie}}, "")
		var got session
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || got.User != "alice" || got.CSRF != s.csrfToken(Identity{User: "alice"}) {
			t.Errorf("session = %s (%v), want alice with her CSRF token", w.Body.String(), err)
		}
		again := do("GET", s.LoginPath(), nil, "")
		if again.Code != http.StatusUnauthorized || len(again.Result().Cookies()) != 0 {
			t.Errorf("the link used a second time: status %d cookies %v, want 401 and none", again.Code, again.Result().Cookies())
		}
	})
	t.Run("an expired login link signs nobody in", func(t *testing.T) {
		late := localServer()
		late.loginUntil = time.Now().Add(-time.Second)
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", late.LoginPath(), nil)
		r.Host = "127.0.0.1:8585"
		late.Handler().ServeHTTP(w, r)
		if w.Code != http.StatusUnauthorized || len(w.Result().Cookies()) != 0 || !strings.Contains(w.Body.String(), "expired") {
			t.Errorf("status %d cookies %v body %q, want 401, none, and why", w.Code, w.Result().Cookies(), w.Body.String())
		}
	})

	csrf := s.csrfToken(s.localIdentity)
	body := `{"action":"pause-bundle","namespace":"fleet-default","name":"app"}`
	for _, tc := range []struct {
		name   string
		header http.Header
	}{
		{"no CSRF token", http.Header{"Cookie": {cookie}, "Content-Type": {"application/json"}}},
		{"another identity's token", http.Header{"Cookie": {cookie}, "Content-Type": {"application/json"}, "X-Flotilla-Csrf": {s.csrfToken(Identity{User: "mallory"})}}},
		{"a cross-site page", http.Header{"Cookie": {cookie}, "Content-Type": {"application/json"}, "X-Flotilla-Csrf": {csrf}, "Sec-Fetch-Site": {"cross-site"}}},
		{"another origin", http.Header{"Cookie": {cookie}, "Content-Type": {"application/json"}, "X-Flotilla-Csrf": {csrf}, "Origin": {"http://evil.test"}}},
		{"a form post", http.Header{"Cookie": {cookie}, "Content-Type": {"application/x-www-form-urlencoded"}, "X-Flotilla-Csrf": {csrf}}},
	} {
		t.Run("CSRF: "+tc.name, func(t *testing.T) {
			w := do("POST", "/api/action", tc.header, body)
			var res actionResult
			_ = json.Unmarshal(w.Body.Bytes(), &res)
			if w.Code != http.StatusForbidden || res.Reason != "CSRF" {
				t.Errorf("status %d body %s, want 403 CSRF", w.Code, w.Body.String())
			}
		})
	}
	t.Run("an action is POST only", func(t *testing.T) {
		if w := do("GET", "/api/action?action=pause-bundle", http.Header{"Cookie": {cookie}}, ""); w.Code != http.StatusMethodNotAllowed {
			t.Errorf("status %d, want 405", w.Code)
		}
	})
}

func TestProxyModeTrustsOnlyTheProxy(t *testing.T) {
	proxyCA, otherCA, serverCA := testpki.NewCA(t, "proxy-ca"), testpki.NewCA(t, "other-ca"), testpki.NewCA(t, "server-ca")
	auth := &ProxyAuth{ClientCA: proxyCA.Pool, AllowedNames: []string{"front-proxy"}, AllowedGroups: []string{"release-managers", "oncall", "system:masters"}}
	s := &Server{opts: Options{Proxy: auth, Namespace: "fleet-default", Config: &rest.Config{Host: "https://127.0.0.1:1"}}, key: []byte("0123456789abcdef0123456789abcdef"), now: time.Now}
	srv := httptest.NewUnstartedServer(s.Handler())
	srv.TLS = ProxyTLS(serverCA.Server(t, "localhost"), auth)
	srv.StartTLS()
	defer srv.Close()

	get := func(t *testing.T, cert *tls.Certificate, header http.Header) (int, string, error) {
		t.Helper()
		cfg := &tls.Config{RootCAs: serverCA.Pool, ServerName: "localhost"}
		if cert != nil {
			// Sent whatever CAs the server asks for, as an attacker's client would.
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
		}
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
		defer c.CloseIdleConnections()
		u, _ := url.Parse(srv.URL + "/api/session")
		req := &http.Request{Method: "GET", URL: u, Header: header}
		res, err := c.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b), nil
	}
	asAlice := http.Header{"X-Remote-User": {"alice"}, "X-Remote-Group": {"release-managers, oncall"}}
	proxy := proxyCA.Client(t, "front-proxy")
	impostor := proxyCA.Client(t, "some-other-client")
	foreign := otherCA.Client(t, "front-proxy")

	for _, tc := range []struct {
		name   string
		cert   *tls.Certificate
		header http.Header
	}{
		{"no certificate, no headers", nil, nil},
		{"a forged user header without the proxy's certificate", nil, asAlice},
		{"the proxy CA's certificate of another name", &impostor, asAlice},
		{"the proxy's certificate without a user", &proxy, http.Header{"X-Remote-Group": {"system:masters"}}},
		// A hostile header set through the real proxy: system identities are never
		// impersonated, even where a list names them.
		{"the proxy asserting system:masters", &proxy, http.Header{"X-Remote-User": {"alice"}, "X-Remote-Group": {"oncall", "system:masters"}}},
		{"the proxy asserting a system user", &proxy, http.Header{"X-Remote-User": {"system:admin"}}},
		{"the proxy asserting a service account", &proxy, http.Header{"X-Remote-User": {"system:serviceaccount:flotilla-system:flotilla-hub"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body, err := get(t, tc.cert, tc.header)
			if err != nil {
				t.Fatal(err)
			}
			if status != http.StatusUnauthorized || strings.Contains(body, "csrf") || strings.Contains(body, "alice") {
				t.Errorf("status %d body %q, want 401 and nothing of a session", status, body)
			}
		})
	}
	t.Run("groups the list does not name are dropped", func(t *testing.T) {
		status, body, err := get(t, &proxy, http.Header{"X-Remote-User": {"bob"}, "X-Remote-Group": {"oncall, cluster-admins", "oncall"}})
		if err != nil || status != http.StatusOK {
			t.Fatalf("status %d body %q err %v, want 200", status, body, err)
		}
		var got session
		if err := json.Unmarshal([]byte(body), &got); err != nil || got.User != "bob" || !slices.Equal(got.Groups, []string{"oncall"}) {
			t.Errorf("identity = %+v (%v), want bob in oncall only", got.Identity, err)
		}
	})
	t.Run("no allowed names: no certificate is the proxy's", func(t *testing.T) {
		open := &ProxyAuth{ClientCA: proxyCA.Pool}
		r := httptest.NewRequest("GET", "/api/session", nil)
		r.Header = asAlice.Clone()
		leaf, err := x509.ParseCertificate(proxy.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		r.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf}}}
		if id, err := open.identify(r); err == nil {
			t.Errorf("identified %+v without a list of the proxy's names", id)
		}
	})
	t.Run("a certificate of another CA fails the handshake", func(t *testing.T) {
		status, body, err := get(t, &foreign, asAlice)
		if err == nil {
			t.Errorf("status %d body %q, want the TLS handshake refused", status, body)
		}
	})
	t.Run("the proxy asserting alice", func(t *testing.T) {
		status, body, err := get(t, &proxy, asAlice)
		if err != nil || status != http.StatusOK {
			t.Fatalf("status %d body %q err %v, want 200", status, body, err)
		}
		var got session
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatal(err)
		}
		if got.User != "alice" || !slices.Equal(got.Groups, []string{"release-managers", "oncall"}) {
			t.Errorf("identity = %+v, want alice in release-managers and oncall", got.Identity)
		}
		cfg := s.config(got.Identity)
		if cfg.Impersonate.UserName != "alice" || !slices.Equal(cfg.Impersonate.Groups, got.Groups) {
			t.Errorf("the API server connection impersonates %+v, want alice", cfg.Impersonate)
		}
	})
	t.Run("the login link does not exist behind the proxy", func(t *testing.T) {
		r := httptest.NewRequest("GET", "/login?token=", nil)
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, r)
		if w.Code != http.StatusUnauthorized || len(w.Result().Cookies()) != 0 {
			t.Errorf("status %d cookies %v, want 401 and none", w.Code, w.Result().Cookies())
		}
	})
}

func TestIdentityKeyIgnoresGroupOrderButNotGroups(t *testing.T) {
	a := Identity{User: "alice", Groups: []string{"b", "a"}}
	if a.key() != (Identity{User: "alice", Groups: []string{"a", "b"}}).key() {
		t.Error("the same groups in another order are another identity")
	}
	for _, other := range []Identity{{User: "alice"}, {User: "alice", Groups: []string{"a"}}, {User: "alice\x00b", Groups: []string{"a"}}, {User: "bob", Groups: []string{"a", "b"}}} {
		if a.key() == other.key() {
			t.Errorf("%+v and %+v share a key: they would share informers and CSRF tokens", a, other)
		}
	}
}
