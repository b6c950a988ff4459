package archtest

import (
	"bufio"
	"errors"
	"fmt"
	"go/ast"
	"go/constant"
	"go/types"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/tools/go/packages"
)

const (
	module = "github.com/flotilla-dev/flotilla"
	hubPkg = module + "/hub"
)

// hubRow is one package of the map hub/doc.go draws: the hub packages it may import and the
// kinds it writes through an API client (Kind, or Kind/subresource).
type hubRow struct {
	imports []string
	writes  []string
}

// readHubMap parses the table under "# The packages" in hub/doc.go: one row per package,
// "package | may import | writes", names relative to hub/ ("." is hub itself), "-" for none,
// and rows with no name continuing the one above.
func readHubMap(t *testing.T) map[string]hubRow {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "hub", "doc.go"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows := map[string]hubRow{}
	inMap, last := false, ""
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		if strings.HasPrefix(line, "// # ") {
			inMap = line == "// # The packages"
			continue
		}
		if !inMap || !strings.HasPrefix(line, "//\t") {
			continue
		}
		cells := strings.Split(strings.TrimPrefix(line, "//\t"), "|")
		if len(cells) != 3 {
			t.Fatalf("hub/doc.go: row %q of the package map has %d cells, want 3 (package | may import | writes)", line, len(cells))
		}
		name := strings.TrimSpace(cells[0])
		switch {
		case name == "package":
			continue // the header
		case name == "" && last == "":
			t.Fatalf("hub/doc.go: the package map starts with a continuation row: %q", line)
		case name == "":
			name = last // a continuation of the row above
		default:
			if _, dup := rows[name]; dup {
				t.Errorf("hub/doc.go draws %s twice", name)
			}
		}
		row := rows[name]
		row.imports = append(row.imports, listCell(cells[1])...)
		row.writes = append(row.writes, listCell(cells[2])...)
		rows[name], last = row, name
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatal("hub/doc.go has no package map under \"# The packages\"")
	}
	return rows
}

func listCell(cell string) []string {
	var out []string
	for _, f := range strings.Fields(cell) {
		if f != "-" {
			out = append(out, f)
		}
	}
	return out
}

// relative names a hub package as the map does.
func relative(path string) string {
	if path == hubPkg {
		return "."
	}
	return strings.TrimPrefix(path, hubPkg+"/")
}

// loadHub type-checks the hub's packages (their code, not their tests), once for the tests
// that read them.
func loadHub(t *testing.T) []*packages.Package {
	t.Helper()
	pkgs, err := hubPackages()
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

var hubPackages = sync.OnceValues(func() ([]*packages.Package, error) {
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedImports | packages.NeedTypes | packages.NeedSyntax | packages.NeedTypesInfo,
		Dir:  filepath.Join("..", ".."),
	}
	pkgs, err := packages.Load(cfg, "./hub/...")
	if err != nil {
		return nil, fmt.Errorf("loading ./hub/...: %w", err)
	}
	if packages.PrintErrors(pkgs) > 0 || len(pkgs) == 0 {
		return nil, errors.New("the hub's packages do not load")
	}
	return pkgs, nil
})

// TestHubImportMap fails when a hub package imports a hub package its row in hub/doc.go does
// not draw, when the map leaves a package out or draws one that is gone, and when the map
// itself has a cycle: the packages are layered, each importing only what lies below it.
func TestHubImportMap(t *testing.T) {
	rows := readHubMap(t)
	seen := map[string]bool{}
	for _, p := range loadHub(t) {
		name := relative(p.PkgPath)
		seen[name] = true
		row, ok := rows[name]
		if !ok {
			t.Errorf("hub/%s is not in the package map of hub/doc.go", name)
			continue
		}
		var got []string
		for path := range p.Imports {
			if path == hubPkg || strings.HasPrefix(path, hubPkg+"/") {
				got = append(got, relative(path))
			}
		}
		slices.Sort(got)
		for _, imp := range got {
			if !slices.Contains(row.imports, imp) {
				t.Errorf("hub/%s imports hub/%s, which its row in hub/doc.go does not draw", name, imp)
			}
		}
		for _, imp := range row.imports {
			if !slices.Contains(got, imp) {
				t.Errorf("hub/doc.go draws hub/%s importing hub/%s, which it does not: take it off the map", name, imp)
			}
		}
	}
	for name := range rows {
		if !seen[name] {
			t.Errorf("hub/doc.go draws hub/%s, which is not a package", name)
		}
	}
	if cycle := findCycle(rows); cycle != nil {
		t.Errorf("the package map runs in a circle: %s", strings.Join(cycle, " → "))
	}
}

