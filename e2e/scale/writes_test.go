package scale

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// BenchmarkWriteKinds measures what the API server takes for each kind of write the fleet
// makes to n BundleDeployments shaped like the hub's, eight at a time: creating them staged and
// released, releasing a new revision (a merge patch of the spec), an agent's status report,
// and the same release as a full update.
func BenchmarkWriteKinds(b *testing.B) {
	const n = 2000
	scheme, _ := hub.Scheme()
	c, err := client.New(fastConfig(), client.Options{Scheme: scheme})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for b.Loop() {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kinds-"}}
		if err := c.Create(ctx, ns); err != nil {
			b.Fatal(err)
		}
		bds := make([]*v1alpha1.BundleDeployment, n)
		measure := func(kind string, f func(i int) error) {
			start := time.Now()
			parallel(n, func(i int) {
				if err := f(i); err != nil {
					b.Error(err)
				}
			})
			b.ReportMetric(float64(time.Since(start).Microseconds())/n, kind+"-µs/write")
		}
		measure("create", func(i int) error {
			bds[i] = hubShaped(ns.Name, i, 1)
			return c.Create(ctx, bds[i])
		})
		measure("status", func(i int) error {
			orig := bds[i].DeepCopy()
			agentReport(bds[i])
			return c.Status().Patch(ctx, bds[i], client.MergeFrom(orig))
		})
		measure("patch", func(i int) error {
			orig := bds[i].DeepCopy()
			r := shapedRef(2)
			bds[i].Spec.Staged, bds[i].Spec.Released = r, &r
			return c.Patch(ctx, bds[i], client.MergeFrom(orig))
		})
		measure("update", func(i int) error {
			r := shapedRef(3)
			bds[i].Spec.Staged, bds[i].Spec.Released = r, &r
			return c.Update(ctx, bds[i])
		})
	}
}
