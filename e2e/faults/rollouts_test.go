package faults

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/e2e/wait"
	"github.com/flotilla-dev/flotilla/hub/access"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// The fleet of each rollout: 60 clusters in three rings of 20 (ring r0, r1, r2, by the order
// of their names), each ring a partition, a stage or a sequence group.
const (
	fleetClusters = 60
	ringSize      = 20
	// agentDelay is the longest a simulated agent takes to apply a release and report it
	// ready: rollouts take long enough for the faults to land in them.
	agentDelay = 1500 * time.Millisecond
	// rolloutTimeout bounds one revision's rollout with its faults.
	rolloutTimeout = 4 * time.Minute
	webhookSecret  = "fault-suite-hook"
)

func clusterName(i int) string { return fmt.Sprintf("c%02d", i) }
func ringOf(i int) int         { return i / ringSize }

// rollout is one fleet namespace with its clusters and their agents, a git repository the hub
// follows through a server whose faults the test sets, the hub and the checker.
type rollout struct {
	t        *testing.T
	c        client.WithWatch
	ns       string
	clusters []string
	rand     *faultRand
	up       *gitserver.Upstream
	srv      *httptest.Server
	faults   *gitserver.Faults
	hub      *supervisedHub
	agents   *simAgents
	check    *rolloutCheck
	// rev is the revision the last push made; revs every revision rolled out.
	rev  int64
	revs []int64
	// endings is how many of the hub's endings were reported.
	endings int
}

// startRollout creates the fleet and its strategy objects, starts the hub and the agents, and
// rolls out the first revision of fleetYAML (R1.12: the first deployment is a rollout too).
func startRollout(t *testing.T, fleetYAML string, rules rolloutRules, strategy ...client.Object) *rollout {
	ctx := context.Background()
	r := &rollout{t: t, c: adminClient(t), rand: newFaultRand(t), up: gitserver.New(t)}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "faults-"}}
	if err := r.c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	r.ns = ns.Name
	rules.stepOf = map[string]int{}
	for i := range fleetClusters {
		name := clusterName(i)
		r.clusters = append(r.clusters, name)
		rules.stepOf[name] = ringOf(i)
		cl := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.ns, Labels: map[string]string{"ring": fmt.Sprintf("r%d", ringOf(i))}}}
		if err := r.c.Create(ctx, cl); err != nil {
			t.Fatal(err)
		}
		if err := access.AdmitCluster(ctx, r.c, cl); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range strategy {
		o.SetNamespace(r.ns)
		if err := r.c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	r.up.Commit("main", map[string]string{"app/fleet.yaml": fleetYAML, "app/cm.yaml": configMap(1)})
	r.srv, r.faults = r.up.ServeSwitchable()
	r.hub = startHub(t)
	r.agents = startAgents(t, r.c, r.ns, r.clusters, r.rand, agentDelay)
	r.check = watchRollout(t, r.c, r.ns, rules)
	hook := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: r.ns}, Data: map[string][]byte{"token": []byte(webhookSecret)}}
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: r.ns}, Spec: v1alpha1.GitRepoSpec{
		Repo: r.repoURL(), PollingInterval: &metav1.Duration{Duration: 2 * time.Second}, WebhookSecretRef: &v1alpha1.LocalObjectReference{Name: hook.Name},
		Targets: []v1alpha1.Target{{ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}}}}
	for _, o := range []client.Object{hook, repo} {
		if err := r.c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	r.rev = 1
	return r
}

func (r *rollout) repoURL() string { return r.srv.URL + "/repo.git" }

func configMap(v int) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\ndata: {v: \"%d\"}\n", v)
}

// push commits the next revision's content; force rewrites the branch's last commit instead
// of adding to it (the hub must follow a history that moved under it).
func (r *rollout) push(force bool) {
	r.rev++
	if force {
		r.up.Git(r.up.Work, "reset", "-q", "--hard", "HEAD~1")
	}
	r.up.Commit("main", map[string]string{"app/cm.yaml": configMap(int(r.rev))})
}

// finish waits until every cluster runs the revision last pushed, ready, and logs how long
// its rollout took from the first release.
func (r *rollout) finish(since time.Time) {
	r.t.Helper()
	wait.Until(r.t, fmt.Sprintf("every cluster ready on revision %d", r.rev), rolloutTimeout, func() bool { return r.check.allReady(r.rev) },
		func() string { return r.check.describe(r.rev) })
	r.revs = append(r.revs, r.rev)
	first := r.check.firstReleaseOf(r.rev)
	r.t.Logf("revision %d: first release %.1fs after its push, every cluster ready %.1fs after it; %d hub processes so far",
		r.rev, first.Sub(since).Seconds(), time.Since(first).Seconds(), r.hub.processes())
	// The hub ends only when the test kills it: it rides out a stalled or restarted API server
	// in its process (a kubelet restarting it would back off between restarts).
	if ended := r.hub.endings(); len(ended) > r.endings {
		r.t.Errorf("the hub's process ended %d times without being killed, first: %s", len(ended)-r.endings, ended[r.endings])
		r.endings = len(ended)
	}
}

