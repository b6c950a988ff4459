package notify

import (
	"bytes"
	"errors"
	"fmt"
	"text/template"
	"text/template/parse"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/events"
)

// MaxSummary bounds a rendered summary.
const MaxSummary = 1024

// summaryFields are what a summary may name: the event's, nothing else.
var summaryFields = map[string]bool{"Kind": true, "Name": true, "Namespace": true, "Reason": true, "Message": true, "Severity": true}

// summaryData is what a summary template sees.
type summaryData struct {
	Kind, Name, Namespace, Reason, Message, Severity string
}

// compiledSummary is an alert's summary template, for the alert's version it was compiled from.
type compiledSummary struct {
	version string
	t       *template.Template
}

// summary compiles the alert's summary once per version of the alert.
func (d *Dispatcher) summary(a *v1alpha1.Alert) (compiledSummary, error) {
	d.mu.Lock()
	c, ok := d.compiled[a.UID]
	d.mu.Unlock()
	if ok && c.version == a.ResourceVersion {
		return c, nil
	}
	t, err := ParseSummary(a.Spec.Summary)
	if err != nil {
		return compiledSummary{}, err
	}
	c = compiledSummary{version: a.ResourceVersion, t: t}
	d.mu.Lock()
	d.compiled[a.UID] = c
	d.mu.Unlock()
	return c, nil
}

// ParseSummary compiles a summary template. An alert is a tenant's: only text, the event's
// fields and {{if}} / {{else}} on them are admitted (no function, no range, no other
// template), so a summary costs the hub no more than its own length.
func ParseSummary(source string) (*template.Template, error) {
	if source == "" {
		return nil, nil
	}
	t, err := template.New("summary").Option("missingkey=error").Parse(source)
	if err != nil {
		return nil, fmt.Errorf("is not a valid template: %w", err)
	}
	if len(t.Templates()) != 1 {
		return nil, errors.New("defines a template: a summary is one template")
	}
	if err := admitSummary(t.Tree.Root); err != nil {
		return nil, fmt.Errorf("is not allowed: %w", err)
	}
	return t, nil
}

func admitSummary(n parse.Node) error {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := admitSummary(c); err != nil {
				return err
			}
		}
		return nil
	case *parse.TextNode, *parse.CommentNode:
		return nil
	case *parse.ActionNode:
		return admitField(n.Pipe)
	case *parse.IfNode:
		if err := admitField(n.Pipe); err != nil {
			return err
		}
		if err := admitSummary(n.List); err != nil {
			return err
		}
		if n.ElseList != nil {
			return admitSummary(n.ElseList)
		}
		return nil
	}
	return fmt.Errorf("%s: only the event's fields and {{if}} are allowed", n)
}

// admitField admits a pipeline that is one of the event's fields.
func admitField(p *parse.PipeNode) error {
	if p == nil || len(p.Decl) > 0 || len(p.Cmds) != 1 || len(p.Cmds[0].Args) != 1 {
		return fmt.Errorf("%s: only the event's fields are allowed", p)
	}
	f, ok := p.Cmds[0].Args[0].(*parse.FieldNode)
	if !ok || len(f.Ident) != 1 || !summaryFields[f.Ident[0]] {
		return fmt.Errorf("%s: only .Kind, .Name, .Namespace, .Reason, .Message and .Severity are allowed", p)
	}
	return nil
}

// render executes the summary for an event; "" without a template.
func (c compiledSummary) render(t events.Told) (string, error) {
	if c.t == nil {
		return "", nil
	}
	var out bytes.Buffer
	if err := c.t.Execute(&out, summaryData{Kind: t.Kind, Name: t.Name, Namespace: t.Namespace, Reason: t.Reason, Message: t.Note, Severity: severity(t)}); err != nil {
		return "", err
	}
	return truncate(out.String(), MaxSummary), nil
}

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
