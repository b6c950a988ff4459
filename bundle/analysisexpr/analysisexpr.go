// Package analysisexpr is the language of analysis checks (ROLLOUT.md §7): the query, a Go
// template of the cluster, bundle and revision, and the condition, a CEL expression over the
// provider's result. The renderer compiles a fleet.yaml's checks with it, so that a check the
// hub could not run is refused at render with the file and field; the hub's analysis runner
// compiles and runs them with it.
//
// Both are untrusted (a repository wrote them). A template has no functions beyond text/
// template's own and sees only QueryData; its output is bounded. A condition sees only result,
// and its cost is bounded at every evaluation. Neither can name where the query goes: the
// provider the operator defined does.
package analysisexpr

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"text/template"
	"text/template/parse"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"

	"github.com/flotilla-dev/flotilla/rollout"
)

// Limits on what a repository may ask the hub to do per measurement.
const (
	// MaxQueryLength bounds a rendered query.
	MaxQueryLength = 16 << 10
	// CostLimit bounds one condition's evaluation, in CEL's cost units.
	CostLimit = 100_000
)

// QueryData is what a query template sees.
type QueryData struct {
	// Cluster is the cluster a Cluster check measures; empty for a Gate check.
	Cluster ClusterData
	// Bundle and Namespace name the bundle; Revision is the revision judged.
	Bundle, Namespace string
	Revision          int64
	// Gate ("partition canary", "stage prod", "group eu") and Clusters (its clusters that run
	// the revision) are a Gate check's.
	Gate     string
	Clusters []string
}

// ClusterData is a cluster as a query sees it.
type ClusterData struct {
	Name   string
	Labels map[string]string
}

// Query is a compiled query template.
type Query struct{ t *template.Template }

// ParseQuery compiles a query template. Only what is known to be cheap is admitted (see
// admit): a template runs in the hub at every measurement, and text/template alone would let a
// repository loop a billion times (range over a number) or build a gigabyte (printf widths).
func ParseQuery(source string) (*Query, error) {
	if len(source) > MaxQueryLength {
		return nil, fmt.Errorf("is %d characters long; at most %d", len(source), MaxQueryLength)
	}
	t, err := template.New("query").Option("missingkey=error").Parse(source)
	if err != nil {
		return nil, fmt.Errorf("is not a valid template: %s", strings.TrimPrefix(err.Error(), "template: query:"))
	}
	for _, tmpl := range t.Templates() {
		if tmpl.Name() != "query" {
			return nil, fmt.Errorf("defines template %q: a query is one template", tmpl.Name())
		}
	}
	if err := admit(t.Tree.Root, 0); err != nil {
		return nil, fmt.Errorf("is not allowed: %w", err)
	}
	return &Query{t: t}, nil
}

// allowedFuncs are the template functions a query may call: comparisons, logic, length, index
// and escaping, each linear in its arguments. printf, call and slice are not among them.
var allowedFuncs = map[string]bool{"and": true, "or": true, "not": true, "eq": true, "ne": true, "lt": true, "le": true, "gt": true, "ge": true,
	"len": true, "index": true, "print": true, "urlquery": true, "js": true, "html": true}

// rangeable are the fields a query may range over: the gate's clusters and a cluster's labels.
// A range over anything else (a number, a pipeline) is refused, and so is a range inside a
// range: a query's work stays linear in the size of its gate.
var rangeable = map[string]bool{"Clusters": true, "Labels": true}

// admit walks a parsed query and refuses what is not on the allow-lists. depth is how many
// ranges enclose the node.
func admit(n parse.Node, depth int) error {
	switch n := n.(type) {
	case nil:
		return nil
	case *parse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := admit(c, depth); err != nil {
				return err
			}
		}
		return nil
	case *parse.TextNode, *parse.CommentNode, *parse.BreakNode, *parse.ContinueNode:
		return nil
	case *parse.ActionNode:
		return admitPipe(n.Pipe)
	case *parse.IfNode:
		return admitBranch(&n.BranchNode, depth)
	case *parse.WithNode:
		return admitBranch(&n.BranchNode, depth)
	case *parse.RangeNode:
		if depth > 0 {
			return errors.New("a range inside a range")
		}
		if !rangesOverAllowedField(n.Pipe) {
			return errors.New("range over something other than .Clusters or a cluster's .Labels")
		}
		if err := admit(n.List, depth+1); err != nil {
			return err
		}
		return admit(n.ElseList, depth)
	case *parse.TemplateNode:
		return errors.New("{{template}}: a query is one template")
	}
	return fmt.Errorf("%s is not allowed in a query", n)
}

func admitBranch(b *parse.BranchNode, depth int) error {
	if err := admitPipe(b.Pipe); err != nil {
		return err
	}
	if err := admit(b.List, depth); err != nil {
		return err
	}
	return admit(b.ElseList, depth)
}

