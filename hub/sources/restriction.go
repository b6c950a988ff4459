package sources

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/bundle"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/gitsource"
)

// Tenancy: the FleetRestrictions of a fleet namespace bound its GitRepos' repositories (checked
// before the hub fetches anything) and what their bundles deploy. The hub checks what it can
// know from a render (the bundle's service account, its namespaces) and passes the
// restrictions on in each deployment's options: the agent, which knows which kinds are
// cluster-scoped on its cluster, refuses any object they do not allow, and applies as the
// service account the restriction names, so downstream RBAC bounds the bundle too.

// RestrictedError says what a FleetRestriction does not allow.
type RestrictedError struct {
	Restriction string
	What        string
}

func (e *RestrictedError) Error() string {
	return fmt.Sprintf("%s is not allowed by FleetRestriction %s", e.What, e.Restriction)
}

// AmbiguousURLError is a repository address that servers and proxies could read as different
// places: it is refused before anything is fetched, and no restriction matches it.
type AmbiguousURLError struct{ URL, Reason string }

func (e *AmbiguousURLError) Error() string {
	return fmt.Sprintf("repository %q is refused: %s; write it in its plain form", gitsource.Sanitize(e.URL), e.Reason)
}

// restrictions are the FleetRestrictions of one namespace, sorted by name.
type restrictions []v1alpha1.FleetRestriction

func restrictionsOf(ctx context.Context, c client.Reader, namespace string) (restrictions, error) {
	var list v1alpha1.FleetRestrictionList
	if err := c.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("failed to list the FleetRestrictions of %s: %w", namespace, err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list.Items, nil
}

// allowRepo checks a GitRepo's repository URL against every restriction's patterns. They
// match its normal form (gitsource.NormalURL); an address that has none, being ambiguous, is
// refused whether or not a restriction applies.
func (rs restrictions) allowRepo(raw string) error {
	url, err := gitsource.NormalURL(raw)
	if err != nil {
		return &AmbiguousURLError{URL: raw, Reason: err.Error()}
	}
	for _, r := range rs {
		if len(r.Spec.AllowedRepoPatterns) == 0 {
			continue
		}
		allowed := false
		for i, p := range r.Spec.AllowedRepoPatterns {
			re, err := regexp.Compile("^(?:" + p + ")$")
			if err != nil {
				// A broken pattern allows nothing: fail closed, and say where.
				return &RestrictedError{Restriction: r.Name, What: fmt.Sprintf("repository %q (spec.allowedRepoPatterns[%d] is invalid: %v)", url, i, err)}
			}
			if re.MatchString(url) {
				allowed = true
				break
			}
		}
		if !allowed {
			return &RestrictedError{Restriction: r.Name, What: fmt.Sprintf("repository %q", url)}
		}
	}
	return nil
}

// requireVerification refuses a GitRepo that verifies no signature in a namespace whose
// restrictions require it.
func (rs restrictions) requireVerification(repo *v1alpha1.GitRepo) error {
	for _, r := range rs {
		if r.Spec.RequireVerifiedSources && repo.Spec.Verify == nil {
			return &RestrictedError{Restriction: r.Name, What: "a GitRepo without spec.verify (requireVerifiedSources)"}
		}
	}
	return nil
}

// AdmitSource checks a source of namespace that is not a GitRepo (a HelmOp's chart server, url)
// against its FleetRestrictions before anything is fetched on its behalf: the repository
// patterns, and requireVerifiedSources (what, such as "a HelmOp without spec.verify", names the
// source when it verifies no signature).
func AdmitSource(ctx context.Context, c client.Reader, namespace, url string, verified bool, what string) error {
	rs, err := restrictionsOf(ctx, c, namespace)
	if err != nil {
		return err
	}
	if err := rs.allowRepo(url); err != nil {
		return err
	}
	for _, r := range rs {
		if r.Spec.RequireVerifiedSources && !verified {
			return &RestrictedError{Restriction: r.Name, What: what + " (requireVerifiedSources)"}
		}
	}
	return nil
}

// serviceAccount returns the service account a bundle deploys as: its own, which every
// restriction must allow, or the first restriction's default.
func (rs restrictions) serviceAccount(own string) (string, error) {
	sa := own
	if sa == "" {
		for _, r := range rs {
			if r.Spec.DefaultServiceAccount != "" {
				sa = r.Spec.DefaultServiceAccount
				break
			}
		}
	}
	for _, r := range rs {
		if r.Spec.DefaultServiceAccount == "" && len(r.Spec.AllowedServiceAccounts) == 0 {
			continue
		}
		if sa == "" || sa != r.Spec.DefaultServiceAccount && !slices.Contains(r.Spec.AllowedServiceAccounts, sa) {
			what := fmt.Sprintf("serviceAccount %q", sa)
			if sa == "" {
				what = "deploying without a serviceAccount"
			}
			return "", &RestrictedError{Restriction: r.Name, What: what}
		}
	}
	return sa, nil
}

// allowNamespace checks a downstream namespace against every restriction's patterns.
func (rs restrictions) allowNamespace(ns string) error {
	for _, r := range rs.forDeployment() {
		if !r.AllowsNamespace(ns) {
			return &RestrictedError{Restriction: r.Name, What: fmt.Sprintf("namespace %q", ns)}
		}
	}
	return nil
}

// forDeployment is what the agent enforces.
func (rs restrictions) forDeployment() []v1alpha1.DeploymentRestriction {
	out := make([]v1alpha1.DeploymentRestriction, 0, len(rs))
	for _, r := range rs {
		out = append(out, v1alpha1.DeploymentRestriction{Name: r.Name, AllowedNamespaces: r.Spec.AllowedTargetNamespaces, AllowedClusterScopedKinds: r.Spec.AllowedClusterScopedKinds})
	}
	return out
}

// restrict checks a render against the restrictions and settles its service account. The
// deployment id then covers the restrictions too: a changed restriction is a new deployment the
// agent applies again. Without restrictions a render is left as it is.
func (rs restrictions) restrict(res *bundle.Rendered) error {
	if len(rs) == 0 {
		return nil
	}
	sa, err := rs.serviceAccount(res.Options.ServiceAccount)
	if err != nil {
		return err
	}
	res.Options.ServiceAccount = sa
	for _, ns := range []string{res.Options.DefaultNamespace, res.Options.TargetNamespace} {
		if ns == "" {
			continue
		}
		if err := rs.allowNamespace(ns); err != nil {
			return err
		}
	}
	for _, o := range res.Objects {
		ns := o.Namespace()
		if o.Group() == "" && o.Kind() == "Namespace" {
			ns = o.Name()
		}
		if ns == "" {
			continue
		}
		if err := rs.allowNamespace(ns); err != nil {
			return fmt.Errorf("%s %s: %w", o.Kind(), o.Name(), err)
		}
	}
	enforced, err := json.Marshal(struct {
		SA           string                           `json:"sa"`
		Restrictions []v1alpha1.DeploymentRestriction `json:"r"`
	}{sa, rs.forDeployment()})
	if err != nil {
		return err
	}
	sum := sha256.Sum256(append([]byte(res.DeploymentID+"\x00"), enforced...))
	res.DeploymentID = "d-" + hex.EncodeToString(sum[:])[:32]
	return nil
}
