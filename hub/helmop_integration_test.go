package hub

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	"helm.sh/helm/v3/pkg/chart"
	helmregistry "helm.sh/helm/v3/pkg/registry"
	"helm.sh/helm/v3/pkg/repo"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/e2e/helmchart"
	"github.com/flotilla-dev/flotilla/e2e/reftools"
	"github.com/flotilla-dev/flotilla/e2e/testpki"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/contentstore"
	"github.com/flotilla-dev/flotilla/hub/report"
)

// chartArchive packages chart web at version: a ConfigMap naming the version and the color value.
func chartArchive(t *testing.T, version string) []byte {
	t.Helper()
	return helmchart.Archive(t, "web", version, map[string]any{"color": "grey"}, map[string]string{"settings.yaml": "apiVersion: v1\nkind: ConfigMap\n" +
		"metadata: {name: {{ .Release.Name }}-settings}\ndata: {version: {{ .Chart.Version | quote }}, color: {{ .Values.color | quote }}}\n"})
}

// chartRepository is a Helm repository on loopback over TLS of its own CA, behind a login; it
// counts the index reads it serves.
type chartRepository struct {
	url, caPEM string
	requests   atomic.Int64 // every request, with or without the login
	indexReads atomic.Int64
	mu         sync.Mutex
	archives   map[string][]byte // file name → archive
	index      *repo.IndexFile
}

func newChartRepository(t *testing.T) *chartRepository {
	t.Helper()
	ca := testpki.NewCA(t, "charts-ca")
	r := &chartRepository{archives: map[string][]byte{}, index: repo.NewIndexFile(), caPEM: string(ca.PEM())}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.requests.Add(1)
		if u, p, ok := req.BasicAuth(); !ok || u != "charts" || p != "s3cret" {
			http.Error(w, "login", http.StatusUnauthorized)
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		name := strings.TrimPrefix(req.URL.Path, "/")
		if name == "index.yaml" {
			r.indexReads.Add(1)
			data, _ := yaml.Marshal(r.index)
			w.Write(data)
			return
		}
		if data, ok := r.archives[name]; ok {
			w.Write(data)
			return
		}
		http.NotFound(w, req)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "127.0.0.1")}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	r.url = srv.URL
	return r
}

// publish adds version of chart web to the repository and its index.
func (r *chartRepository) publish(t *testing.T, version string) {
	t.Helper()
	data := chartArchive(t, version)
	sum := sha256.Sum256(data)
	file := "web-" + version + ".tgz"
	r.mu.Lock()
	defer r.mu.Unlock()
	r.archives[file] = data
	if err := r.index.MustAdd(&chart.Metadata{APIVersion: chart.APIVersionV2, Name: "web", Version: version}, file, r.url, hex.EncodeToString(sum[:])); err != nil {
		t.Fatal(err)
	}
	r.index.SortEntries()
}

// chartsLogin is the Secret of the chart repository's login.
func chartsLogin() *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "charts-login"}, Type: corev1.SecretTypeBasicAuth,
		Data: map[string][]byte{corev1.BasicAuthUsernameKey: []byte("charts"), corev1.BasicAuthPasswordKey: []byte("s3cret")}}
}

// helmOpFleet is a simFleet whose bundle is a HelmOp's: the test plays the agents.
func helmOpFleet(t *testing.T, clusters map[string]map[string]string, op *v1alpha1.HelmOp, objs ...client.Object) *simFleet {
	t.Helper()
	return helmOpFleetOf(t, Options{}, clusters, op, objs...)
}

