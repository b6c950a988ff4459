package sources

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/events"
	"github.com/flotilla-dev/flotilla/hub/gitsource"
	"github.com/flotilla-dev/flotilla/hub/lifecycle"
	"github.com/flotilla-dev/flotilla/hub/metrics"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/hub/reconciler"
	"github.com/flotilla-dev/flotilla/rollout"
)

// CommitHandler receives every new commit of a GitRepo with its read-only checkout; the
// renderer plugs in here. An error keeps the previous commit deployed and is reported on the
// GitRepo.
type CommitHandler func(ctx context.Context, repo *v1alpha1.GitRepo, checkout, commit string) error

// SourceReconciler keeps the poller's list of GitRepos in step with the API server and turns
// each poll into GitRepo status: the commit, the last poll and webhook times, and the
// SourceReady condition (its reason names the cause of a failure: authentication, an
// unreachable host, a missing branch or tag). A failed poll never changes status.commit: the
// last good commit stays deployed.
type SourceReconciler struct {
	Client client.Client
	// Uncached reads from the API server a new commit's Bundles (the cache may not show what
	// the bundler has just written).
	Uncached client.Reader
	// Shard is the hub shard whose GitRepos this controller follows.
	Shard    model.Shard
	Git      *gitsource.Client
	Poller   *gitsource.Poller
	OnCommit CommitHandler
	// RecordEvery bounds how often an unchanged poll is written to status.lastPollTime.
	RecordEvery time.Duration
	Now         func() time.Time

	Mu        sync.Mutex
	Schedules map[string]gitsource.Schedule
	Webhooks  map[string]time.Time // key → last delivery not yet written
	// Rerender counts, per GitRepo, the changes (of its spec or its clusters) that ask for its
	// current commit to be rendered again. A sync clears the count it rendered for only: a
	// change that comes during the render is rendered by the next sync, not lost.
	Rerender map[string]int
	// Forwarded is each GitRepo's last forwarded-webhook annotation seen.
	Forwarded map[string]string
	// forwards are the forwarded-webhook writes of this replica, per GitRepo.
	forwards map[string]*forwarding
	// announced is each GitRepo's last commit recorded as picked up (announce).
	announced map[string]string
	// hosts is the server each GitRepo's repository is fetched from (Host).
	hosts map[string]string
	// UninstallTimeout bounds how long a deleted GitRepo says it waits for its clusters.
	UninstallTimeout time.Duration
	Recorder         *events.Recorder
}

func (r *SourceReconciler) Setup(mgr ctrl.Manager) error {
	// Only spec changes matter here; the controller's own status writes do not come back.
	// Clusters joining, leaving or changing labels change what the current commit renders to;
	// a changed FleetRestriction, what it may render.
	reRender := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		var repos v1alpha1.GitRepoList
		if err := r.Client.List(ctx, &repos, client.InNamespace(o.GetNamespace())); err != nil {
			return nil
		}
		out := make([]reconcile.Request, 0, len(repos.Items))
		r.Mu.Lock()
		for _, repo := range repos.Items {
			r.Rerender[repo.Namespace+"/"+repo.Name]++
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&repo)})
		}
		r.Mu.Unlock()
		return out
	})
	return ctrl.NewControllerManagedBy(mgr).Named("gitrepo-source").
		For(&v1alpha1.GitRepo{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, model.Deleting{}, forwardedWebhook{}))).
		Watches(&v1alpha1.Cluster{}, reRender, builder.WithPredicates(model.ClusterMembershipChanged{})).
		Watches(&v1alpha1.FleetRestriction{}, reRender).
		// A deleted GitRepo waits for its bundles' deployments: each one going may end the wait.
		Watches(&v1alpha1.BundleDeployment{}, handler.Funcs{DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			for _, req := range model.BundleOfDeployment(ctx, e.Object) {
				var bun v1alpha1.Bundle
				if r.Client.Get(ctx, req.NamespacedName, &bun) == nil && bun.Labels[model.LabelGitRepo] != "" {
					q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: bun.Namespace, Name: bun.Labels[model.LabelGitRepo]}})
				}
			}
		}}).
		Watches(&v1alpha1.Bundle{}, handler.Funcs{DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if repo := e.Object.GetLabels()[model.LabelGitRepo]; repo != "" {
				q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: e.Object.GetNamespace(), Name: repo}})
			}
		}}).
		Watches(&v1alpha1.ClusterGroup{}, reRender, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
		Complete(r.Controller())
}

