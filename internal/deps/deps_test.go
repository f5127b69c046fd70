package deps

import (
	"bytes"
	"encoding/json"
	"fmt"
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
	"internal/errno": -1, // below every layer: imported by leaves too
	"ringbuf":        0,
	"procgroup":      0,
	"shlex":          0,
	"fsroot":         0,
	"wire":           0,
	"pycompat":       0,
	"runtime":        1,
	"httpx":          2, // HTTP plumbing of the transports: above runtime, which must not speak HTTP
	"metrics":        2,
	"api":            3,
	"legacy":         3,
}

// processLayer is what only runtime may import: the transports reach
// processes, output records and command splitting through runtime.
var processLayer = []string{"procgroup", "ringbuf", "shlex"}

// transports are the packages that must not skip the runtime layer.
var transports = []string{"api", "legacy", "metrics"}

// leaves import no project package but the ones listed.
var leaves = map[string][]string{
	"wire":           nil,
	"fsroot":         nil,
	"shlex":          nil,
	"ringbuf":        nil,
	"httpx":          nil,
	"internal/errno": nil,
	"pycompat":       {"internal/errno"},
	"procgroup":      {"internal/errno"},
	"client":         {"wire"}, // a client of the protocol links no part of the server
}

// outer are the packages above every layer (commands, tools, tests): they
// may import anything, nothing with a layer may import them. A project
// package that is in none of layer, leaves and outer is a violation, so a
// new package is placed on purpose.
var outer = []string{"cmd/", "internal/daemontest", "internal/deps", "internal/testexec", "deploy", "docs", "reliability"}

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

// moduleGraph is the project's import graph: the packages `go list`
// finds, each with the project imports of all its non-test files, whatever
// their build constraints (a `//go:build !linux` or tagged file counts as
// much as any other).
func moduleGraph(t *testing.T) map[string][]string {
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
	graph := map[string][]string{}
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
		imports, err := dirImports(p.Dir)
		if err != nil {
			t.Fatal(err)
		}
		graph[rel] = imports
	}
	return graph
}

// dirImports returns the project imports of every non-test .go file in
// dir, build constraints ignored.
func dirImports(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	out := []string{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			return nil, err
		}
		for _, spec := range af.Imports {
			path, _ := strconv.Unquote(spec.Path.Value)
			if r, ok := relative(path); ok && !seen[r] {
				seen[r] = true
				out = append(out, r)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

func relative(importPath string) (string, bool) {
	return strings.CutPrefix(importPath, module+"/")
}

// TestImportFlow: the module's import graph follows the flow.
func TestImportFlow(t *testing.T) {
	graph := moduleGraph(t)
	for _, pkg := range []string{"runtime", "api", "legacy", "metrics", "pycompat", "httpx", "ringbuf", "procgroup", "cmd/sandbox-runtime"} {
		if _, ok := graph[pkg]; !ok {
			t.Fatalf("go list did not report %s: the graph is not the module's", pkg)
		}
	}
	for _, v := range violations(graph) {
		t.Error(v)
	}
	// The flow's edges that exist today, so that the rules above are not
	// vacuous: the transports do reach the runtime, main wires them.
	for _, edge := range [][2]string{{"api", "runtime"}, {"legacy", "runtime"}, {"runtime", "procgroup"}, {"runtime", "ringbuf"},
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
		"api":                 {"runtime", "metrics", "httpx", "pycompat", "fsroot"},
		"legacy":              {"runtime", "httpx", "pycompat"},
		"metrics":             {"runtime"},
		"pycompat":            {"internal/errno"},
		"client":              {"wire"},
		"cmd/sandbox-runtime": {"api", "legacy", "metrics", "procgroup", "runtime", "client"},
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
		{"api imports ringbuf", "api", "ringbuf", "skips the runtime layer"},
		{"legacy imports shlex", "legacy", "shlex", "skips the runtime layer"},
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
	imports, err := dirImports(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(imports, []string{"procgroup"}) {
		t.Fatalf("imports %v; want [procgroup] (the constrained file counted, the test file not)", imports)
	}
	if v := violations(map[string][]string{"api": imports}); len(v) != 1 || !strings.Contains(v[0], "skips the runtime layer") {
		t.Fatalf("violations %q; want the skip of the runtime layer", v)
	}
}
