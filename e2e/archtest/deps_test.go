package archtest

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestDependencyDirection fails when a package imports what the architecture forbids:
// rollout/ is pure (no Kubernetes, no hub, no agent), bundle/ renders without the hub or the
// agent, the agent stays small (no Helm, Kustomize or go-git) and apart from the hub's
// controllers (it shares the hub's API types and small libraries: bdstate, contentstore,
// events), and the binaries link no test tooling.
func TestDependencyDirection(t *testing.T) {
	rules := []struct {
		pkgs      string
		forbidden []string
		// exactly are packages forbidden themselves, not what lies below them.
		exactly []string
		// hubAllowed, when set, are the only hub packages the packages may depend on.
		hubAllowed []string
		// except are packages under a forbidden prefix that the packages may depend on.
		except []string
	}{
		{"./rollout/...", []string{"k8s.io/", "sigs.k8s.io/", "github.com/flotilla-dev/flotilla/hub", "github.com/flotilla-dev/flotilla/agent", "github.com/flotilla-dev/flotilla/bundle"}, nil, nil, nil},
		// bundle/ uses the Helm SDK, which links client-go, but renders client-only.
		// It compiles fleet.yaml's healthChecks with the agent's own language, so that both agree.
		{"./bundle/...", []string{"github.com/flotilla-dev/flotilla/hub", "github.com/flotilla-dev/flotilla/agent", "sigs.k8s.io/controller-runtime"}, nil, nil,
			[]string{"github.com/flotilla-dev/flotilla/agent/healthcheck"}},
		// Nor does it link what registers every Kubernetes kind, OpenAPI and protobuf descriptors
		// at start (client-go's clientsets, scheme and discovery, controller-runtime's client and
		// manager): megabytes of each agent's memory (agent/kube).
		{"./agent/...", []string{"helm.sh/", "sigs.k8s.io/kustomize/", "github.com/go-git/", "k8s.io/client-go/kubernetes", "k8s.io/client-go/discovery",
			"k8s.io/client-go/restmapper", "sigs.k8s.io/controller-runtime/pkg/client/apiutil", "k8s.io/kube-openapi/pkg/validation"},
			[]string{"sigs.k8s.io/controller-runtime", "sigs.k8s.io/controller-runtime/pkg/client", "sigs.k8s.io/controller-runtime/pkg/manager",
				"sigs.k8s.io/controller-runtime/pkg/cache"},
			[]string{"api/v1alpha1", "bdstate", "content", "events"}, nil},
		{"./hub/api/...", []string{"k8s.io/client-go", "sigs.k8s.io/controller-runtime", "github.com/flotilla-dev/flotilla/hub/"}, nil, nil, nil},
		// The shipped binaries link no test tooling: the quickstart's clusters and git servers
		// have interfaces of their own (e2e/controlplane, e2e/gitrepo).
		// The standard testing package is checked by its importers (TestBinariesImportTestingOnlyWhereKnown).
		{"./cmd/...", nil, []string{"net/http/httptest", "github.com/flotilla-dev/flotilla/e2e/gitserver"}, nil, nil},
	}
	for _, r := range rules {
		t.Run(r.pkgs, func(t *testing.T) {
			cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", r.pkgs)
			cmd.Dir = "../.."
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil || stderr.Len() > 0 {
				t.Fatalf("go list %s: %v\n%s", r.pkgs, err, stderr.String())
			}
			deps := strings.Fields(string(out))
			if len(deps) == 0 {
				t.Fatalf("go list %s listed nothing", r.pkgs)
			}
			for _, d := range deps {
				if slices.Contains(r.exactly, d) {
					t.Errorf("%s depends on %s (forbidden)", r.pkgs, d)
				}
				if r.hubAllowed != nil && (d == hubPkg || strings.HasPrefix(d, hubPkg+"/")) && !slices.Contains(r.hubAllowed, relative(d)) {
					t.Errorf("%s depends on %s (it may depend on hub/%s only)", r.pkgs, d, strings.Join(r.hubAllowed, ", hub/"))
				}
				for _, f := range r.forbidden {
					if strings.HasPrefix(d, f) && !strings.HasPrefix(d, "github.com/flotilla-dev/flotilla/hub/api") && !slices.Contains(r.except, d) {
						t.Errorf("%s depends on %s (forbidden: %s*)", r.pkgs, d, f)
					}
				}
			}
		})
	}
}

// testingImporters are the libraries the binaries link that import the standard testing
// package, and why that brings no test tooling into them.
var testingImporters = map[string]string{
	// tui.go calls testing.Testing() to guard a password hook of its own tests; nothing runs.
	"github.com/getsops/sops/v3/age": "a test-only guard",
}

// The shipped binaries link the standard testing package only through the libraries listed
// above: none of this repository's packages, and no new library, may bring it in.
func TestBinariesImportTestingOnlyWhereKnown(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./cmd/...")
	cmd.Dir = "../.."
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || stderr.Len() > 0 {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 || !slices.Contains(fields[1:], "testing") {
			continue
		}
		if _, known := testingImporters[fields[0]]; !known {
			t.Errorf("%s imports the testing package into the shipped binaries", fields[0])
		}
	}
}