func helmOpFleetOf(t *testing.T, opts Options, clusters map[string]map[string]string, op *v1alpha1.HelmOp, objs ...client.Object) *simFleet {
	t.Helper()
	opts.StatusDelay, opts.UninstallTimeout = 200*time.Millisecond, 2*time.Second
	c, _ := startHub(t, opts)
	f := &simFleet{t: t, c: c, ns: namespace(t, c)}
	f.bundle = types.NamespacedName{Namespace: f.ns, Name: op.Name}
	for name, labels := range clusters {
		registerCluster(t, c, f.ns, name, labels)
	}
	for _, o := range append(objs, op) {
		o.SetNamespace(f.ns)
		if err := c.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// helmOp waits until the HelmOp satisfies cond.
func (f *simFleet) helmOp(name, what string, cond func(*v1alpha1.HelmOp) bool) *v1alpha1.HelmOp {
	f.t.Helper()
	return waitForObject(f.t, f.c, types.NamespacedName{Namespace: f.ns, Name: name}, what, cond)
}

// releasedContent is what the cluster's deployment releases, as its agent reads it.
func (f *simFleet) releasedContent(cluster string) string {
	f.t.Helper()
	bd := f.deployments()[cluster]
	if bd.Spec.Released == nil {
		f.t.Fatalf("%s has no release", cluster)
	}
	data, err := (&contentstore.Store{Client: f.c}).Get(context.Background(), f.ns, bd.Spec.Released.ContentID)
	if err != nil {
		f.t.Fatal(err)
	}
	return string(data)
}

func condition(conds []metav1.Condition, typ string) metav1.Condition {
	if c := meta.FindStatusCondition(conds, typ); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// A HelmOp follows a chart of a Helm repository (its own CA, behind a login) by semver range:
// each new version in the range is a new revision that rolls out canary first, under the
// HelmOp's partitions; a version outside the range changes nothing.
func TestR1_7_HelmOpRollsOutNewChartVersionsCanaryFirst(t *testing.T) {
	charts := newChartRepository(t)
	charts.publish(t, "1.0.0")
	clusters := clustersNamed(map[string]string{"ring": "main"}, "m1", "m2")
	clusters["c1"] = map[string]string{"ring": "canary"}
	op := &v1alpha1.HelmOp{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: v1alpha1.HelmOpSpec{
		Helm:             v1alpha1.HelmOpChart{Repo: charts.url, Chart: "web", Version: "~1.0", Values: &runtime.RawExtension{Raw: []byte(`{"color":"teal"}`)}},
		DefaultNamespace: "web", HelmSecretRef: &v1alpha1.LocalObjectReference{Name: "charts-login"}, CABundle: []byte(charts.caPEM),
		PollingInterval: &metav1.Duration{Duration: time.Second},
		Targets:         []v1alpha1.Target{{Name: "all", ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}},
		RolloutStrategy: &v1alpha1.RolloutStrategy{MaxUnavailable: ptrTo(intstr.FromInt32(0)), Partitions: []v1alpha1.Partition{
			{Name: "canary", ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}}},
			{Name: "rest", ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "main"}}}}}},
	}}
	// An alert of the HelmOp's events, its bundle's included.
	hook := newHookReceiver(t, "hook-key")
	alerting := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hook"}, Data: map[string][]byte{"address": []byte(hook.address()), "hmacKey": hook.key}},
		&v1alpha1.NotificationProvider{ObjectMeta: metav1.ObjectMeta{Name: "hook"},
			Spec: v1alpha1.NotificationProviderSpec{Type: v1alpha1.ProviderGenericHMAC, SecretRef: &v1alpha1.LocalSecretReference{Name: "hook"}}},
		&v1alpha1.Alert{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: v1alpha1.AlertSpec{
			ProviderRef: v1alpha1.LocalSecretReference{Name: "hook"}, EventSources: []v1alpha1.EventSource{{Kind: "HelmOp", Name: "web"}}}},
	}
	f := helmOpFleet(t, clusters, op, append(alerting, chartsLogin())...)

	f.releasedExactly(1, "canary", "c1")
	if got := f.releasedContent("c1"); !strings.Contains(got, `version: 1.0.0`) || !strings.Contains(got, `color: teal`) || !strings.Contains(got, "name: web-settings") {
		t.Errorf("c1's release of 1.0.0:\n%s", got)
	}
	f.ready("c1")
	f.until("1.0.0 reaches the rest after the canary", func() bool { return len(f.released(1)) == 3 })
	f.ready("m1", "m2")
	got := f.helmOp("web", "the HelmOp says 1.0.0 is Ready everywhere", func(o *v1alpha1.HelmOp) bool {
		return o.Status.Version == "1.0.0" && o.Status.Display.ReadyClusters == "3/3"
	})
	if src := condition(got.Status.Conditions, v1alpha1.SourceReadyCondition); src.Status != metav1.ConditionTrue || !strings.Contains(src.Message, "version 1.0.0 of web") {
		t.Errorf("SourceReady: %+v", src)
	}

	charts.publish(t, "1.0.1")
	f.releasedExactly(2, "canary", "c1")
	if got := f.releasedContent("c1"); !strings.Contains(got, `version: 1.0.1`) {
		t.Errorf("c1's release of 1.0.1:\n%s", got)
	}
	if bun := f.getBundle(); bun.Spec.Revisions[len(bun.Spec.Revisions)-1].Commit != "1.0.1" || bun.Labels["flotilla.dev/helmop"] != "web" || bun.Spec.GitRepo != "" {
		t.Errorf("bundle: labels %v, gitRepo %q, revisions %+v", bun.Labels, bun.Spec.GitRepo, bun.Spec.Revisions)
	}
	f.ready("c1")
	f.until("1.0.1 reaches the rest after the canary", func() bool { return len(f.released(2)) == 3 })

	charts.publish(t, "2.0.0")
	seen := charts.indexReads.Load()
	waitUntil(t, "the hub reads the index twice after 2.0.0 is published", func() bool { return charts.indexReads.Load() >= seen+2 })
	if bun := f.getBundle(); bun.Spec.LatestRevision != 2 {
		t.Errorf("2.0.0, outside ~1.0, made revision %d", bun.Spec.LatestRevision)
	}
	if o := f.helmOp("web", "read", func(*v1alpha1.HelmOp) bool { return true }); o.Status.Version != "1.0.1" {
		t.Errorf("status.version %q after 2.0.0", o.Status.Version)
	}
	waitUntil(t, "the alert tells the HelmOp's story and its bundle's", func() bool {
		told := strings.Join(hook.reasons(), "\n")
		return strings.Contains(told, "HelmOp/web VersionPickedUp") && strings.Contains(told, "HelmOp/web RevisionStaged") && strings.Contains(told, "Bundle/web PartitionReleased")
	}, func() string { return strings.Join(hook.reasons(), "\n") })
	// flotilla status shows it as it shows a GitRepo.
	st, err := report.Collect(context.Background(), f.c, f.ns, "web")
	if err != nil || len(st.GitRepos) != 0 || len(st.HelmOps) != 1 || len(st.HelmOps[0].Bundles) != 1 || st.HelmOps[0].Bundles[0].Revision != 2 {
		t.Fatalf("flotilla status: %+v, %v", st, err)
	}
	var text strings.Builder
	if err := st.WriteText(&text); err != nil || !strings.Contains(text.String(), "HelmOp "+f.ns+"/web  "+charts.url+" web  version 1.0.1") {
		t.Errorf("flotilla status:\n%s", text.String())
	}
}

