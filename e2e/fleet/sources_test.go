package fleet

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
