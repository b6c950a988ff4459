package rollout

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// ParseSelector reads the Kubernetes string form of a label selector (R3.6): comma-separated
// terms "k=v", "k==v", "k!=v", "k in (a,b)", "k notin (a,b)", "k" (exists) and "!k" (does not
// exist). The empty string selects everything.
func ParseSelector(s string) (*Selector, error) {
	sel := &Selector{}
	rest := strings.TrimSpace(s)
	for rest != "" {
		term, tail, err := nextTerm(rest)
		if err != nil {
			return nil, err
		}
		if err := sel.addTerm(strings.TrimSpace(term)); err != nil {
			return nil, err
		}
		rest = strings.TrimSpace(tail)
	}
	return sel, sel.validate()
}

// nextTerm splits off the first term; commas inside parentheses belong to the term.
func nextTerm(s string) (term, rest string, err error) {
	depth := 0
	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
			if depth < 0 {
				return "", "", fmt.Errorf("unbalanced ')' in selector %q", s)
			}
		case ',':
			if depth == 0 {
				if strings.TrimSpace(s[:i]) == "" {
					return "", "", fmt.Errorf("empty term in selector %q", s)
				}
				return s[:i], s[i+1:], nil
			}
		}
	}
	if depth != 0 {
		return "", "", fmt.Errorf("unbalanced '(' in selector %q", s)
	}
	return s, "", nil
}

func (sel *Selector) addTerm(term string) error {
	switch {
	case strings.HasPrefix(term, "!"):
		key := strings.TrimSpace(term[1:])
		if err := checkKey(key, term); err != nil {
			return err
		}
		sel.MatchExpressions = append(sel.MatchExpressions, Requirement{Key: key, Operator: OpDoesNotExist})
	case strings.Contains(term, "!="):
		key, value, _ := strings.Cut(term, "!=")
		return sel.addRequirement(term, key, OpNotIn, value)
	case strings.Contains(term, "=="):
		key, value, _ := strings.Cut(term, "==")
		return sel.addRequirement(term, key, OpIn, value)
	case strings.Contains(term, "="):
		key, value, _ := strings.Cut(term, "=")
		return sel.addRequirement(term, key, OpIn, value)
	case strings.HasSuffix(term, ")"):
		open := strings.Index(term, "(")
		fields := strings.Fields(term[:max(open, 0)])
		if open < 0 || len(fields) != 2 {
			return fmt.Errorf("invalid term %q: want \"key in (a,b)\" or \"key notin (a,b)\"", term)
		}
		var op Operator
		switch fields[1] {
		case "in":
			op = OpIn
		case "notin":
			op = OpNotIn
		default:
			return fmt.Errorf("invalid operator %q in %q: want in or notin", fields[1], term)
		}
		var values []string
		for _, v := range strings.Split(term[open+1:len(term)-1], ",") {
			v = strings.TrimSpace(v)
			if err := checkValue(v, term); err != nil {
				return err
			}
			values = append(values, v)
		}
		if err := checkKey(fields[0], term); err != nil {
			return err
		}
		sel.MatchExpressions = append(sel.MatchExpressions, Requirement{Key: fields[0], Operator: op, Values: values})
	default:
		if err := checkKey(term, term); err != nil {
			return err
		}
		sel.MatchExpressions = append(sel.MatchExpressions, Requirement{Key: term, Operator: OpExists})
	}
	return nil
}

func (sel *Selector) addRequirement(term, key string, op Operator, value string) error {
	key, value = strings.TrimSpace(key), strings.TrimSpace(value)
	if err := checkKey(key, term); err != nil {
		return err
	}
	if err := checkValue(value, term); err != nil {
		return err
	}
	sel.MatchExpressions = append(sel.MatchExpressions, Requirement{Key: key, Operator: op, Values: []string{value}})
	return nil
}

var (
	labelName   = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	labelPrefix = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// checkKey applies Kubernetes' label key syntax: an optional DNS-subdomain prefix and "/", then
// a name of at most 63 characters.
func checkKey(key, term string) error {
	prefix, name, hasPrefix := strings.Cut(key, "/")
	if !hasPrefix {
		prefix, name = "", key
	}
	if len(name) > 63 || !labelName.MatchString(name) || hasPrefix && (len(prefix) > 253 || !labelPrefix.MatchString(prefix)) {
		return fmt.Errorf("invalid label key %q in %q", key, term)
	}
	return nil
}

// checkValue applies Kubernetes' label value syntax: empty, or a name of at most 63 characters.
func checkValue(v, term string) error {
	if v != "" && (len(v) > 63 || !labelName.MatchString(v)) {
		return fmt.Errorf("invalid label value %q in %q", v, term)
	}
	return nil
}

// UnmarshalJSON accepts the structured form ({matchLabels, matchExpressions}) or the string
// form ("env in (prod),tier!=db").
func (s *Selector) UnmarshalJSON(data []byte) error {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '"' {
		var str string
		if err := json.Unmarshal(trimmed, &str); err != nil {
			return err
		}
		parsed, err := ParseSelector(str)
		if err != nil {
			return fmt.Errorf("label selector %q: %w", str, err)
		}
		*s = *parsed
		return nil
	}
	type plain Selector // no UnmarshalJSON: avoids recursion
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	var p plain
	if err := dec.Decode(&p); err != nil {
		return err
	}
	*s = Selector(p)
	return nil
}

// selectorOf is the selector of a stage, a stage group or a sequence group: the structured one,
// else the string form parsed. The string form was checked by validation (ValidateStaged,
// ChainOrder); one that does not read selects nothing.
func selectorOf(structured *Selector, text string) *Selector {
	if structured != nil || text == "" {
		return structured
	}
	parsed, err := ParseSelector(text)
	if err != nil {
		return nil
	}
	return parsed
}
