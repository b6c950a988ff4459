package clusters

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

func TestAgentEndpoint(t *testing.T) {
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, []byte("PEM OF A FILE"), 0o600); err != nil {
		t.Fatal(err)
	}
	inPod := func(k string) string {
		return map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}[k]
	}
	outside := func(string) string { return "" }
	cases := []struct {
		name          string
		opts          endpointOptions
		getenv        func(string) string
		server, ca    string
		inCluster     bool
		errorContains string
	}{
		{"the hub's own address and CA data", endpointOptions{Config: &rest.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("PEM")}}}, outside,
			"https://127.0.0.1:6443", "PEM", false, ""},
		{"a kubeconfig that names its CA by file", endpointOptions{Config: &rest.Config{Host: "https://hub.example:6443", TLSClientConfig: rest.TLSClientConfig{CAFile: caFile}}}, outside,
			"https://hub.example:6443", "PEM OF A FILE", false, ""},
		{"a CA file that cannot be read", endpointOptions{Config: &rest.Config{Host: "https://hub.example:6443", TLSClientConfig: rest.TLSClientConfig{CAFile: caFile + ".gone"}}}, outside,
			"", "", false, "failed to read the API server's CA for agents"},
		{"in a pod, the service address", endpointOptions{Config: &rest.Config{Host: "https://10.96.0.1:443", TLSClientConfig: rest.TLSClientConfig{CAFile: caFile}}}, inPod,
			"https://10.96.0.1:443", "PEM OF A FILE", true, ""},
		{"the service by name", endpointOptions{Config: &rest.Config{Host: "https://kubernetes.default.svc"}}, outside,
			"https://kubernetes.default.svc", "", true, ""},
		{"in a pod, with the operator's address and CA", endpointOptions{Server: "https://hub.example:6443", CACert: []byte("OPERATOR'S"),
			Config: &rest.Config{Host: "https://10.96.0.1:443", TLSClientConfig: rest.TLSClientConfig{CAFile: caFile}}}, inPod,
			"https://hub.example:6443", "OPERATOR'S", false, ""},
		{"in a pod, with an address only", endpointOptions{Server: "https://hub.example:6443", Config: &rest.Config{Host: "https://10.96.0.1:443", TLSClientConfig: rest.TLSClientConfig{CAFile: caFile}}}, inPod,
			"https://hub.example:6443", "PEM OF A FILE", false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, err := ResolveAgentEndpoint(c.opts.Server, c.opts.CACert, c.opts.Config, c.getenv)
			if c.errorContains != "" {
				if err == nil || !strings.Contains(err.Error(), c.errorContains) {
					t.Fatalf("error %v, want %q", err, c.errorContains)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if e.Server != c.server || string(e.Ca) != c.ca || e.InCluster != c.inCluster {
				t.Errorf("got server %q, CA %q, in-cluster %v; want %q, %q, %v", e.Server, e.Ca, e.InCluster, c.server, c.ca, c.inCluster)
			}
		})
	}
}

// endpointOptions are the hub's options that ResolveAgentEndpoint takes.
type endpointOptions struct {
	Server string
	CACert []byte
	Config *rest.Config
}