// gitRepoFinalizer holds a deleted GitRepo until its Bundles and BundleDeployments are gone.
const gitRepoFinalizer = "flotilla.dev/gitrepo"

func (r *SourceReconciler) Controller() reconciler.Status[v1alpha1.GitRepo, *v1alpha1.GitRepo] {
	return reconciler.Status[v1alpha1.GitRepo, *v1alpha1.GitRepo]{Client: r.Client, Step: r.step, Finalizer: gitRepoFinalizer, Finalize: r.finalize, Gone: r.gone}
}

// gone stops following a GitRepo that no longer exists.
func (r *SourceReconciler) gone(_ context.Context, key types.NamespacedName) error {
	r.forget(key.String())
	return nil
}

func (r *SourceReconciler) forget(key string) {
	r.Poller.Remove(key)
	r.Mu.Lock()
	delete(r.Schedules, key)
	delete(r.announced, key)
	delete(r.hosts, key)
	r.Mu.Unlock()
}

// finalize stops following a deleted GitRepo and removes its bundles; it goes once the agents
// removed their workloads, its status saying meanwhile what it waits for.
func (r *SourceReconciler) finalize(ctx context.Context, repo *v1alpha1.GitRepo) (reconciler.Outcome, error) {
	key := repo.Namespace + "/" + repo.Name
	r.forget(key)
	if err := RemoveBundles(ctx, r.Client, repo.Namespace, model.LabelGitRepo, repo.Name, nil); err != nil {
		return reconciler.Outcome{}, fmt.Errorf("failed to remove the bundles of deleted gitrepo %s: %w", key, err)
	}
	waits, err := lifecycle.RemovalWaits(ctx, r.Client, repo.Namespace, model.LabelGitRepo, repo.Name, r.UninstallTimeout)
	if err != nil {
		return reconciler.Outcome{}, err
	}
	if waits != "" {
		// A deployment or Bundle going wakes this again.
		meta.SetStatusCondition(&repo.Status.Conditions, metav1.Condition{Type: v1alpha1.ReadyCondition, Status: metav1.ConditionFalse,
			Reason: v1alpha1.DeletingReason, Message: waits, ObservedGeneration: repo.Generation})
		displayCondition(repo)
		return reconciler.Outcome{}, nil
	}
	log.FromContext(ctx).Info("gitrepo deleted: its bundles and deployments are removed", "gitrepo", key)
	return reconciler.Outcome{Done: true}, nil
}

// step registers or updates the GitRepo's poll schedule and asks for its current commit to be
// rendered again when what it renders to changed; a spec that cannot be scheduled stalls it.
func (r *SourceReconciler) step(ctx context.Context, repo, _ *v1alpha1.GitRepo) (reconciler.Outcome, error) {
	key := repo.Namespace + "/" + repo.Name
	sched, err := scheduleFor(repo)
	if err != nil {
		r.stall(repo, v1alpha1.InvalidSpecReason, err.Error())
		return reconciler.Outcome{}, nil
	}
	r.Mu.Lock()
	prev, known := r.Schedules[key]
	r.Schedules[key] = sched
	if r.hosts == nil {
		r.hosts = map[string]string{}
	}
	r.hosts[key] = gitsource.HostOf(repo.Spec.Repo)
	if repo.Generation != repo.Status.ObservedGeneration || !known && !r.holdsBundlesOf(ctx, repo) {
		// Targets or paths may have changed, or the GitRepo came from another shard: its
		// current commit is rendered again, which adopts what it derived.
		r.Rerender[key]++
	}
	again := r.Rerender[key] > 0
	forwarded := repo.Annotations[AnnotationWebhookForwarded]
	newWebhook := known && forwarded != "" && r.Forwarded[key] != forwarded
	r.Forwarded[key] = forwarded
	r.Mu.Unlock()
	switch {
	case !known || prev.Interval != sched.Interval || prev.Cron != sched.Cron || prev.TimeZone != sched.TimeZone:
		r.Poller.Set(key, sched) // polls at once
	case newWebhook:
		r.Notify(gitsource.Subscriber{Key: key}, gitsource.Push{})
	case again:
		r.Poller.Trigger(key) // look again now
	}
	return reconciler.Outcome{}, nil
}

