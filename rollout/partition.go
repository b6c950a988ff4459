package rollout

import (
	"fmt"
	"slices"
	"strings"
)

// partition is a resolved partition: its members as indexes into the sorted targets.
type partition struct {
	name      string
	members   []int
	threshold int
	// spec is the threshold as written, for messages.
	spec IntOrPercent
}

// partitionTargets splits the targets, sorted by name, into partitions (R1.3, R1.4) and
// returns the indexes of the unpartitioned ones.
//
//	manual:  partitions in fleet.yaml order; a cluster joins the first partition it matches
//	auto:    N < threshold (or threshold 0) → one partition of all
//	         otherwise chunks of autoPartitionSize (rounded down) in name order; the remainder
//	         forms a last, smaller partition
func partitionTargets(targets []*Target, s *Strategy, groups []ClusterGroup) (parts []partition, unpartitioned []int) {
	global := s.MaxUnavailable.Or(DefaultMaxUnavailable)
	n := len(targets)
	if len(s.Partitions) > 0 {
		groupLabels := make(map[string]map[string]string, len(groups))
		for _, g := range groups {
			groupLabels[g.Name] = g.Labels
		}
		parts = make([]partition, len(s.Partitions))
		matchers := make([]matcher, len(s.Partitions))
		for i, p := range s.Partitions {
			parts[i] = partition{name: p.Name, spec: p.MaxUnavailable.Or(global)}
			matchers[i] = p.Match.compile(groupLabels)
		}
		for ti := range targets {
			placed := false
			for pi := range matchers {
				if matchers[pi].matches(targets[ti]) {
					parts[pi].members = append(parts[pi].members, ti)
					placed = true
					break
				}
			}
			if !placed {
				unpartitioned = append(unpartitioned, ti)
			}
		}
	} else {
		threshold := DefaultAutoPartitionThreshold
		if s.AutoPartitionThreshold != nil {
			threshold = *s.AutoPartitionThreshold
		}
		size := n
		if threshold > 0 && n >= threshold {
			size = s.AutoPartitionSize.Or(DefaultAutoPartitionSize).ScaleDown(n)
		}
		for start, i := 0, 0; start < n; start, i = start+size, i+1 {
			end := min(start+size, n)
			members := make([]int, end-start)
			for j := range members {
				members[j] = start + j
			}
			parts = append(parts, partition{name: fmt.Sprintf("auto-%d", i), members: members, spec: global})
		}
	}
	for i := range parts {
		parts[i].threshold = parts[i].spec.ScaleDown(len(parts[i].members))
	}
	return parts, unpartitioned
}

// matcher is a Match prepared for many targets.
type matcher struct {
	m           *Match
	cluster     *compiledSelector
	group       *compiledSelector
	groupLabels map[string]map[string]string
}

func (m *Match) compile(groupLabels map[string]map[string]string) matcher {
	return matcher{m: m, cluster: m.ClusterSelector.compile(), group: m.ClusterGroupSelector.compile(), groupLabels: groupLabels}
}

// matches reports whether the target satisfies every field of the Match that is set; an empty
// Match matches nothing.
func (mt *matcher) matches(t *Target) bool {
	m := mt.m
	if m.ClusterName == "" && m.ClusterSelector == nil && m.ClusterGroup == "" && m.ClusterGroupSelector == nil {
		return false
	}
	if m.ClusterName != "" && m.ClusterName != t.Cluster {
		return false
	}
	if mt.cluster != nil && !mt.cluster.matches(t.Labels) {
		return false
	}
	if m.ClusterGroup != "" && !contains(t.Groups, m.ClusterGroup) {
		return false
	}
	if mt.group != nil {
		inGroup := false
		for _, g := range t.Groups {
			if labels, ok := mt.groupLabels[g]; ok && mt.group.matches(labels) {
				inGroup = true
				break
			}
		}
		if !inGroup {
			return false
		}
	}
	return true
}

// Members is one part of a rollout and its clusters, in the order the rollout takes them.
type Members struct {
	Name     string
	Clusters []string
}

// AssignPartitions says which partition of a continuous rollout each target falls in, exactly
// as Plan forms them (R1.3, R1.4), and which targets fall in none (R1.3: never released). Views
// of a rollout draw its lanes from it.
func AssignPartitions(targets []Target, s *Strategy, groups []ClusterGroup) (parts []Members, unpartitioned []string) {
	sorted := make([]*Target, len(targets))
	for i := range targets {
		sorted[i] = &targets[i]
	}
	slices.SortFunc(sorted, func(a, b *Target) int { return strings.Compare(a.Cluster, b.Cluster) })
	ps, none := partitionTargets(sorted, s, groups)
	for _, p := range ps {
		m := Members{Name: p.name, Clusters: make([]string, len(p.members))}
		for i, ti := range p.members {
			m.Clusters[i] = sorted[ti].Cluster
		}
		parts = append(parts, m)
	}
	for _, ti := range none {
		unpartitioned = append(unpartitioned, sorted[ti].Cluster)
	}
	return parts, unpartitioned
}
