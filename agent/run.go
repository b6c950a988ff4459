package agent

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flotilla-dev/flotilla/agent/healthcheck"
	"github.com/flotilla-dev/flotilla/agent/kube"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/bdstate"
	"github.com/flotilla-dev/flotilla/hub/content"
	"github.com/flotilla-dev/flotilla/hub/events"
)

// RunOptions configure the agent.
type RunOptions struct {
	// HubConfig reaches the hub with the cluster's own credentials.
	HubConfig *rest.Config
	// LocalConfig reaches the cluster the agent deploys to.
	LocalConfig *rest.Config
	// Namespace is the cluster's namespace on the hub, holding its BundleDeployments.
	Namespace string
	// ClusterName and ClusterNamespace locate the cluster's Cluster object for heartbeats.
	ClusterName, ClusterNamespace string
	// StateNamespace on the local cluster keeps the inventories; default flotilla-system.
	StateNamespace string
	// HeartbeatInterval between heartbeats, when set; default the interval the hub asks for
	// (the Cluster's spec.heartbeatInterval, or the hub's default).
	HeartbeatInterval time.Duration
	// ResyncInterval re-checks readiness and drift of deployed bundles; default 30s, 3s while
	// something is not ready.
	ResyncInterval time.Duration
	// Version is reported on the Cluster.
	Version string
	// ProtectedNamespaces are never deleted by a bundle, beside the cluster's own (default,
	// kube-*) and StateNamespace.
	ProtectedNamespaces []string
	// RenewBefore: the hub token is renewed when this much of its lifetime is left; default a
	// third of it. TokenLifetime is the lifetime renewed tokens ask for; default the current
	// token's.
	RenewBefore, TokenLifetime time.Duration
	// OnCredentials keeps credentials the agent renewed or moved to (Bootstrap's Secret, see
	// BootstrapOptions.Keep), before the agent uses them.
	OnCredentials func(context.Context, Credentials) error
	// MetricsAddr serves the agent's Prometheus metrics; empty or "0" disables them.
	MetricsAddr string
	// Events says which Events the agent records on its deployments; default EventsWarnings.
	Events EventLevel
	// NotReadyWarning is how long an applied revision may stay not Ready before the agent
	// tells it (RevisionNotReady, a Warning, once per revision); default 5 minutes.
	NotReadyWarning time.Duration
}

// EventLevel says which Events an agent records on its deployments, in its cluster's namespace
// on the hub. Each is a write to the hub's API server, per cluster and deployment.
type EventLevel string

const (
	// EventsWarnings records what went wrong or was undone on the cluster: ApplyFailed,
	// RevisionNotReady, ReadinessLost, DriftCorrected, RolledBack. The default: a healthy rollout costs the
	// hub's API server no Event per cluster (two per deployment and revision slowed a
	// 10 × 500 first deployment by about 35 %; README "Measured").
	EventsWarnings EventLevel = "warnings"
	// EventsAll also tells each revision applied and ready (RevisionApplied, RevisionReady):
	// the whole story of each cluster in its namespace, for a fleet that can pay for it.
	EventsAll EventLevel = "all"
)

// ParseEventLevel reads an --events value; empty is the default.
func ParseEventLevel(s string) (EventLevel, error) {
	switch l := EventLevel(s); l {
	case "":
		return EventsWarnings, nil
	case EventsWarnings, EventsAll:
		return l, nil
	}
	return "", fmt.Errorf("events %q: want %s or %s", s, EventsWarnings, EventsAll)
}

// DefaultNotReadyWarning is RunOptions.NotReadyWarning's default: half the Deployment
// controller's default progress deadline, so the Warning comes before the rollout's
// failureTimeout (10 minutes by default) fails the revision.
const DefaultNotReadyWarning = 5 * time.Minute

// protected is every namespace no bundle may delete on this cluster, beyond the cluster's own.
func (o *RunOptions) protected() []string {
	return append([]string{o.StateNamespace}, o.ProtectedNamespaces...)
}

// Run runs the agent until ctx ends, or until the hub revokes its access (ErrRemoved) or its
// credentials expired (ErrCredentialsExpired). When its cluster moves to a new namespace on the
// hub, it follows.
func Run(ctx context.Context, opts RunOptions) error {
	if opts.StateNamespace == "" {
		opts.StateNamespace = "flotilla-system"
	}
	level, err := ParseEventLevel(string(opts.Events))
	if err != nil {
		return err
	}
	opts.Events = level
	if opts.ResyncInterval <= 0 {
		opts.ResyncInterval = 30 * time.Second
	}
	if opts.NotReadyWarning <= 0 {
		opts.NotReadyWarning = DefaultNotReadyWarning
	}
	token := &tokenHolder{}
	hubConfig := renewingConfig(opts.HubConfig, token)
	for {
		err := run(ctx, opts, hubConfig, token)
		var moved *movedError
		if !errors.As(err, &moved) {
			return err
		}
		log.FromContext(ctx).Info("the cluster moved to a new namespace on the hub", "from", opts.Namespace, "to", moved.to)
		opts.Namespace = moved.to
	}
}