// Host is the server the GitRepo at key fetches from, for the poller's share per host.
func (r *SourceReconciler) Host(key string) string {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	return r.hosts[key]
}

func scheduleFor(repo *v1alpha1.GitRepo) (gitsource.Schedule, error) {
	s := gitsource.Schedule{Disabled: repo.Spec.DisablePolling}
	if repo.Spec.PollingInterval != nil {
		s.Interval = repo.Spec.PollingInterval.Duration
	}
	if ss := repo.Spec.SyncSchedule; ss != nil {
		s.Cron, s.TimeZone = ss.Cron, ss.TimeZone
	}
	return s, s.Compile()
}

// Sync is the poller's work for one GitRepo.
func (r *SourceReconciler) Sync(ctx context.Context, key string) error {
	ns, name, _ := splitKey(key)
	var repo v1alpha1.GitRepo
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &repo); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !repo.DeletionTimestamp.IsZero() {
		return nil // its bundles are being removed: render nothing new
	}
	logger := log.FromContext(ctx).WithValues("gitrepo", key)
	src, err := r.RepoFor(ctx, &repo)
	var ref gitsource.Ref
	if err == nil {
		ref, err = r.Git.Resolve(ctx, src)
	}
	held := ""
	r.Mu.Lock()
	asked := r.Rerender[key]
	r.Mu.Unlock()
	if err == nil && (ref.Commit != repo.Status.Commit || asked > 0) {
		if allowed, reason := r.releaseAllowed(&repo); !allowed {
			// A sync window holds the new commit: the deployed one stays, the next poll looks again.
			held, ref = fmt.Sprintf("commit %s waits: %s", model.ShortCommit(ref.Commit), reason), gitsource.Ref{Name: ref.Name, Commit: repo.Status.Commit}
		} else {
			var dir string
			if dir, err = r.Checkout(ctx, &repo, src, ref); err == nil {
				// Announced once verified and checked out: a refused commit is not picked up.
				r.announce(&repo, ref)
			}
			if err == nil && r.OnCommit != nil {
				start := time.Now()
				err = r.renderCommit(ctx, &repo, dir, ref.Commit)
				metrics.RenderDuration.
					Observe(time.Since(start).Seconds())
			}
		}
	}
	var renderErr *RenderError
	if errors.As(err, &renderErr) && renderErr.Partial {
		// The commit is recorded as the GitRepo's; its failed bundles are tried again at the
		// next poll (a chart server that was down heals without a new commit).
		r.Mu.Lock()
		r.Rerender[key]++
		r.Mu.Unlock()
	}
	// What the fetch says passes through the credentials' scrubber (a render's text has passed
	// through its own, repoRenderer.render) before it reaches the log, the status and the Events.
	if err != nil {
		unavailable := gitsource.ServerUnavailable(err)
		err = src.Auth.Secrets().Error(err)
		if unavailable {
			// Kept for the poller: the repository is retried once its server answers again.
			err = gitsource.MarkUnavailable(err)
		}
		logger.V(1).Info("sync failed", "error", gitsource.Sanitize(err.Error()))
	} else if asked > 0 && held == "" {
		r.Mu.Lock()
		if r.Rerender[key] == asked {
			delete(r.Rerender, key)
		}
		r.Mu.Unlock()
	}
	return errors.Join(err, r.record(ctx, &repo, ref, err, held))
}

