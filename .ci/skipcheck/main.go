// Command skipcheck lists the tests that skipped in a CI run and fails when
// one of them must run on CI.
//
// With -json it reads `go test -json` on stdin and prints what a person
// needs while the tests run: the package result lines, the whole output of
// every failed test, output lines matching -show, and a line per skipped test (lines that are not JSON,
// such as build errors, are copied as they are). With -text FILE it reads
// the `go test -v` output in FILE instead and prints only the list.
//
// A skip is allowed only when it matches a line of the -allow file:
//
//	<test name regexp> TAB <skip message regexp> TAB <the machine precondition it names>
//
// Every other skip (a -short skip, a known bug, a stub, a missing fixture)
// means a test that must run on CI did not: skipcheck exits 1.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

type skip struct{ pkg, test, reason string }

type rule struct {
	test, reason *regexp.Regexp
	why          string
}

func main() {
	jsonMode := flag.Bool("json", false, "read go test -json on stdin")
	textFile := flag.String("text", "", "read go test -v output from this file")
	allowFile := flag.String("allow", ".ci/skips-allowed", "the allowed skips")
	label := flag.String("label", "tests", "what the list is of, for its heading")
	show := flag.String("show", `replayed [0-9]+ cases`, "with -json: also print test output lines matching this regexp")
	flag.Parse()
	rules, err := readRules(*allowFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "skipcheck:", err)
		os.Exit(2)
	}
	var skips []skip
	switch {
	case *jsonMode:
		skips = fromJSON(os.Stdin, os.Stdout, regexp.MustCompile(*show))
	case *textFile != "":
		f, err := os.Open(*textFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "skipcheck:", err)
			os.Exit(2)
		}
		skips = fromText(f)
		f.Close()
	default:
		fmt.Fprintln(os.Stderr, "skipcheck: give -json or -text FILE")
		os.Exit(2)
	}
	if !report(os.Stdout, *label, skips, rules) {
		os.Exit(1)
	}
}

func readRules(file string) ([]rule, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var rules []rule
	for i, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			return nil, fmt.Errorf("%s:%d: want 3 tab-separated fields, got %d", file, i+1, len(f))
		}
		t, err := regexp.Compile("^(" + f[0] + ")$")
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", file, i+1, err)
		}
		r, err := regexp.Compile(f[1])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", file, i+1, err)
		}
		rules = append(rules, rule{t, r, f[2]})
	}
	return rules, nil
}

// fromJSON renders the event stream to w and returns the skips.
func fromJSON(r io.Reader, w io.Writer, show *regexp.Regexp) []skip {
	out := map[string][]string{} // package/test -> its output lines
	var skips []skip
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(w, sc.Text())
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "output":
			if e.Test == "" {
				// Package-level lines: ok/FAIL, panics, coverage, build output.
				if !strings.HasPrefix(e.Output, "=== ") && !strings.HasPrefix(e.Output, "PASS") {
					fmt.Fprint(w, e.Output)
				}
				continue
			}
			out[key] = append(out[key], e.Output)
			if show.MatchString(e.Output) {
				fmt.Fprintf(w, "%s %s:%s", e.Package, e.Test, e.Output)
			}
		case "fail":
			if e.Test != "" {
				fmt.Fprint(w, strings.Join(out[key], ""))
			}
			delete(out, key)
		case "skip":
			if e.Test != "" {
				reason := skipReason(out[key])
				skips = append(skips, skip{e.Package, e.Test, reason})
				fmt.Fprintf(w, "--- SKIP: %s %s: %s\n", e.Package, e.Test, reason)
			}
			delete(out, key)
		case "pass":
			delete(out, key)
		}
	}
	return skips
}

// skipMessage matches the line t.Skip prints: "    file_test.go:12: message".
var skipMessage = regexp.MustCompile(`^\s+\S+\.go:\d+: (.*)$`)

func skipReason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		if m := skipMessage.FindStringSubmatch(strings.TrimRight(lines[i], "\n")); m != nil {
			return m[1]
		}
	}
	return "(no message)"
}

var skipLine = regexp.MustCompile(`^\s*--- SKIP: (\S+)`)

// testHeader is a line that says whose output follows in go test -v.
var testHeader = regexp.MustCompile(`^=== (?:RUN|CONT|PAUSE|NAME)\s+(\S+)`)

// fromText reads go test -v output. A skip's message is the last message
// line of that test: go test -v prints it under the test's "=== RUN" or
// "=== CONT" line, before "--- SKIP" (without -v, just after it).
func fromText(r io.Reader) []skip {
	var skips []skip
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 16<<20)
	var pending *skip
	current := ""               // the test whose output the lines are
	last := map[string]string{} // test -> its last message line
	for sc.Scan() {
		line := sc.Text()
		m := skipMessage.FindStringSubmatch(line)
		if pending != nil {
			if m != nil {
				pending.reason = m[1]
			}
			skips = append(skips, *pending)
			pending = nil
		}
		switch {
		case testHeader.MatchString(line):
			current = testHeader.FindStringSubmatch(line)[1]
		case skipLine.MatchString(line):
			name := skipLine.FindStringSubmatch(line)[1]
			if msg, ok := last[name]; ok {
				skips = append(skips, skip{test: name, reason: msg})
			} else {
				pending = &skip{test: name, reason: "(no message)"}
			}
		case m != nil && current != "":
			last[current] = m[1]
		}
	}
	if pending != nil {
		skips = append(skips, *pending)
	}
	return skips
}

// report prints the list and returns false when a skip is not allowed.
func report(w io.Writer, label string, skips []skip, rules []rule) bool {
	sort.Slice(skips, func(i, j int) bool {
		return skips[i].pkg+" "+skips[i].test < skips[j].pkg+" "+skips[j].test
	})
	fmt.Fprintf(w, "\n--- %s skipped on CI: %d\n", label, len(skips))
	ok := true
	for _, s := range skips {
		verdict := "MUST RUN ON CI"
		for _, r := range rules {
			if r.test.MatchString(s.test) && r.reason.MatchString(s.reason) {
				verdict = "allowed: " + r.why
				break
			}
		}
		if strings.HasPrefix(verdict, "MUST") {
			ok = false
		}
		name := s.test
		if s.pkg != "" {
			name = s.pkg + " " + s.test
		}
		fmt.Fprintf(w, "  %-60s %s\n      %s\n", name, verdict, s.reason)
	}
	if !ok {
		fmt.Fprintf(w, "--- FAIL: a test that must run on CI was skipped (allowed skips: .ci/skips-allowed)\n")
	}
	return ok
}
