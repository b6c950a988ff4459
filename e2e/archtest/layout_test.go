package archtest

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestTopLevelLayout fails when the repository tracks anything at its top level beyond the
// fixed layout: a built binary or a stray file committed by mistake shows up here first.
func TestTopLevelLayout(t *testing.T) {
	want := []string{".ci", "README.md", "agent", "bundle", "cmd", "e2e", "go.mod", "go.sum", "hub", "manifests", "rollout"}
	cmd := exec.Command("git", "ls-files")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var got []string
	for _, path := range strings.Fields(string(out)) {
		top, _, _ := strings.Cut(path, "/")
		if !slices.Contains(got, top) {
			got = append(got, top)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("top-level entries tracked: %v, want exactly %v", got, want)
	}
}
