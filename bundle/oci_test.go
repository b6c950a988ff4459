package bundle

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
)

// ociRegistry is a minimal read-only OCI distribution registry on loopback serving Helm charts
// the way `helm push` stores them: a manifest with a chart config and one chart layer.
type ociRegistry struct {
	*httptest.Server
	blobs     map[string][]byte
	manifests map[string][]byte // "<repo>:<tag>" → manifest
	tags      map[string][]string
}

func newOCIRegistry(t *testing.T, repo string, charts ...*chart.Chart) *ociRegistry {
	t.Helper()
	reg := &ociRegistry{blobs: map[string][]byte{}, manifests: map[string][]byte{}, tags: map[string][]string{}}
	for _, ch := range charts {
		archive, err := chartutil.Save(ch, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		layer, err := os.ReadFile(archive)
		if err != nil {
			t.Fatal(err)
		}
		config, _ := json.Marshal(ch.Metadata)
		manifest, _ := json.Marshal(map[string]any{
			"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
			"config": map[string]any{"mediaType": "application/vnd.cncf.helm.config.v1+json", "digest": reg.add(config), "size": len(config)},
			"layers": []any{map[string]any{"mediaType": "application/vnd.cncf.helm.chart.content.v1.tar+gzip", "digest": reg.add(layer), "size": len(layer)}},
		})
		reg.manifests[repo+":"+ch.Metadata.Version] = manifest
		reg.add(manifest)
		reg.tags[repo] = append(reg.tags[repo], ch.Metadata.Version)
	}
	reg.Server = httptest.NewServer(http.HandlerFunc(reg.serve))
	t.Cleanup(reg.Close)
	return reg
}

func (r *ociRegistry) add(data []byte) string {
	sum := sha256.Sum256(data)
	d := "sha256:" + hex.EncodeToString(sum[:])
	r.blobs[d] = data
	return d
}

func (r *ociRegistry) serve(w http.ResponseWriter, req *http.Request) {
	p := strings.TrimPrefix(req.URL.Path, "/v2/")
	write := func(mediaType string, data []byte) {
		sum := sha256.Sum256(data)
		w.Header().Set("Content-Type", mediaType)
		w.Header().Set("Docker-Content-Digest", "sha256:"+hex.EncodeToString(sum[:]))
		w.Header().Set("Content-Length", fmt.Sprint(len(data)))
		if req.Method != http.MethodHead {
			_, _ = w.Write(data)
		}
	}
	switch {
	case req.URL.Path == "/v2/":
		w.WriteHeader(http.StatusOK)
	case strings.Contains(p, "/manifests/"):
		repo, ref, _ := strings.Cut(p, "/manifests/")
		m, ok := r.manifests[repo+":"+ref]
		if !ok {
			m, ok = r.blobs[ref]
		}
		if !ok {
			http.NotFound(w, req)
			return
		}
		write("application/vnd.oci.image.manifest.v1+json", m)
	case strings.Contains(p, "/blobs/"):
		_, digest, _ := strings.Cut(p, "/blobs/")
		b, ok := r.blobs[digest]
		if !ok {
			http.NotFound(w, req)
			return
		}
		write("application/octet-stream", b)
	case strings.HasSuffix(p, "/tags/list"):
		repo := strings.TrimSuffix(p, "/tags/list")
		data, _ := json.Marshal(map[string]any{"name": repo, "tags": r.tags[repo]})
		write("application/json", data)
	default:
		http.NotFound(w, req)
	}
}

func TestHelmChartFromOCIRegistry(t *testing.T) {
	reg := newOCIRegistry(t, "charts/greeter", configMapChart("greeter", "1.0.0"), configMapChart("greeter", "1.4.0"), configMapChart("greeter", "2.1.0"))
	host := strings.TrimPrefix(reg.URL, "http://")
	root := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  chart: oci://" + host + "/charts/greeter\n  version: \"^1.0.0\"\n"})
	res, err := renderOnly(t, root, RendererOptions{Charts: &ChartFetcher{PlainHTTPRegistries: []string{host}}}, Target{})
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	if m := string(res.Manifest); !strings.Contains(m, "version: 1.4.0") {
		t.Errorf("want the newest 1.x version:\n%s", m)
	}
	root2 := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  chart: oci://" + host + "/charts/missing\n  version: 1.0.0\n"})
	if _, err := renderOnly(t, root2, RendererOptions{Charts: &ChartFetcher{PlainHTTPRegistries: []string{host}}}, Target{}); err == nil || !strings.Contains(err.Error(), "fleet.yaml: helm.chart: failed to pull") {
		t.Errorf("error = %v", err)
	}
}
