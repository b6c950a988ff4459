package preview

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/flotilla-dev/flotilla/hub/model"
)

// DefaultMarkdownLength fits a pull-request comment (GitHub takes 65,536 characters).
const DefaultMarkdownLength = 60000

// Shown at most, per item, in Markdown (the JSON report has everything).
const (
	shownClusters = 8
	shownDiff     = 80 // lines of one object's diff
	shownSteps    = 12
)

// WriteMarkdown writes the report as Markdown of at most max bytes (0: DefaultMarkdownLength):
// a summary and a table of the bundles that change first, then each bundle's groups with their
// objects and diffs, and its rollout plan. What does not fit is left out whole, and the end
// says how much was.
//
// The repository's text (names, messages, diffs) is untrusted: outside code blocks it is
// written escaped, every character but a known-safe few as an HTML entity, so it can open no
// link, image, HTML or formatting; a diff goes in a fence longer than any run of backticks in
// it, which it therefore cannot close.
func (r *Report) WriteMarkdown(w io.Writer, max int) error {
	if max <= 0 {
		max = DefaultMarkdownLength
	}
	const reserve = 400 // for the closing line about what was left out
	doc := &budget{max: max - reserve}
	doc.must(r.markdownSummary())
	changed := 0
	for _, b := range r.Bundles {
		if b.Status != StatusUnchanged {
			changed++
		}
	}
	shown := 0
	for _, b := range r.Bundles {
		if b.Status == StatusUnchanged {
			continue
		}
		if !doc.add(bundleMarkdown(b, true)) && !doc.add(bundleMarkdown(b, false)) {
			break
		}
		shown++
	}
	if shown < changed {
		doc.must(fmt.Sprintf("\n---\n%d of %d bundles that change are not shown here, to keep within %d characters; the JSON report (-o json) has them all.\n", changed-shown, changed, max))
	}
	_, err := io.WriteString(w, doc.String())
	return err
}

// budget is a document that takes a part only when it fits.
type budget struct {
	strings.Builder
	max int
}

func (b *budget) add(s string) bool {
	if b.Len()+len(s) > b.max {
		return false
	}
	b.WriteString(s)
	return true
}

// must writes a part that is needed whatever its size (it is bounded by construction).
func (b *budget) must(s string) { b.WriteString(s) }

func (r *Report) markdownSummary() string {
	var s strings.Builder
	fmt.Fprintf(&s, "### Fleet preview: %s → %s\n\n", revisionMarkdown(r.Base), revisionMarkdown(r.Head))
	sum := r.Summary
	if !r.Changed() {
		fmt.Fprintf(&s, "Nothing changes on the %d clusters compared: %d bundles render as before.\n", r.Clusters, sum.Bundles)
		return s.String()
	}
	fmt.Fprintf(&s, "**%d of %d bundles change** on %d of %d clusters: %d changed, %d added, %d removed, %d do not render.",
		sum.Added+sum.Changed+sum.Removed+sum.Broken, sum.Bundles, sum.ClustersAffected, r.Clusters, sum.Changed, sum.Added, sum.Removed, sum.Broken)
	if sum.Longest != "" {
		fmt.Fprintf(&s, " The longest rollout takes %s.", sum.Longest)
	}
	s.WriteString("\n\n| Bundle | Change | Clusters | Objects | Rollout |\n| --- | --- | --- | --- | --- |\n")
	rows := 0
	for _, b := range r.Bundles {
		if b.Status == StatusUnchanged {
			continue
		}
		if rows == 50 {
			s.WriteString("| … | | | | |\n")
			break
		}
		rows++
		fmt.Fprintf(&s, "| %s | %s | %s | %s | %s |\n", text(b.Name), b.Status, clustersCell(b), objectsCell(b), rolloutCell(b.Plan))
	}
	return s.String()
}

func revisionMarkdown(rev Revision) string {
	if rev.Commit == "" || rev.Commit == rev.Ref {
		return text(rev.Ref)
	}
	return fmt.Sprintf("%s (%s)", text(rev.Ref), text(short(rev.Commit)))
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}

