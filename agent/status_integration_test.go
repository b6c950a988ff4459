package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/agent/kube"
	"github.com/flotilla-dev/flotilla/e2e/wait"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/bdstate"
	"github.com/flotilla-dev/flotilla/hub/content"
	"github.com/flotilla-dev/flotilla/hub/contentstore"
)

// A release read from a cache that does not show the agent's own last status write yet (the
// one that said the revision before was Ready) must not leave that write's readyAt beside the
// new revision: the hub would take the new revision for Ready once and NotReady now, a
// regression (R5.1), and roll back a good revision. The agent's write is conditional on what
// it read, so the stale pass writes nothing and the next one, from a fresh read, reports the
// new revision as not ready yet.
func TestR5_1_AStaleReadNeverCarriesTheOldRevisionsReadiness(t *testing.T) {
	ctx := context.Background()
	const bundleNS, clusterNS, workloadNS = "fleet-stale", "cluster-stale", "stale-read"
	hubClient, local := deployerNamespaces(t, bundleNS, clusterNS, workloadNS)
	bd, r1, r2 := webWithTwoRevisions(t, hubClient, bundleNS, clusterNS, workloadNS, 2)
	key := client.ObjectKeyFromObject(bd)
	// The copy the stale pass reads: as created, before any status of the agent.
	created := bd.DeepCopy()
	d := newTestDeployer(t, local, clusterNS, "flotilla-stale-read")
	read := func() *v1alpha1.BundleDeployment {
		var now v1alpha1.BundleDeployment
		if err := hubClient.Get(ctx, key, &now); err != nil {
			t.Fatal(err)
		}
		return &now
	}
	// Revision 1 applied and Ready.
	wait.Until(t, "revision 1 is Ready", time.Minute, func() bool {
		if _, err := d.passOn(ctx, read()); err != nil {
			t.Logf("pass: %v", err)
		}
		now := read()
		return now.Status.AppliedDeploymentID == r1.DeploymentID && now.Status.Ready && now.Status.ReadyAt != nil
	}, func() string { return fmt.Sprintf("status: %+v", read().Status) })
	readyAt := read().Status.ReadyAt

	// The hub releases revision 2; the agent's cache shows the release with the status of
	// before its own writes.
	released := read()
	released.Spec.Staged, released.Spec.Released = r2, &r2
	if err := hubClient.Update(ctx, released); err != nil {
		t.Fatal(err)
	}
	staleCopy := created.DeepCopy()
	staleCopy.Spec = released.Spec
	// Its write loses the race (a conflict): the pass is done again, and no error is logged.
	if _, err := d.passOn(ctx, staleCopy); !errors.Is(err, errLateCopy) || !apierrors.IsConflict(err) {
		t.Errorf("the pass from a stale read: %v, want it done again after its conflict", err)
	}
	if now := read(); now.Status.AppliedDeploymentID == r2.DeploymentID && now.Status.ReadyAt.Equal(readyAt) {
		t.Fatalf("revision 2 is reported with revision 1's readyAt %s: %+v", readyAt, now.Status)
	}

	// From fresh reads: revision 2 applied, never a regression, Ready in the end.
	wait.Until(t, "revision 2 is Ready", time.Minute, func() bool {
		if _, err := d.passOn(ctx, read()); err != nil {
			t.Logf("pass: %v", err)
		}
		now := read()
		if d := bdstate.Deployment(now); d.Applied == 2 && d.WasReady && !d.Ready {
			t.Fatalf("the hub sees revision 2 regressed before it was ever Ready: %+v", now.Status)
		}
		return now.Status.AppliedDeploymentID == r2.DeploymentID && now.Status.Ready
	}, func() string { return fmt.Sprintf("status: %+v", read().Status) })
	if now := read(); now.Status.ReadyAt == nil {
		t.Errorf("revision 2 is Ready without a readyAt: %+v", now.Status)
	}
	if d, err := local.AppsV1().Deployments(workloadNS).Get(ctx, "web", metav1.GetOptions{}); err != nil || d.Spec.Template.Spec.Containers[0].Image != "example.invalid/app:2" {
		t.Errorf("the workload does not run revision 2: %v", err)
	}
}

