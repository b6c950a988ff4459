// Package livenesstest gives tests of the hub's packages a liveness judge on clocks they move
// by hand, and Clusters that show a heartbeat.
package livenesstest

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/liveness"
)

// Clocks are the hub's wall clock and its monotonic clock, moved apart by the tests.
type Clocks struct {
	Wall time.Time
	Mono time.Duration
}

// Liveness judges heartbeats on c's monotonic clock, with the default interval and deadline.
func (c *Clocks) Liveness() *liveness.Liveness {
	return liveness.New(nil, 0, 0, func() time.Duration { return c.Mono })
}

// UpdateEvent is the informer's event of a Cluster's update.
func UpdateEvent(old, new *v1alpha1.Cluster) event.UpdateEvent {
	return event.UpdateEvent{ObjectOld: old, ObjectNew: new}
}

// ClusterSeen is a Cluster whose agent last reported (in its status) at, with a 6 s deadline.
func ClusterSeen(at time.Time) *v1alpha1.Cluster {
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{UID: "c1"}, Spec: v1alpha1.ClusterSpec{HeartbeatDeadline: &metav1.Duration{Duration: 6 * time.Second}}}
	c.Status.AgentLastSeen = &metav1.Time{Time: at}
	return c
}