// ociChartRegistry is a registry on loopback over TLS of its own CA.
type ociChartRegistry struct {
	host     string
	ca       []byte
	helm     *helmregistry.Client
	requests atomic.Int64
}

func newOCIChartRegistry(t *testing.T) *ociChartRegistry {
	t.Helper()
	ca := testpki.NewCA(t, "registry-ca")
	r := &ociChartRegistry{ca: ca.PEM()}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.requests.Add(1)
		reg.ServeHTTP(w, req)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "127.0.0.1")}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	r.host = strings.TrimPrefix(srv.URL, "https://")
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(r.ca)
	client, err := helmregistry.NewClient(helmregistry.ClientOptHTTPClient(&http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}))
	if err != nil {
		t.Fatal(err)
	}
	r.helm = client
	return r
}

// push pushes chart web at version as helm push does; it returns the manifest's digest.
func (r *ociChartRegistry) push(t *testing.T, version string) string {
	t.Helper()
	res, err := r.helm.Push(chartArchive(t, version), r.host+"/charts/web:"+version)
	if err != nil {
		t.Fatal(err)
	}
	return res.Manifest.Digest
}

// A HelmOp of an OCI chart that requires cosign signatures: the signed version deploys pinned
// to the digest it verified; a newer unsigned version is refused (SourceReady Unverified) and
// the signed one stays deployed; once signed, it rolls out.
func TestHelmOpOfAnOCIChartDeploysOnlySignedVersions(t *testing.T) {
	reg := newOCIChartRegistry(t)
	key := reftools.NewCosignKey(t)
	first := reg.push(t, "1.0.0")
	reftools.CosignSign(t, key, reg.host+"/charts/web@"+first)
	keys := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "release-keys"}, Data: map[string][]byte{"release.pub": key.Public}}
	op := &v1alpha1.HelmOp{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: v1alpha1.HelmOpSpec{
		Helm:             v1alpha1.HelmOpChart{Repo: "oci://" + reg.host + "/charts", Chart: "web", Version: ">=1.0.0"},
		DefaultNamespace: "web", CABundle: reg.ca, PollingInterval: &metav1.Duration{Duration: time.Second},
		Verify:  &v1alpha1.ChartVerification{Provider: "cosign", SecretRef: v1alpha1.LocalObjectReference{Name: "release-keys"}},
		Targets: []v1alpha1.Target{{Name: "all", ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}},
	}}
	f := helmOpFleet(t, map[string]map[string]string{"c1": nil}, op, keys)
	f.until("the signed 1.0.0 is released", func() bool { return len(f.released(1)) == 1 })
	if got := f.releasedContent("c1"); !strings.Contains(got, "version: 1.0.0") {
		t.Errorf("c1's release:\n%s", got)
	}
	got := f.helmOp("web", "status names 1.0.0 and its digest", func(o *v1alpha1.HelmOp) bool { return o.Status.Version == "1.0.0" })
	if got.Status.Digest != first {
		t.Errorf("status.digest %q, want %q", got.Status.Digest, first)
	}

	unsigned := reg.push(t, "1.1.0")
	got = f.helmOp("web", "the unsigned 1.1.0 refused", func(o *v1alpha1.HelmOp) bool {
		c := condition(o.Status.Conditions, v1alpha1.SourceReadyCondition)
		return c.Reason == v1alpha1.UnverifiedReason && strings.Contains(c.Message, "1.1.0")
	})
	if msg := condition(got.Status.Conditions, v1alpha1.SourceReadyCondition).Message; !strings.Contains(msg, "no cosign signature") || got.Status.Version != "1.0.0" {
		t.Errorf("SourceReady %q, version %s", msg, got.Status.Version)
	}
	if bun := f.getBundle(); bun.Spec.LatestRevision != 1 {
		t.Errorf("an unsigned version made revision %d", bun.Spec.LatestRevision)
	}
	reftools.CosignSign(t, key, reg.host+"/charts/web@"+unsigned)
	f.until("1.1.0 is released once signed", func() bool { return len(f.released(2)) == 1 })
	if got := f.releasedContent("c1"); !strings.Contains(got, "version: 1.1.0") {
		t.Errorf("c1's release of 1.1.0:\n%s", got)
	}
}