// movedError stops the agent's run to start again in the namespace its cluster moved to.
type movedError struct{ to string }

func (e *movedError) Error() string { return "the cluster moved to namespace " + e.to }

func run(ctx context.Context, opts RunOptions, hubConfig *rest.Config, token *tokenHolder) error {
	hub, err := kube.NewHub(hubConfig)
	if err != nil {
		return err
	}
	// Revoked or expired credentials end the run before the agent waits on a cache that could
	// never fill.
	own, err := hub.Clusters(opts.ClusterNamespace).Get(ctx, opts.ClusterName)
	if gone := removal(own, err, token.get()); gone != nil {
		return gone
	}
	local, err := kube.NewLocal(opts.LocalConfig)
	if err != nil {
		return err
	}
	// Drift corrections are Events on the deployment, in the cluster's namespace on the hub,
	// where the hub's operator reads the story of a rollout.
	recorder := events.New(hub.Events(), hub.Scheme, EventsController)
	d := &deployer{hub: hub, readContent: hub.Content(), token: token, local: local, opts: opts, appliers: map[string]*Applier{},
		notMember: make(chan struct{}, 1), recorder: recorder, toldNotReady: map[string]string{}}
	deployments := newDeploymentLoop(hub.BundleDeployments(opts.Namespace), d)
	tasks := []func(context.Context) error{recorder.Start, deployments.run, d.heartbeat, d.renewCredentials, d.sweep}
	if addr := opts.MetricsAddr; addr != "" && addr != "0" {
		tasks = append(tasks, func(ctx context.Context) error { return serveMetrics(ctx, addr) })
	}
	return runAll(ctx, tasks)
}

// runAll runs tasks until ctx ends or one fails, and returns once all have returned: the first
// failure, or nil. A task that returns nil is done, and the others go on.
func runAll(ctx context.Context, tasks []func(context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	var once sync.Once
	var failed error
	for _, task := range tasks {
		wg.Go(func() {
			if err := task(ctx); err != nil {
				once.Do(func() { failed = err })
				cancel(err)
			}
		})
	}
	wg.Wait()
	return failed
}

// deployer applies one BundleDeployment and reports its state.
type deployer struct {
	hub   *kube.Hub
	token *tokenHolder
	local *kube.Local
	opts  RunOptions

	// lease is the agent's Lease as last renewed; reported, whether the Cluster shows the
	// agent's version and namespace (only the heartbeat loop uses them).
	lease    *coordinationv1.Lease
	reported bool
	// notMember wakes the heartbeat when a deployment's removal finds that the cluster left
	// or moved (stillMember): the heartbeat then stops or follows the agent.
	notMember chan struct{}

	recorder *events.Recorder
	// contents are the contents its deployments run, read from the hub (readContent) once: a
	// resync reads none again.
	contents    content.Cache
	readContent content.Getter
	// toldNotReady is, per deployment, the applied deployment id it told RevisionNotReady of.
	toldNotReady map[string]string

	mu       sync.Mutex
	appliers map[string]*Applier // by the service account they apply as; "" is the agent's own
}

// progress tells a healthy step of a revision (applied, ready), with EventsAll only.
func (d *deployer) progress(bd *v1alpha1.BundleDeployment, reason v1alpha1.EventReason, format string, args ...any) {
	if d.opts.Events == EventsAll {
		d.recorder.Normal(bd, reason, format, args...)
	}
}

// EventsController is the reportingController of the agents' Events.
const EventsController = "flotilla.dev/agent"

// driftSummary names the drifted resources an agent reported, for an Event.
func driftSummary(modified []v1alpha1.ResourceSummary) string {
	if len(modified) == 0 {
		return "drifted resources"
	}
	names := make([]string, 0, len(modified))
	for _, m := range modified {
		names = append(names, m.Kind+" "+m.Name)
	}
	return strings.Join(names, ", ")
}

// applier returns the engine that applies as serviceAccount (in the agent's namespace), or as
// the agent itself: impersonated, downstream RBAC bounds what a bundle can do.
func (d *deployer) applier(serviceAccount string) (*Applier, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if a := d.appliers[serviceAccount]; a != nil {
		return a, nil
	}
	cfg := d.opts.LocalConfig
	if serviceAccount != "" {
		cfg = rest.CopyConfig(cfg)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + d.opts.StateNamespace + ":" + serviceAccount}
	}
	a, err := NewApplier(cfg)
	if err != nil {
		return nil, err
	}
	d.appliers[serviceAccount] = a
	return a, nil
}

// gone uninstalls a deployment that is gone from the hub, only while this cluster is still a
// member there: a deleted Cluster's deployments go with its namespace, and a moving cluster's
// are deleted from the old one; neither removes what runs on the cluster.
func (d *deployer) gone(ctx context.Context, key types.NamespacedName) error {
	d.contents.Release(key.Name)
	if member, err := d.stillMember(ctx); !member || err != nil {
		return err
	}
	return d.uninstall(ctx, key.Name)
}

