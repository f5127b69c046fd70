package deps

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// docs/architecture.md has a table of every package of the module: its
// place in the flow and its project imports (the arrows of the picture).
// TestArchitectureDocMatchesCode holds it to the code: the packages are
// those `go list ./...` finds (moduleGraph), the imports those of their
// non-test files, and the place the one the rules of deps_test.go give
// (layer, leaves, outer: read from there, never restated here).
const architectureDoc = "../../docs/architecture.md"

// archHeader starts the table's header row.
const archHeader = "| package | place | imports |"

// placeOf is a package's place by the rules: its layer number, else "leaf"
// (a leaf rule and no layer: client), else "outer"; "" when no rule places
// it (TestImportFlow reports that).
func placeOf(pkg string) string {
	if l, ok := layer[pkg]; ok {
		return strconv.Itoa(l)
	}
	if _, ok := leaves[pkg]; ok {
		return "leaf"
	}
	if isOuter(pkg) {
		return "outer"
	}
	return ""
}

// archRow is one package as the document lists it.
type archRow struct {
	line    int
	place   string
	imports []string
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// readArchitectureTable returns the rows of the package table of the
// document text, by package.
func readArchitectureTable(text string) (map[string]archRow, []string) {
	rows := map[string]archRow{}
	var problems []string
	in := false
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case !in && strings.HasPrefix(line, archHeader):
			in = true
		case in && strings.HasPrefix(line, "|---"):
		case in && strings.HasPrefix(line, "|"):
			cells := strings.Split(strings.Trim(line, "|"), "|")
			if len(cells) < 3 {
				problems = append(problems, fmt.Sprintf("docs/architecture.md:%d: a row needs package, place and imports cells", n))
				continue
			}
			m := codeSpan.FindStringSubmatch(cells[0])
			if m == nil {
				problems = append(problems, fmt.Sprintf("docs/architecture.md:%d: the package cell %q names no `package`", n, strings.TrimSpace(cells[0])))
				continue
			}
			pkg := strings.TrimSuffix(m[1], "/")
			if _, dup := rows[pkg]; dup {
				problems = append(problems, fmt.Sprintf("docs/architecture.md:%d: %s is listed twice", n, pkg))
			}
			var imports []string
			for _, s := range codeSpan.FindAllStringSubmatch(cells[2], -1) {
				imports = append(imports, strings.TrimSuffix(s[1], "/"))
			}
			sort.Strings(imports)
			rows[pkg] = archRow{line: n, place: strings.TrimSpace(cells[1]), imports: imports}
		case in:
			return rows, problems
		}
	}
	if !in {
		problems = append(problems, fmt.Sprintf("docs/architecture.md has no table whose header starts %q", archHeader))
	}
	return rows, problems
}

// architectureProblems compares the document's rows with graph (package →
// project imports, as moduleGraph returns it).
func architectureProblems(rows map[string]archRow, graph map[string][]string) []string {
	var out []string
	for pkg, imports := range graph {
		row, ok := rows[pkg]
		want := "–"
		if len(imports) > 0 {
			want = "`" + strings.Join(imports, "`, `") + "`"
		}
		if !ok {
			out = append(out, fmt.Sprintf("docs/architecture.md: package %s is missing: add the row | `%s` | %s | %s | what it owns |", pkg, pkg, placeOf(pkg), want))
			continue
		}
		if p := placeOf(pkg); row.place != p {
			out = append(out, fmt.Sprintf("docs/architecture.md:%d: %s is in place %q; the rules of internal/deps/deps_test.go put it in %q", row.line, pkg, row.place, p))
		}
		if !slices.Equal(row.imports, imports) {
			out = append(out, fmt.Sprintf("docs/architecture.md:%d: %s imports %s; the code imports %s", row.line, pkg, orNone(row.imports), want))
		}
	}
	for pkg, row := range rows {
		if _, ok := graph[pkg]; !ok {
			out = append(out, fmt.Sprintf("docs/architecture.md:%d: %s is no package of the module (go list ./...)", row.line, pkg))
		}
	}
	sort.Strings(out)
	return out
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "nothing"
	}
	return strings.Join(s, ", ")
}

