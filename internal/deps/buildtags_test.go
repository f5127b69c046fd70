package deps

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sandbox-runtime/sandbox-runtime/internal/daemontest"
)

// TestDaemonBuildTags: every build of the daemon (the Dockerfile's, the
// Makefile's, .ci/docker.sh's; daemontest.Build uses the constant) carries
// daemontest.BuildTags, and with them the daemon links neither
// golang.org/x/net/trace nor html/template (3 MB of binary and 1.7 MiB of
// idle RSS: BENCHMARKS.md). A new build line without the tags, or a new
// import that pulls the templates in, fails here.
func TestDaemonBuildTags(t *testing.T) {
	root := "../.."
	buildLine := regexp.MustCompile(`(go|\$\(GO\)) (build|run)\b.*cmd/sandbox-runtime`)
	for _, name := range []string{"Dockerfile", "Makefile", ".ci/docker.sh"} {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		// One logical line per continued shell line.
		text := strings.ReplaceAll(string(b), "\\\n", " ")
		found := 0
		for _, line := range strings.Split(text, "\n") {
			if !buildLine.MatchString(line) || strings.Contains(line, "fail \"go build") {
				continue
			}
			found++
			if !strings.Contains(line, "-tags "+daemontest.BuildTags) && !strings.Contains(line, "-tags '$(BUILD_TAGS)'") {
				t.Errorf("%s: a build of the daemon without -tags %s: %s", name, daemontest.BuildTags, strings.TrimSpace(line))
			}
		}
		if found == 0 {
			t.Errorf("%s: no build line of ./cmd/sandbox-runtime found (the check would pass on nothing)", name)
		}
	}
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^BUILD_TAGS := ` + regexp.QuoteMeta(daemontest.BuildTags) + `$`).Match(mk) {
		t.Errorf("Makefile: BUILD_TAGS is not %q", daemontest.BuildTags)
	}
	cmd := exec.Command("go", "list", "-tags", daemontest.BuildTags, "-deps", "./cmd/sandbox-runtime")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "golang.org/x/net/trace" || pkg == "html/template" || pkg == "text/template" {
			t.Errorf("the daemon built with -tags %s links %s", daemontest.BuildTags, pkg)
		}
	}
}