func admitPipe(p *parse.PipeNode) error {
	if p == nil {
		return nil
	}
	for _, cmd := range p.Cmds {
		for _, arg := range cmd.Args {
			switch a := arg.(type) {
			case *parse.IdentifierNode:
				if !allowedFuncs[a.Ident] {
					return fmt.Errorf("function %q is not allowed in a query", a.Ident)
				}
			case *parse.PipeNode:
				if err := admitPipe(a); err != nil {
					return err
				}
			case *parse.ChainNode:
				if pipe, ok := a.Node.(*parse.PipeNode); ok {
					if err := admitPipe(pipe); err != nil {
						return err
					}
				}
			case *parse.FieldNode, *parse.VariableNode, *parse.DotNode, *parse.StringNode, *parse.NumberNode, *parse.BoolNode, *parse.NilNode:
			default:
				return fmt.Errorf("%s is not allowed in a query", arg)
			}
		}
	}
	return nil
}

// rangesOverAllowedField reports whether a range's pipeline is one field path ending in a
// rangeable field (.Clusters, $.Clusters, .Cluster.Labels, $c.Labels).
func rangesOverAllowedField(p *parse.PipeNode) bool {
	if p == nil || len(p.Cmds) != 1 || len(p.Cmds[0].Args) != 1 {
		return false
	}
	var idents []string
	switch a := p.Cmds[0].Args[0].(type) {
	case *parse.FieldNode:
		idents = a.Ident
	case *parse.VariableNode:
		idents = a.Ident[1:]
	}
	return len(idents) > 0 && rangeable[idents[len(idents)-1]]
}

// Render executes the template for one measurement.
func (q *Query) Render(d QueryData) (string, error) {
	var out limitedBuffer
	if err := q.t.Execute(&out, d); err != nil {
		return "", fmt.Errorf("query template: %w", err)
	}
	return out.String(), nil
}

// limitedBuffer refuses output past MaxQueryLength: a template that loops over the clusters
// of a large gate cannot make the hub build a query of any size.
type limitedBuffer struct{ bytes.Buffer }

var errQueryTooLong = fmt.Errorf("the query is longer than %d bytes", MaxQueryLength)

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > MaxQueryLength {
		return 0, errQueryTooLong
	}
	return b.Buffer.Write(p)
}

var env = func() *cel.Env {
	e, err := cel.NewEnv(ext.Strings(), cel.Variable("result", cel.DynType))
	if err != nil {
		panic(fmt.Sprintf("analysisexpr: the CEL environment does not build: %v", err))
	}
	return e
}()

// Condition is a compiled condition.
type Condition struct{ prog cel.Program }

// CompileCondition compiles a condition over result; it must give a bool.
func CompileCondition(source string) (*Condition, error) {
	if len(source) > 1024 {
		return nil, fmt.Errorf("is %d characters long; at most 1024", len(source))
	}
	ast, iss := env.Compile(source)
	if iss.Err() != nil {
		return nil, fmt.Errorf("is not a valid CEL expression over result: %s", strings.ReplaceAll(iss.Err().Error(), "\n", " "))
	}
	if t := ast.OutputType(); !t.IsExactType(types.BoolType) && !t.IsExactType(types.DynType) {
		return nil, fmt.Errorf("gives %s; it must give a bool", t)
	}
	prog, err := env.Program(ast, cel.CostLimit(CostLimit), cel.InterruptCheckFrequency(100))
	if err != nil {
		return nil, fmt.Errorf("does not compile: %w", err)
	}
	return &Condition{prog: prog}, nil
}

// ErrNotBool is a condition that gave something other than a bool.
var ErrNotBool = errors.New("the condition did not give a bool")

// Holds evaluates the condition on a result: a float64, a list of them, or decoded JSON.
func (c *Condition) Holds(result any) (bool, error) {
	out, _, err := c.prog.Eval(map[string]any{"result": result})
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("%w (gave %v)", ErrNotBool, out.Value())
	}
	return b, nil
}

// FieldError names the check field a problem is in, under the caller's prefix.
type FieldError struct {
	Field, Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// Validate compiles every check's query and condition; the first problem is a *FieldError
// under field (e.g. "rolloutStrategy.analysis").
func Validate(field string, checks []rollout.Check) error {
	for i, c := range checks {
		if _, err := ParseQuery(c.Query); err != nil {
			return &FieldError{Field: fmt.Sprintf("%s[%d].query", field, i), Message: err.Error()}
		}
		if _, err := CompileCondition(c.Condition); err != nil {
			return &FieldError{Field: fmt.Sprintf("%s[%d].condition", field, i), Message: err.Error()}
		}
	}
	return nil
}