// nextRelease waits for the rollout's next release after t, or its end, and says when it came.
func (r *rollout) nextRelease(t time.Time) string {
	r.t.Helper()
	wait.Until(r.t, "a release, or the rollout's end", rolloutTimeout, func() bool {
		_, released := r.check.releasedSince(t)
		return released || r.check.allReady(r.rev)
	}, func() string { return r.check.describe(r.rev) })
	if at, released := r.check.releasedSince(t); released {
		return fmt.Sprintf("; the rollout released again %.1fs after", at.Sub(t).Seconds())
	}
	return "; the rollout had ended"
}

// killHub SIGKILLs the hub at kills random moments within the next spread, in the
// background; the returned function waits for the last kill.
func (r *rollout) killHub(kills int, spread time.Duration) (wait func()) {
	var done sync.WaitGroup
	done.Add(1)
	go func() {
		defer done.Done()
		for range kills {
			pause(context.Background(), time.Duration(r.rand.intN(int(spread/time.Millisecond)/kills+1))*time.Millisecond)
			r.hub.kill()
		}
	}()
	return done.Wait
}

// floodWebhooks delivers signed push webhooks of the repository, and as many forged ones, from
// four senders as fast as the hub answers, until stop; it returns the answers by status.
func (r *rollout) floodWebhooks() (stop func() map[int]int64) {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	answers := map[int]int64{}
	var sent atomic.Int64
	var senders sync.WaitGroup
	for sender := range 4 {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for ctx.Err() == nil {
				secret := webhookSecret
				if sent.Add(1)%2 == 0 {
					secret = "forged" // an attacker without the secret
				}
				status, err := gitserver.AnnouncePush("http://"+r.hub.webhook, secret, "main", r.repoURL(), fmt.Sprintf("%040d", sender))
				if err != nil {
					status = 0 // the hub was down (killed, restarting)
					pause(ctx, 50*time.Millisecond)
				}
				mu.Lock()
				answers[status]++
				mu.Unlock()
			}
		}()
	}
	return func() map[int]int64 {
		cancel()
		senders.Wait()
		return answers
	}
}

// partitionRules are the rules of partitionedYAML over the fleet: ten percent of 60 may be
// unavailable (6, R1.9), of each partition's 20 two (R1.5), released five at a time (R1.8).
var partitionRules = rolloutRules{stepBudget: []int{2 + 5, 2 + 5, 2 + 5}, fleetBudget: 6 + 5, gate: []int{2, 2, 2}}

const partitionedYAML = `defaultNamespace: faults
rolloutStrategy:
  maxUnavailable: 10%
  maxNew: 5
  partitions:
  - {name: r0, clusterSelector: {matchLabels: {ring: r0}}}
  - {name: r1, clusterSelector: {matchLabels: {ring: r1}}}
  - {name: r2, clusterSelector: {matchLabels: {ring: r2}}}
`

