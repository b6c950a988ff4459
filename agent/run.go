package agent

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/bdstate"
	"github.com/flotilla-dev/flotilla/hub/contentstore"
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
	// HeartbeatInterval between heartbeats; default 30s.
	HeartbeatInterval time.Duration
	// ResyncInterval re-checks readiness and drift of deployed bundles; default 30s, 3s while
	// something is not ready.
	ResyncInterval time.Duration
	// Version is reported on the Cluster.
	Version string
	// ProtectedNamespaces are never deleted by a bundle, beside the cluster's own (default,
	// kube-*) and StateNamespace.
	ProtectedNamespaces []string
}

// protected is every namespace no bundle may delete on this cluster, beyond the cluster's own.
func (o *RunOptions) protected() []string {
	return append([]string{o.StateNamespace}, o.ProtectedNamespaces...)
}

// Run runs the agent until ctx ends.
func Run(ctx context.Context, opts RunOptions) error {
	if opts.StateNamespace == "" {
		opts.StateNamespace = "flotilla-system"
	}
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = 30 * time.Second
	}
	if opts.ResyncInterval <= 0 {
		opts.ResyncInterval = 30 * time.Second
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(opts.HubConfig, ctrl.Options{
		Scheme:     scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Cache:      cache.Options{DefaultNamespaces: map[string]cache.Config{opts.Namespace: {}}},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return fmt.Errorf("failed to create manager: %w", err)
	}
	applier, err := NewApplier(opts.LocalConfig)
	if err != nil {
		return err
	}
	local, err := kubernetes.NewForConfig(opts.LocalConfig)
	if err != nil {
		return err
	}
	r := &deployer{hub: mgr.GetClient(), hubReader: mgr.GetAPIReader(), applier: applier, local: local, opts: opts}
	if err := ctrl.NewControllerManagedBy(mgr).Named("bundledeployment").For(&v1alpha1.BundleDeployment{}).Complete(r); err != nil {
		return err
	}
	if err := mgr.Add(manager.RunnableFunc(r.heartbeat)); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// deployer applies one BundleDeployment and reports its state.
type deployer struct {
	hub       client.Client
	hubReader client.Reader
	applier   *Applier
	local     kubernetes.Interface
	opts      RunOptions
}

func (d *deployer) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var bd v1alpha1.BundleDeployment
	if err := d.hub.Get(ctx, req.NamespacedName, &bd); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, d.uninstall(ctx, req.Name)
		}
		return ctrl.Result{}, err
	}
	orig := bd.DeepCopy()
	opts := d.engineOptions(&bd)
	var objs []*unstructured.Unstructured
	var applyErr error
	rel := bd.Spec.Released
	waiting := false
	if rel != nil && !bd.Spec.Paused {
		objs, applyErr = d.objects(ctx, bd.Spec.BundleNamespace, rel.ContentID)
		switch {
		case apierrors.IsForbidden(applyErr) || apierrors.IsNotFound(applyErr):
			// The hub grants access to new content right after releasing it: wait, this is
			// not a failed apply.
			waiting, applyErr = true, nil
		case applyErr == nil && (rel.DeploymentID != bd.Status.AppliedDeploymentID || bd.Spec.Options.CorrectDrift && bd.Status.Modified):
			applyErr = d.apply(ctx, &bd, objs, opts)
		}
		if applyErr != nil {
			setCondition(&bd, v1alpha1.AppliedCondition, false, "ApplyFailed", applyErr.Error())
		}
	}
	requeue := d.observe(ctx, &bd, objs, opts)
	if waiting {
		requeue = time.Second
	}
	if applyErr != nil {
		// Retry on our own schedule: the cause (content not readable yet, a webhook down on the
		// cluster) usually passes, and nothing else would wake us.
		requeue = min(5*time.Second, d.opts.ResyncInterval)
	}
	bd.Status.State = bdstate.State(&bd, bd.Spec.Staged.Index) // the newest revision the agent knows of
	bd.Status.ObservedGeneration = bd.Generation
	if !equality.Semantic.DeepEqual(orig.Status, bd.Status) {
		if err := d.hub.Status().Patch(ctx, &bd, client.MergeFrom(orig)); err != nil {
			return ctrl.Result{}, fmt.Errorf("failed to report status: %w", client.IgnoreNotFound(err))
		}
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// objects reads and parses the released content.
func (d *deployer) objects(ctx context.Context, namespace, contentID string) ([]*unstructured.Unstructured, error) {
	data, err := contentstore.Read(ctx, d.hubReader, namespace, contentID)
	if err != nil {
		return nil, err
	}
	return parseManifests(data)
}

func (d *deployer) apply(ctx context.Context, bd *v1alpha1.BundleDeployment, objs []*unstructured.Unstructured, opts Options) error {
	previous, err := d.loadInventory(ctx, bd.Name)
	if err != nil {
		return err
	}
	res, err := d.applier.Apply(ctx, objs, previous, opts)
	if err != nil {
		return err
	}
	if err := d.saveInventory(ctx, bd.Name, res.Inventory, opts); err != nil {
		return err
	}
	if err := res.Err(); err != nil {
		return err
	}
	now := metav1.Now()
	bd.Status.AppliedRevision, bd.Status.AppliedDeploymentID, bd.Status.AppliedAt = bd.Spec.Released.Index, bd.Spec.Released.DeploymentID, &now
	setCondition(bd, v1alpha1.AppliedCondition, true, v1alpha1.SucceededReason, fmt.Sprintf("revision %d applied", bd.Spec.Released.Index))
	return nil
}

// observe computes readiness and drift of what is deployed; it returns when to look again.
func (d *deployer) observe(ctx context.Context, bd *v1alpha1.BundleDeployment, objs []*unstructured.Unstructured, opts Options) time.Duration {
	if bd.Status.AppliedDeploymentID == "" {
		bd.Status.Ready, bd.Status.Modified = false, false
		return 0
	}
	inv, err := d.loadInventory(ctx, bd.Name)
	if err != nil {
		setCondition(bd, v1alpha1.ReadyCondition, false, "InventoryUnreadable", err.Error())
		return d.opts.ResyncInterval
	}
	notReady, err := d.applier.Health(ctx, inv, opts)
	if err != nil {
		setCondition(bd, v1alpha1.ReadyCondition, false, "HealthCheckFailed", err.Error())
		return d.opts.ResyncInterval
	}
	bd.Status.Ready, bd.Status.NonReadyResources = len(notReady) == 0, summaries(notReady)
	if bd.Status.Ready {
		setCondition(bd, v1alpha1.ReadyCondition, true, v1alpha1.SucceededReason, fmt.Sprintf("%d resources ready", len(inv)))
	} else {
		setCondition(bd, v1alpha1.ReadyCondition, false, "NotReady", fmt.Sprintf("%d of %d resources not ready: %s", len(notReady), len(inv), notReady[0].Message))
	}
	if objs != nil && bd.Status.AppliedDeploymentID == bd.Spec.Released.DeploymentID {
		drifted, err := d.applier.Drift(ctx, objs, opts)
		if err != nil {
			// Keep the last known drift; say why it could not be checked now.
			setCondition(bd, v1alpha1.InSyncCondition, false, "DriftCheckFailed", err.Error())
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

// heartbeat reports the agent alive on its Cluster (R1.11).
func (d *deployer) heartbeat(ctx context.Context) error {
	beat := func() {
		var c v1alpha1.Cluster
		if err := d.hubReader.Get(ctx, types.NamespacedName{Namespace: d.opts.ClusterNamespace, Name: d.opts.ClusterName}, &c); err != nil {
			return
		}
		orig := c.DeepCopy()
		now := metav1.Now()
		c.Status.AgentLastSeen, c.Status.AgentVersion = &now, d.opts.Version
		_ = d.hub.Status().Patch(ctx, &c, client.MergeFrom(orig))
	}
	beat()
	t := time.NewTicker(d.opts.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			beat()
		}
	}
}

// inventories live in ConfigMaps on the local cluster, one per BundleDeployment.
func (d *deployer) loadInventory(ctx context.Context, name string) (Inventory, error) {
	cm, err := d.local.CoreV1().ConfigMaps(d.opts.StateNamespace).Get(ctx, inventoryName(name), metav1.GetOptions{})
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

func (d *deployer) saveInventory(ctx context.Context, name string, inv Inventory, opts Options) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: inventoryName(name), Namespace: d.opts.StateNamespace, Labels: map[string]string{"app.kubernetes.io/managed-by": "flotilla-agent"}},
		Data: map[string]string{"inventory": strings.Join(inv.Strings(), "\n"), "keepResources": fmt.Sprint(opts.KeepResources)}}
	if opts.DeleteNamespace && !opts.KeepResources {
		cm.Data["deleteNamespaces"] = strings.Join(inv.Namespaces(d.opts.protected()...), "\n")
	}
	if _, err := d.local.CoreV1().Namespaces().Get(ctx, d.opts.StateNamespace, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		if _, err := d.local.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: d.opts.StateNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("failed to create %s: %w", d.opts.StateNamespace, err)
		}
	}
	_, err := d.local.CoreV1().ConfigMaps(d.opts.StateNamespace).Update(ctx, cm, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		_, err = d.local.CoreV1().ConfigMaps(d.opts.StateNamespace).Create(ctx, cm, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("failed to save inventory: %w", err)
	}
	return nil
}

// uninstall removes what a deleted BundleDeployment deployed, unless it asked to keep it.
func (d *deployer) uninstall(ctx context.Context, name string) error {
	cm, err := d.local.CoreV1().ConfigMaps(d.opts.StateNamespace).Get(ctx, inventoryName(name), metav1.GetOptions{})
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
		if _, err := d.applier.Apply(ctx, nil, inv, Options{Owner: name, Protected: d.opts.protected()}); err != nil {
			return err
		}
		// deleteNamespace: the namespaces the bundle deployed into go with it.
		for _, ns := range strings.Fields(cm.Data["deleteNamespaces"]) {
			if err := d.local.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("failed to delete namespace %s: %w", ns, err)
			}
		}
	}
	return client.IgnoreNotFound(d.local.CoreV1().ConfigMaps(d.opts.StateNamespace).Delete(ctx, cm.Name, metav1.DeleteOptions{}))
}

