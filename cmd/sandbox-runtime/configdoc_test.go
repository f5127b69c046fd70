//go:build linux

package main

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The settings are described in four places: --help (written from
// settings()), the package comment of main.go, the table of
// docs/configuration.md, and the protocol's table (docs/protocol.md §6, the
// settings a client can observe). TestConfigDocumented reads the three
// written by hand and holds each to settings(): the same variables and flags
// in the same order (the protocol's: a subset, in any order), and defaults
// that agree with what --help shows.
const (
	configDoc   = "../../docs/configuration.md"
	protocolDoc = "../../docs/protocol.md"
	mainFile    = "main.go"
)

// docRow is one setting as a document lists it.
type docRow struct {
	where          string // file:line
	env, flag, def string // flag "" where the document has no flag column
}

// leadingDefault is the value a document's default must start with: the
// default itself, else the first word of what --help shows for it, else
// "none".
func leadingDefault(s setting) string {
	if s.def != "" {
		return s.def
	}
	if shown, ok := shownDefaults[s.flag]; ok {
		return strings.FieldsFunc(shown, func(r rune) bool { return r == ' ' || r == ',' || r == ':' })[0]
	}
	return "none"
}

// defaultAgrees: text (code spans unquoted) is the leading default, alone
// or followed by a word boundary ("16", "none (no auth)", "/app, else …").
func defaultAgrees(text, want string) bool {
	text = strings.TrimSpace(strings.ReplaceAll(text, "`", ""))
	rest, ok := strings.CutPrefix(text, want)
	if !ok {
		return false
	}
	r := []rune(rest)
	return len(r) == 0 || !(unicode.IsLetter(r[0]) || unicode.IsDigit(r[0]) || r[0] == '.' || r[0] == ':' || r[0] == '_')
}

// checkRows returns what is wrong with rows against settings: complete
// asks for every setting, in order.
func checkRows(doc string, rows []docRow, settings []setting, complete bool) []string {
	var out []string
	byEnv := map[string]setting{}
	for _, s := range settings {
		byEnv[s.env] = s
	}
	seen := map[string]bool{}
	for i, r := range rows {
		s, ok := byEnv[r.env]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s: %s is no setting (settings() in config.go)", r.where, r.env))
			continue
		case seen[r.env]:
			out = append(out, fmt.Sprintf("%s: %s is listed twice", r.where, r.env))
		case complete && i < len(settings) && settings[i].env != r.env:
			out = append(out, fmt.Sprintf("%s: %s where settings() has %s: list them in settings()' order", r.where, r.env, settings[i].env))
		}
		seen[r.env] = true
		if r.flag != "" && r.flag != "--"+s.flag {
			out = append(out, fmt.Sprintf("%s: %s has flag %s; its flag is --%s", r.where, r.env, r.flag, s.flag))
		}
		if want := leadingDefault(s); !defaultAgrees(r.def, want) {
			out = append(out, fmt.Sprintf("%s: %s defaults to %q; --help says %q: the default must start with that", r.where, r.env, r.def, want))
		}
	}
	if complete {
		for _, s := range settings {
			if !seen[s.env] {
				out = append(out, fmt.Sprintf("%s: %s (--%s, default %q) is missing", doc, s.env, s.flag, leadingDefault(s)))
			}
		}
	}
	return out
}

// tableRows reads the rows of the first markdown table of path whose
// header starts with header (cells: variable, [flag,] default, …).
func tableRows(t *testing.T, path, header string, withFlag bool) []docRow {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []docRow
	in := false
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case !in && strings.HasPrefix(line, header):
			in = true
		case in && strings.HasPrefix(line, "|---"):
		case in && strings.HasPrefix(line, "|"):
			cells := strings.Split(strings.Trim(line, "|"), "|")
			r := docRow{where: fmt.Sprintf("%s:%d", strings.TrimPrefix(path, "../../"), n), env: strings.Trim(strings.TrimSpace(cells[0]), "`")}
			if withFlag && len(cells) > 2 {
				r.flag, r.def = strings.Trim(strings.TrimSpace(cells[1]), "`"), cells[2]
			} else if len(cells) > 1 {
				r.def = cells[1]
			}
			rows = append(rows, r)
		case in:
			return rows
		}
	}
	if !in {
		t.Fatalf("%s has no table with the header %q", path, header)
	}
	return rows
}

