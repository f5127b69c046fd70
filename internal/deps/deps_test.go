package deps

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/sandbox-runtime/sandbox-runtime"

// The flow: (ringbuf, procgroup, shlex) → runtime → (metrics → api, legacy)
// → cmd. A package may import only packages of a lower layer; packages of
// no layer here (client, internal helpers of tests and tools, cmd/…) are
// outer: nothing with a layer may import them, and they may import anything.
var layer = map[string]int{
	"internal/errno":     -1, // below every layer: imported by leaves too
	"ringbuf":            0,
	"procgroup":          0,
	"netports":           0, // listening sockets from /proc (issue 23): runtime's, like procgroup
	"shlex":              0,
	"fsroot":             0,
	"wire":               0,
	"pycompat":           0,
	"internal/tokenfile": 0, // the token file's reading: api's and the CLI's one
	"sandboxd/processv1": 0, // generated from upstream's process.proto
	"watch":              1, // inotify watches of the base dir: beside runtime, on fsroot only
	"runtime":            1,
	"httpx":              2, // HTTP plumbing of the transports: above runtime, which must not speak HTTP
	"metrics":            2,
	"api":                3,
	"legacy":             3,
	// sandboxd's gRPC ProcessService: a transport beside api and legacy.
	"sandboxd/process": 3,
	"sandboxd/rest":    3, // sandboxd's REST API on a listener of its own
}

// processLayer is what only runtime may import: the transports reach
// processes through runtime.
var processLayer = []string{"procgroup", "netports"}

// transportMay are the pure leaves below runtime whose names a transport may
// use as they are, each name listed on purpose (the rest of the package
// stays runtime's). The output records Command.Read returns are the ring's
// own, so that a stream copies nothing to read them (a runtime type of its
// own would cost a copy of every batch, an alias would hide the coupling
// from this test), and so is the Hold Command.Hold hands a holding stream
// (which only tells it what it has sent, and releases it); legacy /execute
// answers shlex.Split's errors as Popen would. A transport that builds a Ring, or uses any other name of these
// packages, breaks the rule; so does a re-export by alias (see aliases).
var transportMay = map[string][]string{
	"ringbuf": {"Hold", "PTY", "ReadResult", "Record", "Stderr", "Stdout", "Stream"},
	"shlex":   {"Split"},
}

// transports are the packages that must not skip the runtime layer.
var transports = []string{"api", "legacy", "metrics", "sandboxd/process", "sandboxd/rest"}

// leaves import no project package but the ones listed.
var leaves = map[string][]string{
	"wire":               nil,
	"fsroot":             nil,
	"shlex":              nil,
	"ringbuf":            nil,
	"httpx":              nil,
	"internal/errno":     nil,
	"pycompat":           {"internal/errno"},
	"procgroup":          {"internal/errno"},
	"netports":           nil,
	"internal/tokenfile": {"wire"},
	"watch":              {"fsroot"}, // no HTTP, no wire: api translates its events
	"client":             {"wire"},   // a client of the protocol links no part of the server
	// The command-line client sits on client, with no layer: nothing of the
	// server may import it, and it imports nothing of the server (api,
	// legacy, metrics, httpx, runtime, procgroup, ringbuf, …): a limit it
	// shares with the daemon is in wire, the token file's reading in
	// internal/tokenfile.
	"cli": {"client", "internal/tokenfile", "wire"},
	// Generated from upstream's process.proto: grpc and protobuf only.
	"sandboxd/processv1": nil,
}

// outer are the packages above every layer (commands, tools, tests): they
// may import anything, nothing with a layer may import them. A project
// package that is in none of layer, leaves and outer is a violation, so a
// new package is placed on purpose.
var outer = []string{"cmd/", "internal/conntest", "internal/daemontest", "internal/deps", "internal/testexec", "deploy", "docs", "reliability"}

func isOuter(pkg string) bool {
	for _, o := range outer {
		if pkg == o || (strings.HasSuffix(o, "/") && strings.HasPrefix(pkg, o)) {
			return true
		}
	}
	return false
}

