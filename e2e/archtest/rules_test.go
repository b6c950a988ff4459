package archtest

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	ruleDefinition = regexp.MustCompile(`^- \*\*(R[1-9][0-9]*\.[1-9][0-9]*) `)
	ruleRow        = regexp.MustCompile("^\\| (R[1-9][0-9]*\\.[1-9][0-9]*) \\| `(Test[A-Za-z0-9_]+)` \\| `(Test[A-Za-z0-9_]+)` \\|$")
	testFunc       = regexp.MustCompile(`^func (Test[A-Za-z0-9_]+)\(`)
	citedRule      = regexp.MustCompile(`R([1-9][0-9]*)_([1-9][0-9]*)`)
)

// TestRolloutRulesAreDocumentedAndTested holds rollout/ROLLOUT.md to what it claims: every rule
// of §1–§5 has a row in its table naming a planner test (rollout, bundle or cmd) and a test
// through the hub (hub or e2e), both existing and citing the rule in their names; and every rule
// id a test name cites is one the document defines.
func TestRolloutRulesAreDocumentedAndTested(t *testing.T) {
	const root = "../.."
	defined, rows := readRules(t, filepath.Join(root, "rollout", "ROLLOUT.md"))
	planner := testsUnder(t, root, "rollout", "bundle", "cmd")
	hub := testsUnder(t, root, "hub", "e2e", "agent")
	for id := range defined {
		row, ok := rows[id]
		if !ok {
			t.Errorf("%s has no row in the table of ROLLOUT.md", id)
			continue
		}
		for _, c := range []struct {
			name  string
			where map[string]string
			kind  string
		}{{row[0], planner, "planner test (rollout, bundle, cmd)"}, {row[1], hub, "hub or e2e test"}} {
			if _, ok := c.where[c.name]; !ok {
				t.Errorf("%s: %s is not a %s of the repository", id, c.name, c.kind)
			}
			if !cites(c.name, id) {
				t.Errorf("%s: %s does not cite %s in its name", id, c.name, id)
			}
		}
	}
	for id := range rows {
		if !defined[id] {
			t.Errorf("the table of ROLLOUT.md has a row for %s, which it does not define", id)
		}
	}
	for _, tests := range []map[string]string{planner, hub} {
		for name, file := range tests {
			for _, m := range citedRule.FindAllStringSubmatch(name, -1) {
				if id := "R" + m[1] + "." + m[2]; !defined[id] {
					t.Errorf("%s (%s) cites %s, which ROLLOUT.md does not define", name, file, id)
				}
			}
		}
	}
}

// readRules returns the rule ids ROLLOUT.md defines and its table: id → planner and hub test.
func readRules(t *testing.T, path string) (map[string]bool, map[string][2]string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	defined, rows := map[string]bool{}, map[string][2]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		if m := ruleDefinition.FindStringSubmatch(s.Text()); m != nil {
			if defined[m[1]] {
				t.Errorf("ROLLOUT.md defines %s twice", m[1])
			}
			defined[m[1]] = true
		}
		if m := ruleRow.FindStringSubmatch(s.Text()); m != nil {
			if _, dup := rows[m[1]]; dup {
				t.Errorf("the table of ROLLOUT.md has two rows for %s", m[1])
			}
			rows[m[1]] = [2]string{m[2], m[3]}
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if len(defined) == 0 || len(rows) == 0 {
		t.Fatalf("%s: no rules or no table found", path)
	}
	return defined, rows
}

// testsUnder maps the test functions of the _test.go files under the top-level directories
// to their files.
func testsUnder(t *testing.T, root string, dirs ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, line := range strings.Split(string(data), "\n") {
				if m := testFunc.FindStringSubmatch(line); m != nil {
					out[m[1]] = path
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// cites reports whether a test name cites rule id (R1.7 as R1_7, not as the start of R1_70).
func cites(name, id string) bool {
	for _, m := range citedRule.FindAllStringSubmatch(name, -1) {
		if "R"+m[1]+"."+m[2] == id {
			return true
		}
	}
	return false
}
