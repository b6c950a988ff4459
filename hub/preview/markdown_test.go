package preview

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/flotilla-dev/flotilla/e2e/hostile"
)

// checkMarkdownConfines reads Markdown as a CommonMark renderer finds its code fences and
// fails when repository text escaped them: outside fences, no character that opens HTML, a
// link, an image or code may appear raw (an entity is inert); inside, every line is a line of
// a diff, so no fence was closed early by the text. It returns the number of fenced blocks.
func checkMarkdownConfines(t *testing.T, md string) int {
	t.Helper()
	fences := 0
	fence := ""
	for i, line := range strings.Split(md, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.Trim(trimmed, "`") == "" && len(trimmed) >= len(fence) {
				fence = ""
				continue
			}
			if !diffLine.MatchString(strings.TrimPrefix(line, "    ")) { // the list item's indent
				t.Errorf("line %d, inside a fence, is not a diff's: %q", i+1, line)
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") {
			fence = strings.TrimRight(trimmed[:len(trimmed)-len(strings.TrimLeft(trimmed, "`"))], " ")
			if rest := strings.TrimLeft(trimmed, "`"); rest != "diff" {
				t.Errorf("line %d opens a fence that is not ours: %q", i+1, line)
			}
			fences++
			continue
		}
		if strings.HasPrefix(line, "| ") {
			// A row of the summary's table: its five cells' pipes are ours, and only those.
			if n := strings.Count(line, "|"); n != 6 {
				t.Errorf("line %d, a table row, has %d pipes, want 6: %q", i+1, n, line)
			}
			line = strings.ReplaceAll(line, "|", "")
		}
		if raw := unsafeRaw.FindString(entity.ReplaceAllString(line, "")); raw != "" {
			t.Errorf("line %d, outside code, holds %q raw: %q", i+1, raw, line)
		}
		if link := linkable.FindString(line); link != "" {
			t.Errorf("line %d, outside code, holds %q, which GitHub links or mentions by itself: %q", i+1, link, line)
		}
	}
	if fence != "" {
		t.Errorf("a fence is never closed")
	}
	return fences
}

var (
	diffLine  = regexp.MustCompile(`^([ +\-@]|… \d+ more lines$|$)`)
	entity    = regexp.MustCompile(`&#\d+;`)
	unsafeRaw = regexp.MustCompile("[<>\\[\\]`&\\\\|]")
	linkable  = regexp.MustCompile(`(?i)://|www\.|@\w`)
)

// hostileReport is a report whose every field a repository writes is built to break out.
func hostileReport(s string) *Report {
	obj := ObjectChange{APIVersion: "v1" + s, Kind: "ConfigMap" + s, Namespace: s, Name: s, Change: ObjectChanged,
		Diff: "--- base\n+++ head\n@@ -1 +1 @@\n-" + strings.ReplaceAll(s, "\n", "\n-") + "\n+" + strings.ReplaceAll(s, "\n", "\n+") + "\n"}
	b := BundleChange{Name: "b" + s, Dir: s, Status: StatusChanged, Joining: []string{s}, Leaving: []string{s},
		Groups: []GroupChange{{Count: 1, Clusters: []string{s}, CommonLabels: map[string]string{s: s}, ClusterGroups: []string{s},
			BaseCustomization: s, HeadCustomization: s + "2", Objects: []ObjectChange{obj}, Options: obj.Diff}},
		HeadFailure: &RenderFailure{Message: s, Count: 1, Clusters: []string{s}}, BaseFailure: &RenderFailure{Message: s, Count: 1, Clusters: []string{s}},
		Plan: &Plan{Strategy: s, Clusters: 1, Stuck: s, Steps: []PlanStep{{At: "0s", Started: []string{s}, Waiting: s}}}}
	r := &Report{Base: Revision{Ref: s, Commit: s}, Head: Revision{Ref: s}, Clusters: 1, Bundles: []BundleChange{b}}
	r.summarize()
	return r
}

