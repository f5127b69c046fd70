package docs

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"
)

const (
	protocolFile = "protocol.md"
	specFile     = "../api/openapi.yaml"
)

// spec is what the test reads from api/openapi.yaml.
type spec struct {
	routes  set // "METHOD /path"
	query   set // query parameter names
	headers set // request and response header names
	fields  set // property names of every schema
	states  set // the State enum
	codes   set // the ErrorCode enum
	types   set // the `type` enums of the *Event and *Frame schemas
	enums   set // every string enum value
}

type set map[string][]string // value -> where it was found

func (s set) add(v, where string) { s[v] = append(s[v], where) }

func (s set) sorted() []string {
	var out []string
	for v := range s {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

func readSpec(t *testing.T) spec {
	t.Helper()
	b, err := os.ReadFile(specFile)
	if err != nil {
		t.Fatalf("the spec is part of the repository: %v", err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", specFile, err)
	}
	sp := spec{routes: set{}, query: set{}, headers: set{}, fields: set{}, states: set{}, codes: set{}, types: set{}, enums: set{}}
	components, _ := doc["components"].(map[string]any)
	params, _ := components["parameters"].(map[string]any)
	resolve := func(p any) map[string]any {
		m, _ := p.(map[string]any)
		if ref, ok := m["$ref"].(string); ok {
			m, _ = params[strings.TrimPrefix(ref, "#/components/parameters/")].(map[string]any)
		}
		return m
	}
	paths, _ := doc["paths"].(map[string]any)
	for path, v := range paths {
		ops, _ := v.(map[string]any)
		shared, _ := ops["parameters"].([]any)
		for method, op := range ops {
			if method == "parameters" {
				continue
			}
			route := strings.ToUpper(method) + " " + path
			sp.routes.add(route, "paths")
			o, _ := op.(map[string]any)
			ps, _ := o["parameters"].([]any)
			for _, p := range append(ps, shared...) {
				m := resolve(p)
				name, _ := m["name"].(string)
				switch m["in"] {
				case "query":
					sp.query.add(name, route)
				case "header":
					sp.headers.add(name, route)
				}
			}
		}
	}
	// Walk everything for properties, enums and response headers.
	var walk func(x any, where []string)
	walk = func(x any, where []string) {
		switch v := x.(type) {
		case map[string]any:
			if props, ok := v["properties"].(map[string]any); ok {
				for name := range props {
					sp.fields.add(name, strings.Join(where, "/"))
				}
			}
			if hs, ok := v["headers"].(map[string]any); ok && len(where) > 0 && where[len(where)-1] != "components" {
				for name := range hs {
					sp.headers.add(name, strings.Join(where, "/"))
				}
			}
			if enum, ok := v["enum"].([]any); ok {
				for _, e := range enum {
					if s, ok := e.(string); ok {
						sp.enums.add(s, strings.Join(where, "/"))
					}
				}
			}
			for k, c := range v {
				walk(c, append(where[:len(where):len(where)], k))
			}
		case []any:
			for _, c := range v {
				walk(c, where)
			}
		}
	}
	walk(doc, nil)
	schemas, _ := components["schemas"].(map[string]any)
	enumOf := func(x any) []string {
		m, _ := x.(map[string]any)
		var out []string
		for _, e := range m["enum"].([]any) {
			out = append(out, fmt.Sprint(e))
		}
		return out
	}
	for _, s := range enumOf(schemas["State"]) {
		sp.states.add(s, "State")
	}
	for _, s := range enumOf(schemas["ErrorCode"]) {
		sp.codes.add(s, "ErrorCode")
	}
	for name, sc := range schemas {
		if !strings.HasSuffix(name, "Event") && !strings.HasSuffix(name, "Frame") {
			continue
		}
		m, _ := sc.(map[string]any)
		props, _ := m["properties"].(map[string]any)
		if typ, ok := props["type"].(map[string]any); ok && typ["enum"] != nil {
			for _, s := range enumOf(typ) {
				sp.types.add(s, name)
			}
		}
	}
	if len(sp.routes) < 10 || len(sp.fields) < 20 || len(sp.states) == 0 || len(sp.codes) == 0 || len(sp.types) == 0 {
		t.Fatalf("read too little from %s: %d routes, %d fields, %d states, %d codes, %d types",
			specFile, len(sp.routes), len(sp.fields), len(sp.states), len(sp.codes), len(sp.types))
	}
	return sp
}

// document is what the test reads from protocol.md: the first cells of its
// tables, by the table's first header cell, and the whole text.
type document struct {
	text   string
	tables map[string]set // header -> backticked names in the first cells
}

var backticked = regexp.MustCompile("`([^`]+)`")

func readDocument(t *testing.T) document {
	t.Helper()
	f, err := os.Open(protocolFile)
	if err != nil {
		t.Fatalf("the protocol document is part of the repository: %v", err)
	}
	defer f.Close()
	d := document{tables: map[string]set{}}
	var text strings.Builder
	header := "" // first header cell of the table being read
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		text.WriteString(line + "\n")
		line = strings.TrimSpace(line) // tables may be indented inside a list item
		if !strings.HasPrefix(line, "|") {
			header = ""
			continue
		}
		cells := strings.Split(line, "|")
		first := strings.TrimSpace(cells[1])
		switch {
		case header == "":
			header = first
			if d.tables[header] == nil {
				d.tables[header] = set{}
			}
		case strings.HasPrefix(first, "---"):
		default:
			for _, m := range backticked.FindAllStringSubmatch(first, -1) {
				d.tables[header].add(m[1], fmt.Sprintf("%s:%d", protocolFile, n))
			}
		}
	}
	d.text = text.String()
	return d
}

// lastName is the field a table row names: `limits.max_running` and
// `entries[].name` describe max_running and name.
func lastName(s string) string {
	s = strings.TrimSuffix(s, "?")
	if i := strings.LastIndexAny(s, ".]"); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// compare returns what the spec has and the document lacks, and the reverse,
// each with what to do about it.
func compare(what string, inSpec, inDoc set, addHow string) []string {
	var out []string
	for _, v := range inSpec.sorted() {
		if _, ok := inDoc[v]; !ok {
			out = append(out, fmt.Sprintf("%s `%s` is in %s (%s) but not in docs/%s: %s", what, v, specFile, inSpec[v][0], protocolFile, addHow))
		}
	}
	for _, v := range inDoc.sorted() {
		if _, ok := inSpec[v]; !ok {
			out = append(out, fmt.Sprintf("%s `%s` is in docs/%s (%s) but not in %s: remove it from the document or add it to the spec", what, v, protocolFile, inDoc[v][0], specFile))
		}
	}
	return out
}

// problems compares the spec and the document in every respect.
func problems(sp spec, doc document) []string {
	var out []string
	routes := set{}
	for v, where := range doc.tables["route"] {
		routes[v] = where
	}
	out = append(out, compare("route", sp.routes, routes, "add a row \"| `METHOD /path` | what it does |\" to a table headed \"route\" (§3 or §5)")...)

	fields := set{}
	for v, where := range doc.tables["field"] {
		fields[lastName(v)] = where
	}
	out = append(out, compare("field", sp.fields, fields, "add a row \"| `name` | type | meaning |\" to the field table of its object")...)
	out = append(out, compare("state", sp.states, doc.tables["state"], "add a row to the table headed \"state\" (§2 States)")...)
	out = append(out, compare("error code", sp.codes, doc.tables["code"], "add a row \"| `code` | status | when |\" to the table headed \"code\" (§3 Errors)")...)
	out = append(out, compare("event or frame type", sp.types, doc.tables["type"], "add a row to the table headed \"type\" (§4)")...)
	out = append(out, compare("header", sp.headers, doc.tables["header"], "add a row to the table headed \"header\" (§1)")...)

	query := set{}
	for i, line := range strings.Split(doc.text, "\n") {
		for _, m := range queryParam.FindAllStringSubmatch(line, -1) {
			query.add(m[1], fmt.Sprintf("%s:%d", protocolFile, i+1))
		}
	}
	out = append(out, compare("query parameter", sp.query, query, "mention it as `?name=…` where its route is described")...)

	for _, v := range sp.enums.sorted() {
		if !strings.Contains(doc.text, "`"+v+"`") && !strings.Contains(doc.text, "`\""+v+"\"`") {
			out = append(out, fmt.Sprintf("enum value `%s` (%s) is not in docs/%s: name it in backticks where its field is described", v, sp.enums[v][0], protocolFile))
		}
	}
	return out
}

var queryParam = regexp.MustCompile("`\\?([a-z_]+)=")

func TestProtocolMatchesSpec(t *testing.T) {
	for _, p := range problems(readSpec(t), readDocument(t)) {
		t.Error(p)
	}
}

// TestProtocolTestCanFail: what one side has and the other lacks is reported,
// in each respect, so that a green TestProtocolMatchesSpec means something.
func TestProtocolTestCanFail(t *testing.T) {
	doc := readDocument(t)
	for _, c := range []struct {
		name   string
		mutate func(*spec)
		want   string
	}{
		{"route added to the spec", func(s *spec) { s.routes.add("POST /v1/commands/{id}/pause", "test") }, "route `POST /v1/commands/{id}/pause` is in"},
		{"route gone from the spec", func(s *spec) { delete(s.routes, "GET /v1/info") }, "route `GET /v1/info` is in docs/"},
		{"field added", func(s *spec) { s.fields.add("paused_at", "test") }, "field `paused_at`"},
		{"field gone", func(s *spec) { delete(s.fields, "retained_from") }, "field `retained_from` is in docs/"},
		{"state added", func(s *spec) { s.states.add("paused", "test") }, "state `paused`"},
		{"code added", func(s *spec) { s.codes.add("quota_exceeded", "test") }, "error code `quota_exceeded`"},
		{"code gone", func(s *spec) { delete(s.codes, "stdin_full") }, "error code `stdin_full` is in docs/"},
		{"event type added", func(s *spec) { s.types.add("pause", "test") }, "event or frame type `pause`"},
		{"query parameter added", func(s *spec) { s.query.add("tail", "test") }, "query parameter `tail`"},
		{"header added", func(s *spec) { s.headers.add("Origin", "test") }, "header `Origin`"},
		{"enum value added", func(s *spec) { s.enums.add("hibernated", "test") }, "enum value `hibernated`"},
	} {
		sp := readSpec(t)
		c.mutate(&sp)
		found := false
		for _, p := range problems(sp, doc) {
			found = found || strings.Contains(p, c.want)
		}
		if !found {
			t.Errorf("%s: no problem mentions %q", c.name, c.want)
		}
	}
}

// repoFiles lists the files of the repository relative to root: git's view
// (tracked, and untracked but not ignored) when git can tell, else every
// regular file outside .git, bin and dist.
func repoFiles(t *testing.T, root string) []string {
	t.Helper()
	// Walk in any case: the directories it opens are what go test's cache
	// watches, so a new file re-runs the test.
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() && (rel == ".git" || rel == "bin" || rel == "dist") {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("git", "-C", root, "ls-files", "-co", "--exclude-standard").Output(); err == nil {
		return strings.Fields(string(out))
	}
	return files
}

// TestNothingRefersOutside: no file of the repository (outside .ci/) names
// a path outside it, and every relative Markdown link resolves to a file
// inside it. A fresh clone with nothing beside it must be complete.
func TestNothingRefersOutside(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	outside := regexp.MustCompile(`shared[/]|CONTRACT(\.md| §)`) // written so that grep for the path itself finds nothing here
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	checked := 0
	for _, rel := range repoFiles(t, root) {
		if strings.HasPrefix(rel, ".ci/") || rel == "docs/protocol_test.go" {
			continue
		}
		p := filepath.Join(root, rel)
		b, err := os.ReadFile(p)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // deleted in the work tree
			}
			t.Fatal(err)
		}
		if strings.IndexByte(string(b[:min(len(b), 8000)]), 0) >= 0 {
			continue // binary
		}
		checked++
		for i, line := range strings.Split(string(b), "\n") {
			if m := outside.FindString(line); m != "" {
				t.Errorf("%s:%d refers outside the repository (%q): %s; cite docs/protocol.md §N, or testdata/legacy/", rel, i+1, m, strings.TrimSpace(line))
			}
			if !strings.HasSuffix(p, ".md") {
				continue
			}
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				target, _, _ = strings.Cut(target, "#")
				abs := filepath.Join(filepath.Dir(p), target)
				if r, err := filepath.Rel(root, abs); err != nil || strings.HasPrefix(r, "..") {
					t.Errorf("%s:%d links outside the repository: %s", rel, i+1, m[1])
				} else if _, err := os.Stat(abs); err != nil {
					t.Errorf("%s:%d links to a missing file: %s", rel, i+1, m[1])
				}
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked only %d files under %s", checked, root)
	}
}
