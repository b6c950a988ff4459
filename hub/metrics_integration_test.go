package hub

import (
	"context"
	"crypto/tls"
	"io"
	"io/fs"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/e2e/controlplane"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/manifests"
)

// With --metrics-secure (the installs' default) the hub's metrics go only to a caller the API
// server authenticates and authorizes for GET /metrics (the ClusterRole
// flotilla-hub-metrics-reader): no token, a token of an account without the role, and plain
// HTTP get nothing of them, not a single metric name.
func TestMetricsGoOnlyToThoseAllowedToReadThem(t *testing.T) {
	c := apiClient(t)
	ns := namespace(t, c)
	cs := kubernetes.NewForConfigOrDie(hubCluster.Config())
	ctx := context.Background()
	reader, err := fs.ReadFile(manifests.Install, "rbac/metrics-reader.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := controlplane.Apply(ctx, hubCluster.Config(), reader); err != nil {
		t.Fatal(err)
	}
	token := func(name string) string {
		t.Helper()
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	scraper, stranger := token("prometheus"), token("stranger")
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "metrics-" + ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "flotilla-hub-metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "prometheus", Namespace: ns}}}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	startHub(t, Options{MetricsAddr: addr, MetricsSecure: true, Namespace: ns, AgentTokenTTL: 36 * time.Hour})

	// The certificate is the hub's own, self-signed: what a ServiceMonitor's
	// insecureSkipVerify trusts; what is checked here is who gets the metrics.
	httpsClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec
	get := func(scheme, bearer string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, scheme+"://"+addr+"/metrics", nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := httpsClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	var code int
	var body string
	waitUntil(t, "the metrics endpoint answers", func() bool {
		code, body = get("https", scraper)
		return code == http.StatusOK
	}, func() string { return strconv.Itoa(code) + " " + body })
	if !strings.Contains(body, "flotilla_") {
		t.Errorf("the allowed scraper got no Flotilla metric:\n%.500s", body)
	}
	for _, tc := range []struct {
		name, scheme, bearer string
		want                 int // 0: any refusal
	}{
		{"no token", "https", "", http.StatusUnauthorized},
		// controller-runtime's filter answers a token the TokenReview does not know with 500.
		{"a token not the API server's", "https", "not-a-token", 0},
		{"an account without the reader role", "https", stranger, http.StatusForbidden},
		{"plain HTTP", "http", scraper, http.StatusBadRequest},
	} {
		code, body := get(tc.scheme, tc.bearer)
		if (tc.want != 0 && code != tc.want) || code < 400 || strings.Contains(body, "flotilla_") || strings.Contains(body, "go_goroutines") {
			t.Errorf("%s: %d, want %d and no metric in the answer:\n%.300s", tc.name, code, tc.want, body)
		}
	}

	// The hub records in its namespace the agent token lifetime the admission policies hold
	// agents' renewals to.
	waitUntil(t, "the hub records its agent token lifetime", func() bool {
		var record corev1.ConfigMap
		return c.Get(ctx, types.NamespacedName{Namespace: ns, Name: v1alpha1.HubRecordConfigMap}, &record) == nil &&
			record.Data[v1alpha1.HubRecordAgentTokenSeconds] == strconv.Itoa(36*3600)
	})
}
