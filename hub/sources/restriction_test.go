package sources

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/bundle"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

func restriction(name string, spec v1alpha1.FleetRestrictionSpec) v1alpha1.FleetRestriction {
	return v1alpha1.FleetRestriction{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
}

func TestRestrictionsAllowRepositories(t *testing.T) {
	teamA := restriction("team-a", v1alpha1.FleetRestrictionSpec{AllowedRepoPatterns: []string{`https://git\.example\.com/team-a/.*`}})
	cases := []struct {
		name string
		rs   restrictions
		url  string
		want string // "" allowed, else a part of the error
	}{
		{"no restriction", nil, "https://anywhere/x.git", ""},
		{"a restriction without patterns", restrictions{restriction("r", v1alpha1.FleetRestrictionSpec{})}, "https://anywhere/x.git", ""},
		{"matching", restrictions{teamA}, "https://git.example.com/team-a/app.git", ""},
		{"patterns match in full", restrictions{teamA}, "https://evil.example/?u=https://git.example.com/team-a/app.git", "not allowed by FleetRestriction team-a"},
		{"another team", restrictions{teamA}, "https://git.example.com/team-b/app.git", `repository "https://git.example.com/team-b/app.git" is not allowed`},
		{"every restriction applies", restrictions{teamA, restriction("ssh-only", v1alpha1.FleetRestrictionSpec{AllowedRepoPatterns: []string{`ssh://.*`}})},
			"https://git.example.com/team-a/app.git", "FleetRestriction ssh-only"},
		{"matched in its normal form", restrictions{teamA}, "HTTPS://Git.Example.com:443/team-a/%61pp.git", ""},
		{"a dot segment that reads as another team's", restrictions{teamA}, "https://git.example.com/team-a/../team-b/repo", `".." segment`},
		{"an encoded dot segment", restrictions{teamA}, "https://git.example.com/team-a/%2E%2E/team-b/repo", "encodes '.'"},
		{"ambiguous without any restriction", nil, "https://git.example.com/team-a/../team-b/repo", "write it in its plain form"},
		{"an invalid pattern allows nothing", restrictions{restriction("broken", v1alpha1.FleetRestrictionSpec{AllowedRepoPatterns: []string{`(`}})},
			"https://git.example.com/x.git", "spec.allowedRepoPatterns[0] is invalid"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.rs.allowRepo(c.url)
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Errorf("allowRepo(%q) = %v, want %q", c.url, err, c.want)
			}
		})
	}
}

func TestRestrictionsSettleTheServiceAccountAndNamespaces(t *testing.T) {
	tenant := restriction("tenant", v1alpha1.FleetRestrictionSpec{AllowedTargetNamespaces: []string{"tenant", "tenant-*"},
		DefaultServiceAccount: "deployer", AllowedServiceAccounts: []string{"admin"}})
	cases := []struct {
		name    string
		rs      restrictions
		options bundle.DeploymentOptions
		objects []bundle.Object
		wantSA  string
		wantErr string
	}{
		{"the default service account", restrictions{tenant}, bundle.DeploymentOptions{DefaultNamespace: "tenant"}, nil, "deployer", ""},
		{"an allowed one", restrictions{tenant}, bundle.DeploymentOptions{DefaultNamespace: "tenant", ServiceAccount: "admin"}, nil, "admin", ""},
		{"another one", restrictions{tenant}, bundle.DeploymentOptions{DefaultNamespace: "tenant", ServiceAccount: "root"}, nil, "", `serviceAccount "root" is not allowed by FleetRestriction tenant`},
		{"a restriction without accounts allows any", restrictions{restriction("open", v1alpha1.FleetRestrictionSpec{})}, bundle.DeploymentOptions{ServiceAccount: "root"}, nil, "root", ""},
		{"no account where one is required", restrictions{restriction("strict", v1alpha1.FleetRestrictionSpec{AllowedServiceAccounts: []string{"a"}})}, bundle.DeploymentOptions{}, nil, "",
			"deploying without a serviceAccount is not allowed by FleetRestriction strict"},
		{"a forced namespace outside", restrictions{tenant}, bundle.DeploymentOptions{TargetNamespace: "kube-system"}, nil, "", `namespace "kube-system" is not allowed`},
		{"an object's namespace outside", restrictions{tenant}, bundle.DeploymentOptions{DefaultNamespace: "tenant"},
			[]bundle.Object{{"kind": "ConfigMap", "metadata": map[string]any{"name": "x", "namespace": "default"}}}, "", `ConfigMap x: namespace "default" is not allowed`},
		{"a Namespace object outside", restrictions{tenant}, bundle.DeploymentOptions{DefaultNamespace: "tenant"},
			[]bundle.Object{{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "prod"}}}, "", `Namespace prod: namespace "prod" is not allowed`},
		{"objects inside", restrictions{tenant}, bundle.DeploymentOptions{DefaultNamespace: "tenant"},
			[]bundle.Object{{"kind": "ConfigMap", "metadata": map[string]any{"name": "x", "namespace": "tenant-web"}}}, "deployer", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := &bundle.Rendered{Objects: c.objects, Options: c.options, DeploymentID: "d-original"}
			err := c.rs.restrict(res)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Errorf("restrict = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil || res.Options.ServiceAccount != c.wantSA || res.DeploymentID == "d-original" {
				t.Errorf("restrict = %v, service account %q (want %q), deployment id %s (want a new one)", err, res.Options.ServiceAccount, c.wantSA, res.DeploymentID)
			}
		})
	}
	unrestricted := &bundle.Rendered{DeploymentID: "d-original"}
	if err := restrictions(nil).restrict(unrestricted); err != nil || unrestricted.DeploymentID != "d-original" {
		t.Errorf("without restrictions a render is left alone: %v %s", err, unrestricted.DeploymentID)
	}
}