// TestArchitectureDocMatchesCode: every package, its place and its imports,
// as docs/architecture.md's table says.
func TestArchitectureDocMatchesCode(t *testing.T) {
	data, err := os.ReadFile(architectureDoc)
	if err != nil {
		t.Fatal(err)
	}
	rows, problems := readArchitectureTable(string(data))
	module := moduleGraph(t)
	if len(module) < 15 {
		t.Fatalf("go list found %d packages: the graph is not the module's", len(module))
	}
	graph := make(map[string][]string, len(module))
	for pkg, f := range module {
		graph[pkg] = f.imports
	}
	for _, p := range append(problems, architectureProblems(rows, graph)...) {
		t.Error(p)
	}
}

// TestArchitectureCheckCanFail: a missing package, an extra one, a wrong
// arrow (missing or added) and a wrong place are each reported.
func TestArchitectureCheckCanFail(t *testing.T) {
	doc := archHeader + " owns |\n|---|---|---|---|\n" +
		"| `runtime/` | 1 | `procgroup`, `ringbuf` | the command table |\n" +
		"| `procgroup` | 0 | `internal/errno` | spawn |\n" +
		"| `ringbuf` | 0 | – | the ring |\n" +
		"| `client` | leaf | `wire` | the Go client |\n" +
		"| `wire` | 0 | – | the JSON types |\n" +
		"| `internal/errno` | -1 | – | errno |\n" +
		"| `cmd/sandbox-runtime` | outer | `client`, `runtime` | main |\n\nafter the table\n"
	graph := map[string][]string{
		"runtime": {"procgroup", "ringbuf"}, "procgroup": {"internal/errno"}, "ringbuf": {}, "client": {"wire"},
		"wire": {}, "internal/errno": {}, "cmd/sandbox-runtime": {"client", "runtime"},
	}
	rows, problems := readArchitectureTable(doc)
	if p := append(problems, architectureProblems(rows, graph)...); len(p) != 0 {
		t.Fatalf("the good document has problems: %q", p)
	}
	for _, tc := range []struct {
		name string
		edit func(g map[string][]string) string // returns the document to check
		want string
	}{
		{"a package missing from the doc", func(g map[string][]string) string { g["shlex"] = nil; return doc }, "package shlex is missing: add the row | `shlex` | 0 | – |"},
		{"a package the module does not have", func(g map[string][]string) string {
			delete(g, "ringbuf")
			g["runtime"] = []string{"procgroup"}
			return strings.Replace(doc, "`procgroup`, `ringbuf`", "`procgroup`", 1)
		}, "ringbuf is no package of the module"},
		{"an arrow the code does not have", func(g map[string][]string) string { g["runtime"] = []string{"procgroup"}; return doc }, "runtime imports procgroup, ringbuf; the code imports `procgroup`"},
		{"an arrow the doc does not have", func(g map[string][]string) string { g["wire"] = []string{"internal/errno"}; return doc }, "wire imports nothing; the code imports `internal/errno`"},
		{"a wrong place", func(g map[string][]string) string {
			return strings.Replace(doc, "| `client` | leaf |", "| `client` | 0 |", 1)
		}, `client is in place "0"`},
	} {
		g := map[string][]string{}
		for k, v := range graph {
			g[k] = slices.Clone(v)
		}
		d := tc.edit(g)
		rows, problems := readArchitectureTable(d)
		p := append(problems, architectureProblems(rows, g)...)
		if len(p) != 1 || !strings.Contains(p[0], tc.want) {
			t.Errorf("%s: problems %q; want one saying %q", tc.name, p, tc.want)
		}
	}
}