var breakouts = []string{
	"<img src=x onerror=alert(1)>",
	"[click](https://evil.example/steal)",
	"![pixel](https://evil.example/p.png)",
	"```\n</details><script>alert(1)</script>\n```",
	"````````````",
	"| col | umn |\n| --- | --- |",
	"\n# Approved by the security team\n",
	"\\`code\\` &lt;b&gt; &#60;b&#62;",
	"<!-- hidden -->",
	"line\r\n```diff\r\n+ injected",
}

// Repository text cannot open HTML, links, images or code, nor close the fence of a diff, nor
// become a link or a mention by itself (the strings every channel is tested with, too).
func TestMarkdownKeepsRepositoryTextInert(t *testing.T) {
	for _, s := range append(slices.Clone(breakouts), hostile.Texts...) {
		var md bytes.Buffer
		if err := hostileReport(s).WriteMarkdown(&md, 0); err != nil {
			t.Fatal(err)
		}
		if n := checkMarkdownConfines(t, md.String()); n != 2 {
			t.Errorf("%q: %d fenced blocks, want the object's diff and the options' diff", s, n)
		}
		if t.Failed() {
			t.Fatalf("for %q:\n%s", s, md.String())
		}
	}
}

func FuzzMarkdownKeepsRepositoryTextInert(f *testing.F) {
	for _, s := range breakouts {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var md bytes.Buffer
		if err := hostileReport(s).WriteMarkdown(&md, 0); err != nil {
			t.Fatal(err)
		}
		checkMarkdownConfines(t, md.String())
	})
}

// However much changes, the Markdown stays within its length, summary first, and says what it
// left out; the JSON report keeps everything.
func TestMarkdownIsBoundedSummaryFirst(t *testing.T) {
	base, head := map[string]string{}, map[string]string{}
	for i := range 120 {
		dir := fmt.Sprintf("apps/app-%03d", i)
		base[dir+"/fleet.yaml"] = "defaultNamespace: apps\n"
		var cm strings.Builder
		fmt.Fprintf(&cm, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app-%03d}\ndata:\n", i)
		for k := range 40 {
			fmt.Fprintf(&cm, "  key%02d: value-%d\n", k, k)
		}
		base[dir+"/cm.yaml"] = cm.String()
		head[dir+"/cm.yaml"] = strings.ReplaceAll(cm.String(), "value-", "changed-")
	}
	headFiles := map[string]string{}
	for k, v := range base {
		headFiles[k] = v
	}
	for k, v := range head {
		headFiles[k] = v
	}
	fleet := threeGroups()
	fleet.Clusters, fleet.Paths = fleet.Clusters[:12], []string{"apps/*"}
	r, err := Compare(context.Background(), Revision{Ref: "main", Dir: writeRepo(t, base, nil)}, Revision{Ref: "big", Dir: writeRepo(t, headFiles, nil)}, fleet, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Summary.Changed != 120 {
		t.Fatalf("summary %+v", r.Summary)
	}
	const max = 20000
	var md bytes.Buffer
	if err := r.WriteMarkdown(&md, max); err != nil {
		t.Fatal(err)
	}
	out := md.String()
	if len(out) > max {
		t.Errorf("%d bytes, more than %d", len(out), max)
	}
	if !strings.HasPrefix(out, "### Fleet preview: main → big\n\n**120 of 120 bundles change** on 12 of 12 clusters") {
		t.Errorf("the summary is not first:\n%.300s", out)
	}
	m := regexp.MustCompile(`(\d+) of 120 bundles that change are not shown here`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the end does not say what was left out:\n%s", out[len(out)-500:])
	}
	shown := strings.Count(out, "\n#### ")
	if left := m[1]; fmt.Sprint(120-shown) != left || shown == 0 {
		t.Errorf("%d bundles shown, %s said left out", shown, left)
	}
	checkMarkdownConfines(t, out)
}
