package sources

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/flotilla-dev/flotilla/bundle"
	"github.com/flotilla-dev/flotilla/bundle/scrub"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/gitsource"
	"github.com/flotilla-dev/flotilla/hub/model"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RenderError is a commit, or some bundles of it, that does not render: it names the file and
// field. The last good revision of each bundle that failed stays deployed.
type RenderError struct {
	Err error
	// Partial: the commit's other bundles rendered and roll out; the commit is the GitRepo's.
	Partial bool
}

func (e *RenderError) Error() string { return e.Err.Error() }
func (e *RenderError) Unwrap() error { return e.Err }

// DefaultRenderBudget is Options.RenderBudget's default: five renders at the sandbox's
// default deadline.
const DefaultRenderBudget = 5 * time.Minute

// errRenderBudget is the cause of a commit's renders stopped at its render budget.
var errRenderBudget = errors.New("render budget spent")

// rendered is one bundle of a commit, rendered for each cluster it targets.
type rendered struct {
	src     *bundle.Source
	targets map[string]*bundle.Rendered // cluster → render
	// clusters are what each target was rendered for.
	clusters map[string]bundle.Target
	// restrictions are the namespace's FleetRestrictions, which every deployment carries.
	restrictions []v1alpha1.DeploymentRestriction
}

// render renders every bundle for every cluster it targets. A bundle that does not render for
// one of them is left out and returned among the failed, as Fleet fails that bundle alone: the
// commit's other bundles roll out. Any other error (the API server's) is the commit's.
func (b *Bundler) render(ctx context.Context, repo Origin, checkout string, sources []bundle.Source, clusters []targetCluster) ([]rendered, []bundleFailure, error) {
	rr, err := b.newRepoRenderer(ctx, repo, checkout)
	if err != nil {
		return nil, nil, err
	}
	defer rr.Close()
	// The commit's renders share one budget: a repository whose bundles each take the sandbox's
	// whole deadline holds its poll worker for the budget, not for as many deadlines as it has
	// bundles. Bundles not rendered within it fail alone and render again at the next poll.
	budget, spent := context.WithTimeoutCause(ctx, b.budget(), errRenderBudget)
	defer spent()
	all := make([]rendered, 0, len(sources))
	var failed []bundleFailure
	for i := range sources {
		src := &sources[i]
		if err := b.ownName(ctx, repo, src); err != nil {
			failed = append(failed, bundleFailure{name: src.Name, err: err})
			continue
		}
		spentNow := func() bool { return ctx.Err() == nil && context.Cause(budget) == errRenderBudget }
		if spentNow() {
			failed = append(failed, b.overBudget(src))
			continue
		}
		r, err := rr.renderAll(budget, repo, src, clusters)
		var renderErr *RenderError
		switch {
		case err != nil && spentNow():
			failed = append(failed, b.overBudget(src))
		case errors.As(err, &renderErr):
			failed = append(failed, bundleFailure{name: src.Name, err: renderErr})
		case err != nil:
			return nil, nil, err
		default:
			all = append(all, r)
		}
	}
	return all, failed, nil
}

// budget is what the renders of one commit may take together.
func (b *Bundler) budget() time.Duration {
	return model.PositiveOr(b.RenderBudget, DefaultRenderBudget)
}

// overBudget is the failure of a bundle the commit's render budget did not reach, or stopped.
func (b *Bundler) overBudget(src *bundle.Source) bundleFailure {
	return bundleFailure{name: src.Name, err: &RenderError{Err: fmt.Errorf("bundle %s (%s): not rendered: the commit's render budget of %s was spent (--render-budget); it is rendered again at the next poll",
		src.Name, src.Dir, b.budget())}}
}

// ownName refuses a bundle whose name is another GitRepo's Bundle's in the namespace:
// fleet.yaml's name is the repository author's, and never takes another GitRepo's Bundle over.
// A Bundle of no GitRepo (made by hand) is not taken over either.
func (b *Bundler) ownName(ctx context.Context, repo Origin, src *bundle.Source) *RenderError {
	var bun v1alpha1.Bundle
	if err := b.Client.Get(ctx, types.NamespacedName{Namespace: repo.Namespace, Name: src.Name}, &bun); err != nil {
		return nil // none (or unreadable: stage reads it again)
	}
	if bun.Labels[repo.Label] != repo.Name {
		return nameTaken(src, &bun)
	}
	return nil
}

func nameTaken(src *bundle.Source, owner *v1alpha1.Bundle) *RenderError {
	by := "no GitRepo or HelmOp"
	if name := owner.Labels[model.LabelGitRepo]; name != "" {
		by = "GitRepo " + name
	} else if name := owner.Labels[model.LabelHelmOp]; name != "" {
		by = "HelmOp " + name
	}
	return &RenderError{Err: fmt.Errorf("bundle %s (%s): the name is taken by a Bundle of %s in this namespace: give the bundle another name in %s",
		src.Name, src.Dir, by, orDefault(src.FleetFile, path.Join(src.Dir, bundle.FleetFileName)))}
}

// bundleFailure is a bundle of a commit that does not render.
type bundleFailure struct {
	name string
	err  *RenderError
}