// newTestDeployer is a deployer of the deployments of clusterNS on the hub, keeping its state
// in stateNS on the workload cluster.
func newTestDeployer(t *testing.T, local kubernetes.Interface, clusterNS, stateNS string) *deployer {
	t.Helper()
	hub, err := kube.NewHub(hubAPI.Config())
	if err != nil {
		t.Fatal(err)
	}
	localClients, err := kube.NewLocal(workload.Config())
	if err != nil {
		t.Fatal(err)
	}
	return &deployer{hub: hub, readContent: hub.Content(), local: localClients, appliers: map[string]*Applier{}, toldNotReady: map[string]string{},
		opts: RunOptions{LocalConfig: workload.Config(), Namespace: clusterNS, StateNamespace: stateNS, ResyncInterval: time.Second}}
}

// passOn runs the agent's pass over a deployment as its loop does, with the copy its informer's
// cache shows.
func (d *deployer) passOn(ctx context.Context, cached *v1alpha1.BundleDeployment) (time.Duration, error) {
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	if err := store.Add(cached); err != nil {
		return 0, err
	}
	loop := &deploymentLoop{deployments: d.hub.BundleDeployments(cached.Namespace), store: store, d: d}
	return loop.pass(ctx, client.ObjectKeyFromObject(cached))
}

