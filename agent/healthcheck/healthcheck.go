// Package healthcheck is the language of fleet.yaml's healthChecks: for a kind whose health
// kstatus cannot read (a custom resource that reports it in .status.phase, say), CEL expressions
// over the object say whether it is current, in progress or failed. The agent evaluates them;
// the renderer compiles them with this same package, so an expression the agent would refuse is
// refused at render, with the file and field.
//
// Expressions see the object's top-level fields as variables (apiVersion, kind, metadata, spec,
// status); one the object lacks is an empty map, so has(status.phase) is false rather than an
// error. They are untrusted (a repository wrote them): their length is bounded at compile, their
// cost at every evaluation, and they can reach nothing but the object.
package healthcheck

import (
	"fmt"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Limits on what a repository may ask the agent to evaluate.
const (
	// MaxExpressionLength bounds one expression's source.
	MaxExpressionLength = 2048
	// CostLimit bounds one evaluation, in CEL's cost units (about one per operation and per
	// element a macro visits); an expression that exceeds it is an error, not a hang.
	CostLimit = 100_000
	// MaxChecks bounds a deployment's checks.
	MaxChecks = 20
)

// Status is what a check says of an object.
type Status string

const (
	Current    Status = "Current"
	InProgress Status = "InProgress"
	Failed     Status = "Failed"
)

// Rule is one fleet.yaml healthChecks entry: the kind it judges and its expressions. Current is
// required; Failed is evaluated first, then Current, then InProgress; when none holds the object
// is in progress.
type Rule struct {
	// APIVersion is the kind's group/version ("v1" for the core group); the rule judges the
	// kind in every version of its group.
	APIVersion string
	Kind       string
	Current    string
	InProgress string
	Failed     string
}

// FieldError names the rule field an expression came from, for the renderer's error.
type FieldError struct {
	Field   string // e.g. "[1].current"
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// variables are the object's top-level fields an expression may name.
var variables = []string{"apiVersion", "kind", "metadata", "spec", "status"}

var env = func() *cel.Env {
	opts := []cel.EnvOption{ext.Strings()}
	for _, v := range variables {
		opts = append(opts, cel.Variable(v, cel.DynType))
	}
	e, err := cel.NewEnv(opts...)
	if err != nil {
		panic(fmt.Sprintf("healthcheck: the CEL environment does not build: %v", err))
	}
	return e
}()

// Set is a deployment's compiled rules, by kind.
type Set struct {
	byKind map[schema.GroupKind]*check
}

type check struct {
	// exprs in evaluation order: failed, current, inProgress (absent ones skipped).
	exprs []expr
}

type expr struct {
	field  string // current, inProgress or failed
	source string
	prog   cel.Program
	then   Status
}

// Compile checks and compiles rules. An error is a *FieldError naming the rule and field. A
// later rule for a kind an earlier one judges is refused: which one applies would be unclear.
func Compile(rules []Rule) (*Set, error) {
	if len(rules) > MaxChecks {
		return nil, &FieldError{Field: "", Message: fmt.Sprintf("%d checks; at most %d", len(rules), MaxChecks)}
	}
	s := &Set{byKind: make(map[schema.GroupKind]*check, len(rules))}
	for i, r := range rules {
		at := func(field string) string { return fmt.Sprintf("[%d].%s", i, field) }
		gv, err := schema.ParseGroupVersion(r.APIVersion)
		switch {
		case r.APIVersion == "" || err != nil || gv.Version == "":
			return nil, &FieldError{Field: at("apiVersion"), Message: fmt.Sprintf("%q is not group/version (or v1 for the core group)", r.APIVersion)}
		case r.Kind == "":
			return nil, &FieldError{Field: at("kind"), Message: "is required"}
		case r.Current == "":
			return nil, &FieldError{Field: at("current"), Message: "is required: the expression that holds once the object is healthy"}
		}
		gk := schema.GroupKind{Group: gv.Group, Kind: r.Kind}
		if _, dup := s.byKind[gk]; dup {
			return nil, &FieldError{Field: at("kind"), Message: fmt.Sprintf("%s is judged by an earlier check already", gk)}
		}
		c := &check{}
		for _, e := range []struct {
			field, source string
			then          Status
		}{{"failed", r.Failed, Failed}, {"current", r.Current, Current}, {"inProgress", r.InProgress, InProgress}} {
			if e.source == "" {
				continue
			}
			prog, err := compile(e.source)
			if err != nil {
				return nil, &FieldError{Field: at(e.field), Message: err.Error()}
			}
			c.exprs = append(c.exprs, expr{field: e.field, source: e.source, prog: prog, then: e.then})
		}
		s.byKind[gk] = c
	}
	return s, nil
}

func compile(source string) (cel.Program, error) {
	if len(source) > MaxExpressionLength {
		return nil, fmt.Errorf("is %d characters long; at most %d", len(source), MaxExpressionLength)
	}
	ast, iss := env.Compile(source)
	if iss.Err() != nil {
		return nil, fmt.Errorf("is not a valid CEL expression: %s", strings.ReplaceAll(iss.Err().Error(), "\n", " "))
	}
	if t := ast.OutputType(); !t.IsExactType(types.BoolType) && !t.IsExactType(types.DynType) {
		return nil, fmt.Errorf("gives %s; it must give a bool", t)
	}
	prog, err := env.Program(ast, cel.CostLimit(CostLimit), cel.InterruptCheckFrequency(100))
	if err != nil {
		return nil, fmt.Errorf("does not compile: %w", err)
	}
	return prog, nil
}

// Judges reports whether a rule of the set judges objects of the kind.
func (s *Set) Judges(gk schema.GroupKind) bool {
	if s == nil {
		return false
	}
	_, ok := s.byKind[gk]
	return ok
}

// Evaluate judges an object (its unstructured content) by the rule for its kind. ok is false
// when no rule judges the kind: kstatus does. An expression that cannot be evaluated (a field
// the object does not have yet, a value of another type) leaves the object in progress and says
// why: health the expression cannot read is not health.
func (s *Set) Evaluate(gk schema.GroupKind, object map[string]any) (st Status, message string, ok bool) {
	if s == nil {
		return "", "", false
	}
	c, ok := s.byKind[gk]
	if !ok {
		return "", "", false
	}
	vars := make(map[string]any, len(variables))
	for _, v := range variables {
		if val, found := object[v]; found && val != nil {
			vars[v] = val
		} else {
			vars[v] = map[string]any{}
		}
	}
	for _, e := range c.exprs {
		out, _, err := e.prog.Eval(vars)
		if err != nil {
			return InProgress, fmt.Sprintf("healthChecks %s %s cannot be evaluated: %v", e.field, quote(e.source), err), true
		}
		holds, isBool := out.Value().(bool)
		if !isBool {
			return InProgress, fmt.Sprintf("healthChecks %s %s gave %v, not a bool", e.field, quote(e.source), out.Value()), true
		}
		if holds {
			return e.then, fmt.Sprintf("healthChecks %s %s holds", e.field, quote(e.source)), true
		}
	}
	return InProgress, fmt.Sprintf("healthChecks current %s does not hold yet", quote(c.current())), true
}

func (c *check) current() string {
	for _, e := range c.exprs {
		if e.field == "current" {
			return e.source
		}
	}
	return ""
}

// quote shortens an expression for a status message.
func quote(source string) string {
	const max = 80
	if len(source) > max {
		source = source[:max-1] + "…"
	}
	return "(" + source + ")"
}