// A HelmOp is a tenant's source like a GitRepo: its namespace's FleetRestrictions admit its
// chart server before the hub reads anything there (a server outside allowedRepoPatterns, or
// a chart that verifies no signature where requireVerifiedSources holds, gets no request);
// deleted, it takes its bundle and deployments with it.
func TestHelmOpIsRestrictedAndRemovedLikeAGitRepo(t *testing.T) {
	charts := newChartRepository(t)
	charts.publish(t, "1.0.0")
	restriction := &v1alpha1.FleetRestriction{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}, Spec: v1alpha1.FleetRestrictionSpec{
		AllowedRepoPatterns: []string{`https://charts\.example\.com/.*`}}}
	op := &v1alpha1.HelmOp{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: v1alpha1.HelmOpSpec{
		Helm:          v1alpha1.HelmOpChart{Repo: charts.url, Chart: "web"},
		HelmSecretRef: &v1alpha1.LocalObjectReference{Name: "charts-login"}, CABundle: []byte(charts.caPEM), PollingInterval: &metav1.Duration{Duration: time.Second},
		Targets: []v1alpha1.Target{{Name: "all", ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}},
	}}
	f := helmOpFleet(t, map[string]map[string]string{"c1": nil}, op, restriction, chartsLogin())
	key := types.NamespacedName{Namespace: f.ns, Name: "web"}
	f.helmOp("web", "the chart server is refused", func(o *v1alpha1.HelmOp) bool {
		c := condition(o.Status.Conditions, v1alpha1.SourceReadyCondition)
		return c.Reason == v1alpha1.RestrictedReason && strings.Contains(c.Message, "FleetRestriction tenant") && strings.Contains(c.Message, charts.url)
	})
	if n := charts.requests.Load(); n != 0 || len(f.deployments()) != 0 {
		t.Errorf("a refused chart server was read %d times; deployments %v", n, f.deployments())
	}

	// Admitted by its pattern, but the namespace requires verified sources.
	var r v1alpha1.FleetRestriction
	if err := f.c.Get(context.Background(), types.NamespacedName{Namespace: f.ns, Name: "tenant"}, &r); err != nil {
		t.Fatal(err)
	}
	r.Spec.AllowedRepoPatterns, r.Spec.RequireVerifiedSources = []string{`https://127\.0\.0\.1:[0-9]+`}, true
	if err := f.c.Update(context.Background(), &r); err != nil {
		t.Fatal(err)
	}
	f.helmOp("web", "an unverified chart is refused", func(o *v1alpha1.HelmOp) bool {
		return strings.Contains(condition(o.Status.Conditions, v1alpha1.SourceReadyCondition).Message, "a HelmOp without spec.verify (requireVerifiedSources)")
	})
	if n := charts.requests.Load(); n != 0 {
		t.Errorf("an unverified chart's server was read %d times", n)
	}

	r.Spec.RequireVerifiedSources = false
	if err := f.c.Update(context.Background(), &r); err != nil {
		t.Fatal(err)
	}
	f.helmOp("web", "admitted, 1.0.0 is rendered", func(o *v1alpha1.HelmOp) bool { return o.Status.Version == "1.0.0" })
	f.until("admitted, 1.0.0 is released", func() bool { return len(f.released(1)) == 1 })
	f.ready("c1")

	var del v1alpha1.HelmOp
	if err := f.c.Get(context.Background(), key, &del); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Delete(context.Background(), &del); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the deleted HelmOp goes with its bundle and deployments", func() bool {
		var bun v1alpha1.Bundle
		return f.c.Get(context.Background(), key, &del) != nil && f.c.Get(context.Background(), f.bundle, &bun) != nil && len(f.deployments()) == 0
	})
}