// deployerNamespaces makes the namespaces of a deployer test: the bundle's and the cluster's on
// the hub, the workload's downstream. It returns a client of the hub and one of the workload
// cluster.
func deployerNamespaces(t *testing.T, bundleNS, clusterNS, workloadNS string) (client.Client, kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	scheme, err := kube.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	hubClient, err := client.New(hubAPI.Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	// The hub client has the agent's scheme (what the deployer writes); the namespaces are
	// the hub operator's.
	hubAdmin := kubernetes.NewForConfigOrDie(hubAPI.Config())
	for _, ns := range []string{bundleNS, clusterNS} {
		if _, err := hubAdmin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	local := kubernetes.NewForConfigOrDie(workload.Config())
	if _, err := local.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: workloadNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return hubClient, local
}

// agentPlay plays one deployment through the agent's own controller, as its cluster's agent
// would, against the hub's API server and the workload cluster.
type agentPlay struct {
	t   *testing.T
	hub client.Client
	key client.ObjectKey
	d   *deployer
}

// newAgentPlay creates bd on the hub and an agent for its cluster namespace, keeping its
// state in stateNS downstream.
func newAgentPlay(t *testing.T, hubClient client.Client, local kubernetes.Interface, stateNS string, bd *v1alpha1.BundleDeployment) *agentPlay {
	t.Helper()
	if err := hubClient.Create(context.Background(), bd); err != nil {
		t.Fatal(err)
	}
	return &agentPlay{t: t, hub: hubClient, key: client.ObjectKeyFromObject(bd), d: newTestDeployer(t, local, bd.Namespace, stateNS)}
}

// read is the deployment as the hub has it.
func (p *agentPlay) read() *v1alpha1.BundleDeployment {
	p.t.Helper()
	var now v1alpha1.BundleDeployment
	if err := p.hub.Get(context.Background(), p.key, &now); err != nil {
		p.t.Fatal(err)
	}
	return &now
}

// until reconciles as the agent's controller would until the deployment's status holds.
func (p *agentPlay) until(what string, holds func(*v1alpha1.BundleDeployment) bool) *v1alpha1.BundleDeployment {
	p.t.Helper()
	var last *v1alpha1.BundleDeployment
	wait.Until(p.t, what, time.Minute, func() bool {
		if _, err := p.d.passOn(context.Background(), p.read()); err != nil {
			p.t.Logf("pass: %v", err)
		}
		last = p.read()
		return holds(last)
	}, func() string { return fmt.Sprintf("status: %+v", last.Status) })
	return last
}

// countingReads counts the Content objects read through it.
type countingReads struct {
	get      content.Getter
	contents int
}

func (c *countingReads) read(ctx context.Context, key types.NamespacedName, into *v1alpha1.Content) error {
	c.contents++
	return c.get(ctx, key, into)
}

// An agent resyncs every deployment every half minute (readiness, drift): with 50 bundles, a
// read of each one's content at each resync was 100 requests a minute to the hub from an idle
// agent. A content id names one render, so the agent reads it once: the passes after the
// apply ask the hub for no content, and a new revision's content is read once more.
func TestResyncsReadNoContentFromTheHub(t *testing.T) {
	ctx := context.Background()
	const bundleNS, clusterNS, workloadNS = "fleet-resync", "cluster-resync", "resync-reads"
	hubClient, local := deployerNamespaces(t, bundleNS, clusterNS, workloadNS)
	bd, r1, r2 := webWithTwoRevisions(t, hubClient, bundleNS, clusterNS, workloadNS, 1)
	d := newTestDeployer(t, local, clusterNS, "flotilla-resync-reads")
	reads := &countingReads{get: d.readContent}
	d.readContent = reads.read
	read := func() *v1alpha1.BundleDeployment {
		var now v1alpha1.BundleDeployment
		if err := hubClient.Get(ctx, client.ObjectKeyFromObject(bd), &now); err != nil {
			t.Fatal(err)
		}
		return &now
	}
	readyOn := func(r v1alpha1.RevisionRef) func() bool {
		return func() bool {
			if _, err := d.passOn(ctx, read()); err != nil {
				t.Logf("pass: %v", err)
			}
			now := read()
			return now.Status.AppliedDeploymentID == r.DeploymentID && now.Status.Ready
		}
	}
	wait.Until(t, "revision 1 is Ready", time.Minute, readyOn(r1), func() string { return fmt.Sprintf("status: %+v", read().Status) })
	if reads.contents != 1 {
		t.Errorf("applying revision 1 read %d Content objects, want 1", reads.contents)
	}
	for range 5 { // resyncs: readiness and drift checked again, nothing changed
		if _, err := d.passOn(ctx, read()); err != nil {
			t.Fatal(err)
		}
	}
	if reads.contents != 1 {
		t.Errorf("five resyncs after the apply read %d Content objects in all, want the apply's 1", reads.contents)
	}
	released := read()
	released.Spec.Staged, released.Spec.Released = r2, &r2
	if err := hubClient.Update(ctx, released); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "revision 2 is Ready", time.Minute, readyOn(r2), func() string { return fmt.Sprintf("status: %+v", read().Status) })
	if reads.contents != 2 {
		t.Errorf("revision 2 read %d Content objects in all, want 2: one per content", reads.contents)
	}
}

// webWithTwoRevisions stores two revisions of a Deployment web of the given replicas (images
// app:1 and app:2) as content on the hub and creates its BundleDeployment with the first
// released.
func webWithTwoRevisions(t *testing.T, hubClient client.Client, bundleNS, clusterNS, workloadNS string, replicas int) (*v1alpha1.BundleDeployment, v1alpha1.RevisionRef, v1alpha1.RevisionRef) {
	t.Helper()
	ctx := context.Background()
	store := contentstore.Store{Client: hubClient}
	revision := func(index int64, image string) v1alpha1.RevisionRef {
		id := fmt.Sprintf("content-%d", index)
		manifest := strings.Replace(deploymentYAML(workloadNS, "web", replicas, false), "example.invalid/app:1", image, 1)
		if _, err := store.Put(ctx, bundleNS, id, []byte(manifest)); err != nil {
			t.Fatal(err)
		}
		return v1alpha1.RevisionRef{Index: index, ContentID: id, DeploymentID: fmt.Sprintf("deployment-%d", index)}
	}
	r1, r2 := revision(1, "example.invalid/app:1"), revision(2, "example.invalid/app:2")
	bd := &v1alpha1.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Name: bundleNS + "-web", Namespace: clusterNS},
		Spec: v1alpha1.BundleDeploymentSpec{Bundle: "web", BundleNamespace: bundleNS, Staged: r1, Released: &r1}}
	if err := hubClient.Create(ctx, bd); err != nil {
		t.Fatal(err)
	}
	return bd, r1, r2
}