func clustersCell(b BundleChange) string {
	changing := 0
	for _, g := range b.Groups {
		changing += g.Count
	}
	cell := fmt.Sprintf("%d changing, %d as before", changing, b.Unchanged)
	if f := b.HeadFailure; f != nil {
		cell += fmt.Sprintf(", %d not rendering", f.Count)
	}
	return cell
}

func objectsCell(b BundleChange) string {
	var added, changed, removed int
	for _, g := range b.Groups {
		for _, o := range g.Objects {
			switch o.Change {
			case ObjectAdded:
				added++
			case ObjectChanged:
				changed++
			case ObjectRemoved:
				removed++
			}
		}
	}
	return fmt.Sprintf("+%d ~%d −%d", added, changed, removed)
}

func rolloutCell(p *Plan) string {
	switch {
	case p == nil:
		return "–"
	case p.NotSimulated != "":
		return text(p.Strategy) + ": not simulated"
	case p.Completed:
		return fmt.Sprintf("%s (%s)", p.ETA, text(p.Strategy))
	}
	return "stops: " + text(truncate(p.Stuck, 80))
}

func bundleMarkdown(b BundleChange, diffs bool) string {
	var s strings.Builder
	fmt.Fprintf(&s, "\n#### %s", text(b.Name))
	if b.Dir != "" {
		fmt.Fprintf(&s, " (%s)", text(b.Dir))
	}
	fmt.Fprintf(&s, ": %s\n\n", b.Status)
	if f := b.HeadFailure; f != nil {
		fmt.Fprintf(&s, "- **Does not render** for %s (%s): %s\n", clusterCount(f.Count), namesMarkdown(f.Clusters, f.Count), text(truncate(f.Message, 600)))
	}
	if f := b.BaseFailure; f != nil {
		fmt.Fprintf(&s, "- The base does not render for %s (%s), which are not compared: %s\n", clusterCount(f.Count), namesMarkdown(f.Clusters, f.Count), text(truncate(f.Message, 300)))
	}
	if n := len(b.Joining); n > 0 {
		fmt.Fprintf(&s, "- Targets change: %s join (%s)\n", clusterCount(n), namesMarkdown(b.Joining, n))
	}
	if n := len(b.Leaving); n > 0 {
		fmt.Fprintf(&s, "- Targets change: %s leave (%s)\n", clusterCount(n), namesMarkdown(b.Leaving, n))
	}
	for _, g := range b.Groups {
		fmt.Fprintf(&s, "- **%s**%s: %s\n", clusterCount(g.Count), groupTraits(g), namesMarkdown(g.Clusters, g.Count))
		for _, o := range g.Objects {
			fmt.Fprintf(&s, "  - %s %s\n", o.Change, objectName(o))
			if diffs && o.Diff != "" {
				s.WriteString(fenced(o.Diff, "    "))
			}
		}
		if g.Options != "" {
			s.WriteString("  - changed: how the agent deploys\n")
			if diffs {
				s.WriteString(fenced(g.Options, "    "))
			}
		}
	}
	if p := b.Plan; p != nil {
		s.WriteString(planMarkdown(p))
	}
	return s.String()
}

