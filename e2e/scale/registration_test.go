package scale

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/e2e/wait"
	"github.com/flotilla-dev/flotilla/hub"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// BenchmarkRegistrationStorm registers 1,000 clusters at once (SCALE_REGISTRATIONS for
// another number) the way real agents do: each creates a ClusterRegistration with its own
// X25519 key and the fleet's registration token, and the real hub grants it (the Cluster, its
// namespace, the agent's identity and Roles, its Lease, credentials sealed to the key). The hub
// lets the token grant the whole storm at once (RegistrationBurst), as an operator expecting one
// sets it. It reports the time until every registration is granted and the hub has settled,
// against the write floor for as many writes; the hub's writes per cluster (by kind with
// SCALE_WRITES) and the API server's CPU per cluster.
func BenchmarkRegistrationStorm(b *testing.B) {
	clusters := envCount(b, "SCALE_REGISTRATIONS", 1000)
	for b.Loop() {
		runRegistrationStorm(b, clusters)
	}
}

func runRegistrationStorm(b *testing.B, clusters int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := benchClient(b)
	warmUp.Do(func() { writeFloor(b, c, 2000, floorShape{}) })
	ns := benchNamespace(b, c, "storm-").Name
	counter, stopHub := startHub(ctx, b, hub.Options{RegistrationBurst: clusters})
	defer removeScenario(b, c, ns, clusters)
	defer stopHub()

	token := &v1alpha1.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Name: "storm", Namespace: ns}}
	if err := c.Create(ctx, token); err != nil {
		b.Fatal(err)
	}
	wait.Until(b, "the hub issues the registration token", time.Minute, func() bool {
		return c.Get(ctx, client.ObjectKeyFromObject(token), token) == nil && token.Status.SecretName != ""
	})
	before := counter.writes.Load()

	// The agents' keys are made before the clock starts: each agent has its own already.
	keys := make([][]byte, clusters)
	for i := range keys {
		key, err := ecdh.X25519().GenerateKey(rand.Reader)
		if err != nil {
			b.Fatal(err)
		}
		keys[i] = key.PublicKey().Bytes()
	}
	// Granted registrations are counted from a watch: polling 10,000 of them would load the
	// API server the storm is measured on.
	grantsWatched := watchGrants(ctx, b, c, ns, clusters)
	start, apiCPU := time.Now(), apiServerCPU(b)
	parallel(clusters, func(i int) {
		reg := &v1alpha1.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("reg-%05d", i), Namespace: ns},
			Spec: v1alpha1.ClusterRegistrationSpec{ClientID: fmt.Sprintf("client-%05d", i), ClusterName: clusterName(i), TokenName: token.Name, PublicKey: keys[i]}}
		if err := c.Create(ctx, reg); err != nil {
			b.Error(err)
		}
	})
	if err := grantsWatched.wait(30 * time.Minute); err != nil {
		b.Fatal(err)
	}
	allGranted := time.Since(start)
	// Then the access controller's part (finalizer, Lease): settled once the hub stops writing.
	writes := settle(b, counter, counter.writes.Load()) - before
	settled := time.Since(start) - time.Second // settle waits a quiet second
	apiCPU = apiServerCPU(b) - apiCPU
	// The floor: as many writes as the hub and the agents' registrations made, eight at a time.
	floor := writeFloor(b, c, int(writes+int64(clusters))/2, floorShape{}).took

	if os.Getenv("SCALE_WRITES") != "" {
		counter.mu.Lock()
		b.Logf("hub writes by kind (the token's issue included): %v", counter.byKind)
		counter.mu.Unlock()
	}
	b.ReportMetric(allGranted.Seconds(), "granted-s")
	b.ReportMetric(settled.Seconds(), "settled-s")
	b.ReportMetric(floor.Seconds(), "floor-s")
	b.ReportMetric(settled.Seconds()/floor.Seconds(), "settled/floor")
	b.ReportMetric(float64(writes)/float64(clusters), "hub-writes/cluster")
	b.ReportMetric(apiCPU*1000/float64(clusters), "apiserver-cpu-ms/cluster")
}

// grantWatch counts the registrations of a namespace the hub granted, from a watch.
type grantWatch struct {
	done    chan struct{}
	granted func() int
	want    int
}

// watchGrants watches the ClusterRegistrations of ns until want of them are granted (a watch
// that ends is started again from where it was).
func watchGrants(ctx context.Context, b *testing.B, c client.Client, ns string, want int) *grantWatch {
	wc, err := client.NewWithWatch(fastConfig(), client.Options{Scheme: c.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	granted := map[string]bool{}
	g := &grantWatch{done: make(chan struct{}), want: want, granted: func() int { mu.Lock(); defer mu.Unlock(); return len(granted) }}
	see := func(reg *v1alpha1.ClusterRegistration) {
		mu.Lock()
		defer mu.Unlock()
		if reg.Status.Granted && !granted[reg.Name] {
			granted[reg.Name] = true
			if len(granted) == want {
				close(g.done)
			}
		}
	}
	// list reads what is there and where the next watch starts.
	list := func() (string, error) {
		var regs v1alpha1.ClusterRegistrationList
		if err := c.List(ctx, &regs, client.InNamespace(ns)); err != nil {
			return "", err
		}
		for i := range regs.Items {
			see(&regs.Items[i])
		}
		return regs.ResourceVersion, nil
	}
	rv, err := list()
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		for ctx.Err() == nil {
			w, err := wc.Watch(ctx, &v1alpha1.ClusterRegistrationList{}, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
			if err == nil {
				for ev := range w.ResultChan() {
					reg, ok := ev.Object.(*v1alpha1.ClusterRegistration)
					if !ok {
						break // an error event (the version expired): listed again below
					}
					rv = reg.ResourceVersion
					see(reg)
				}
				w.Stop()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond): // before watching again
			}
			if next, err := list(); err == nil {
				rv = next
			}
		}
	}()
	return g
}

// wait returns once every registration is granted, or an error naming how many were.
func (g *grantWatch) wait(timeout time.Duration) error {
	select {
	case <-g.done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("timed out after %s: %d of %d registrations granted", timeout, g.granted(), g.want)
	}
}
