package rollout

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestR3_14_RunsStartThemselvesAndSupersede(t *testing.T) {
	cases := []struct {
		name   string
		latest int64
		runs   []RunRef
		want   AutoRunDecision
	}{
		{"first revision", 1, nil, AutoRunDecision{Create: "web-r1"}},
		{"run exists", 1, []RunRef{{Name: "web-r1", Revision: 1, Auto: true, State: RunRunning}}, AutoRunDecision{}},
		{"newer revision supersedes the automatic run in flight", 2,
			[]RunRef{{Name: "web-r1", Revision: 1, Auto: true, State: RunRunning}, {Name: "web-r0", Revision: 0, Auto: true, State: RunCompleted}},
			AutoRunDecision{Create: "web-r2", Supersede: []string{"web-r1"}}},
		{"a person's run is not superseded", 3,
			[]RunRef{{Name: "rollback", Revision: 1, State: RunRunning}},
			AutoRunDecision{Create: "web-r3"}},
		{"superseded run still stopping after the new run exists", 2,
			[]RunRef{{Name: "web-r1", Revision: 1, Auto: true, State: RunStopping}, {Name: "web-r2", Revision: 2, Auto: true, State: RunRunning}},
			AutoRunDecision{Supersede: []string{"web-r1"}}},
	}
	for _, c := range cases {
		if diff := cmp.Diff(c.want, PlanAutoRuns("web", c.latest, c.runs)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
}
