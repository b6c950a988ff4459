package plan

import "testing"

// A GitRepo shows the most pressing outcome among its bundles (R5.6): a rollback under way over
// a rollout held by its failure, that over one rolled back, any of them over none.
func TestR5_6_OutcomeRanking(t *testing.T) {
	order := []OutcomeState{"", stateRolledBack, stateFailed, stateRollingBack}
	for i, s := range order {
		for j, o := range order {
			if got, want := s.Outranks(o), i > j; got != want {
				t.Errorf("%q.Outranks(%q) = %v, want %v", s, o, got, want)
			}
		}
	}
}
