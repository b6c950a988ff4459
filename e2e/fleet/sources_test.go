package fleet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	helmregistry "helm.sh/helm/v3/pkg/registry"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/e2e/helmchart"
	"github.com/flotilla-dev/flotilla/e2e/testpki"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/gitsource"
)

// A fleet repository shipped as an OCI artifact (packed as `flotilla push artifact` packs it,
// served by a registry on loopback) is deployed to the workload clusters by the hub and their
// agents, and a new tag in the GitRepo's semver range rolls out.
func TestOCIArtifactDeploysToWorkloadClusters(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	push := func(tag, image string) {
		dir := t.TempDir()
		files := map[string]string{"web/fleet.yaml": "defaultNamespace: oci-shop\n", "web/deployment.yaml": webManifest(image)}
		for name, content := range files {
			if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		img, err := gitsource.BuildArtifact(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := name.NewTag(host + "/fleet/shop:" + tag)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(ref, img); err != nil {
			t.Fatal(err)
		}
	}
	push("1.0.0", "example.invalid/web:1")
	f := startFleet(t)
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: f.ns}, Spec: v1alpha1.GitRepoSpec{
		Repo: "oci://" + host + "/fleet/shop", Semver: "~1.0", PollingInterval: &metav1.Duration{Duration: 2 * time.Second},
		Targets: []v1alpha1.Target{{ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}},
	}}
	if err := f.hub.Create(context.Background(), repo); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the artifact's web Available everywhere", 90*time.Second, func() bool { return availableEverywhere(t, "oci-shop", "web", "example.invalid/web:1") })
	push("1.0.1", "example.invalid/web:2")
	eventually(t, "1.0.1 Available everywhere", 90*time.Second, func() bool { return availableEverywhere(t, "oci-shop", "web", "example.invalid/web:2") })
	waitRepo(t, f, "all ready on 1.0.1", func(r *v1alpha1.GitRepo) bool { return r.Status.Display.ReadyClusters == allReady() })
}

// A HelmOp of a chart in an OCI registry (over TLS of its own CA, the chart pushed as helm push
// does) is deployed to the workload clusters by the hub and their agents; a new chart version
// rolls out canary first: while the canary's agent is away, the rest are not released it; once
// the canary is back and has applied it, it reaches the rest.
func TestR1_7_HelmOpRollsOutAChartCanaryFirst(t *testing.T) {
	ca := testpki.NewCA(t, "registry-ca")
	srv := httptest.NewUnstartedServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "127.0.0.1")}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "https://")
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM())
	pusher, err := helmregistry.NewClient(helmregistry.ClientOptHTTPClient(&http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}))
	if err != nil {
		t.Fatal(err)
	}
	push := func(version string) {
		data := helmchart.Archive(t, "web", version, map[string]any{"registry": "example.invalid"},
			map[string]string{"web.yaml": webManifest("{{ .Values.registry }}/web:{{ .Chart.Version }}")})
		if _, err := pusher.Push(data, host+"/charts/web:"+version); err != nil {
			t.Fatal(err)
		}
	}
	push("1.0.0")
	f := startFleet(t)
	zero := intstr.FromInt32(0)
	op := &v1alpha1.HelmOp{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: f.ns}, Spec: v1alpha1.HelmOpSpec{
		Helm:             v1alpha1.HelmOpChart{Repo: "oci://" + host + "/charts", Chart: "web", Version: "~1.0", Values: &runtime.RawExtension{Raw: []byte(`{"registry":"registry.example"}`)}},
		DefaultNamespace: "helmop-shop", CABundle: ca.PEM(), PollingInterval: &metav1.Duration{Duration: 2 * time.Second},
		Targets: []v1alpha1.Target{{ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}},
		RolloutStrategy: &v1alpha1.RolloutStrategy{MaxUnavailable: &zero, Partitions: []v1alpha1.Partition{
			{Name: "canary", ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"index": "0"}}}},
			{Name: "rest", ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "index", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"0"}}}}}}}},
	}}
	if err := f.hub.Create(context.Background(), op); err != nil {
		t.Fatal(err)
	}
	eventually(t, "chart 1.0.0 Available everywhere", 90*time.Second, func() bool {
		return availableEverywhere(t, "helmop-shop", "web", "registry.example/web:1.0.0")
	})

	canary := workloads[0]
	f.stopKnownAgent(canary)
	push("1.0.1")
	var hold string
	eventually(t, "the canary, away, holds 1.0.1", 60*time.Second, func() bool {
		bun := bundleOf(t, f, "web")
		if c := meta.FindStatusCondition(bun.Status.Conditions, v1alpha1.RolloutPausedCondition); c != nil {
			hold = c.Message
		}
		return bun.Spec.LatestRevision == 2 && strings.Contains(hold, "NotReady (canary)")
	}, func() string { return "RolloutPaused: " + hold })
	for _, w := range workloads[1:] {
		if r := released(deploymentOf(t, f, w.Name, "web")); r != 1 {
			t.Errorf("%s was released revision %d while the canary had not applied it", w.Name, r)
		}
	}
	f.startAgent(canary)
	eventually(t, "1.0.1 reaches the canary, then the rest", 90*time.Second, func() bool {
		return availableEverywhere(t, "helmop-shop", "web", "registry.example/web:1.0.1")
	})
	var got v1alpha1.HelmOp
	eventually(t, "the HelmOp says 1.0.1 is Ready everywhere", 30*time.Second, func() bool {
		return f.hub.Get(context.Background(), client.ObjectKeyFromObject(op), &got) == nil && got.Status.Version == "1.0.1" && got.Status.Display.ReadyClusters == allReady()
	}, func() string { return fmt.Sprintf("status %+v", got.Status) })
}