func inventoryName(bd string) string { return "inventory-" + bd }

// engineOptions are a deployment's options for the engine: those of its spec, its ownership
// mark (the deployment's name) and the namespaces no bundle may delete here.
func (d *deployer) engineOptions(bd *v1alpha1.BundleDeployment) Options {
	o := &bd.Spec.Options
	opts := Options{DefaultNamespace: o.DefaultNamespace, NamespaceLabels: o.NamespaceLabels, NamespaceAnnotations: o.NamespaceAnnotations,
		KeepResources: o.KeepResources, DeleteNamespace: o.DeleteNamespace, IgnoreConditions: o.IgnoreConditions,
		Owner: bd.Name, TakeOwnership: o.TakeOwnership, Protected: d.opts.protected()}
	for _, p := range o.ComparePatches {
		opts.ComparePatches = append(opts.ComparePatches, ComparePatch{Kind: p.Kind, Namespace: p.Namespace, Name: p.Name, JSONPointers: p.JSONPointers})
	}
	return opts
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

func summaries(rs []ResourceStatus) []v1alpha1.ResourceSummary {
	var out []v1alpha1.ResourceSummary
	for i, r := range rs {
		if i == 10 {
			break
		}
		out = append(out, v1alpha1.ResourceSummary{Kind: r.Object.Kind, Namespace: r.Object.Namespace, Name: r.Object.Name, Message: r.Message})
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