func groupTraits(g GroupChange) string {
	var traits []string
	if len(g.CommonLabels) > 0 {
		var labels []string
		for _, k := range slices.Sorted(maps.Keys(g.CommonLabels)) {
			labels = append(labels, k+"="+g.CommonLabels[k])
		}
		traits = append(traits, "labels "+text(strings.Join(labels, ",")))
	}
	if len(g.ClusterGroups) > 0 {
		traits = append(traits, "cluster groups "+text(strings.Join(g.ClusterGroups, ", ")))
	}
	switch {
	case g.BaseCustomization != g.HeadCustomization:
		traits = append(traits, fmt.Sprintf("customization %s → %s", text(orNone(g.BaseCustomization)), text(orNone(g.HeadCustomization))))
	case g.HeadCustomization != "":
		traits = append(traits, "customization "+text(g.HeadCustomization))
	}
	if len(traits) == 0 {
		return ""
	}
	return " (" + strings.Join(traits, "; ") + ")"
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func objectName(o ObjectChange) string {
	name := o.Name
	if o.Namespace != "" {
		name = o.Namespace + "/" + o.Name
	}
	return fmt.Sprintf("%s %s %s", text(o.APIVersion), text(o.Kind), text(name))
}

func planMarkdown(p *Plan) string {
	var s strings.Builder
	switch {
	case p.NotSimulated != "":
		fmt.Fprintf(&s, "- Rollout (%s) to %s: not simulated: %s\n", text(p.Strategy), clusterCount(p.Clusters), text(p.NotSimulated))
		return s.String()
	case p.Completed:
		fmt.Fprintf(&s, "- Rollout (%s) to %s: complete after **%s**\n", text(p.Strategy), clusterCount(p.Clusters), p.ETA)
	default:
		fmt.Fprintf(&s, "- Rollout (%s) to %s: does not complete by itself: %s\n", text(p.Strategy), clusterCount(p.Clusters), text(truncate(p.Stuck, 300)))
	}
	for i, st := range p.Steps {
		if i == shownSteps {
			fmt.Fprintf(&s, "  - … %d more steps\n", len(p.Steps)-shownSteps)
			break
		}
		fmt.Fprintf(&s, "  - at %s:", st.At)
		if n := len(st.Started); n > 0 {
			fmt.Fprintf(&s, " %d started (%s)", n, namesMarkdown(st.Started, n))
		}
		if st.Waiting != "" {
			fmt.Fprintf(&s, " waiting: %s", text(truncate(st.Waiting, 200)))
		}
		s.WriteString("\n")
	}
	return s.String()
}

// namesMarkdown lists the first few names and how many more there are.
func namesMarkdown(names []string, total int) string {
	shown := names[:min(len(names), shownClusters)]
	out := text(strings.Join(shown, ", "))
	if total > len(shown) {
		out += fmt.Sprintf(" and %d more", total-len(shown))
	}
	return out
}

// fenced puts a diff in a code block, indented under a list item, cut at shownDiff lines. The
// fence is longer than the longest run of backticks in the text, so no line of it closes it.
func fenced(diff, indent string) string {
	// A carriage return ends a line in Markdown too: it is shown, not obeyed.
	lines := strings.Split(strings.ReplaceAll(strings.TrimRight(diff, "\n"), "\r", `\r`), "\n")
	if len(lines) > shownDiff {
		lines = append(lines[:shownDiff], fmt.Sprintf("… %d more lines", len(lines)-shownDiff))
	}
	body := strings.Join(lines, "\n")
	fence := strings.Repeat("`", max(3, longestRun(body, '`')+1))
	var s strings.Builder
	s.WriteString(indent + fence + "diff\n")
	for _, l := range lines {
		s.WriteString(indent + l + "\n")
	}
	s.WriteString(indent + fence + "\n")
	return s.String()
}

func longestRun(s string, c byte) int {
	longest, run := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	return longest
}

// text escapes untrusted text for Markdown outside code: letters, digits, spaces and a few
// punctuation marks that mean nothing to Markdown or HTML there pass; every other character
// becomes its numeric HTML entity, which renders as the character and does nothing. Line
// breaks become spaces. Bare URLs, www. hosts and @mentions, which GitHub and GitLab link
// without any markup, are broken by a zero-width space (model.Unlinked).
func text(s string) string {
	var b strings.Builder
	for _, r := range model.Unlinked(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9',
			r == ' ', r == '.', r == ',', r == '-', r == '/', r == ':', r == '=', r == '@', r == '(', r == ')', r == '"', r == '\'', r == ';', r == '?', r == '%', r == '→':
			b.WriteRune(r)
		case r == '\n' || r == '\r' || r == '\t':
			b.WriteByte(' ')
		default:
			fmt.Fprintf(&b, "&#%d;", r)
		}
	}
	return b.String()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && (s[cut]&0xC0) == 0x80 {
		cut-- // not inside a UTF-8 sequence
	}
	return s[:cut] + "…"
}

// clusterCount is "1 cluster" or "N clusters".
func clusterCount(n int) string {
	if n == 1 {
		return "1 cluster"
	}
	return fmt.Sprintf("%d clusters", n)
}