// step applies the released revision, checks readiness and drift, and sets the status the
// agent reports; a deleted deployment is uninstalled and says so (remove).
func (d *deployer) step(ctx context.Context, bd *v1alpha1.BundleDeployment) (time.Duration, error) {
	if !bd.DeletionTimestamp.IsZero() {
		return 0, d.remove(ctx, bd)
	}
	opts := d.engineOptions(bd)
	var objs []*unstructured.Unstructured
	var applyErr error
	rel := bd.Spec.Released
	waiting := false
	// What the agent last reported, before this pass applies anything: readiness is lost only
	// by the revision that had it.
	wasReady, wasApplied := bd.Status.Ready, bd.Status.AppliedDeploymentID
	if rel == nil && bd.Spec.Rollback && bd.Status.AppliedDeploymentID != "" {
		// A rollback to no earlier revision: the bundle leaves the cluster (R5.4).
		return 0, d.rollBackToNothing(ctx, bd)
	}
	if rel != nil && !bd.Spec.Paused {
		objs, applyErr = d.objects(ctx, bd.Name, bd.Spec.BundleNamespace, rel.ContentID)
		switch {
		case apierrors.IsForbidden(applyErr) || apierrors.IsNotFound(applyErr):
			// The hub grants access to new content right after releasing it: wait, this is
			// not a failed apply.
			waiting, applyErr = true, nil
		case applyErr == nil && rel.DeploymentID != bd.Status.AppliedDeploymentID:
			applyErr = d.apply(ctx, bd, objs, opts)
		case applyErr == nil && bd.Spec.Options.CorrectDrift && bd.Status.Modified:
			if applyErr = d.apply(ctx, bd, objs, opts); applyErr == nil {
				driftCorrections.Inc()
				log.FromContext(ctx).Info("drift corrected", "bundle", bd.Spec.Bundle, "revision", rel.Index, "resources", len(bd.Status.ModifiedResources))
				d.recorder.Normal(bd, v1alpha1.EventDriftCorrected, "revision %d applied again over %s", rel.Index, driftSummary(bd.Status.ModifiedResources))
			}
		}
		var unserved *UnservedError
		switch {
		case errors.As(applyErr, &unserved):
			// The cluster cannot run this revision: it keeps the one it runs (R1.15).
			bd.Status.Ineligible = &v1alpha1.Ineligibility{DeploymentID: rel.DeploymentID, UnservedAPIs: unserved.APIs}
		case !waiting:
			bd.Status.Ineligible = nil
		}
		if applyErr != nil {
			reason := v1alpha1.ApplyFailedReason
			switch {
			case errors.As(applyErr, new(*RestrictedError)):
				reason = v1alpha1.RestrictedReason
			case unserved != nil:
				reason = v1alpha1.APINotServedReason
			}
			if prev := meta.FindStatusCondition(bd.Status.Conditions, v1alpha1.AppliedCondition); prev == nil || prev.Status != metav1.ConditionFalse || prev.Message != applyErr.Error() {
				// Told when the apply starts failing or fails anew, not at each retry.
				d.recorder.Warning(bd, v1alpha1.EventApplyFailed, "revision %d: %s", rel.Index, applyErr)
			}
			setCondition(bd, v1alpha1.AppliedCondition, false, reason, applyErr.Error())
		}
	}
	requeue := d.observe(ctx, bd, objs, opts)
	d.recordReadiness(bd, wasReady && wasApplied == bd.Status.AppliedDeploymentID)
	if waiting {
		requeue = time.Second
	}
	switch {
	case bd.Status.Ineligible != nil:
		// A cluster gains an API when it is upgraded or a CRD is installed: looked for at
		// each resync, which reads discovery once.
		if requeue == 0 || requeue > d.opts.ResyncInterval {
			requeue = d.opts.ResyncInterval
		}
	case applyErr != nil:
		// Retry on our own schedule: the cause (content not readable yet, a webhook down on the
		// cluster) usually passes, and nothing else would wake us.
		requeue = min(5*time.Second, d.opts.ResyncInterval)
	}
	bd.Status.State = bdstate.State(bd, bd.Spec.Staged.Index) // the newest revision the agent knows of
	bd.Status.ObservedGeneration = bd.Generation
	return requeue, nil
}

