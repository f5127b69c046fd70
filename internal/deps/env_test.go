package deps

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// envReaders are the packages allowed to read the process environment (as
// cmd/sandbox-runtime/main.go's comment says): the commands, and the test
// launcher that filters what it hands a daemon, the test wrapper. procgroup may read PATH
// only (its fallback when a command's environment has none).
var envReaders = []string{"cmd/", "internal/daemontest", "internal/testexec"}

// TestOnlyMainReadsTheEnvironment: no library package of the daemon calls
// os.Getenv, os.LookupEnv or os.Environ (but procgroup's PATH).
func TestOnlyMainReadsTheEnvironment(t *testing.T) {
	root := "../.."
	var found int
	err := walkProductionGo(root, func(path, rel string) error {
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
		for _, r := range envReads(f, pkg) {
			t.Errorf("%s %s: only main (cmd/…) reads the environment", rel, r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 20 {
		t.Fatalf("only %d library files parsed: the walk did not see the module", found)
	}
}

// envReads lists the environment reads of f: any use (a call or a value,
// as in os.Expand(s, os.Getenv)) of os.Getenv, LookupEnv, Environ or
// ExpandEnv and of syscall.Getenv or Environ, under whatever name the file
// imports os or syscall, and any dot import of them; procgroup's
// os.LookupEnv("PATH") is allowed.
func envReads(f *ast.File, pkg string) []string {
	readers := map[string]map[string]bool{
		"os":      {"Getenv": true, "LookupEnv": true, "Environ": true, "ExpandEnv": true},
		"syscall": {"Getenv": true, "Environ": true},
	}
	names := map[string]string{} // local name → package path
	var out []string
	for _, spec := range f.Imports {
		path, _ := strconv.Unquote(spec.Path.Value)
		if readers[path] == nil {
			continue
		}
		name := path
		if spec.Name != nil {
			name = spec.Name.Name
		}
		if name == "." {
			out = append(out, "dot-imports "+path)
			continue
		}
		names[name] = path
	}
	allowed := map[*ast.SelectorExpr]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok && pkg == "procgroup" && len(call.Args) == 1 {
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "LookupEnv" {
				if lit, ok := call.Args[0].(*ast.BasicLit); ok {
					if v, _ := strconv.Unquote(lit.Value); v == "PATH" {
						allowed[sel] = true
					}
				}
			}
		}
		sel, ok := n.(*ast.SelectorExpr)
		if !ok || allowed[sel] {
			return true
		}
		x, ok := sel.X.(*ast.Ident)
		if !ok {
			return true
		}
		if path, ok := names[x.Name]; ok && readers[path][sel.Sel.Name] {
			out = append(out, "uses "+path+"."+sel.Sel.Name)
		}
		return true
	})
	return out
}

// TestEnvReadsCatchesEveryForm: the checker finds the forms an attack
// slipped past the first version of it.
func TestEnvReadsCatchesEveryForm(t *testing.T) {
	for _, tc := range []struct {
		src  string
		pkg  string
		want int
	}{
		{`package p; import "os"; var _ = os.Getenv("A")`, "runtime", 1},
		{`package p; import xos "os"; var _ = xos.Getenv("A")`, "runtime", 1},
		{`package p; import "syscall"; var _, _ = syscall.Getenv("A")`, "runtime", 1},
		{`package p; import "os"; var _ = os.Expand("$A", os.Getenv)`, "runtime", 1},
		{`package p; import . "os"; var _ = Getenv("A")`, "runtime", 1},
		{`package p; import "os"; var _ = os.Environ()`, "api", 1},
		{`package p; import "os"; var _, _ = os.LookupEnv("PATH")`, "procgroup", 0},
		{`package p; import "os"; var _, _ = os.LookupEnv("HOME")`, "procgroup", 1},
		{`package p; import "os"; var _ = os.Getpid()`, "runtime", 0},
	} {
		f, err := parser.ParseFile(token.NewFileSet(), "x.go", tc.src, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := envReads(f, tc.pkg); len(got) != tc.want {
			t.Errorf("%s (package %s): %q; want %d reads", tc.src, tc.pkg, got, tc.want)
		}
	}
}