// renderAll renders one bundle for every cluster it targets.
func (rr *repoRenderer) renderAll(ctx context.Context, repo Origin, src *bundle.Source, clusters []targetCluster) (rendered, error) {
	r := rendered{src: src, targets: map[string]*bundle.Rendered{}, clusters: map[string]bundle.Target{}, restrictions: rr.policy.forDeployment()}
	for _, c := range clusters {
		res, err := rr.render(ctx, repo, src, c.target)
		if err != nil {
			return r, err
		}
		if res != nil {
			r.targets[c.cluster.Name], r.clusters[c.cluster.Name] = res, c.target
		}
	}
	return r, nil
}

// commitFailures is the error of a commit some of whose bundles do not render: each failed
// Bundle that exists records it (status.renderFailure, kept deployed at its last revision), and
// the GitRepo's Rendered condition names them all. Partial when other bundles rendered.
func (b *Bundler) commitFailures(ctx context.Context, repo Origin, commit string, failed []bundleFailure, rendered int) error {
	if len(failed) == 0 {
		return nil
	}
	msgs := make([]string, 0, len(failed))
	var errs []error
	for _, f := range failed {
		msgs = append(msgs, f.err.Error())
		if err := b.setRenderFailure(ctx, repo, f.name, &v1alpha1.RenderFailure{Commit: commit, Message: model.Truncate(gitsource.Sanitize(f.err.Error()), 4096)}); err != nil {
			errs = append(errs, err)
		}
	}
	slices.Sort(msgs)
	// The GitRepo's condition names a few, each Bundle its own: a condition's message is bounded.
	const named = 5
	listed := strings.Join(msgs[:min(len(msgs), named)], "; ")
	if len(msgs) > named {
		listed += fmt.Sprintf("; and %d more (each Bundle's Rendered condition says why)", len(msgs)-named)
	}
	err := &RenderError{Err: fmt.Errorf("%d of %d bundles do not render and keep their last revision: %s", len(failed), len(failed)+rendered, model.Truncate(listed, 16384)), Partial: rendered > 0}
	if len(failed) == 1 && rendered == 0 {
		err.Err = failed[0].err.Err
	}
	if len(errs) > 0 {
		return errors.Join(append(errs, err)...)
	}
	return err
}

// setRenderFailure records on the GitRepo's Bundle that the newest commit does not render (nil:
// it does), when that changes; a Bundle that does not exist yet, or is another's, has nothing
// to record it on.
func (b *Bundler) setRenderFailure(ctx context.Context, repo Origin, name string, failure *v1alpha1.RenderFailure) error {
	var bun v1alpha1.Bundle
	if err := b.Client.Get(ctx, types.NamespacedName{Namespace: repo.Namespace, Name: name}, &bun); err != nil {
		return client.IgnoreNotFound(err)
	}
	if bun.Labels[repo.Label] != repo.Name || equality.Semantic.DeepEqual(bun.Status.RenderFailure, failure) {
		return nil
	}
	orig := bun.DeepCopy()
	bun.Status.RenderFailure = failure
	if err := b.Client.Status().Patch(ctx, &bun, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("failed to record the render failure of bundle %s: %w", name, client.IgnoreNotFound(err))
	}
	return nil
}

// repoRenderer renders one checkout of a repository under its namespace's restrictions.
type repoRenderer struct {
	*bundle.Renderer
	policy restrictions
}

func (b *Bundler) newRepoRenderer(ctx context.Context, repo Origin, checkout string) (*repoRenderer, error) {
	access, err := ChartAccessOf(ctx, b.Client, repo.GitRepo)
	if err != nil {
		return nil, &RenderError{Err: err}
	}
	policy, err := restrictionsOf(ctx, b.Client, repo.Namespace)
	if err != nil {
		return nil, err
	}
	values := &valuesResolver{client: b.Client, namespace: repo.Namespace, crossNamespace: b.CrossNamespaceRefs}
	decryption, err := decryptorOf(ctx, b.Client, repo.GitRepo)
	if err != nil {
		return nil, &RenderError{Err: err}
	}
	// The chart password is scrubbed from what the renders say, with what they read of secrets.
	secrets := &scrub.Secrets{}
	secrets.Add(access.Password)
	renderer, err := bundle.NewRenderer(checkout, bundle.RendererOptions{Charts: b.Charts.For(access), Values: values, Sandbox: b.Sandbox, Decryption: decryption, Secrets: secrets})
	if err != nil {
		return nil, err
	}
	return &repoRenderer{Renderer: renderer, policy: policy}, nil
}

// render renders a bundle for one cluster; nil when the bundle does not target it or is not
// to be deployed there. It is the one way a render's text reaches the hub's statuses, Events,
// logs, notifications and commit statuses: its error holds no value of a secret the render read
// (bundle.Renderer.Scrub).
func (rr *repoRenderer) render(ctx context.Context, repo Origin, src *bundle.Source, t bundle.Target) (*bundle.Rendered, error) {
	if !bundle.Selected(model.TargetMatches(repo.Spec.Targets), src.Fleet.OverrideTargets, t) {
		return nil, nil
	}
	res, err := rr.Render(ctx, src, t)
	if err == nil && !res.DoNotDeploy {
		// The restrictions name the rendered objects, which a template may name after a secret.
		err = rr.policy.restrict(res)
	}
	switch {
	case err != nil:
		return nil, &RenderError{Err: rr.Scrub(fmt.Errorf("bundle %s for cluster %s: %w", src.Name, t.ClusterName, err))}
	case res.DoNotDeploy:
		return nil, nil
	}
	return res, nil
}