// mainDocRows reads the list under "Configuration" in main.go's package
// comment: "//	--flag  ENV  default".
func mainDocRows(t *testing.T) []docRow {
	t.Helper()
	data, err := os.ReadFile(mainFile)
	if err != nil {
		t.Fatal(err)
	}
	lineRE := regexp.MustCompile(`^//\t(--[a-z-]+)\s+([A-Z_]+)\s+(.*)$`)
	var rows []docRow
	for i, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "package ") {
			break
		}
		if m := lineRE.FindStringSubmatch(line); m != nil {
			rows = append(rows, docRow{where: fmt.Sprintf("cmd/sandbox-runtime/main.go:%d", i+1), flag: m[1], env: m[2], def: m[3]})
		}
	}
	return rows
}

func TestConfigDocumented(t *testing.T) {
	settings := (&config{}).settings()
	var problems []string
	problems = append(problems, checkRows("docs/configuration.md", tableRows(t, configDoc, "| variable | flag | default |", true), settings, true)...)
	problems = append(problems, checkRows("cmd/sandbox-runtime/main.go", mainDocRows(t), settings, true)...)
	problems = append(problems, checkRows("docs/protocol.md", tableRows(t, protocolDoc, "| variable | default |", false), settings, false)...)
	for _, p := range problems {
		t.Error(p)
	}
	// --help is written from settings(): every setting appears with its
	// variable and the default the documents are held to.
	var help strings.Builder
	writeHelp(&help, settings)
	for _, s := range settings {
		if !strings.Contains(help.String(), "--"+s.flag+" ") || !strings.Contains(help.String(), "env "+s.env+"; default ") {
			t.Errorf("--help does not list --%s with env %s", s.flag, s.env)
		}
	}
}

// TestConfigDocCheckCanFail: the checks catch a wrong default, a wrong
// flag, a missing, an unknown, a repeated and a misplaced setting.
func TestConfigDocCheckCanFail(t *testing.T) {
	settings := []setting{
		{flag: "max-running", env: "SANDBOX_MAX_RUNNING", def: "16"},
		{flag: "token-file", env: "SANDBOX_RUNTIME_TOKEN_FILE"},
		{flag: "base-dir", env: "SANDBOX_BASE_DIR"},
	}
	good := []docRow{
		{"a:1", "SANDBOX_MAX_RUNNING", "--max-running", "16"},
		{"a:2", "SANDBOX_RUNTIME_TOKEN_FILE", "--token-file", "none (no auth)"},
		{"a:3", "SANDBOX_BASE_DIR", "--base-dir", " `/app`, else the current directory "},
	}
	if p := checkRows("a", good, settings, true); len(p) != 0 {
		t.Fatalf("the good rows have problems: %q", p)
	}
	for _, tc := range []struct {
		name string
		edit func([]docRow) []docRow
		want string
	}{
		{"another default", func(r []docRow) []docRow { r[0].def = "160"; return r }, `defaults to "160"`},
		{"a prefix is not the default", func(r []docRow) []docRow { r[0].def = "1"; return r }, `defaults to "1"`},
		{"a value where there is none", func(r []docRow) []docRow { r[1].def = "/etc/token"; return r }, `--help says "none"`},
		{"another flag", func(r []docRow) []docRow { r[0].flag = "--max-run"; return r }, "its flag is --max-running"},
		{"missing", func(r []docRow) []docRow { return r[:2] }, "SANDBOX_BASE_DIR (--base-dir"},
		{"unknown", func(r []docRow) []docRow { return append(r, docRow{"a:4", "SANDBOX_NOPE", "", "1"}) }, "SANDBOX_NOPE is no setting"},
		{"twice", func(r []docRow) []docRow { return append(r, r[0]) }, "listed twice"},
		{"order", func(r []docRow) []docRow { r[0], r[1] = r[1], r[0]; return r }, "settings()' order"},
	} {
		rows := tc.edit(append([]docRow(nil), good...))
		p := checkRows("a", rows, settings, true)
		if !strings.Contains(strings.Join(p, "\n"), tc.want) {
			t.Errorf("%s: problems %q; want one saying %q", tc.name, p, tc.want)
		}
	}
}