// recordReadiness tells when the applied revision becomes ready (with EventsAll), when it was
// ready and is no longer, and when it has not been ready for NotReadyWarning since its apply
// (once per revision): none while nothing changes.
func (d *deployer) recordReadiness(bd *v1alpha1.BundleDeployment, wasReady bool) {
	applied := bd.Status.AppliedDeploymentID
	msg := "not ready"
	if c := meta.FindStatusCondition(bd.Status.Conditions, v1alpha1.ReadyCondition); c != nil {
		msg = c.Message
	}
	switch {
	case applied == "":
	case bd.Status.Ready && !wasReady:
		d.progress(bd, v1alpha1.EventRevisionReady, "revision %d ready", bd.Status.AppliedRevision)
		d.mu.Lock()
		delete(d.toldNotReady, bd.Name)
		d.mu.Unlock()
	case !bd.Status.Ready && wasReady:
		d.recorder.Warning(bd, v1alpha1.EventReadinessLost, "revision %d was ready and is not: %s", bd.Status.AppliedRevision, msg)
	case !bd.Status.Ready && bd.Status.ReadyAt == nil && bd.Status.AppliedAt != nil && time.Since(bd.Status.AppliedAt.Time) >= d.opts.NotReadyWarning:
		d.mu.Lock()
		told := d.toldNotReady[bd.Name] == applied
		d.toldNotReady[bd.Name] = applied
		d.mu.Unlock()
		if !told {
			d.recorder.Warning(bd, v1alpha1.EventRevisionNotReady, "revision %d not ready %s after its apply: %s", bd.Status.AppliedRevision, d.opts.NotReadyWarning, msg)
		}
	}
}

// rollBackToNothing removes what a deployment applied when a rollback leaves the cluster no
// earlier revision to run, and reports it gone.
func (d *deployer) rollBackToNothing(ctx context.Context, bd *v1alpha1.BundleDeployment) error {
	if err := d.uninstall(ctx, bd.Name); err != nil {
		return fmt.Errorf("failed to remove %s for its rollback: %w", bd.Name, err)
	}
	log.FromContext(ctx).Info("rolled back: the bundle had no earlier revision here and is removed", "bundle", bd.Spec.Bundle, "revision", bd.Status.AppliedRevision)
	d.recorder.Warning(bd, v1alpha1.EventRolledBack, "revision %d removed: the cluster had no earlier revision to roll back to", bd.Status.AppliedRevision)
	bd.Status.AppliedRevision, bd.Status.AppliedDeploymentID, bd.Status.AppliedAt, bd.Status.ReadyAt = 0, "", nil, nil
	bd.Status.Ready, bd.Status.Modified, bd.Status.NonReadyResources, bd.Status.ModifiedResources = false, false, nil, nil
	setCondition(bd, v1alpha1.AppliedCondition, true, v1alpha1.SucceededReason, "rolled back: nothing of the bundle runs here")
	bd.Status.State = bdstate.State(bd, bd.Spec.Staged.Index)
	bd.Status.ObservedGeneration = bd.Generation
	return nil
}

// objects reads and parses the content deployment name runs.
func (d *deployer) objects(ctx context.Context, name, namespace, contentID string) ([]*unstructured.Unstructured, error) {
	data, err := d.contents.Read(ctx, d.readContent, name, namespace, contentID)
	if err != nil {
		return nil, err
	}
	return parseManifests(data)
}

func (d *deployer) apply(ctx context.Context, bd *v1alpha1.BundleDeployment, objs []*unstructured.Unstructured, opts deployOptions) error {
	previous, err := d.loadInventory(ctx, bd.Name)
	if err != nil {
		return err
	}
	a, err := d.applier(opts.serviceAccount)
	if err != nil {
		return err
	}
	start := time.Now()
	res, err := a.Apply(ctx, objs, previous, opts.Options)
	applyDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		applies.WithLabelValues("failed").Inc()
		return err
	}
	pruned.Add(float64(len(res.Pruned)))
	logger := log.FromContext(ctx).WithValues("bundle", bd.Spec.Bundle, "revision", bd.Spec.Released.Index)
	if len(res.Pruned) > 0 {
		logger.Info("pruned objects that left the bundle", "objects", len(res.Pruned))
	}
	if err := d.saveInventory(ctx, bd.Name, res.Inventory, opts); err != nil {
		applies.WithLabelValues("failed").Inc()
		return err
	}
	if err := res.Err(); err != nil {
		applies.WithLabelValues("failed").Inc()
		logger.Info("apply failed", "error", err.Error())
		return err
	}
	applies.WithLabelValues("succeeded").Inc()
	logger.Info("revision applied", "objects", len(objs))
	d.progress(bd, v1alpha1.EventRevisionApplied, "revision %d applied: %d objects, %d pruned", bd.Spec.Released.Index, len(objs), len(res.Pruned))
	now := metav1.Now()
	bd.Status.AppliedRevision, bd.Status.AppliedDeploymentID, bd.Status.AppliedAt = bd.Spec.Released.Index, bd.Spec.Released.DeploymentID, &now
	bd.Status.Ready, bd.Status.ReadyAt = false, nil // the new revision has not been ready yet
	setCondition(bd, v1alpha1.AppliedCondition, true, v1alpha1.SucceededReason, fmt.Sprintf("revision %d applied", bd.Spec.Released.Index))
	return nil
}