// The hub's operator bounds the chart servers every HelmOp reaches (--allowed-chart-hosts): an
// OCI chart elsewhere is refused before its tags or signatures are asked for.
func TestHelmOpReachesOnlyTheChartHostsTheHubAllows(t *testing.T) {
	reg := newOCIChartRegistry(t)
	reg.push(t, "1.0.0")
	sent := reg.requests.Load()
	op := &v1alpha1.HelmOp{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: v1alpha1.HelmOpSpec{
		Helm: v1alpha1.HelmOpChart{Repo: "oci://" + reg.host + "/charts/web"}, CABundle: reg.ca, PollingInterval: &metav1.Duration{Duration: time.Second},
		Targets: []v1alpha1.Target{{Name: "all", ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}},
	}}
	f := helmOpFleetOf(t, Options{AllowedChartHosts: []string{"charts.example.com"}}, map[string]map[string]string{"c1": nil}, op)
	got := f.helmOp("web", "the registry is refused", func(o *v1alpha1.HelmOp) bool {
		return condition(o.Status.Conditions, v1alpha1.SourceReadyCondition).Reason == v1alpha1.RestrictedReason
	})
	if msg := condition(got.Status.Conditions, v1alpha1.SourceReadyCondition).Message; !strings.Contains(msg, "--allowed-chart-hosts") || !strings.Contains(msg, reg.host) {
		t.Errorf("SourceReady: %q", msg)
	}
	if n := reg.requests.Load() - sent; n != 0 || len(f.deployments()) != 0 {
		t.Errorf("the refused registry got %d requests; deployments %v", n, f.deployments())
	}
}