// violations returns every import of graph (package → its project imports,
// both relative to the module, tests excluded) that breaks the rules.
func violations(graph map[string][]string) []string {
	var out []string
	for pkg, imports := range graph {
		from, fromHas := layer[pkg]
		allowed, isLeaf := leaves[pkg]
		if !fromHas && !isLeaf && !isOuter(pkg) {
			out = append(out, fmt.Sprintf("%s is not classified: give it a layer, a leaf rule or an outer place in internal/deps", pkg))
		}
		for _, imp := range imports {
			to, toHas := layer[imp]
			if isLeaf {
				if !slices.Contains(allowed, imp) {
					out = append(out, fmt.Sprintf("%s imports %s: a leaf imports no project package but %v", pkg, imp, allowed))
				}
				continue
			}
			switch {
			case slices.Contains(transports, pkg) && slices.Contains(processLayer, imp):
				out = append(out, fmt.Sprintf("%s imports %s: it skips the runtime layer (use what runtime exports)", pkg, imp))
			case fromHas && !toHas:
				out = append(out, fmt.Sprintf("%s imports %s: against the flow (%s is outer, above every layer)", pkg, imp, imp))
			case fromHas && to >= from:
				out = append(out, fmt.Sprintf("%s imports %s: against the flow (layer %d imports layer %d)", pkg, imp, from, to))
			}
		}
	}
	sort.Strings(out)
	return out
}

// facts is what the rules read of a package's non-test files.
type facts struct {
	imports []string            // project imports, relative to the module, sorted
	names   map[string][]string // project import → the names used of it (pkg.Name), sorted
	aliases []string            // "X = ringbuf.Y": declarations that re-export a project package's name
}

// moduleGraph is the project's import graph: the packages `go list`
// finds, each with the facts of all its non-test files, whatever their
// build constraints (a `//go:build !linux` or tagged file counts as much as
// any other).
func moduleGraph(t *testing.T) map[string]facts {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(goruntime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goTool, "list", "-e", "-json", "./...")
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	graph := map[string]facts{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Dir        string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		rel, ok := relative(p.ImportPath)
		if !ok {
			continue
		}
		f, err := dirFacts(p.Dir)
		if err != nil {
			t.Fatal(err)
		}
		graph[rel] = f
	}
	return graph
}

// importGraph is graph's imports alone.
func importGraph(graph map[string]facts) map[string][]string {
	out := map[string][]string{}
	for pkg, f := range graph {
		out[pkg] = f.imports
	}
	return out
}

// dirFacts reads every non-test .go file in dir, build constraints ignored.
func dirFacts(dir string) (facts, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return facts{}, err
	}
	out := facts{imports: []string{}, names: map[string][]string{}}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.SkipObjectResolution)
		if err != nil {
			return facts{}, err
		}
		local := map[string]string{} // the file's name of a project import → the import
		for _, spec := range af.Imports {
			path, _ := strconv.Unquote(spec.Path.Value)
			r, ok := relative(path)
			if !ok {
				continue
			}
			if !slices.Contains(out.imports, r) {
				out.imports = append(out.imports, r)
			}
			name := r[strings.LastIndex(r, "/")+1:]
			if spec.Name != nil {
				name = spec.Name.Name
			}
			if name == "." {
				out.names[r] = append(out.names[r], "*") // every name, unqualified
			}
			local[name] = r
		}
		ast.Inspect(af, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok && local[id.Name] != "" {
					out.names[local[id.Name]] = append(out.names[local[id.Name]], sel.Sel.Name)
				}
			}
			return true
		})
		for _, d := range af.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range gd.Specs {
				switch sp := spec.(type) {
				case *ast.TypeSpec:
					if sp.Assign.IsValid() {
						if r := reexport(sp.Type, local); r != "" {
							out.aliases = append(out.aliases, sp.Name.Name+" = "+r)
						}
					}
				case *ast.ValueSpec:
					if sp.Type != nil {
						continue // a value of the name's type, not the name again
					}
					for i, v := range sp.Values {
						if r := reexport(v, local); r != "" && i < len(sp.Names) {
							out.aliases = append(out.aliases, sp.Names[i].Name+" = "+r)
						}
					}
				}
			}
		}
	}
	sort.Strings(out.imports)
	for k, v := range out.names {
		slices.Sort(v)
		out.names[k] = slices.Compact(v)
	}
	sort.Strings(out.aliases)
	return out, nil
}

// reexport returns "pkg.Name" when e is exactly a name of a project import
// (what a type alias or a constant re-exporting it is written as), else "".
func reexport(e ast.Expr, local map[string]string) string {
	if sel, ok := e.(*ast.SelectorExpr); ok {
		if id, ok := sel.X.(*ast.Ident); ok && local[id.Name] != "" {
			return local[id.Name] + "." + sel.Sel.Name
		}
	}
	return ""
}