// observe computes readiness and drift of what is deployed; it returns when to look again.
func (d *deployer) observe(ctx context.Context, bd *v1alpha1.BundleDeployment, objs []*unstructured.Unstructured, opts deployOptions) time.Duration {
	if bd.Status.AppliedDeploymentID == "" {
		bd.Status.Ready, bd.Status.Modified = false, false
		return 0
	}
	inv, err := d.loadInventory(ctx, bd.Name)
	if err != nil {
		setCondition(bd, v1alpha1.ReadyCondition, false, v1alpha1.InventoryUnreadableReason, err.Error())
		return d.opts.ResyncInterval
	}
	a, err := d.applier(opts.serviceAccount)
	if err != nil {
		setCondition(bd, v1alpha1.ReadyCondition, false, v1alpha1.HealthCheckFailedReason, err.Error())
		return d.opts.ResyncInterval
	}
	notReady, err := a.Health(ctx, inv, opts.Options)
	if err != nil {
		setCondition(bd, v1alpha1.ReadyCondition, false, v1alpha1.HealthCheckFailedReason, err.Error())
		return d.opts.ResyncInterval
	}
	bd.Status.Ready, bd.Status.NonReadyResources = len(notReady) == 0, summaries(notReady)
	if bd.Status.Ready && bd.Status.ReadyAt == nil {
		// Once, per applied revision: NotReady after it is a regression the hub watches (R5.1).
		now := metav1.Now()
		bd.Status.ReadyAt = &now
	}
	if bd.Status.Ready {
		setCondition(bd, v1alpha1.ReadyCondition, true, v1alpha1.SucceededReason, fmt.Sprintf("%d resources ready", len(inv)))
	} else {
		// The first object by name, and why: the message every event of its readiness tells.
		setCondition(bd, v1alpha1.ReadyCondition, false, v1alpha1.NotReadyReason, fmt.Sprintf("%d of %d resources not ready: %s", len(notReady), len(inv), bd.Status.NonReadyResources[0]))
	}
	if objs != nil && bd.Status.AppliedDeploymentID == bd.Spec.Released.DeploymentID {
		drifted, err := a.Drift(ctx, objs, opts.Options)
		if err != nil {
			// Keep the last known drift; say why it could not be checked now.
			setCondition(bd, v1alpha1.InSyncCondition, false, v1alpha1.DriftCheckFailedReason, err.Error())
			return min(3*time.Second, d.opts.ResyncInterval)
		}
		bd.Status.Modified, bd.Status.ModifiedResources = len(drifted) > 0, summaries(drifted)
		if len(drifted) > 0 {
			setCondition(bd, v1alpha1.InSyncCondition, false, v1alpha1.DriftDetectedReason, fmt.Sprintf("%d resources drifted: %s %s", len(drifted), drifted[0].Object.Kind, drifted[0].Message))
		} else {
			setCondition(bd, v1alpha1.InSyncCondition, true, v1alpha1.SucceededReason, "live objects match the bundle")
		}
	}
	if !bd.Status.Ready || bd.Status.Modified {
		return min(3*time.Second, d.opts.ResyncInterval)
	}
	return d.opts.ResyncInterval
}

// heartbeat renews the agent's Lease on the hub (R1.11) at the interval the hub asks, and
// reports on its Cluster the version it runs and the namespace it watches when they change: an
// idle agent costs the API server one small write per interval, and nothing else wakes for it.
// It ends the agent's run when the Cluster names another namespace (the agent follows it), and
// when the hub removed the cluster.
func (d *deployer) heartbeat(ctx context.Context) error {
	readCluster := false
	for {
		interval, err := d.beat(ctx, readCluster)
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
			readCluster = false
		case <-d.notMember:
			readCluster = true // the Cluster says the cluster moved or leaves: act on it now
		}
	}
}

// legacyHeartbeatInterval is how often an agent writes its heartbeat into its Cluster's status
// where the hub keeps no Lease for it (a hub from before Leases).
const legacyHeartbeatInterval = 30 * time.Second

// beat is one heartbeat; it returns the time until the next. Usually it is the Lease's renewal
// alone; the agent reads its Cluster on its first beat, when the renewal fails (the hub may
// have removed the cluster), where the hub keeps no Lease, when the hub announces a move on the
// Lease, and with readCluster (a deployment's removal found the cluster leaving or moved).
func (d *deployer) beat(ctx context.Context, readCluster bool) (time.Duration, error) {
	asked, hasLease, err := d.renewLease(ctx)
	if err != nil {
		log.FromContext(ctx).Error(err, "failed to renew the agent's lease on the hub")
	}
	if err == nil && hasLease && d.reported && !readCluster && d.lease.Annotations[v1alpha1.MovedToAnnotation] == "" {
		return d.interval(asked), nil
	}
	c, err := d.hub.Clusters(d.opts.ClusterNamespace).Get(ctx, d.opts.ClusterName)
	if gone := d.removed(c, err); gone != nil {
		return 0, gone
	}
	if err != nil {
		return d.interval(asked), nil // the hub is unreachable or slow: try again at the next beat
	}
	if to := c.Status.Namespace; to != "" && to != d.opts.Namespace {
		if err := d.moveTo(ctx, to); err != nil {
			log.FromContext(ctx).Error(err, "cannot follow the cluster to its new namespace yet", "to", to)
			return d.interval(0), nil
		}
		return 0, &movedError{to: to}
	}
	orig := c.DeepCopy()
	c.Status.AgentVersion, c.Status.AgentNamespace = d.opts.Version, d.opts.Namespace
	if !hasLease {
		now := metav1.Now()
		c.Status.AgentLastSeen = &now
		asked = legacyHeartbeatInterval
	}
	if equality.Semantic.DeepEqual(orig.Status, c.Status) {
		d.reported = true
	} else if patch, err := kube.StatusPatch(orig.Status, c.Status, ""); err == nil {
		if _, err := d.hub.Clusters(c.Namespace).Patch(ctx, c.Name, types.MergePatchType, patch, "status"); err == nil {
			d.reported = true
		}
	}
	return d.interval(asked), nil
}