// A partitioned rollout of 60 clusters keeps its budgets and its partition gate, and releases
// each cluster each revision once, while the hub is SIGKILLed at random moments (R1.7–R1.9),
// while etcd stalls past the hub's renew deadline and the API server restarts, while agents of
// the last partition are cut off past their deadline (R1.11), while the git server fails,
// hangs and hangs mid-fetch, across a force-push, and under a flood of webhooks, true and
// forged.
func TestR1_7_R1_9_R1_11_APartitionedRolloutKeepsItsRulesUnderFaults(t *testing.T) {
	r := startRollout(t, partitionedYAML, partitionRules)
	start := time.Now()
	r.killHub(2, 6*time.Second)()
	r.finish(start)

	for round := range rounds(t) {
		// The hub killed at random moments of an update.
		r.push(false)
		start = time.Now()
		r.killHub(3, 8*time.Second)()
		r.finish(start)

		// etcd stalls past the renew deadline mid-rollout; then the API server restarts.
		r.push(false)
		start = time.Now()
		pause(context.Background(), time.Duration(r.rand.intN(3000))*time.Millisecond)
		steppedBack := r.hub.logged("stepping back into the election")
		if err := environment.PauseEtcd(); err != nil {
			t.Fatal(err)
		}
		// The stall: twice the Lease's duration in the first round, 30 s in the others.
		stall := 8 * time.Second
		if round > 0 {
			stall = 30 * time.Second
		}
		pause(context.Background(), stall)
		if err := environment.ResumeEtcd(); err != nil {
			t.Fatal(err)
		}
		resumed := time.Now()
		wait.Until(t, "the hub leading again after the stall", time.Minute, r.hub.leads)
		t.Logf("round %d: etcd stalled %s; the hub stepped back into the election %d times, led again %.1fs after etcd answered%s",
			round, stall, r.hub.logged("stepping back into the election")-steppedBack, time.Since(resumed).Seconds(), r.nextRelease(resumed))
		if err := apiServer.RestartAPIServer(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: the API server restarted%s", round, r.nextRelease(time.Now()))
		r.finish(start)

		// Agents of the last partition cut off past their deadline while the update runs.
		r.push(false)
		start = time.Now()
		cut := r.clusters[fleetClusters-3:]
		for _, name := range cut {
			r.agents.cutOff(name)
		}
		pause(context.Background(), 10*time.Second) // past the 6 s heartbeat deadline
		for _, name := range cut {
			r.agents.restore(name)
		}
		r.finish(start)

		// The git server fails, hangs and hangs mid-fetch under a webhook flood; then a
		// force-push rewrites the commit the hub just rolled out.
		stopFlood := r.floodWebhooks()
		for _, fault := range []gitserver.Fault{{Status: http.StatusInternalServerError, EveryRequest: true}, {Hang: true, EveryRequest: true}, {Hang: true, After: 512}} {
			r.faults.Set(fault)
			if fault.Status != 0 {
				r.push(false) // pushed while the server fails: the hub learns of it once it answers
				start = time.Now()
			}
			pause(context.Background(), 4*time.Second) // the fault's length: two stall timeouts
		}
		healed := time.Now()
		r.faults.Set(gitserver.Fault{})
		r.finish(start)
		t.Logf("round %d: the revision pushed while the git server failed was released %.1fs after the server answered again", round, r.check.firstReleaseOf(r.rev).Sub(healed).Seconds())
		r.push(true)
		start = time.Now()
		r.finish(start)
		answers := stopFlood()
		t.Logf("round %d: webhooks answered by status over the flood: %v", round, answers)
		if answers[http.StatusAccepted] == 0 || answers[http.StatusUnauthorized] == 0 {
			t.Errorf("the webhook flood: answers %v; want true pushes accepted (202) and forged ones refused (401)", answers)
		}
	}
	r.check.verify(t, r.revs)
	t.Logf("%d revisions rolled out through %d hub processes; the hub's peak resident memory %d MiB", len(r.revs), r.hub.processes(), r.hub.peakSince()>>20)
}

// A staged run of three stages keeps its order and each stage's maxConcurrency while the hub
// is SIGKILLed at random moments of it (R3.8, R3.3).
func TestR3_8_R3_3_AStagedRunKeepsItsOrderWhenTheHubIsKilled(t *testing.T) {
	three := intstr.FromInt32(3)
	var stages []v1alpha1.StageConfig
	for ring := range 3 {
		stages = append(stages, v1alpha1.StageConfig{Name: fmt.Sprintf("r%d", ring), Selector: fmt.Sprintf("ring=r%d", ring), MaxConcurrency: &three})
	}
	strategy := &v1alpha1.StagedUpdateStrategy{ObjectMeta: metav1.ObjectMeta{Name: "rings"}, Spec: v1alpha1.StagedUpdateStrategySpec{Stages: stages}}
	rules := rolloutRules{stepBudget: []int{3, 3, 3}, fleetBudget: 3, gate: []int{0, 0, 0}}
	r := startRollout(t, "defaultNamespace: faults\nstagedUpdate: {strategy: rings, autoRun: true}\n", rules, strategy)
	r.killHubThroughRollouts()
}

// A sequence of three groups hands each revision on only once the group before completed it,
// while the hub is SIGKILLed at random moments of it (R4.3).
func TestR4_3_ASequenceQualifiesEachGroupWhenTheHubIsKilled(t *testing.T) {
	zero := &metav1.Duration{}
	strategy := &v1alpha1.RolloutSequence{ObjectMeta: metav1.ObjectMeta{Name: "rings"}, Spec: v1alpha1.RolloutSequenceSpec{Groups: []v1alpha1.SequenceGroup{
		{Name: "first", Selector: "ring=r0", Soak: zero},
		{Name: "second", Upstream: "first", Selector: "ring=r1", Soak: zero},
		{Name: "third", Upstream: "second", Selector: "ring=r2", Soak: zero},
	}}}
	rules := rolloutRules{stepBudget: []int{ringSize, ringSize, ringSize}, gate: []int{0, 0, 0}}
	r := startRollout(t, "defaultNamespace: faults\nsequence: {name: rings}\n", rules, strategy)
	r.killHubThroughRollouts()
}

// killHubThroughRollouts rolls out the first revision and FAULTS_ROUNDS updates, the hub
// SIGKILLed at random moments of each, and verifies the rollout.
func (r *rollout) killHubThroughRollouts() {
	start := time.Now()
	r.killHub(2, 6*time.Second)()
	r.finish(start)
	for range rounds(r.t) {
		r.push(false)
		start = time.Now()
		r.killHub(3, 10*time.Second)()
		r.finish(start)
	}
	r.check.verify(r.t, r.revs)
	r.t.Logf("%d revisions rolled out through %d hub processes", len(r.revs), r.hub.processes())
}
