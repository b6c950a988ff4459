package archtest

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	ruleDefinition = regexp.MustCompile(`^- \*\*(R[1-9][0-9]*\.[1-9][0-9]*) `)
	ruleRow        = regexp.MustCompile("^\\| (R[1-9][0-9]*\\.[1-9][0-9]*) \\| `(Test[A-Za-z0-9_]+)` \\| (`Test[A-Za-z0-9_]+`(?:, `Test[A-Za-z0-9_]+`)*) \\| ([A-Za-z]+) \\|$")
	testFunc       = regexp.MustCompile(`^func (Test[A-Za-z0-9_]+)\(`)
	citedRule      = regexp.MustCompile(`R([1-9][0-9]*)_([1-9][0-9]*)`)
)

// ruleTests is a rule's row in the table of ROLLOUT.md.
type ruleTests struct {
	planner  string
	hub      []string
	coverage string
}

// TestRolloutRulesAreDocumentedAndTested holds rollout/ROLLOUT.md to what it claims: every rule
// has a row in its table naming a planner test (rollout, bundle or cmd) and tests through the
// hub (hub or e2e), all existing and citing the rule in their names, and is Full; every hub
// test starts a hub; and every rule id a test name cites is one the document defines.
func TestRolloutRulesAreDocumentedAndTested(t *testing.T) {
	const root = "../.."
	defined, rows := readRules(t, filepath.Join(root, "rollout", "ROLLOUT.md"))
	planner := testsUnder(t, root, "rollout", "bundle", "cmd")
	hub := testsUnder(t, root, "hub", "e2e")
	starters := map[string]map[string]bool{} // directory → the test functions there that start a hub
	for id := range defined {
		row, ok := rows[id]
		if !ok {
			t.Errorf("%s has no row in the table of ROLLOUT.md", id)
			continue
		}
		if row.coverage != "Full" {
			t.Errorf("%s is %s, not Full: it needs a planner test and a hub test", id, row.coverage)
		}
		check := func(name string, where map[string]string, kind string) {
			if _, ok := where[name]; !ok {
				t.Errorf("%s: %s is not a %s of the repository", id, name, kind)
			}
			if !cites(name, id) {
				t.Errorf("%s: %s does not cite %s in its name", id, name, id)
			}
		}
		check(row.planner, planner, "planner test (rollout, bundle, cmd)")
		for _, name := range row.hub {
			check(name, hub, "hub or e2e test")
			file, ok := hub[name]
			if !ok {
				continue
			}
			dir := filepath.Dir(file)
			if starters[dir] == nil {
				starters[dir] = hubStarters(t, dir)
			}
			if !starters[dir][name] {
				t.Errorf("%s: %s (%s) starts no hub (hub.Run): a hub test shows the real hub acting on the rule", id, name, file)
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

// TestHubStartersFindsTheHub points hubStarters at a probe package: a test that starts a hub
// through helpers, a method and a closure, one that starts it directly, and ones that only
// look like it (a method named Run of another type, a helper never called, a hub.Options).
func TestHubStartersFindsTheHub(t *testing.T) {
	dir := t.TempDir()
	probe := `package probe

import (
	"context"
	"testing"

	"github.com/flotilla-dev/flotilla/hub"
)

type env struct{ run func(context.Context) error }

func (e *env) start(run func(context.Context) error) { e.run = run; _ = e.run(context.Background()) }
func (e *env) startHub()                              { e.start(func(ctx context.Context) error { return hub.Run(ctx, hub.Options{}) }) }
func newEnv() *env                                    { e := &env{}; e.startHub(); return e }

type other struct{}

func (other) Run(context.Context, hub.Options) error { return nil }
func unused()                                       { _ = hub.Run(context.Background(), hub.Options{}) }

func TestThroughHelpers(t *testing.T) { newEnv() }
func TestDirect(t *testing.T)         { _ = hub.Run(context.Background(), hub.Options{}) }
func TestOtherRun(t *testing.T)       { _ = other{}.Run(context.Background(), hub.Options{}) }
func TestOptionsOnly(t *testing.T)    { _ = hub.Options{} }
`
	if err := os.WriteFile(filepath.Join(dir, "probe_test.go"), []byte(probe), 0o644); err != nil {
		t.Fatal(err)
	}
	got := hubStarters(t, dir)
	for name, want := range map[string]bool{"TestThroughHelpers": true, "TestDirect": true, "TestOtherRun": false, "TestOptionsOnly": false} {
		if got[name] != want {
			t.Errorf("%s starts a hub: %v, want %v", name, got[name], want)
		}
	}
}

// hubStarters parses the Go files of dir and returns its test functions that start a hub: that
// call hub.Run (Run, in package hub itself), directly or through the package's functions and
// methods. Calls are followed by name, which can only make a test look like a starter when a
// method of another type shares a helper's name; a call of a Run that is not the hub's is not
// followed.
func hubStarters(t *testing.T, dir string) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string][]string{} // function or method name → the names it calls
	starts := map[string]bool{}    // functions that call hub.Run themselves
	var tests []string
	for pkgName, pkg := range pkgs {
		for _, file := range pkg.Files {
			hubImport := ""
			for _, imp := range file.Imports {
				if strings.Trim(imp.Path.Value, `"`) == hubPkg {
					hubImport = "hub"
					if imp.Name != nil {
						hubImport = imp.Name.Name
					}
				}
			}
			for _, decl := range file.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				name := fn.Name.Name
				if fn.Recv == nil && strings.HasPrefix(name, "Test") {
					tests = append(tests, name)
				}
				ast.Inspect(fn.Body, func(n ast.Node) bool {
					call, ok := n.(*ast.CallExpr)
					if !ok {
						return true
					}
					switch f := call.Fun.(type) {
					case *ast.Ident:
						if f.Name == "Run" && pkgName == "hub" {
							starts[name] = true
						}
						calls[name] = append(calls[name], f.Name)
					case *ast.SelectorExpr:
						if x, ok := f.X.(*ast.Ident); ok && hubImport != "" && x.Name == hubImport {
							starts[name] = starts[name] || f.Sel.Name == "Run"
							return true
						}
						if f.Sel.Name != "Run" {
							calls[name] = append(calls[name], f.Sel.Name)
						}
					}
					return true
				})
			}
		}
	}
	reaches := map[string]bool{}
	var visit func(string, map[string]bool) bool
	visit = func(name string, seen map[string]bool) bool {
		if r, done := reaches[name]; done {
			return r
		}
		if seen[name] {
			return false
		}
		seen[name] = true
		r := starts[name]
		for _, callee := range calls[name] {
			if !r && visit(callee, seen) {
				r = true
			}
		}
		if r {
			reaches[name] = true
		}
		return r
	}
	out := map[string]bool{}
	for _, name := range tests {
		out[name] = visit(name, map[string]bool{})
	}
	return out
}

// readRules returns the rule ids ROLLOUT.md defines and its table: id → planner and hub tests.
func readRules(t *testing.T, path string) (map[string]bool, map[string]ruleTests) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	defined, rows := map[string]bool{}, map[string]ruleTests{}
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
			var hub []string
			for _, name := range strings.Split(m[3], ", ") {
				hub = append(hub, strings.Trim(name, "`"))
			}
			rows[m[1]] = ruleTests{planner: m[2], hub: hub, coverage: m[4]}
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