// interval is the time between heartbeats: RunOptions.HeartbeatInterval when set, else what
// the hub asks (0: not known yet).
func (d *deployer) interval(asked time.Duration) time.Duration {
	switch {
	case d.opts.HeartbeatInterval > 0:
		return d.opts.HeartbeatInterval
	case asked > 0:
		return asked
	}
	return legacyHeartbeatInterval
}

// renewLease renews the agent's Lease and returns the renewal interval the hub asks for.
// hasLease is false where the hub keeps none for the agent (not found, or the agent may not
// read it: a hub from before Leases); the heartbeat then goes into the Cluster's status.
func (d *deployer) renewLease(ctx context.Context) (asked time.Duration, hasLease bool, err error) {
	key := types.NamespacedName{Namespace: d.opts.Namespace, Name: v1alpha1.AgentLeaseName}
	leases := d.hub.Leases(key.Namespace)
	for attempt := 0; ; attempt++ {
		if d.lease == nil {
			lease, err := leases.Get(ctx, key.Name)
			if err != nil {
				if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
					return 0, false, nil
				}
				return 0, true, fmt.Errorf("failed to read lease %s: %w", key, err)
			}
			d.lease = lease
		}
		renewed := d.lease.DeepCopy()
		now := metav1.NowMicro()
		renewed.Spec.RenewTime = &now
		renewed, err := leases.Update(ctx, renewed)
		if err == nil {
			d.lease = renewed
			asked, _ := time.ParseDuration(renewed.Annotations[v1alpha1.HeartbeatIntervalAnnotation])
			return asked, true, nil
		}
		d.lease = nil // the hub changed it (its interval), or it went: read it again
		if !apierrors.IsConflict(err) || attempt > 0 {
			return 0, true, fmt.Errorf("failed to renew lease %s: %w", key, err)
		}
	}
}

func (d *deployer) removed(c *v1alpha1.Cluster, err error) error {
	return removal(c, err, d.token.get())
}

// removal says whether a reading of the agent's own Cluster shows that the hub removed the
// cluster: gone, being deleted, or the agent's token refused while it has not expired; or
// that the token expired.
func removal(c *v1alpha1.Cluster, err error, token string) error {
	switch {
	case apierrors.IsUnauthorized(err) && expired(token, time.Now()):
		return ErrCredentialsExpired
	case apierrors.IsUnauthorized(err), apierrors.IsNotFound(err):
		return ErrRemoved
	case err == nil && !c.DeletionTimestamp.IsZero():
		return ErrRemoved
	}
	return nil
}

// stillMember reads the agent's Cluster: true while it exists, is not being deleted and names
// the namespace the agent watches.
func (d *deployer) stillMember(ctx context.Context) (bool, error) {
	c, err := d.hub.Clusters(d.opts.ClusterNamespace).Get(ctx, d.opts.ClusterName)
	if d.removed(c, err) != nil {
		d.leaving()
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("failed to confirm the cluster is still in the fleet: %w", err)
	}
	member := c.Status.Namespace == d.opts.Namespace
	if !member {
		d.leaving()
	}
	return member, nil
}

// leaving wakes the heartbeat to act on the cluster's removal or move.
func (d *deployer) leaving() {
	select {
	case d.notMember <- struct{}{}:
	default:
	}
}

// moveTo takes the agent identity of the namespace its cluster moves to (the hub lets the
// current identity request it) and keeps it.
func (d *deployer) moveTo(ctx context.Context, namespace string) error {
	lifetime := d.opts.TokenLifetime
	if _, current, ok := renewal(d.token.get(), 0); ok && lifetime == 0 {
		lifetime = current
	}
	if lifetime == 0 {
		lifetime = 7 * 24 * time.Hour
	}
	token, err := requestToken(ctx, d.hub, namespace, lifetime)
	if err != nil {
		return err
	}
	return d.keep(ctx, Credentials{Token: token, Namespace: namespace})
}

