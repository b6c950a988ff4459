package rollout

import (
	"fmt"
	"sort"
)

// Selector is a Kubernetes label selector (R3.6), defined here so the package stays free of
// Kubernetes imports. Its JSON form is metav1.LabelSelector's. A nil Selector matches nothing;
// an empty one matches everything, as in Kubernetes.
type Selector struct {
	MatchLabels      map[string]string `json:"matchLabels,omitempty"`
	MatchExpressions []Requirement     `json:"matchExpressions,omitempty"`
}

// Requirement is one expression of a Selector.
type Requirement struct {
	Key      string   `json:"key"`
	Operator Operator `json:"operator"`
	Values   []string `json:"values,omitempty"`
}

// Operator is a selector operator.
type Operator string

const (
	OpIn           Operator = "In"
	OpNotIn        Operator = "NotIn"
	OpExists       Operator = "Exists"
	OpDoesNotExist Operator = "DoesNotExist"
)

// Matches reports whether labels satisfy every term of the selector.
func (s *Selector) Matches(labels map[string]string) bool { return s.compile().matches(labels) }

// compiledSelector is a Selector prepared for matching many label sets: a slice walk instead of
// a map iteration per match, which dominates planning over large fleets.
type compiledSelector struct {
	equal [][2]string
	exprs []Requirement
}

// compile prepares the selector; nil stays nil (matches nothing).
func (s *Selector) compile() *compiledSelector {
	if s == nil {
		return nil
	}
	c := &compiledSelector{equal: make([][2]string, 0, len(s.MatchLabels)), exprs: s.MatchExpressions}
	for k, v := range s.MatchLabels {
		c.equal = append(c.equal, [2]string{k, v})
	}
	return c
}

func (c *compiledSelector) matches(labels map[string]string) bool {
	if c == nil {
		return false
	}
	for _, kv := range c.equal {
		if got, ok := labels[kv[0]]; !ok || got != kv[1] {
			return false
		}
	}
	for _, r := range c.exprs {
		if !r.matches(labels) {
			return false
		}
	}
	return true
}

func (r Requirement) matches(labels map[string]string) bool {
	v, ok := labels[r.Key]
	switch r.Operator {
	case OpExists:
		return ok
	case OpDoesNotExist:
		return !ok
	case OpIn:
		return ok && contains(r.Values, v)
	case OpNotIn:
		return !ok || !contains(r.Values, v)
	}
	return false
}

func contains(values []string, v string) bool {
	for _, x := range values {
		if x == v {
			return true
		}
	}
	return false
}

// validate checks operators and their value counts.
func (s *Selector) validate() error {
	if s == nil {
		return nil
	}
	for i, r := range s.MatchExpressions {
		if r.Key == "" {
			return fmt.Errorf("matchExpressions[%d].key is empty", i)
		}
		switch r.Operator {
		case OpIn, OpNotIn:
			if len(r.Values) == 0 {
				return fmt.Errorf("matchExpressions[%d]: operator %s needs values", i, r.Operator)
			}
		case OpExists, OpDoesNotExist:
			if len(r.Values) > 0 {
				return fmt.Errorf("matchExpressions[%d]: operator %s takes no values", i, r.Operator)
			}
		default:
			return fmt.Errorf("matchExpressions[%d].operator %q is not one of In, NotIn, Exists, DoesNotExist", i, r.Operator)
		}
	}
	return nil
}

// String renders the selector in Kubernetes string form, keys sorted, for messages.
func (s *Selector) String() string {
	if s == nil {
		return "<none>"
	}
	keys := make([]string, 0, len(s.MatchLabels))
	for k := range s.MatchLabels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []byte
	add := func(term string) {
		if len(out) > 0 {
			out = append(out, ',')
		}
		out = append(out, term...)
	}
	for _, k := range keys {
		add(k + "=" + s.MatchLabels[k])
	}
	for _, r := range s.MatchExpressions {
		switch r.Operator {
		case OpExists:
			add(r.Key)
		case OpDoesNotExist:
			add("!" + r.Key)
		case OpIn, OpNotIn:
			if len(r.Values) == 1 {
				add(r.Key + map[Operator]string{OpIn: "=", OpNotIn: "!="}[r.Operator] + r.Values[0])
				continue
			}
			vals := append([]string(nil), r.Values...)
			sort.Strings(vals)
			term := r.Key + " " + map[Operator]string{OpIn: "in", OpNotIn: "notin"}[r.Operator] + " ("
			for i, v := range vals {
				if i > 0 {
					term += ","
				}
				term += v
			}
			add(term + ")")
		}
	}
	if len(out) == 0 {
		return "<all>"
	}
	return string(out)
}
