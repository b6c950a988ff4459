package helmops

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/bundle"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/events"
	"github.com/flotilla-dev/flotilla/hub/gitsource"
	"github.com/flotilla-dev/flotilla/hub/lifecycle"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/hub/reconciler"
	"github.com/flotilla-dev/flotilla/hub/sources"
)

// DefaultPollingInterval is how often a HelmOp's chart server is read when it says nothing.
const DefaultPollingInterval = time.Minute

// finalizer holds a deleted HelmOp until its Bundle and BundleDeployments are gone.
const finalizer = "flotilla.dev/helmop"

// SourceReconciler follows each HelmOp's chart server: at each poll it finds the newest version
// in the HelmOp's range, verifies it when the HelmOp asks, and has the bundler render it when
// the version, the HelmOp or its clusters changed since it last did. A version that cannot be
// read, verified or rendered keeps the one deployed.
type SourceReconciler struct {
	Client  client.Client
	Bundler *sources.Bundler
	// OCI resolves an OCI chart's tags to manifest digests and checks its cosign signatures.
	OCI *gitsource.Client
	// Dir holds the fleet.yaml of a version while it is rendered.
	Dir string
	// RecordEvery bounds how often an unchanged poll is written to status.lastPollTime.
	RecordEvery      time.Duration
	UninstallTimeout time.Duration
	Now              func() time.Time
	Recorder         *events.Recorder

	mu sync.Mutex
	// rendered is what each HelmOp's bundle was last rendered from; a hub that starts renders
	// every HelmOp once (the bundler writes nothing that did not change).
	rendered map[types.NamespacedName]renderedFrom
	// rerender counts, per HelmOp, the changes of its clusters that ask for it to be rendered
	// again (a cluster joined, left or changed labels; a restriction changed).
	rerender map[types.NamespacedName]int
	// announced is each HelmOp's last version told as picked up: a version that keeps failing
	// to render is told once, not at every poll.
	announced map[types.NamespacedName]Version
}

// renderedFrom is what a render took: the version, the HelmOp's spec and its clusters' changes.
type renderedFrom struct {
	version    Version
	generation int64
	rerender   int
}

func (r *SourceReconciler) Setup(mgr ctrl.Manager) error {
	r.rendered, r.rerender, r.announced = map[types.NamespacedName]renderedFrom{}, map[types.NamespacedName]int{}, map[types.NamespacedName]Version{}
	reRender := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		var ops v1alpha1.HelmOpList
		if err := r.Client.List(ctx, &ops, client.InNamespace(o.GetNamespace())); err != nil {
			return nil
		}
		out := make([]reconcile.Request, 0, len(ops.Items))
		r.mu.Lock()
		defer r.mu.Unlock()
		for i := range ops.Items {
			key := client.ObjectKeyFromObject(&ops.Items[i])
			r.rerender[key]++
			out = append(out, reconcile.Request{NamespacedName: key})
		}
		return out
	})
	ownerOfBundle := model.SourceOfBundle(model.LabelHelmOp)
	return ctrl.NewControllerManagedBy(mgr).Named("helmop-source").
		For(&v1alpha1.HelmOp{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, model.Deleting{}))).
		Watches(&v1alpha1.Cluster{}, reRender, builder.WithPredicates(model.ClusterMembershipChanged{})).
		Watches(&v1alpha1.ClusterGroup{}, reRender, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
		Watches(&v1alpha1.FleetRestriction{}, reRender).
		// A deleted HelmOp waits for its bundle's deployments: each one going may end the wait.
		Watches(&v1alpha1.BundleDeployment{}, handler.Funcs{DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			for _, req := range model.BundleOfDeployment(ctx, e.Object) {
				var bun v1alpha1.Bundle
				if r.Client.Get(ctx, req.NamespacedName, &bun) == nil {
					for _, owner := range ownerOfBundle(ctx, &bun) {
						q.Add(owner)
					}
				}
			}
		}}).
		Watches(&v1alpha1.Bundle{}, handler.Funcs{DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			for _, owner := range ownerOfBundle(ctx, e.Object) {
				q.Add(owner)
			}
		}}).
		// A poll waits on a chart server: a few at a time, so that one slow server does not
		// hold the others.
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(reconciler.Status[v1alpha1.HelmOp, *v1alpha1.HelmOp]{Client: r.Client, Step: r.step, Finalizer: finalizer, Finalize: r.finalize, Gone: r.gone})
}