// renderCommit hands a checked-out commit to the bundler, turning a panic into the commit's
// render error: a repository that crashes the renderer fails its own GitRepo, with a condition,
// and not the hub.
func (r *SourceReconciler) renderCommit(ctx context.Context, repo *v1alpha1.GitRepo, dir, commit string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			log.FromContext(ctx).Error(nil, "rendering panicked", "gitrepo", repo.Namespace+"/"+repo.Name, "commit", commit, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = &RenderError{Err: fmt.Errorf("rendering commit %s failed unexpectedly: %v", model.ShortCommit(commit), p)}
		}
	}()
	return r.OnCommit(ctx, repo, dir, commit)
}

// releaseAllowed applies the GitRepo's sync windows now. Invalid windows were rejected by the
// API server's validation; one that still fails to compile holds releases (fail closed).
func (r *SourceReconciler) releaseAllowed(repo *v1alpha1.GitRepo) (bool, string) {
	windows := make([]gitsource.SyncWindow, 0, len(repo.Spec.SyncWindows))
	for i, w := range repo.Spec.SyncWindows {
		sw := gitsource.SyncWindow{Kind: gitsource.SyncWindowKind(w.Kind), Window: rollout.Window{Schedule: w.Schedule, Duration: rollout.Duration(w.Duration.Duration), TimeZone: w.TimeZone}}
		if err := sw.Compile(); err != nil {
			return false, fmt.Sprintf("syncWindows[%d]: %v", i, err)
		}
		windows = append(windows, sw)
	}
	return gitsource.ReleaseAllowed(windows, r.Now())
}

// RepoFor builds the gitsource.Repo of a GitRepo, reading its credentials Secret.
func (r *SourceReconciler) RepoFor(ctx context.Context, repo *v1alpha1.GitRepo) (gitsource.Repo, error) {
	src := gitsource.Repo{URL: repo.Spec.Repo, Branch: repo.Spec.Branch, Revision: repo.Spec.Revision, Semver: repo.Spec.Semver}
	if v := repo.Spec.Verify; v != nil {
		src.SignedTags = v.Mode.VerifiesTags()
	}
	// Checked before anything is read or fetched on the repository's behalf.
	policy, err := restrictionsOf(ctx, r.Client, repo.Namespace)
	if err != nil {
		return src, err
	}
	if err := policy.allowRepo(repo.Spec.Repo); err != nil {
		return src, err
	}
	if err := policy.requireVerification(repo); err != nil {
		return src, err
	}
	auth := &gitsource.Auth{CABundle: repo.Spec.CABundle, InsecureSkipTLSVerify: repo.Spec.InsecureSkipTLSVerify}
	if ref := repo.Spec.SecretRef; ref != nil {
		var secret corev1.Secret
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: repo.Namespace, Name: ref.Name}, &secret); err != nil {
			return src, fmt.Errorf("failed to read secret %s: %w", ref.Name, err)
		}
		a, err := gitsource.AuthFromSecret(secret.Data)
		if err != nil {
			return src, fmt.Errorf("secret %s: %w", ref.Name, err)
		}
		a.CABundle, a.InsecureSkipTLSVerify = append(a.CABundle, auth.CABundle...), auth.InsecureSkipTLSVerify
		auth = a
	}
	src.Auth = auth
	return src, nil
}

