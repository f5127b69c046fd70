package docs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"
)

// The documents link each other (README.md is the map): a link to a file of
// the repository must name one that exists, and a #fragment must name a
// heading of its target, as GitHub spells heading anchors.

var (
	mdLink  = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`^#{1,6} (.+)$`)
)

// anchors returns the heading anchors of a markdown document (GitHub's
// slugs: lower case, punctuation dropped, spaces to hyphens, repeats
// numbered), skipping fenced blocks.
func anchors(data []byte) map[string]bool {
	out := map[string]bool{}
	fenced := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		m := heading.FindStringSubmatch(line)
		if fenced || m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		slug := b.String()
		for i, s := 1, slug; ; i++ {
			if !out[s] {
				out[s] = true
				break
			}
			s = fmt.Sprintf("%s-%d", slug, i)
		}
	}
	return out
}

// linkProblems checks the links of one document (path relative to docs/).
func linkProblems(path string, data []byte) []string {
	var out []string
	fenced := false
	for i, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			resolved := path
			if file != "" {
				resolved = filepath.Join(filepath.Dir(path), file)
			}
			where := fmt.Sprintf("%s:%d", docName(path), i+1)
			st, err := os.Stat(resolved)
			if err != nil {
				out = append(out, fmt.Sprintf("%s: the link %q names no file of the repository", where, target))
				continue
			}
			if frag == "" {
				continue
			}
			if st.IsDir() || !strings.HasSuffix(resolved, ".md") {
				out = append(out, fmt.Sprintf("%s: the link %q has a #fragment on something that is not a document", where, target))
				continue
			}
			td, err := os.ReadFile(resolved)
			if err != nil {
				out = append(out, fmt.Sprintf("%s: %v", where, err))
				continue
			}
			if a := anchors(td); !a[frag] {
				var have []string
				for k := range a {
					have = append(have, k)
				}
				sort.Strings(have)
				out = append(out, fmt.Sprintf("%s: the link %q names no heading of %s (its anchors: %s)", where, target, file, strings.Join(have, " ")))
			}
		}
	}
	return out
}

// TestDocLinks: every relative link of README.md and docs/*.md reaches a
// file, and every fragment a heading.
func TestDocLinks(t *testing.T) {
	files, err := docFiles()
	if err != nil {
		t.Fatal(err)
	}
	links := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		links += len(mdLink.FindAll(data, -1))
		for _, p := range linkProblems(f, data) {
			t.Error(p)
		}
	}
	if links < 30 {
		t.Fatalf("%d links in %v: the documents were not read", links, files)
	}
}

// TestDocLinksCanFail: a missing file and a missing heading are reported.
func TestDocLinksCanFail(t *testing.T) {
	doc := []byte("# Top\n## Terminals (PTY)\n[a](#terminals-pty) [b](protocol.md#1-callers-and-transport) [c](#nope) [d](missing.md) [e](https://example.com/x)\n```text\n[f](#in-a-fence)\n```\n")
	dir := t.TempDir()
	path := filepath.Join(dir, "x.md")
	if err := os.WriteFile(path, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "protocol.md"), []byte("## 1. Callers and transport\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := linkProblems(path, doc)
	if len(p) != 2 || !strings.Contains(p[0], `"#nope" names no heading`) || !strings.Contains(p[1], `"missing.md" names no file`) {
		t.Errorf("problems %q; want #nope and missing.md", p)
	}
}

// TestREADMEIsAMap: README.md stays short, and its first screen says what
// the daemon is, the two commands, and where the map leads.
func TestREADMEIsAMap(t *testing.T) {
	data, err := os.ReadFile(readmeFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	if len(lines) > 250 {
		t.Errorf("README.md has %d lines; keep it under 250 (move detail into docs/ and link it)", len(lines))
	}
	first := strings.Join(lines[:min(len(lines), 40)], "\n")
	for _, want := range []string{"`make run`", "`make test`", "(docs/architecture.md)", "(docs/protocol.md)"} {
		if !strings.Contains(first, want) {
			t.Errorf("README.md's first 40 lines do not have %s", want)
		}
	}
	// Every document of docs/ is on the map.
	md, err := filepath.Glob(filepath.Join(docsDir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range md {
		if name := docName(f); !strings.Contains(first, "("+name+")") {
			t.Errorf("README.md's first 40 lines do not link %s", name)
		}
	}
}