func (r *SourceReconciler) gone(_ context.Context, key types.NamespacedName) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.rendered, key)
	delete(r.rerender, key)
	delete(r.announced, key)
	return nil
}

// finalize removes a deleted HelmOp's bundle; it goes once the agents removed the release, its
// status saying meanwhile what it waits for.
func (r *SourceReconciler) finalize(ctx context.Context, op *v1alpha1.HelmOp) (reconciler.Outcome, error) {
	if err := sources.RemoveBundles(ctx, r.Client, op.Namespace, model.LabelHelmOp, op.Name, nil); err != nil {
		return reconciler.Outcome{}, fmt.Errorf("failed to remove the bundle of deleted helmop %s: %w", op.Name, err)
	}
	waits, err := lifecycle.RemovalWaits(ctx, r.Client, op.Namespace, model.LabelHelmOp, op.Name, r.UninstallTimeout)
	if err != nil {
		return reconciler.Outcome{}, err
	}
	if waits != "" {
		setReady(op, metav1.ConditionFalse, v1alpha1.DeletingReason, waits)
		return reconciler.Outcome{}, nil
	}
	_ = r.gone(ctx, client.ObjectKeyFromObject(op))
	return reconciler.Outcome{Done: true}, nil
}

// step polls the HelmOp's chart server and renders a version it has not rendered yet.
func (r *SourceReconciler) step(ctx context.Context, op, _ *v1alpha1.HelmOp) (reconciler.Outcome, error) {
	key := client.ObjectKeyFromObject(op)
	interval := DefaultPollingInterval
	if p := op.Spec.PollingInterval; p != nil && p.Duration >= time.Second {
		interval = p.Duration
	}
	next := reconciler.Outcome{After: interval}
	r.mu.Lock()
	asked := r.rerender[key]
	last, known := r.rendered[key]
	r.mu.Unlock()

	v, err := r.newest(ctx, op)
	if err == nil && (!known || last.version != v || last.generation != op.Generation || last.rerender != asked) {
		if err = r.render(ctx, op, v); err == nil {
			r.mu.Lock()
			r.rendered[key] = renderedFrom{version: v, generation: op.Generation, rerender: asked}
			r.mu.Unlock()
		}
	}
	r.record(ctx, op, v, err)
	if err != nil {
		log.FromContext(ctx).V(1).Info("helmop sync failed", "helmop", key.String(), "error", gitsource.Sanitize(err.Error()))
	}
	return next, nil
}

// newest is the newest version in the HelmOp's range, verified as the HelmOp asks; what the
// namespace's restrictions do not admit is not read at all.
func (r *SourceReconciler) newest(ctx context.Context, op *v1alpha1.HelmOp) (Version, error) {
	if err := sources.AdmitSource(ctx, r.Client, op.Namespace, op.Spec.Helm.Repo, op.Spec.Verify != nil, "a HelmOp without spec.verify"); err != nil {
		return Version{}, err
	}
	if !isOCI(op) {
		if op.Spec.Verify != nil {
			return Version{}, &specError{"spec.verify: cosign signatures are checked on oci:// charts only; a Helm repository's chart has none to check"}
		}
		if op.Spec.Helm.Chart == "" {
			return Version{}, &specError{"spec.helm.chart: a Helm repository's chart is named by chart"}
		}
		access, err := sources.ChartAccessOf(ctx, r.Client, repoView(op))
		if err != nil {
			return Version{}, err
		}
		cv, err := r.Bundler.Charts.For(access).NewestInRepository(ctx, op.Spec.Helm.Repo, op.Spec.Helm.Chart, constraint(op))
		if err != nil {
			return Version{}, err
		}
		return Version{Version: cv.Version, Digest: cv.Digest}, nil
	}
	// The registry is reached for tags and signatures before the renderer pulls the chart: the
	// operator's allowed chart hosts hold for it first.
	if err := r.Bundler.Charts.Allows(chartRef(op)); err != nil {
		return Version{}, &hostRefused{err}
	}
	repo, err := r.ociRepo(ctx, op)
	if err != nil {
		return Version{}, err
	}
	ref, err := r.OCI.Resolve(ctx, repo)
	if err != nil {
		return Version{}, err
	}
	v := Version{Version: ref.ShortName(), Digest: "sha256:" + ref.Commit}
	if err := r.OCI.VerifySignature(ctx, repo, ref.Commit); err != nil {
		return Version{}, fmt.Errorf("version %s: %w", v.Version, err)
	}
	return v, nil
}

