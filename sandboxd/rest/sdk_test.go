package rest_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sdkGitRef is the commit of kubernetes-sigs/agent-sandbox taken when
// SANDBOXD_SDK_SOURCE names a git repository and SANDBOXD_SDK_REF is unset
// (the one the first run reported in docs/sandboxd-rest.md was taken at).
const sdkGitRef = "2fd412d55ecae90861a101a5424a75473de97c36"

// The parts of upstream's tree the harness needs.
const sdkPath, protoPath = "clients/python/agentic-sandbox-client", "packages/sandboxd/spec/process/v1/process.proto"

// sdkPythonModules are what the SDK imports in its sandboxd mode (Debian:
// python3-requests, python3-pydantic, python3-kubernetes,
// python3-prometheus-client, python3-grpcio, python3-protobuf).
var sdkPythonModules = []string{"requests", "pydantic", "kubernetes", "prometheus_client", "grpc", "google.protobuf"}

// sdkPython is the first python3 that imports every module the SDK needs:
// Debian's /usr/bin/python3 first, deliberately (apt puts the modules
// there, and the python3 on PATH may be a pyenv shim without them), then
// the one on PATH.
func sdkPython(t *testing.T) string {
	t.Helper()
	var tried []string
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		path, err := exec.LookPath(p)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := exec.CommandContext(ctx, path, "-c", "import "+strings.Join(sdkPythonModules, ", ")).CombinedOutput()
		cancel()
		if err == nil {
			return path
		}
		tried = append(tried, path+": "+strings.TrimSpace(lastLine(string(out))))
	}
	t.Skipf("needs python3 with the modules %v (apt: python3-requests python3-pydantic python3-kubernetes python3-prometheus-client python3-grpcio python3-protobuf); tried %v", sdkPythonModules, tried)
	return ""
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// sdkSource copies upstream's Python SDK (sdkPath) and its process.proto
// (protoPath) into the test's temporary directory, so that the harness may
// regenerate the SDK's stubs in the copy; nothing of upstream is kept in
// this repository. It returns both paths and where they came from.
//
// The source is upstream's repository, which this repository never holds
// and CI cannot reach (the registries it reaches are for their own kinds of
// package, not for another project's source): SANDBOXD_SDK_SOURCE names a
// directory holding upstream's tree, or a git repository of it (a bare
// mirror or a clone), of which SANDBOXD_SDK_REF (default sdkGitRef) is
// taken. .ci/run sets it to the mirror a session keeps, when the machine
// has one. Without it the test skips, naming that precondition.
func sdkSource(t *testing.T) (sdkDir, proto, from string) {
	t.Helper()
	dst := t.TempDir()
	src := os.Getenv("SANDBOXD_SDK_SOURCE")
	switch {
	case src == "":
		t.Skip("needs upstream's source (kubernetes-sigs/agent-sandbox at " + sdkGitRef[:8] + "): set SANDBOXD_SDK_SOURCE to a git mirror or a tree of it")
	case isDir(filepath.Join(src, sdkPath)):
		from = "the tree " + src
		// os.CopyFS makes the copy writable (the module cache is read-only).
		if err := os.CopyFS(filepath.Join(dst, sdkPath), os.DirFS(filepath.Join(src, sdkPath))); err != nil {
			t.Fatalf("copying the SDK from %s: %v", src, err)
		}
		data, err := os.ReadFile(filepath.Join(src, protoPath))
		if err == nil {
			err = os.MkdirAll(filepath.Dir(filepath.Join(dst, protoPath)), 0o755)
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(dst, protoPath), data, 0o644)
		}
		if err != nil {
			t.Fatalf("copying process.proto from %s: %v", src, err)
		}
	default:
		ref := os.Getenv("SANDBOXD_SDK_REF")
		if ref == "" {
			ref = sdkGitRef
		}
		from = "git " + src + " at " + ref
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		archive := exec.CommandContext(ctx, "git", "-C", src, "archive", ref, sdkPath, protoPath)
		tar := exec.CommandContext(ctx, "tar", "-x", "-C", dst)
		pipe, err := archive.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		tar.Stdin = pipe
		var aerr bytes.Buffer
		archive.Stderr = &aerr
		if err := tar.Start(); err != nil {
			t.Fatal(err)
		}
		if err := archive.Run(); err != nil {
			t.Fatalf("SANDBOXD_SDK_SOURCE %s is neither a tree of upstream (no %s) nor a git repository holding %s: %v %s", src, sdkPath, ref, err, aerr.String())
		}
		if err := tar.Wait(); err != nil {
			t.Fatalf("tar: %v", err)
		}
	}
	return filepath.Join(dst, sdkPath), filepath.Join(dst, protoPath), from
}

