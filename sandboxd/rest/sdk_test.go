package rest_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sdkCommit is the commit of kubernetes-sigs/agent-sandbox whose Python SDK
// the harness drives (the one docs/sandboxd-rest.md reports on).
const sdkCommit = "2fd412d55ecae90861a101a5424a75473de97c36"

// sdkPythonModules are what the SDK imports in its sandboxd mode (Debian:
// python3-requests, python3-pydantic, python3-kubernetes,
// python3-prometheus-client, python3-grpcio, python3-protobuf).
var sdkPythonModules = []string{"requests", "pydantic", "kubernetes", "prometheus_client", "grpc", "google.protobuf"}

// sdkPython is the first python3 that imports every module the SDK needs:
// Debian's (where apt puts them), then the one on PATH.
func sdkPython(t *testing.T) string {
	t.Helper()
	var tried []string
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		path, err := exec.LookPath(p)
		if err != nil {
			continue
		}
		out, err := exec.Command(path, "-c", "import "+strings.Join(sdkPythonModules, ", ")).CombinedOutput()
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

// sdkSource extracts the SDK (clients/python/agentic-sandbox-client) and
// upstream's process.proto from SANDBOXD_SDK_SOURCE: a git repository
// (a bare mirror or a clone) of kubernetes-sigs/agent-sandbox holding
// sdkCommit, or a directory of that tree. Nothing of it is kept in this
// repository; the copy lives in the test's temporary directory.
func sdkSource(t *testing.T) (sdkDir, proto string) {
	t.Helper()
	src := os.Getenv("SANDBOXD_SDK_SOURCE")
	if src == "" {
		t.Skip("needs upstream's source (kubernetes-sigs/agent-sandbox at " + sdkCommit[:8] + "): set SANDBOXD_SDK_SOURCE to a git mirror or a tree of it")
	}
	dst := t.TempDir()
	const sdkPath, protoPath = "clients/python/agentic-sandbox-client", "packages/sandboxd/spec/process/v1/process.proto"
	if _, err := os.Stat(filepath.Join(src, sdkPath)); err == nil {
		if out, err := exec.Command("cp", "-a", filepath.Join(src, "clients"), filepath.Join(src, "packages"), dst).CombinedOutput(); err != nil {
			t.Fatalf("copying the SDK from %s: %v %s", src, err, out)
		}
	} else {
		archive := exec.Command("git", "-C", src, "archive", sdkCommit, sdkPath, protoPath)
		tar := exec.Command("tar", "-x", "-C", dst)
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
			t.Fatalf("git archive %s from %s: %v %s", sdkCommit, src, err, aerr.String())
		}
		if err := tar.Wait(); err != nil {
			t.Fatalf("tar: %v", err)
		}
	}
	return filepath.Join(dst, sdkPath), filepath.Join(dst, protoPath)
}

// TestUpstreamPythonSDK runs upstream's Python SDK, in its sandboxd mode
// and otherwise unmodified, against the real binary
// (sandboxd/testdata/sdk_harness.py says what the harness adapts around
// it: the kubectl port-forward step, the generated stubs, pydantic 1).
// Every files.* call must succeed. commands.run needs the gRPC
// ProcessService: when the daemon announces it (sandboxd_grpc_addr in its
// listening line) those calls must succeed too; without it they are
// reported failing and logged as waiting for it.
func TestUpstreamPythonSDK(t *testing.T) {
	if os.Getenv("SANDBOXD_REST_BLACKBOX_URL") != "" {
		t.Skip("SANDBOXD_REST_BLACKBOX_URL names another server; this test starts our daemon")
	}
	python := sdkPython(t)
	for _, tool := range []string{"protoc", "grpc_python_plugin"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s to generate the SDK's stubs (apt: protobuf-compiler protobuf-compiler-grpc)", tool)
		}
	}
	sdkDir, proto := sdkSource(t)
	d, restURL := startOurs(t, "SANDBOXD_REST_ADDR=127.0.0.1:0", "SANDBOXD_GRPC_ADDR=127.0.0.1:0")
	grpcAddr, _ := d.Listening["sandboxd_grpc_addr"].(string)
	haveGRPC := grpcAddr != ""
	if !haveGRPC {
		grpcAddr = "127.0.0.1:1" // nothing listens there: commands.run fails at once
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "../testdata/sdk_harness.py",
		"--sdk", sdkDir, "--proto", proto, "--rest", restURL, "--grpc", grpcAddr)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "SDK_HARNESS_BASE_DIR=" + d.BaseDir, "PYTHONDONTWRITEBYTECODE=1"}
	out, err := cmd.CombinedOutput()
	t.Logf("the harness (exit %v) printed:\n%s", err, out)
	var calls, failedREST, failedGRPC int
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		pass, fail := strings.HasPrefix(line, "PASS "), strings.HasPrefix(line, "FAIL ")
		if !pass && !fail {
			continue
		}
		calls++
		name, _, _ := strings.Cut(line[5:], ":")
		switch {
		case fail && strings.HasPrefix(name, "commands."):
			failedGRPC++
			if haveGRPC {
				t.Errorf("%s", line)
			}
		case fail:
			failedREST++
			t.Errorf("%s", line)
		}
	}
	if calls < 15 {
		t.Fatalf("the harness reported %d calls; want 15", calls)
	}
	if !haveGRPC {
		t.Logf("the daemon serves no gRPC ProcessService (no sandboxd_grpc_addr in its listening line): %d commands.run call(s) failed, as expected until it does", failedGRPC)
	}
}