// ociRepo is the HelmOp's OCI chart as a source: its tags by semantic version, the chart
// server's credentials and CA, and the cosign keys of spec.verify.
func (r *SourceReconciler) ociRepo(ctx context.Context, op *v1alpha1.HelmOp) (gitsource.Repo, error) {
	access, err := sources.ChartAccessOf(ctx, r.Client, repoView(op))
	if err != nil {
		return gitsource.Repo{}, err
	}
	repo := gitsource.Repo{URL: chartRef(op), Semver: constraint(op), Auth: &gitsource.Auth{Username: access.Username, Password: access.Password, CABundle: op.Spec.CABundle}}
	if v := op.Spec.Verify; v != nil {
		var s corev1.Secret
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: op.Namespace, Name: v.SecretRef.Name}, &s); err != nil {
			return repo, fmt.Errorf("spec.verify.secretRef: secret %s: %w", v.SecretRef.Name, err)
		}
		ring, err := gitsource.ParseKeys(s.Data)
		if err != nil {
			return repo, &gitsource.VerificationError{Object: "the HelmOp", Reason: fmt.Sprintf("spec.verify.secretRef: secret %s: %v", v.SecretRef.Name, err)}
		}
		repo.Verify = &gitsource.Verification{Keys: ring}
	}
	return repo, nil
}