// envWith is env with each of kvs set, an earlier value of the same name
// dropped (not duplicated).
func envWith(env []string, kvs ...string) []string {
	var out []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.ContainsFunc(kvs, func(s string) bool { return strings.HasPrefix(s, name+"=") }) {
			out = append(out, kv)
		}
	}
	return append(out, kvs...)
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// sdkCalls is how many calls the harness makes; every one must pass.
const sdkCalls = 19

// TestUpstreamPythonSDK runs upstream's Python SDK, in its sandboxd mode
// and otherwise unmodified, against the real binary with both sandboxd
// listeners on (sandboxd/testdata/sdk_harness.py says what the harness
// adapts around it: the kubectl port-forward step, and, only where they do
// not load, the generated stubs, and pydantic 1). The SDK is upstream's tree
// named by SANDBOXD_SDK_SOURCE. Every call (files.*, commands.run) must succeed; the names
// and the count are logged.
func TestUpstreamPythonSDK(t *testing.T) {
	if os.Getenv("SANDBOXD_REST_BLACKBOX_URL") != "" {
		t.Skip("SANDBOXD_REST_BLACKBOX_URL names another server; this test starts our daemon")
	}
	python := sdkPython(t)
	for _, tool := range []string{"protoc", "grpc_python_plugin"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s to generate the SDK's stubs (apt: protobuf-compiler protobuf-compiler-grpc libprotobuf-dev)", tool)
		}
	}
	if _, err := os.Stat("/usr/include/google/protobuf/empty.proto"); err != nil {
		t.Skip("needs the well-known protos process.proto imports, /usr/include/google/protobuf/empty.proto (apt: libprotobuf-dev)")
	}
	sdkDir, proto, from := sdkSource(t)
	t.Logf("upstream's Python SDK from %s", from)
	d, restURL := startOurs(t, "SANDBOXD_REST_ADDR=127.0.0.1:0", "SANDBOXD_GRPC_ADDR=127.0.0.1:0")
	grpcAddr, _ := d.Listening["sandboxd_grpc_addr"].(string)
	if grpcAddr == "" {
		t.Fatalf("the listening line has no sandboxd_grpc_addr: %v", d.Listening)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "../testdata/sdk_harness.py",
		"--sdk", sdkDir, "--proto", proto, "--rest", restURL, "--grpc", grpcAddr)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "SDK_HARNESS_BASE_DIR=" + d.BaseDir, "PYTHONDONTWRITEBYTECODE=1"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	t.Logf("the harness (exit %v) printed:\n%s", err, out)
	var passed []string
	failed := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		pass, fail := strings.HasPrefix(line, "PASS "), strings.HasPrefix(line, "FAIL ")
		if !pass && !fail {
			continue
		}
		name, _, _ := strings.Cut(line[5:], ": ") // names have no ": "
		if fail {
			failed++
			t.Errorf("%s", line)
			continue
		}
		passed = append(passed, name)
	}
	if len(passed)+failed != sdkCalls {
		t.Errorf("the harness reported %d calls; want %d", len(passed)+failed, sdkCalls)
	}
	if err != nil && failed == 0 {
		t.Errorf("the harness failed: %v", err)
	}
	t.Logf("%d of %d SDK calls passed: %s", len(passed), sdkCalls, strings.Join(passed, "; "))
}
