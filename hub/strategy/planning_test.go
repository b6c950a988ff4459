package strategy

import (
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/hub/liveness/livenesstest"
)

// An update's old object is judged by its own heartbeat, so the rollout controller sees an
// agent that comes back after its deadline as coming back, whatever the order in which the
// informer's handlers see the update.
func TestR1_11_AgentComingBackIsSeenFromTheUpdate(t *testing.T) {
	w0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clocks := &livenesstest.Clocks{Wall: w0}
	live := clocks.Liveness()
	old := livenesstest.ClusterSeen(w0)
	live.ObserveObject(old)
	clocks.Wall, clocks.Mono = w0.Add(-30*time.Second), 20*time.Second // wall stepped back
	back := livenesstest.ClusterSeen(w0.Add(-30 * time.Second))
	p := clusterPlanningChanged{live: live, now: func() time.Time { return clocks.Wall }}
	for _, observedFirst := range []bool{false, true} {
		if observedFirst {
			live.ObserveObject(back)
		}
		if !p.Update(livenesstest.UpdateEvent(old, back)) {
			t.Errorf("observed first %v: the agent coming back does not re-plan its bundles", observedFirst)
		}
	}
	if p.Update(livenesstest.UpdateEvent(back, back.DeepCopy())) {
		t.Errorf("a routine update re-plans")
	}
}
