package deps

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines is the length (from the func keyword to the closing brace)
// above which a production function must say why it is long: a line of its
// doc comment that starts with "long:" (docs/architecture.md "Long
// functions"). Split a long function along its steps instead where it has
// steps; the marker is for the ones that are one step (a table, a state
// machine's one switch) or whose parts only make sense together.
const maxFuncLines = 80

// longMarker is the doc-comment prefix that justifies a long function.
const longMarker = "long:"

// longFunctions lists the function declarations of f over maxFuncLines
// lines whose doc comment has no "// long: why" line.
func longFunctions(fset *token.FileSet, f *ast.File) []string {
	var out []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		from, to := fset.Position(fn.Pos()).Line, fset.Position(fn.End()).Line
		n := to - from + 1
		if n <= maxFuncLines || hasLongMarker(fn.Doc) {
			continue
		}
		name := fn.Name.Name
		if fn.Recv != nil && len(fn.Recv.List) == 1 {
			name = recvName(fn.Recv.List[0].Type) + "." + name
		}
		out = append(out, fmt.Sprintf("%s:%d %s: %d lines", fset.Position(fn.Pos()).Filename, from, name, n))
	}
	return out
}

func hasLongMarker(doc *ast.CommentGroup) bool {
	if doc == nil {
		return false
	}
	for _, c := range doc.List {
		text := strings.TrimSpace(strings.TrimPrefix(c.Text, "//"))
		if strings.HasPrefix(text, longMarker) && len(strings.TrimSpace(text[len(longMarker):])) > 0 {
			return true
		}
	}
	return false
}

func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvName(t.X)
	case *ast.IndexExpr:
		return recvName(t.X)
	case *ast.IndexListExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}

// TestNoLongFunctionWithoutReason walks the module's production Go files
// (not _test.go, not generated code) and fails for each function over
// maxFuncLines lines without a "// long:" line in its doc comment.
func TestNoLongFunctionWithoutReason(t *testing.T) {
	root := "../.."
	var parsed int
	err := walkProductionGo(root, func(path, rel string) error {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		parsed++
		for _, p := range longFunctions(fset, f) {
			rel, _ := filepath.Rel(root, p)
			t.Errorf("%s: split it along its steps, or say why in a %q line of its doc comment", rel, "// "+longMarker+" …")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if parsed < 20 {
		t.Fatalf("only %d production files parsed: the walk did not see the module", parsed)
	}
}

// walkProductionGo calls fn for each non-test .go file under root (not in
// testdata or a dot directory), with its path relative to root.
func walkProductionGo(root string, fn func(path, rel string) error) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		return fn(path, rel)
	})
}

// TestLongFunctionCheckCanFail: the check finds a long function without the
// marker, and accepts it with one (not with an empty one).
func TestLongFunctionCheckCanFail(t *testing.T) {
	body := strings.Repeat("\tx++\n", maxFuncLines)
	src := func(doc string) string {
		return "package p\n\n" + doc + "func F() {\n\tx := 0\n" + body + "\t_ = x\n}\n\nfunc Short() {}\n"
	}
	for _, c := range []struct {
		doc  string
		want int
	}{
		{"", 1},
		{"// F does things.\n", 1},
		{"// F does things.\n//\n// long:\n", 1},
		{"// F does things.\n//\n// long: one table, no steps.\n", 0},
	} {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, "p.go", src(c.doc), parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if got := longFunctions(fset, f); len(got) != c.want {
			t.Errorf("doc %q: found %v; want %d", c.doc, got, c.want)
		}
	}
}