// render writes the version's fleet.yaml and hands it to the bundler as the HelmOp's revision;
// a panic of the renderer fails this HelmOp, not the hub.
func (r *SourceReconciler) render(ctx context.Context, op *v1alpha1.HelmOp, v Version) (err error) {
	defer func() {
		if p := recover(); p != nil {
			log.FromContext(ctx).Error(nil, "rendering panicked", "helmop", op.Namespace+"/"+op.Name, "version", v.Version, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = &sources.RenderError{Err: fmt.Errorf("rendering version %s failed unexpectedly: %v", v.Version, p)}
		}
	}()
	data, err := fleetFile(op, v)
	if err != nil {
		return &sources.RenderError{Err: err}
	}
	if err := os.MkdirAll(r.Dir, 0o700); err != nil {
		return fmt.Errorf("failed to create %s: %w", r.Dir, err)
	}
	dir, err := os.MkdirTemp(r.Dir, "helmop-")
	if err != nil {
		return fmt.Errorf("failed to create a checkout for helmop %s: %w", op.Name, err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, bundle.FleetFileName), data, 0o600); err != nil {
		return fmt.Errorf("failed to write the fleet.yaml of helmop %s: %w", op.Name, err)
	}
	key := client.ObjectKeyFromObject(op)
	r.mu.Lock()
	announce := r.announced[key] != v && (op.Status.Version != v.Version || op.Status.Digest != v.Digest)
	r.announced[key] = v
	r.mu.Unlock()
	if announce {
		r.Recorder.Normal(op, v1alpha1.EventVersionPickedUp, "version %s of %s picked up", v.Version, chartName(op))
	}
	origin := sources.Origin{GitRepo: repoView(op), Object: op, Label: model.LabelHelmOp, Revision: func(id string) string { return "version " + id }}
	return r.Bundler.OnRevision(ctx, origin, dir, v.Version)
}

// chartName names the HelmOp's chart for people.
func chartName(op *v1alpha1.HelmOp) string {
	if isOCI(op) {
		return gitsource.SanitizeURL(chartRef(op))
	}
	return op.Spec.Helm.Chart + " from " + gitsource.SanitizeURL(op.Spec.Helm.Repo)
}

// hostRefused is a chart server the hub's operator does not allow.
type hostRefused struct{ error }

func (e *hostRefused) Unwrap() error { return e.error }

// specError is a HelmOp's spec that cannot be followed.
type specError struct{ msg string }

func (e *specError) Error() string { return e.msg }

// record sets the outcome of a poll on the HelmOp's status: the version rendered and the
// SourceReady, Rendered and Ready conditions. lastPollTime is written at most every
// RecordEvery when nothing else changed: an unchanged chart server costs the API server
// nothing most of the time.
func (r *SourceReconciler) record(ctx context.Context, op *v1alpha1.HelmOp, v Version, syncErr error) {
	st := &op.Status
	before := st.DeepCopy()
	source := metav1.Condition{Type: v1alpha1.SourceReadyCondition, Status: metav1.ConditionTrue, Reason: v1alpha1.SucceededReason,
		Message: fmt.Sprintf("version %s of %s", v.Version, chartName(op)), ObservedGeneration: op.Generation}
	rendered := metav1.Condition{Type: v1alpha1.RenderedCondition, Status: metav1.ConditionTrue, Reason: v1alpha1.SucceededReason,
		Message: "rendered version " + v.Version, ObservedGeneration: op.Generation}
	var renderErr *sources.RenderError
	var spec *specError
	switch {
	case errors.As(syncErr, &renderErr):
		rendered.Status, rendered.Reason, rendered.Message = metav1.ConditionFalse, v1alpha1.RenderFailedReason, model.Truncate(gitsource.Sanitize(syncErr.Error()), model.MaxConditionMessage)
		if errors.As(syncErr, new(*sources.RestrictedError)) {
			rendered.Reason = v1alpha1.RestrictedReason
		}
	case errors.As(syncErr, &spec):
		source.Status, source.Reason, source.Message = metav1.ConditionFalse, v1alpha1.InvalidSpecReason, spec.msg
	case errors.As(syncErr, new(*sources.RestrictedError)), errors.As(syncErr, new(*hostRefused)):
		source.Status, source.Reason, source.Message = metav1.ConditionFalse, v1alpha1.RestrictedReason, syncErr.Error()
	case errors.Is(syncErr, gitsource.ErrUnverified):
		// The version is not deployed; the one before stays.
		source.Status, source.Reason, source.Message = metav1.ConditionFalse, v1alpha1.UnverifiedReason, model.Truncate(syncErr.Error(), model.MaxConditionMessage)
	case syncErr != nil:
		source.Status, source.Reason, source.Message = metav1.ConditionFalse, string(gitsource.Classify(syncErr)), model.Truncate(gitsource.Sanitize(syncErr.Error()), model.MaxConditionMessage)
	default:
		st.Version, st.Digest = v.Version, v.Digest
	}
	meta.SetStatusCondition(&st.Conditions, source)
	if syncErr == nil || renderErr != nil {
		meta.SetStatusCondition(&st.Conditions, rendered)
	}
	ready := source
	switch {
	case renderErr != nil:
		ready = rendered
	case syncErr == nil:
		ready.Message = "deploying version " + st.Version
	}
	setReady(op, ready.Status, ready.Reason, ready.Message)
	st.ObservedGeneration = op.Generation
	if syncErr == nil && before.Version != st.Version {
		// The new version and its bundle's counts in one write.
		var bundles v1alpha1.BundleList
		if err := r.Client.List(ctx, &bundles, client.InNamespace(op.Namespace), client.MatchingLabels{model.LabelHelmOp: op.Name}); err == nil {
			sumBundles(op, bundles.Items)
		}
	}
	if failed := failedAnew(before.Conditions, st.Conditions); failed != nil {
		r.Recorder.Warning(op, v1alpha1.EventSourceUnavailable, "%s: %s", failed.Reason, failed.Message)
	}
	now := r.Now()
	if !equalStatus(before, st) || st.LastPollTime == nil || now.Sub(st.LastPollTime.Time) >= r.RecordEvery {
		st.LastPollTime = &metav1.Time{Time: now.Truncate(time.Second)}
	}
}

// setReady sets the HelmOp's Ready condition; while it is not True the printer columns say it.
func setReady(op *v1alpha1.HelmOp, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&op.Status.Conditions, metav1.Condition{Type: v1alpha1.ReadyCondition, Status: status, Reason: reason, Message: msg, ObservedGeneration: op.Generation})
	displayCondition(op)
}

// failedAnew is the SourceReady or Rendered condition that became False, or changed its
// message, in this poll: told once, not at every poll.
func failedAnew(before, now []metav1.Condition) *metav1.Condition {
	for _, t := range []string{v1alpha1.SourceReadyCondition, v1alpha1.RenderedCondition} {
		c := meta.FindStatusCondition(now, t)
		if c == nil || c.Status != metav1.ConditionFalse {
			continue
		}
		if old := meta.FindStatusCondition(before, t); old == nil || old.Status != metav1.ConditionFalse || old.Message != c.Message {
			return c
		}
	}
	return nil
}