// record writes the outcome of a poll, but only what changed, plus lastPollTime at most every
// recordEvery: an unchanged repository costs the API server nothing most of the time.
func (r *SourceReconciler) record(ctx context.Context, repo *v1alpha1.GitRepo, ref gitsource.Ref, syncErr error, held string) error {
	now := r.Now()
	orig := repo.DeepCopy()
	st := &repo.Status
	cond := metav1.Condition{Type: v1alpha1.SourceReadyCondition, Status: metav1.ConditionTrue, Reason: v1alpha1.SucceededReason,
		Message: fmt.Sprintf("%s at %s", ref.Name, model.ShortCommit(ref.Commit)), ObservedGeneration: repo.Generation}
	rendered := metav1.Condition{Type: v1alpha1.RenderedCondition, Status: metav1.ConditionTrue, Reason: v1alpha1.SucceededReason,
		Message: "rendered " + model.ShortCommit(ref.Commit), ObservedGeneration: repo.Generation}
	var renderErr *RenderError
	switch {
	case errors.As(syncErr, &renderErr):
		metrics.
			// The source is fine; the commit is not: keep deploying the last good one.
			RenderErrors.
			Inc()
		rendered.Status, rendered.Reason, rendered.Message = metav1.ConditionFalse, v1alpha1.RenderFailedReason, model.Truncate(gitsource.Sanitize(syncErr.Error()), model.MaxConditionMessage)
		if errors.As(syncErr, new(*RestrictedError)) {
			rendered.Reason = v1alpha1.RestrictedReason
		}
		if renderErr.Partial {
			st.Commit = ref.Commit // the bundles that render roll out at it
		}
	case errors.As(syncErr, new(*RestrictedError)), errors.As(syncErr, new(*AmbiguousURLError)):
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, v1alpha1.RestrictedReason, syncErr.Error()
		metrics.SyncErrors.
			WithLabelValues(cond.Reason).Inc()
	case errors.Is(syncErr, gitsource.ErrUnverified):
		// The new commit is not deployed; the one before stays (st.Commit is left as it was).
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, v1alpha1.UnverifiedReason, model.Truncate(syncErr.Error(), model.MaxConditionMessage)
		metrics.SyncErrors.
			WithLabelValues(cond.Reason).Inc()
	case syncErr != nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, string(gitsource.Classify(syncErr)), gitsource.Sanitize(syncErr.Error())
		metrics.SyncErrors.
			WithLabelValues(cond.Reason).Inc()
	default:
		st.Commit = ref.Commit
	}
	meta.SetStatusCondition(&st.Conditions, cond)
	if syncErr == nil || renderErr != nil {
		meta.SetStatusCondition(&st.Conditions, rendered)
	}
	if held != "" {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.RolloutPausedCondition, Status: metav1.ConditionTrue,
			Reason: v1alpha1.SyncWindowReason, Message: held, ObservedGeneration: repo.Generation})
	} else {
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.RolloutPausedCondition)
	}
	meta.RemoveStatusCondition(&st.Conditions, v1alpha1.StalledCondition)
	meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ReconcilingCondition)
	ready := metav1.Condition{Type: v1alpha1.ReadyCondition, Status: cond.Status, Reason: cond.Reason, Message: cond.Message, ObservedGeneration: repo.Generation}
	switch {
	case renderErr != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, rendered.Reason, rendered.Message
	case syncErr == nil && st.Commit != "":
		ready.Message = "source at " + model.ShortCommit(st.Commit)
	}
	meta.SetStatusCondition(&st.Conditions, ready)
	st.ObservedGeneration = repo.Generation
	if syncErr == nil && (orig.Status.Commit != ref.Commit || displaysCondition(orig)) {
		// The new commit and its bundles' counts in one write: a GitRepo on the new commit
		// never shows the counts of the one before. A GitRepo that failed before shows its
		// bundles again.
		var bundles v1alpha1.BundleList
		if err := r.Uncached.List(ctx, &bundles, client.InNamespace(repo.Namespace), client.MatchingLabels{model.LabelGitRepo: repo.Name}); err == nil {
			sumBundles(repo, bundles.Items)
		}
	}
	displayCondition(repo)
	r.Mu.Lock()
	if at, ok := r.Webhooks[repo.Namespace+"/"+repo.Name]; ok {
		st.LastWebhookTime = &metav1.Time{Time: at}
		delete(r.Webhooks, repo.Namespace+"/"+repo.Name)
	}
	r.Mu.Unlock()
	changed := !equality.Semantic.DeepEqual(orig.Status, repo.Status)
	if !changed && st.LastPollTime != nil && now.Sub(st.LastPollTime.Time) < r.RecordEvery {
		return nil
	}
	st.LastPollTime = &metav1.Time{Time: now.Truncate(time.Second)}
	if err := r.Client.Status().Patch(ctx, repo, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("failed to update gitrepo status: %w", client.IgnoreNotFound(err))
	}
	r.recordSyncEvents(orig, repo)
	return nil
}