// findCycle returns a cycle of the map's import edges, or nil.
func findCycle(rows map[string]hubRow) []string {
	const (
		unvisited = iota
		open
		done
	)
	state := map[string]int{}
	var stack []string
	var visit func(string) []string
	visit = func(n string) []string {
		state[n] = open
		stack = append(stack, n)
		for _, m := range rows[n].imports {
			switch state[m] {
			case open:
				i := slices.Index(stack, m)
				return append(slices.Clone(stack[i:]), m)
			case unvisited:
				if c := visit(m); c != nil {
					return c
				}
			}
		}
		stack = stack[:len(stack)-1]
		state[n] = done
		return nil
	}
	for _, n := range slices.Sorted(maps.Keys(rows)) {
		if state[n] == unvisited {
			if c := visit(n); c != nil {
				return c
			}
		}
	}
	return nil
}

func TestFindCycle(t *testing.T) {
	row := func(imports ...string) hubRow { return hubRow{imports: imports} }
	for _, c := range []struct {
		name string
		rows map[string]hubRow
		want []string
	}{
		{"layered", map[string]hubRow{"a": row("b", "c"), "b": row("c"), "c": row()}, nil},
		{"a package importing itself", map[string]hubRow{"a": row("a")}, []string{"a", "a"}},
		{"a circle below the top", map[string]hubRow{"a": row("b"), "b": row("c"), "c": row("d"), "d": row("b")}, []string{"b", "c", "d", "b"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := findCycle(c.rows); !slices.Equal(got, c.want) {
				t.Errorf("findCycle = %v, want %v", got, c.want)
			}
		})
	}
}

// TestHubWritesMap fails when a hub package writes a kind through an API client that its row in
// hub/doc.go does not list, or lists one it no longer writes. The writes are found in the code:
// calls of controller-runtime's client writers (Create, Update, Patch, Delete, DeleteAllOf,
// Apply; Status() and SubResource() writes as Kind/status and Kind/<subresource>, deletions as
// Kind(delete)) and of client-go's typed clients, with the kind from the object's static type.
// An object whose kind the code does not fix (a generic skeleton's) is listed as "object".
func TestHubWritesMap(t *testing.T) {
	rows := readHubMap(t)
	for _, p := range loadHub(t) {
		name := relative(p.PkgPath)
		row, ok := rows[name]
		if !ok {
			continue // TestHubImportMap reports it
		}
		found := writesOf(p)
		got := slices.Sorted(maps.Keys(found))
		for _, kind := range got {
			if !slices.Contains(row.writes, kind) {
				t.Errorf("hub/%s writes %s (%s), which its row in hub/doc.go does not list", name, kind, strings.Join(found[kind], ", "))
			}
		}
		for _, kind := range row.writes {
			if _, ok := found[kind]; !ok {
				t.Errorf("hub/doc.go lists hub/%s writing %s, which it does not: take it off the map", name, kind)
			}
		}
	}
}

// TestHubWritesMapFindsWrites holds the scanner of TestHubWritesMap to what it claims, on code
// written to hide writes from it: through an embedded client, a status writer kept in a
// variable, a subresource, a typed clientset and a generic object.
func TestHubWritesMapFindsWrites(t *testing.T) {
	src := `package probe

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

type wrapped struct{ client.Client }

func writes[T client.Object](ctx context.Context, w wrapped, kube kubernetes.Interface, obj T) {
	_ = w.Create(ctx, &corev1.ConfigMap{})
	status := w.Status()
	_ = status.Update(ctx, &corev1.Pod{})
	_ = w.SubResource("eviction").Create(ctx, &corev1.Pod{}, nil)
	_ = w.DeleteAllOf(ctx, &corev1.Secret{})
	_, _ = kube.CoreV1().ServiceAccounts("ns").CreateToken(ctx, "sa", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	_ = kube.CoreV1().Namespaces().Delete(ctx, "ns", metav1.DeleteOptions{})
	_ = w.Patch(ctx, obj, nil)
	_ = w.Get(ctx, client.ObjectKey{}, &corev1.Service{})
}
`
	abs, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cfg := &packages.Config{
		Mode:    packages.NeedName | packages.NeedImports | packages.NeedTypes | packages.NeedSyntax | packages.NeedTypesInfo,
		Dir:     abs,
		Overlay: map[string][]byte{filepath.Join(abs, "e2e", "archtest", "probe", "probe.go"): []byte(src)},
	}
	pkgs, err := packages.Load(cfg, "./e2e/archtest/probe")
	if err != nil || packages.PrintErrors(pkgs) > 0 || len(pkgs) != 1 {
		t.Fatalf("loading the probe: %v", err)
	}
	got := slices.Sorted(maps.Keys(writesOf(pkgs[0])))
	want := []string{"ConfigMap", "Namespace(delete)", "Pod/eviction", "Pod/status", "Secret(delete)", "ServiceAccount/token", "object"}
	if !slices.Equal(got, want) {
		t.Errorf("writes found in the probe: %v, want %v", got, want)
	}
}

