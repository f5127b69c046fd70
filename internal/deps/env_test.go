package deps

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// envReaders are the packages allowed to read the process environment (as
// cmd/sandbox-runtime/main.go's comment says): the commands, and the test
// launcher that filters what it hands a daemon. procgroup may read PATH
// only (its fallback when a command's environment has none).
var envReaders = []string{"cmd/", "internal/daemontest"}

// TestOnlyMainReadsTheEnvironment: no library package of the daemon calls
// os.Getenv, os.LookupEnv or os.Environ (but procgroup's PATH).
func TestOnlyMainReadsTheEnvironment(t *testing.T) {
	root := "../.."
	var found int
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		pkg := filepath.ToSlash(filepath.Dir(rel))
		for _, p := range envReaders {
			if strings.HasPrefix(pkg+"/", p) || pkg == strings.TrimSuffix(p, "/") {
				return nil
			}
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		found++
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "os" {
				return true
			}
			switch sel.Sel.Name {
			case "Getenv", "LookupEnv", "Environ", "ExpandEnv":
			default:
				return true
			}
			if pkg == "procgroup" && sel.Sel.Name == "LookupEnv" && len(call.Args) == 1 {
				if lit, ok := call.Args[0].(*ast.BasicLit); ok {
					if v, _ := strconv.Unquote(lit.Value); v == "PATH" {
						return true
					}
				}
			}
			t.Errorf("%s calls os.%s: only main (cmd/…) reads the environment", rel, sel.Sel.Name)
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 20 {
		t.Fatalf("only %d library files parsed: the walk did not see the module", found)
	}
}
