package pycompat

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"
)

// TestPyDecodeUTF8 pins Python's errors="replace" (one U+FFFD per maximal
// invalid subpart).
func TestDecodeUTF8(t *testing.T) {
	for in, want := range map[string]string{
		"ok":               "ok",
		"a\xffb":           "a\ufffdb",
		"\xff\xfe":         "\ufffd\ufffd",
		"\xe2\x80x":        "\ufffdx",
		"\xed\xa0\x80":     "\ufffd\ufffd\ufffd",
		"\xf0\x9f\x98":     "\ufffd",
		"caf\xc3\xa9\xc3":  "café\ufffd",
		"\xef\xbf\xbd":     "\ufffd",
		"\xc0\xaf":         "\ufffd\ufffd",
		"\xf4\x90\x80\x80": "\ufffd\ufffd\ufffd\ufffd",
	} {
		if got := DecodeUTF8([]byte(in)); got != want {
			t.Errorf("DecodeUTF8(%q) = %q; want %q", in, got, want)
		}
	}
}

// TestResolveUnder pins the realpath-style resolution and confinement.
func TestResolveUnder(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	outside, _ := filepath.EvalSymlinks(t.TempDir())
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(base, "dir/sub"), 0o755))
	must(os.WriteFile(filepath.Join(base, "dir/f"), nil, 0o644))
	must(os.Symlink("..", filepath.Join(base, "dir/sub/up")))
	must(os.Symlink(outside, filepath.Join(base, "out")))
	must(os.Symlink("/nonexistent-target", filepath.Join(base, "dangling-out")))
	must(os.Symlink("nowhere", filepath.Join(base, "dangling-in")))
	must(os.Symlink(filepath.Join(base, "dir"), filepath.Join(base, "abs-in")))
	must(os.Symlink("loop", filepath.Join(base, "loop")))
	for rel, want := range map[string]string{
		"":                                   base,
		"/":                                  base,
		"//dir/./sub/":                       base + "/dir/sub",
		"dir/../dir/f":                       base + "/dir/f",
		"dir/f/":                             base + "/dir/f",
		"dir/f/x":                            base + "/dir/f/x",
		"missing/../dir":                     base + "/dir",
		"dir/sub/up/f":                       base + "/dir/f",
		"dir/sub/up/../x":                    base + "/x",
		"abs-in/f":                           base + "/dir/f",
		"dangling-in":                        base + "/nowhere",
		"loop/x":                             base + "/loop/x",
		"..":                                 "forbidden",
		"../" + filepath.Base(base) + "/dir": base + "/dir",
		"dir/../../x":                        "forbidden",
		"out":                                "forbidden",
		"out/secret":                         "forbidden",
		"dangling-out":                       "forbidden",
		"a\x00b":                             "nul",
	} {
		got, err := ResolveUnder(base, rel)
		switch {
		case errors.Is(err, ErrOutside):
			got = "forbidden"
		case errors.Is(err, ErrNULPath):
			got = "nul"
		case err != nil:
			got = err.Error()
		}
		if got != want {
			t.Errorf("ResolveUnder(%q) = %q; want %q", rel, got, want)
		}
	}
}

// TestPyParseJSONErrors pins messages and positions against CPython 3.11's
// json.loads (values printed by python3).
func TestParseJSONErrors(t *testing.T) {
	for doc, want := range map[string]string{
		`{"command": "x",}`:  "Expecting property name enclosed in double quotes@16",
		"{\n\"command\" 1}":  "Expecting ':' delimiter@12",
		`{"command": "x"} x`: "Extra data@17",
		"not json":           "Expecting value@0",
		"[1,]":               "Expecting value@3",
		`{"a": "\x"}`:        "Invalid \\escape@7",
		`"abc`:               "Unterminated string starting at@0",
		`{"a":"\u12"}`:       "Invalid \\uXXXX escape@7",
		"1.":                 "Extra data@1",
		"-":                  "Expecting value@0",
		"[":                  "Expecting value@1",
		"{":                  "Expecting property name enclosed in double quotes@1",
		`{"a" :`:             "Expecting value@6",
		`"\ud800\u12"`:       "Invalid \\uXXXX escape@8",
		"\"a\tb\"":           "Invalid control character at@2",
		`{"a": NaN, "b": -Infinity, "c": [1e5, -0, "\ud83d\ude00"]}`: "",
	} {
		_, err := ParseJSON([]rune(doc))
		got := ""
		var je *JSONError
		if errors.As(err, &je) {
			got = fmt.Sprintf("%s@%d", je.Msg, je.Pos)
		} else if err != nil {
			got = err.Error()
		}
		if got != want {
			t.Errorf("ParseJSON(%q): %q; want %q", doc, got, want)
		}
	}
}

func TestPartDisposition(t *testing.T) {
	for h, want := range map[string][2]string{
		`form-data; name="file"; filename="a/b.txt"`:         {"file", "a/b.txt"},
		`form-data; name=file; filename=plain.txt`:           {"file", "plain.txt"},
		`form-data; name="file"; filename="C:\\x\\evil.txt"`: {"file", "evil.txt"},
		`form-data; name="file"; filename="\\\\srv\\s\\y"`:   {"file", "y"},
		`form-data; name="file"; filename="q\"uote"`:         {"file", `q"uote`},
		"form-data; name=\"file\"; filename=\"caf\xe9\"":     {"file", "café"}, // Latin-1
		`form-data; NAME="file"; FileName="up.txt"`:          {"file", "up.txt"},
	} {
		name, filename, _, hasFilename := PartDisposition(h)
		if name != want[0] || filename != want[1] || !hasFilename {
			t.Errorf("PartDisposition(%q) = %q, %q; want %q, %q", h, name, filename, want[0], want[1])
		}
	}
}

// FuzzPartDisposition fuzzes the Content-Disposition parser of /upload:
// no panic, and names and filenames come out as valid UTF-8.
func FuzzPartDisposition(f *testing.F) {
	for _, s := range []string{`form-data; name="file"; filename="a/b.txt"`, `form-data; name=file; filename=x`,
		`form-data; filename="C:\\dir\\x.txt"; name="file"`, `form-data`, `form-data;`, `; name="a\"b"`, "form-data; name=\"\xff\"",
		`form-data; name="file"; filename*=utf-8''x`, `form-data; name="file"; filename="\\\\server\\x"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		name, filename, hasName, hasFilename := PartDisposition(h)
		if !utf8.ValidString(name) || !utf8.ValidString(filename) {
			t.Fatalf("PartDisposition(%q) = %q, %q: not UTF-8", h, name, filename)
		}
		if (!hasName && name != "") || (!hasFilename && filename != "") {
			t.Fatalf("PartDisposition(%q): values without their flags", h)
		}
	})
}
