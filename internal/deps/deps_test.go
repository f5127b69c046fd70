package deps

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"sort"
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
	"httpx":          0,
	"runtime":        1,
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
}

// violations returns every import of graph (package → its project imports,
// both relative to the module, tests excluded) that breaks the rules.
func violations(graph map[string][]string) []string {
	var out []string
	for pkg, imports := range graph {
		from, fromHas := layer[pkg]
		allowed, isLeaf := leaves[pkg]
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

// moduleGraph is the project's import graph from `go list -deps -json`.
func moduleGraph(t *testing.T) map[string][]string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(goruntime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goTool, "list", "-deps", "-json", "./...")
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
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		rel, ok := relative(p.ImportPath)
		if !ok {
			continue // the standard library, a dependency
		}
		graph[rel] = []string{}
		for _, imp := range p.Imports {
			if r, ok := relative(imp); ok {
				graph[rel] = append(graph[rel], r)
			}
		}
	}
	return graph
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
	} {
		bad := map[string][]string{}
		for k, v := range good {
			bad[k] = slices.Clone(v)
		}
		bad[tc.pkg] = append(bad[tc.pkg], tc.imp)
		v := violations(bad)
		if len(v) != 1 || !strings.Contains(v[0], tc.pkg+" imports "+tc.imp) || !strings.Contains(v[0], tc.want) {
			t.Errorf("%s: violations %q; want one saying %q", tc.name, v, tc.want)
		}
	}
}