// renewCredentials renews the agent's hub token for as long as the agent runs.
func (d *deployer) renewCredentials(ctx context.Context) error {
	logger := log.FromContext(ctx)
	for {
		at, lifetime, ok := renewal(d.token.get(), d.opts.RenewBefore)
		if !ok {
			return nil // a token that does not expire (or is no JWT) needs no renewal
		}
		if d.opts.TokenLifetime > 0 {
			lifetime = d.opts.TokenLifetime
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(at)):
		}
		token, err := requestToken(ctx, d.hub, d.opts.Namespace, lifetime)
		if err == nil {
			err = d.keep(ctx, Credentials{Token: token, Namespace: d.opts.Namespace})
		}
		if err != nil {
			logger.Error(err, "failed to renew the hub credentials; retrying")
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(d.interval(legacyHeartbeatInterval)):
			}
			continue
		}
		logger.Info("renewed the hub credentials")
	}
}

// keep stores credentials (OnCredentials) and uses them from then on.
func (d *deployer) keep(ctx context.Context, creds Credentials) error {
	if d.opts.OnCredentials != nil {
		if err := d.opts.OnCredentials(ctx, creds); err != nil {
			return fmt.Errorf("failed to keep the hub credentials: %w", err)
		}
	}
	d.token.set(creds.Token)
	return nil
}

// inventories live in ConfigMaps on the local cluster, one per BundleDeployment.
func (d *deployer) loadInventory(ctx context.Context, name string) (Inventory, error) {
	cm, err := d.local.ConfigMaps(d.opts.StateNamespace).Get(ctx, inventoryName(name))
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read inventory: %w", err)
	}
	var inv Inventory
	sc := bufio.NewScanner(strings.NewReader(cm.Data["inventory"]))
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			o, err := ParseObjMeta(line)
			if err != nil {
				return nil, err
			}
			inv = append(inv, o)
		}
	}
	return inv, nil
}

func (d *deployer) saveInventory(ctx context.Context, name string, inv Inventory, opts deployOptions) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: inventoryName(name), Namespace: d.opts.StateNamespace, Labels: map[string]string{"app.kubernetes.io/managed-by": "flotilla-agent"}},
		Data: map[string]string{"inventory": strings.Join(inv.Strings(), "\n"), "keepResources": fmt.Sprint(opts.KeepResources), "serviceAccount": opts.serviceAccount}}
	if opts.DeleteNamespace && !opts.KeepResources {
		cm.Data["deleteNamespaces"] = strings.Join(inv.Namespaces(d.opts.protected()...), "\n")
	}
	if _, err := d.local.Namespaces().Get(ctx, d.opts.StateNamespace); apierrors.IsNotFound(err) {
		if _, err := d.local.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: d.opts.StateNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("failed to create %s: %w", d.opts.StateNamespace, err)
		}
	}
	_, err := d.local.ConfigMaps(d.opts.StateNamespace).Update(ctx, cm)
	if apierrors.IsNotFound(err) {
		_, err = d.local.ConfigMaps(d.opts.StateNamespace).Create(ctx, cm)
	}
	if err != nil {
		return fmt.Errorf("failed to save inventory: %w", err)
	}
	return nil
}

// remove uninstalls a BundleDeployment the hub deleted and confirms it in its status
// (Uninstalled, written by the skeleton), which lets the hub finish the deletion. A cluster leaving the fleet keeps
// its workloads, as on a deployment gone without a word.
func (d *deployer) remove(ctx context.Context, bd *v1alpha1.BundleDeployment) error {
	if meta.IsStatusConditionTrue(bd.Status.Conditions, v1alpha1.UninstalledCondition) {
		return nil
	}
	if member, err := d.stillMember(ctx); !member || err != nil {
		return err
	}
	if err := d.uninstall(ctx, bd.Name); err != nil {
		return fmt.Errorf("failed to uninstall %s: %w", bd.Name, err)
	}
	d.contents.Release(bd.Name)
	reason, msg := v1alpha1.UninstalledReason, "the workloads are removed"
	if bd.Spec.Options.KeepResources {
		reason, msg = v1alpha1.ResourcesKeptReason, "the workloads are kept (keepResources) and no longer managed"
	}
	meta.SetStatusCondition(&bd.Status.Conditions, metav1.Condition{Type: v1alpha1.UninstalledCondition, Status: metav1.ConditionTrue, Reason: reason, Message: msg, ObservedGeneration: bd.Generation})
	return nil
}

// sweep uninstalls what deployments deleted while the agent was not running deployed: their
// inventories are here, the deployments are not on the hub any more. It runs once at start,
// retrying until the hub answers.
func (d *deployer) sweep(ctx context.Context) error {
	for {
		err := d.sweepOnce(ctx)
		if err == nil {
			return nil
		}
		log.FromContext(ctx).Error(err, "failed to look for deployments removed while the agent was away; retrying")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(d.interval(legacyHeartbeatInterval)):
		}
	}
}

