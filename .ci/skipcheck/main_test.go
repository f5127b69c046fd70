package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func rulesFor(t *testing.T, text string) []rule {
	t.Helper()
	f := filepath.Join(t.TempDir(), "allow")
	os.WriteFile(f, []byte(text), 0o600)
	r, err := readRules(f)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A skip passes only when both its name and its message match a rule.
func TestReport(t *testing.T) {
	rules := rulesFor(t, "# comment\nTestPID1\tnot permitted\tno CAP_SYS_ADMIN\n")
	for _, c := range []struct {
		skips []skip
		ok    bool
	}{
		{nil, true},
		{[]skip{{"p", "TestPID1", "creating a PID namespace is not permitted here"}}, true},
		{[]skip{{"p", "TestPID1", "e2e tests are skipped with -short"}}, false}, // right name, other reason
		{[]skip{{"p", "TestPID1Helper", "not permitted"}}, false},               // names are anchored
		{[]skip{{"p", "TestX", "BUG: reported"}}, false},
	} {
		var out bytes.Buffer
		if got := report(&out, "tests", c.skips, rules); got != c.ok {
			t.Errorf("%v: ok %v; want %v\n%s", c.skips, got, c.ok, out.String())
		}
		for _, s := range c.skips {
			if !strings.Contains(out.String(), s.test) || !strings.Contains(out.String(), s.reason) {
				t.Errorf("the list does not show %v:\n%s", s, out.String())
			}
		}
	}
}

// go test -json: skips with their messages; failed tests' output shown.
func TestFromJSON(t *testing.T) {
	in := `{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:9: no python3 here\n"}
{"Action":"skip","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:3: got 1; want 2\n"}
{"Action":"fail","Package":"p","Test":"TestB"}
{"Action":"output","Package":"p","Test":"TestC","Output":"    c_test.go:1: replayed 148 cases\n"}
{"Action":"pass","Package":"p","Test":"TestC"}
{"Action":"output","Package":"p","Output":"ok  \tp\t0.1s\n"}
not json: a build error
`
	var out bytes.Buffer
	skips := fromJSON(strings.NewReader(in), &out, regexp.MustCompile(`replayed [0-9]+ cases`))
	if len(skips) != 1 || skips[0].test != "TestA" || skips[0].reason != "no python3 here" {
		t.Errorf("skips %v", skips)
	}
	for _, want := range []string{"got 1; want 2", "replayed 148 cases", "ok  \tp", "not json: a build error"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// go test -v with parallel subtests: a message belongs to its own test.
func TestFromText(t *testing.T) {
	in := `=== RUN   TestR/a
=== PAUSE TestR/a
=== RUN   TestR/b
    r_test.go:155: needs a daemon built with -race
=== CONT  TestR/a
    r_test.go:10: FIGURE: something
    --- PASS: TestR/a (0.00s)
    --- SKIP: TestR/b (0.00s)
=== RUN   TestQ
--- SKIP: TestQ (0.00s)
    q_test.go:3: late message
`
	skips := fromText(strings.NewReader(in))
	if len(skips) != 2 || skips[0] != (skip{test: "TestR/b", reason: "needs a daemon built with -race"}) ||
		skips[1] != (skip{test: "TestQ", reason: "late message"}) {
		t.Errorf("skips %+v", skips)
	}
}