// nameViolations returns the uses of names that break the rules: a
// transport uses of a transportMay package only the names listed there,
// and no package below the transports re-exports a name of procgroup,
// ringbuf or shlex by alias (`type Record = ringbuf.Record`, `const Stdout
// = ringbuf.Stdout`): the coupling an alias hides is the one these rules
// must see, so a transport names the lower package, under its rule,
// instead. (A wrapper function is not seen; it is code of its own.)
func nameViolations(graph map[string]facts) []string {
	var out []string
	for pkg, f := range graph {
		if slices.Contains(transports, pkg) {
			for imp, allowed := range transportMay {
				for _, name := range f.names[imp] {
					if !slices.Contains(allowed, name) {
						out = append(out, fmt.Sprintf("%s uses %s.%s: a transport uses of %s only %v", pkg, imp, name, imp, allowed))
					}
				}
			}
		}
		if slices.Contains(transports, pkg) {
			continue // nothing of the layers below imports a transport
		}
		for _, a := range f.aliases {
			from := strings.SplitN(strings.SplitN(a, " = ", 2)[1], ".", 2)[0]
			if _, may := transportMay[from]; may || slices.Contains(processLayer, from) {
				out = append(out, fmt.Sprintf("%s declares %s: a re-export by alias hides from these rules what a transport uses of %s", pkg, a, from))
			}
		}
	}
	sort.Strings(out)
	return out
}

func relative(importPath string) (string, bool) {
	return strings.CutPrefix(importPath, module+"/")
}

// TestImportFlow: the module's import graph follows the flow.
func TestImportFlow(t *testing.T) {
	facts := moduleGraph(t)
	graph := importGraph(facts)
	for _, pkg := range []string{"runtime", "api", "legacy", "metrics", "pycompat", "httpx", "ringbuf", "procgroup", "cmd/sandbox-runtime"} {
		if _, ok := graph[pkg]; !ok {
			t.Fatalf("go list did not report %s: the graph is not the module's", pkg)
		}
	}
	for _, v := range violations(graph) {
		t.Error(v)
	}
	for _, v := range nameViolations(facts) {
		t.Error(v)
	}
	// The flow's edges that exist today, so that the rules above are not
	// vacuous: the transports do reach the runtime, main wires them.
	for _, edge := range [][2]string{{"api", "runtime"}, {"legacy", "runtime"}, {"runtime", "procgroup"}, {"runtime", "ringbuf"},
		{"api", "ringbuf"}, {"legacy", "shlex"},
		{"cmd/sandbox-runtime", "api"}, {"cmd/sandbox-runtime", "legacy"}} {
		if !slices.Contains(graph[edge[0]], edge[1]) {
			t.Errorf("%s does not import %s; the flow's description is out of date", edge[0], edge[1])
		}
	}
}

// TestViolationsCatchBadGraphs: each rule fails a graph that breaks it.
func TestViolationsCatchBadGraphs(t *testing.T) {
	good := map[string][]string{
		"runtime":             {"procgroup", "ringbuf", "shlex"},
		"api":                 {"runtime", "metrics", "httpx", "pycompat", "fsroot", "ringbuf", "wire"},
		"legacy":              {"runtime", "httpx", "pycompat", "shlex"},
		"metrics":             {"runtime"},
		"pycompat":            {"internal/errno"},
		"client":              {"wire"},
		"internal/tokenfile":  {"wire"},
		"cli":                 {"client", "internal/tokenfile", "wire"},
		"cmd/sandbox-runtime": {"api", "cli", "legacy", "metrics", "procgroup", "runtime", "client"},
	}
	if v := violations(good); len(v) != 0 {
		t.Fatalf("the good graph has violations: %v", v)
	}
	for _, tc := range []struct {
		name string
		pkg  string
		imp  string
		want string
	}{
		{"runtime imports api", "runtime", "api", "against the flow"},
		{"procgroup imports runtime", "procgroup", "runtime", "a leaf imports no project package"},
		{"api imports procgroup", "api", "procgroup", "skips the runtime layer"},
		{"legacy imports procgroup", "legacy", "procgroup", "skips the runtime layer"},
		{"metrics imports procgroup", "metrics", "procgroup", "skips the runtime layer"},
		{"api imports legacy", "api", "legacy", "against the flow"},
		{"legacy imports api", "legacy", "api", "against the flow"},
		{"metrics imports api", "metrics", "api", "against the flow"},
		{"runtime imports client", "runtime", "client", "is outer"},
		{"wire imports runtime", "wire", "runtime", "a leaf imports no project package"},
		{"pycompat imports fsroot", "pycompat", "fsroot", "a leaf imports no project package"},
		{"shlex imports pycompat", "shlex", "pycompat", "a leaf imports no project package"},
		{"fsroot imports ringbuf", "fsroot", "ringbuf", "a leaf imports no project package"},
		{"ringbuf imports wire", "ringbuf", "wire", "a leaf imports no project package"},
		{"runtime imports httpx", "runtime", "httpx", "against the flow"},
		{"client imports runtime", "client", "runtime", "a leaf imports no project package"},
		{"client imports procgroup", "client", "procgroup", "a leaf imports no project package"},
		{"cli imports api", "cli", "api", "a leaf imports no project package"},
		{"cli imports runtime", "cli", "runtime", "a leaf imports no project package"},
		{"cli imports procgroup", "cli", "procgroup", "a leaf imports no project package"},
		{"cli imports httpx", "cli", "httpx", "a leaf imports no project package"},
		{"api imports cli", "api", "cli", "is outer"},
		{"runtime imports cli", "runtime", "cli", "is outer"},
		{"tokenfile imports api", "internal/tokenfile", "api", "a leaf imports no project package"},
		{"a new package nobody placed", "server", "api", "is not classified"},
	} {
		bad := map[string][]string{}
		for k, v := range good {
			bad[k] = slices.Clone(v)
		}
		bad[tc.pkg] = append(bad[tc.pkg], tc.imp)
		if tc.pkg == "server" { // the unplaced package is wired from main
			bad["cmd/sandbox-runtime"] = append(bad["cmd/sandbox-runtime"], "server")
		}
		v := violations(bad)
		if len(v) != 1 || !strings.HasPrefix(v[0], tc.pkg+" ") || !strings.Contains(v[0], tc.want) {
			t.Errorf("%s: violations %q; want one saying %q", tc.name, v, tc.want)
		}
	}
}