func (d *deployer) sweepOnce(ctx context.Context) error {
	var inventories corev1.ConfigMapList
	err := d.local.ConfigMaps(d.opts.StateNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=flotilla-agent"}, &inventories)
	if err != nil {
		return fmt.Errorf("failed to list inventories: %w", err)
	}
	for _, cm := range inventories.Items {
		name, ok := strings.CutPrefix(cm.Name, inventoryName(""))
		if !ok {
			continue
		}
		_, err := d.hub.BundleDeployments(d.opts.Namespace).Get(ctx, name)
		if !apierrors.IsNotFound(err) {
			if err != nil {
				return err
			}
			continue // the deployment's own reconcile handles it, removed or not
		}
		if member, err := d.stillMember(ctx); !member || err != nil {
			return err
		}
		log.FromContext(ctx).Info("uninstalling a deployment removed from the hub while the agent was away", "deployment", name)
		if err := d.uninstall(ctx, name); err != nil {
			return fmt.Errorf("failed to uninstall %s: %w", name, err)
		}
	}
	return nil
}

// uninstall removes what a deleted BundleDeployment deployed, unless it asked to keep it.
func (d *deployer) uninstall(ctx context.Context, name string) error {
	cm, err := d.local.ConfigMaps(d.opts.StateNamespace).Get(ctx, inventoryName(name))
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	inv, err := d.loadInventory(ctx, name)
	if err != nil {
		return err
	}
	if cm.Data["keepResources"] != "true" {
		a, err := d.applier(cm.Data["serviceAccount"])
		if err != nil {
			return err
		}
		if _, err := a.Apply(ctx, nil, inv, Options{Owner: name, Protected: d.opts.protected()}); err != nil {
			return err
		}
		// deleteNamespace: the namespaces the bundle deployed into go with it, deleted with the
		// rights the bundle applied with, never the agent's own.
		for _, ns := range strings.Fields(cm.Data["deleteNamespaces"]) {
			deleted, err := a.DeleteNamespace(ctx, ns)
			if err != nil {
				return err
			}
			if !deleted {
				log.FromContext(ctx).Info("namespace kept: the deployment's service account may not delete it (deleteNamespace)",
					"deployment", name, "namespace", ns, "serviceAccount", cm.Data["serviceAccount"])
			}
		}
	}
	return ignoreNotFound(d.local.ConfigMaps(d.opts.StateNamespace).Delete(ctx, cm.Name, metav1.DeleteOptions{}))
}

func inventoryName(bd string) string { return "inventory-" + bd }

// deployOptions are a deployment's options for the engine, and the service account it
// applies as.
type deployOptions struct {
	Options
	serviceAccount string
}

// engineOptions are a deployment's options for the engine: those of its spec, its ownership
// mark (the deployment's name) and the namespaces no bundle may delete here.
func (d *deployer) engineOptions(bd *v1alpha1.BundleDeployment) deployOptions {
	o := &bd.Spec.Options
	opts := Options{DefaultNamespace: o.DefaultNamespace, NamespaceLabels: o.NamespaceLabels, NamespaceAnnotations: o.NamespaceAnnotations,
		KeepResources: o.KeepResources, DeleteNamespace: o.DeleteNamespace, IgnoreConditions: o.IgnoreConditions,
		Owner: bd.Name, TakeOwnership: o.TakeOwnership, Force: o.Force, Timeout: time.Duration(o.TimeoutSeconds) * time.Second, WaitForJobs: o.WaitForJobs,
		Protected: d.opts.protected(), TargetNamespace: o.TargetNamespace, Restrictions: o.Restrictions}
	for _, h := range o.HealthChecks {
		opts.HealthChecks = append(opts.HealthChecks, healthcheck.Rule(h))
	}
	for _, p := range o.ComparePatches {
		opts.ComparePatches = append(opts.ComparePatches, ComparePatch{APIVersion: p.APIVersion, Kind: p.Kind, Namespace: p.Namespace, Name: p.Name, JSONPointers: p.JSONPointers})
	}
	return deployOptions{Options: opts, serviceAccount: o.ServiceAccount}
}

func parseManifests(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("invalid manifests: %w", err)
		}
		if len(obj) == 0 {
			continue
		}
		u := &unstructured.Unstructured{}
		js, _ := (&unstructured.Unstructured{Object: obj}).MarshalJSON()
		if err := u.UnmarshalJSON(js); err != nil {
			return nil, fmt.Errorf("invalid manifest: %w", err)
		}
		out = append(out, u)
	}
}

// maxResourceMessage bounds what a status says of one object: ten of them stay small in every
// deployment's status, whatever an object's own message or a health check's expression.
const maxResourceMessage = 300

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n-3], "") + "…"
}

func summaries(rs []ResourceStatus) []v1alpha1.ResourceSummary {
	var out []v1alpha1.ResourceSummary
	for i, r := range rs {
		if i == 10 {
			break
		}
		out = append(out, v1alpha1.ResourceSummary{Kind: r.Object.Kind, Namespace: r.Object.Namespace, Name: r.Object.Name, Message: truncate(r.Message, maxResourceMessage)})
	}
	return out
}

func setCondition(bd *v1alpha1.BundleDeployment, typ string, ok bool, reason, msg string) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&bd.Status.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: bd.Generation})
}