// writesOf returns the kinds a package writes, each with the places it does.
func writesOf(p *packages.Package) map[string][]string {
	found := map[string][]string{}
	for _, file := range p.Syntax {
		defined := definitions(p.TypesInfo, file)
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if kind := writtenKind(p.TypesInfo, defined, call); kind != "" {
				pos := p.Fset.Position(call.Pos())
				found[kind] = append(found[kind], fmt.Sprintf("%s:%d", filepath.Base(pos.Filename), pos.Line))
			}
			return true
		})
	}
	return found
}

// definitions maps the variables a file defines one by one (v := expr) to their expressions,
// so that a writer kept in a variable is followed back to where it came from.
func definitions(info *types.Info, file *ast.File) map[types.Object]ast.Expr {
	defined := map[types.Object]ast.Expr{}
	ast.Inspect(file, func(n ast.Node) bool {
		if assign, ok := n.(*ast.AssignStmt); ok && len(assign.Lhs) == len(assign.Rhs) {
			for i, lhs := range assign.Lhs {
				if id, ok := lhs.(*ast.Ident); ok {
					if obj := info.ObjectOf(id); obj != nil {
						defined[obj] = assign.Rhs[i]
					}
				}
			}
		}
		return true
	})
	return defined
}

var (
	clientWrites = []string{"Create", "Update", "Patch", "Delete", "DeleteAllOf", "Apply"}
	typedWrites  = []string{"Create", "Update", "Patch", "Delete", "DeleteCollection", "Apply"}
)

// writtenKind returns the kind a call writes, or "" when it writes nothing.
func writtenKind(info *types.Info, defined map[types.Object]ast.Expr, call *ast.CallExpr) string {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	fn, ok := info.Uses[sel.Sel].(*types.Func)
	if !ok || fn.Pkg() == nil {
		return ""
	}
	recv := fn.Type().(*types.Signature).Recv()
	if recv == nil {
		return ""
	}
	switch path := fn.Pkg().Path(); {
	case path == "sigs.k8s.io/controller-runtime/pkg/client":
		if !slices.Contains(clientWrites, fn.Name()) || len(call.Args) < 2 {
			return ""
		}
		kind := objectKind(info.TypeOf(call.Args[1]))
		// An interface's method belongs to the interface that declares it: Client and
		// SubResourceClient embed these two.
		switch named(recv.Type()) {
		case "Writer":
			return kind + deletion(fn.Name())
		case "SubResourceWriter":
			return kind + "/" + subresource(info, defined, sel.X)
		}
	case strings.HasPrefix(path, "k8s.io/client-go/kubernetes/typed/"):
		// A typed client's kind is its interface's (ServiceAccountInterface); a write of a
		// subresource is a verb and the subresource (CreateToken, UpdateStatus).
		kind, ok := strings.CutSuffix(named(recv.Type()), "Interface")
		if !ok {
			return ""
		}
		if slices.Contains(typedWrites, fn.Name()) {
			return kind + deletion(fn.Name())
		}
		for _, verb := range typedWrites {
			if sub, ok := strings.CutPrefix(fn.Name(), verb); ok && sub != "" {
				return kind + "/" + strings.ToLower(sub)
			}
		}
	}
	return ""
}

// deletion marks a write that only deletes: a package may delete a kind another one owns the
// content of (a removal, a revocation), and the map tells the two apart.
func deletion(verb string) string {
	if strings.HasPrefix(verb, "Delete") {
		return "(delete)"
	}
	return ""
}

// subresource names the subresource of a Status() or SubResource("x") writer, following a
// variable back to what it was defined with; "?" when the code does not fix it.
func subresource(info *types.Info, defined map[types.Object]ast.Expr, x ast.Expr) string {
	if id, ok := x.(*ast.Ident); ok {
		if e, ok := defined[info.ObjectOf(id)]; ok {
			x = e
		}
	}
	call, ok := x.(*ast.CallExpr)
	if !ok {
		return "?"
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return "?"
	}
	switch sel.Sel.Name {
	case "Status":
		return "status"
	case "SubResource":
		if len(call.Args) == 1 {
			if tv, ok := info.Types[call.Args[0]]; ok && tv.Value != nil {
				return constant.StringVal(tv.Value)
			}
		}
	}
	return "?"
}

// objectKind names the kind of a written object from its static type: the named type it
// points to, "object" when the code does not fix it (an interface or a type parameter).
func objectKind(t types.Type) string {
	if ptr, ok := t.(*types.Pointer); ok {
		t = ptr.Elem()
	}
	switch t := types.Unalias(t).(type) {
	case *types.Named:
		if _, isInterface := t.Underlying().(*types.Interface); isInterface {
			return "object"
		}
		return t.Obj().Name()
	case *types.TypeParam, *types.Interface:
		return "object"
	}
	return "?"
}

// named returns the name of a (pointer to a) named type, "" for others.
func named(t types.Type) string {
	if ptr, ok := t.(*types.Pointer); ok {
		t = ptr.Elem()
	}
	if n, ok := types.Unalias(t).(*types.Named); ok {
		return n.Obj().Name()
	}
	return ""
}