// announce records a new commit once, before it is rendered: the first Event of its rollout.
func (r *SourceReconciler) announce(repo *v1alpha1.GitRepo, ref gitsource.Ref) {
	key := repo.Namespace + "/" + repo.Name
	r.Mu.Lock()
	defer r.Mu.Unlock()
	if ref.Commit == repo.Status.Commit || r.announced[key] == ref.Commit {
		return
	}
	if r.announced == nil {
		r.announced = map[string]string{}
	}
	r.announced[key] = ref.Commit
	r.Recorder.Normal(repo, v1alpha1.EventCommitPickedUp, "commit %s of %s picked up", model.ShortCommit(ref.Commit), ref.ShortName())
}

// recordSyncEvents records what a poll changed: a render failing, the source becoming
// unavailable. Unchanged polls record nothing.
func (r *SourceReconciler) recordSyncEvents(orig, repo *v1alpha1.GitRepo) {
	if c := failedAnew(orig.Status.Conditions, repo.Status.Conditions, v1alpha1.RenderedCondition); c != nil {
		r.Recorder.Warning(repo, v1alpha1.EventRenderFailed, "%s", c.Message)
	}
	if c := failedAnew(orig.Status.Conditions, repo.Status.Conditions, v1alpha1.SourceReadyCondition); c != nil {
		r.Recorder.Warning(repo, v1alpha1.EventSourceUnavailable, "%s: %s", c.Reason, c.Message)
	}
}

// failedAnew returns the condition typ of now when it is False and was not False with the same
// message before: a failure to tell an operator about once, not at every poll.
func failedAnew(before, now []metav1.Condition, typ string) *metav1.Condition {
	c := meta.FindStatusCondition(now, typ)
	if c == nil || c.Status != metav1.ConditionFalse {
		return nil
	}
	if old := meta.FindStatusCondition(before, typ); old != nil && old.Status == metav1.ConditionFalse && old.Message == c.Message {
		return nil
	}
	return c
}

// stall marks a GitRepo whose spec cannot be followed: Stalled, and not Ready, for reason.
func (r *SourceReconciler) stall(repo *v1alpha1.GitRepo, reason, msg string) {
	for _, t := range []string{v1alpha1.StalledCondition, v1alpha1.ReadyCondition} {
		status := metav1.ConditionTrue
		if t == v1alpha1.ReadyCondition {
			status = metav1.ConditionFalse
		}
		meta.SetStatusCondition(&repo.Status.Conditions, metav1.Condition{Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: repo.Generation})
	}
	repo.Status.ObservedGeneration = repo.Generation
	displayCondition(repo)
}

// Notify is the receiver's callback: remember the delivery time and poll now.
func (r *SourceReconciler) Notify(s gitsource.Subscriber, _ gitsource.Push) {
	r.Mu.Lock()
	r.Webhooks[s.Key] = r.Now()
	r.Mu.Unlock()
	r.Poller.Trigger(s.Key)
}

