package rollout

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		s    *Strategy
		p    *Placement
		want []string // each must appear; nil means valid
	}{
		{"defaults are valid", &Strategy{}, nil, nil},
		{"R1.2 percent above 100", &Strategy{MaxUnavailable: Percent(150)}, nil, []string{"rolloutStrategy.maxUnavailable: 150% is above 100%"}},
		{"negative count", &Strategy{MaxUnavailablePartitions: Int(-1)}, nil, []string{"rolloutStrategy.maxUnavailablePartitions: -1 is negative"}},
		{"R1.4 partition size 0", &Strategy{AutoPartitionSize: Percent(0)}, nil, []string{"rolloutStrategy.autoPartitionSize: must be above 0"}},
		{"R1.8 maxNew 0", &Strategy{MaxNew: ptr(0)}, nil, []string{"rolloutStrategy.maxNew: must be at least 1"}},
		{"R1.3 partition without selector", &Strategy{Partitions: []Partition{{Name: "a", Match: Match{ClusterName: "x"}}, {Name: "b"}}}, nil,
			[]string{"rolloutStrategy.partitions[1]: needs clusterName, clusterSelector, clusterGroup or clusterGroupSelector"}},
		{"duplicate partition names", &Strategy{Partitions: []Partition{{Name: "a", Match: Match{ClusterName: "x"}}, {Name: "a", Match: Match{ClusterName: "y"}}}}, nil,
			[]string{`rolloutStrategy.partitions[1].name: "a" is already the name of partitions[0]`}},
		{"bad selector operator", &Strategy{Partitions: []Partition{{Name: "a", Match: Match{ClusterSelector: &Selector{MatchExpressions: []Requirement{{Key: "k", Operator: "Like"}}}}}}}, nil,
			[]string{`rolloutStrategy.partitions[0].clusterSelector: matchExpressions[0].operator "Like" is not one of`}},
		{"R2.3 maxSurge 0", nil, &Placement{RollingUpdate: &RollingUpdate{MaxSurge: Int(0)}}, []string{"placement.rollingUpdate.maxSurge: must not be 0"}},
		{"R2.1 PickN without number", nil, &Placement{Type: PickN}, []string{"placement.numberOfClusters: is required when type is PickN"}},
		{"R2.1 PickFixed without names", nil, &Placement{Type: PickFixed}, []string{"placement.clusterNames: is required when type is PickFixed"}},
		{"unknown placement", nil, &Placement{Type: "PickSome"}, []string{`placement.type: "PickSome" is not one of PickAll, PickN, PickFixed`}},
		{"two ways to roll out", &Strategy{MaxNew: ptr(3)}, &Placement{RollingUpdate: &RollingUpdate{}}, []string{"placement.rollingUpdate: cannot be combined with rolloutStrategy"}},
		{"every problem at once", &Strategy{MaxUnavailable: Percent(101), MaxNew: ptr(0)}, nil, []string{"maxUnavailable", "maxNew"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Validate(c.s, c.p)
			if c.want == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
