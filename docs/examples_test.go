//go:build linux

package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDocExamplesSelection keeps the selection of TestREADMEExamples honest
// without running anything: the parser finds and refuses what it should,
// every document of docs/ is read, every block of the real documents is
// run by exactly one mode (or built by the docker stage), and .ci/docker.sh
// runs the docker mode over README.md and docs/ and cleans up every
// container those blocks name.
func TestDocExamplesSelection(t *testing.T) {
	t.Run("parser", func(t *testing.T) {
		doc := strings.Join([]string{
			"# title",
			"```sh",
			"echo plain",
			"```",
			"<!-- example: docker -->",
			"```sh",
			"docker run --name x img",
			"```",
			"<!-- example: docker build -->",
			"",
			"```sh",
			"docker build .",
			"```",
			"```text",
			"$ websocat ws://localhost:8888 (a transcript, not run)",
			"```",
			"```bash",
			"echo escaped",
			"```",
			"```sh",
			"docker ps",
			"```",
			"<!-- example: dockr -->",
			"```sh",
			"sudo true",
			"```",
			"```sh",
			"echo never closed",
		}, "\n")
		ex, problems := parseExamples("docs/x.md", []byte(doc))
		var got []string
		for _, e := range ex {
			got = append(got, e.where()+" "+e.marker+"|"+strings.TrimSpace(e.text))
		}
		want := []string{
			"docs/x.md:2 |echo plain",
			"docs/x.md:6 docker|docker run --name x img",
			"docs/x.md:11 docker build|docker build .",
			"docs/x.md:20 |docker ps",
			"docs/x.md:24 dockr|sudo true",
		}
		if !slices.Equal(got, want) {
			t.Errorf("blocks\n%q\nwant\n%q", got, want)
		}
		for _, p := range []string{
			"docs/x.md:17: a shell block is fenced ```bash",
			"docs/x.md:23: unknown marker \"dockr\"",
			"docs/x.md:27: unterminated ```sh block",
			"docs/x.md:20: this example runs docker",
			"docs/x.md:24: an example uses sudo",
		} {
			if !slices.ContainsFunc(problems, func(s string) bool { return strings.HasPrefix(s, p) }) {
				t.Errorf("no problem %q among %q", p, problems)
			}
		}
		if len(problems) != 5 {
			t.Errorf("%d problems, want 5: %q", len(problems), problems)
		}
		if s := selectExamples(ex, ""); len(s) != 2 || s[0].line != 2 || s[1].line != 20 {
			t.Errorf("make-run selection %v; want the blocks at lines 2 and 20", s)
		}
		if s := selectExamples(ex, "docker"); len(s) != 1 || s[0].line != 6 {
			t.Errorf("docker selection %v; want the block at line 6", s)
		}
	})

	t.Run("documents", func(t *testing.T) {
		files, err := docFiles()
		if err != nil {
			t.Fatal(err)
		}
		entries, err := os.ReadDir(docsDir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".md") && !slices.Contains(files, filepath.Join(docsDir, e.Name())) {
				t.Errorf("docs/%s is not among the documents whose examples run (%v)", e.Name(), files)
			}
		}
		if files[0] != readmeFile {
			t.Errorf("the documents %v do not start with README.md", files)
		}
		examples := docExamples(t)
		shell, docker := selectExamples(examples, ""), selectExamples(examples, "docker")
		for _, e := range examples {
			if e.marker != "" && e.marker != "docker" && e.marker != "docker build" {
				t.Errorf("%s: marked %q, which no mode runs", e.where(), e.marker)
			}
		}
		if len(shell) < minShellExamples || len(docker) < minDockerExamples {
			t.Errorf("%d unmarked and %d docker blocks; want at least %d and %d", len(shell), len(docker), minShellExamples, minDockerExamples)
		}
		// Every file that has an example is one a reader reaches from the README.
		readme, err := os.ReadFile(readmeFile)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range examples {
			if e.file != "README.md" && !strings.Contains(string(readme), "("+e.file+")") {
				t.Errorf("%s: README.md does not link %s", e.where(), e.file)
			}
		}

		// .ci/docker.sh: the step that runs the docker mode, and the
		// containers it removes whatever happens.
		script, err := os.ReadFile("../.ci/docker.sh")
		if err != nil {
			t.Fatal(err)
		}
		step := regexp.MustCompile(`(?s)containers\+=\(([^)]*)\)\s*README_EXAMPLES=docker [^\n]*\\\n\s*go test [^\n]*-run '\^TestREADMEExamples\$' \./docs/`).FindSubmatch(script)
		if step == nil {
			t.Fatal(".ci/docker.sh has no step `containers+=(…)` then `README_EXAMPLES=docker … go test … -run '^TestREADMEExamples$' ./docs/`")
		}
		cleaned := strings.Fields(string(step[1]))
		nameRE := regexp.MustCompile(`docker run [^\n]*--name ([A-Za-z0-9_.-]+)`)
		for _, e := range docker {
			for _, m := range nameRE.FindAllStringSubmatch(e.text, -1) {
				if !slices.Contains(cleaned, m[1]) {
					t.Errorf("%s: container %q is not in .ci/docker.sh's containers+=(%s), so a failed run would leave it behind", e.where(), m[1], step[1])
				}
			}
		}
	})
}