// holdsBundlesOf reports whether the GitRepo's Bundles are this shard's: none of another
// shard's among them, and some unless nothing was rendered yet.
func (r *SourceReconciler) holdsBundlesOf(ctx context.Context, repo *v1alpha1.GitRepo) bool {
	var bundles v1alpha1.BundleList
	if err := r.Client.List(ctx, &bundles, client.InNamespace(repo.Namespace), client.MatchingLabels{model.LabelGitRepo: repo.Name}); err != nil {
		return false
	}
	for i := range bundles.Items {
		if !r.Shard.Owns(&bundles.Items[i]) {
			return false
		}
	}
	return len(bundles.Items) > 0 || repo.Status.Commit == ""
}

// Follows reports whether this hub's shard follows the GitRepo of key (its cache holds it).
func (r *SourceReconciler) Follows(ctx context.Context, key string) bool {
	ns, name, _ := splitKey(key)
	return r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &v1alpha1.GitRepo{}) == nil
}

// AnnotationWebhookForwarded on a GitRepo is when a hub that does not follow it received a
// webhook for it (a replica that does not lead, or another shard): the leader of its shard
// polls on seeing it change (see Options.LeaderElection and shard).
const AnnotationWebhookForwarded = "flotilla.dev/webhook-forwarded"

// forward hands a webhook delivery to the leading replica: one write per delivery, none per
// cluster.
// ForwardEvery bounds the forwarded-webhook writes of one GitRepo: deliveries (a burst of
// pushes, or one delivery replayed) faster than that cost one write, and the last of a burst
// is forwarded when the interval ends, so that no push waits for the next poll.
const ForwardEvery = time.Second

// forwarding is a GitRepo's forwarded-webhook writes: the last one, and whether one waits.
type forwarding struct {
	last    time.Time
	pending bool
}

// Forward tells the hub that follows the GitRepo of a delivery, at most every ForwardEvery.
func (r *SourceReconciler) Forward(ctx context.Context, s gitsource.Subscriber) {
	r.Mu.Lock()
	if r.forwards == nil {
		r.forwards = map[string]*forwarding{}
	}
	f := r.forwards[s.Key]
	if f == nil {
		f = &forwarding{}
		r.forwards[s.Key] = f
	}
	if f.pending {
		r.Mu.Unlock()
		return // the write that waits covers this delivery too
	}
	if wait := time.Until(f.last.Add(ForwardEvery)); wait > 0 {
		f.pending = true
		r.Mu.Unlock()
		time.AfterFunc(wait, func() {
			r.Mu.Lock()
			f.pending, f.last = false, time.Now()
			r.Mu.Unlock()
			r.writeForward(ctx, s)
		})
		return
	}
	f.last = time.Now()
	r.Mu.Unlock()
	r.writeForward(ctx, s)
}

// writeForward is the forwarded-webhook annotation's write.
func (r *SourceReconciler) writeForward(ctx context.Context, s gitsource.Subscriber) {
	if ctx.Err() != nil {
		return
	}
	ns, name, _ := splitKey(s.Key)
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, AnnotationWebhookForwarded, r.Now().UTC().Format(time.RFC3339Nano))
	if err := r.Client.Patch(ctx, repo, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		log.FromContext(ctx).Error(err, "failed to forward a webhook to the leading hub; the next poll picks the push up", "gitrepo", s.Key)
		return
	}
	log.FromContext(ctx).V(1).Info("webhook forwarded to the hub that follows the gitrepo (this one does not lead, or is another shard)", "gitrepo", s.Key)
}

// forwardedWebhook passes a GitRepo update whose forwarded-webhook annotation changed.
type forwardedWebhook struct{ predicate.Funcs }

func (forwardedWebhook) Update(e event.UpdateEvent) bool {
	return e.ObjectOld.GetAnnotations()[AnnotationWebhookForwarded] != e.ObjectNew.GetAnnotations()[AnnotationWebhookForwarded]
}

func splitKey(key string) (ns, name string, ok bool) {
	for i := range len(key) {
		if key[i] == '/' {
			return key[:i], key[i+1:], true
		}
	}
	return "", key, false
}