// TestGraphSeesConstrainedFiles: a file behind a build constraint that
// this build does not satisfy still counts (a bad import for another OS
// or tag is still a bad import).
func TestGraphSeesConstrainedFiles(t *testing.T) {
	dir := t.TempDir()
	src := "//go:build !linux && sometag\n\npackage api\n\nimport _ \"" + module + "/procgroup\"\n"
	if err := os.WriteFile(filepath.Join(dir, "other.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "other_test.go"), []byte("package api\n\nimport _ \""+module+"/ringbuf\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := dirFacts(dir)
	if err != nil {
		t.Fatal(err)
	}
	imports := f.imports
	if !slices.Equal(imports, []string{"procgroup"}) {
		t.Fatalf("imports %v; want [procgroup] (the constrained file counted, the test file not)", imports)
	}
	if v := violations(map[string][]string{"api": imports}); len(v) != 1 || !strings.Contains(v[0], "skips the runtime layer") {
		t.Fatalf("violations %q; want the skip of the runtime layer", v)
	}
}

// TestNameRules: the names a transport uses of ringbuf and shlex are the
// listed ones, and an alias that re-exports a lower package's name is
// caught, as written in real files (an import renamed, a dot import).
func TestNameRules(t *testing.T) {
	for _, tc := range []struct {
		name, pkg, src string
		want           string // "" for none
	}{
		{"the records a stream reads", "api", "import \"M/ringbuf\"\nvar r []ringbuf.Record\nvar s ringbuf.Stream = ringbuf.PTY\n", ""},
		{"the split of a legacy command", "legacy", "import \"M/shlex\"\nvar f = shlex.Split\n", ""},
		{"a ring of its own", "api", "import \"M/ringbuf\"\nvar r = ringbuf.New(1, 1)\n", "api uses ringbuf.New"},
		{"a renamed import", "legacy", "import rb \"M/ringbuf\"\nvar r *rb.Ring\n", "legacy uses ringbuf.Ring"},
		{"a dot import", "metrics", "import . \"M/shlex\"\nvar f = Split\n", "metrics uses shlex.*"},
		{"a type alias", "runtime", "import \"M/ringbuf\"\ntype Record = ringbuf.Record\n", "runtime declares Record = ringbuf.Record"},
		{"a constant re-exported", "runtime", "import \"M/ringbuf\"\nconst (\n\tA = 1\n\tStdout = ringbuf.Stdout\n)\n", "runtime declares Stdout = ringbuf.Stdout"},
		{"a type of its own is no alias", "runtime", "import \"M/ringbuf\"\ntype Record ringbuf.Record\n", ""},
	} {
		dir := t.TempDir()
		src := "package " + tc.pkg + "\n\n" + strings.ReplaceAll(tc.src, "M/", module+"/")
		if err := os.WriteFile(filepath.Join(dir, "f.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := dirFacts(dir)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		v := nameViolations(map[string]facts{tc.pkg: f})
		switch {
		case tc.want == "" && len(v) != 0:
			t.Errorf("%s: violations %q; want none", tc.name, v)
		case tc.want != "" && (len(v) != 1 || !strings.HasPrefix(v[0], tc.want)):
			t.Errorf("%s: violations %q; want one starting %q", tc.name, v, tc.want)
		}
	}
}
