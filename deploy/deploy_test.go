package deploy

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v4"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sandbox-runtime/sandbox-runtime/sandboxd/processv1"
)

// The subset of the Kubernetes objects the checks read.
type (
	envVar struct {
		Name  string `yaml:"name"`
		Value string `yaml:"value"`
	}
	probe struct {
		HTTPGet struct {
			Path string `yaml:"path"`
			Port any    `yaml:"port"` // a number or a port name
		} `yaml:"httpGet"`
		TimeoutSeconds int `yaml:"timeoutSeconds"`
	}
	container struct {
		Name  string `yaml:"name"`
		Image string `yaml:"image"`
		Ports []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
		} `yaml:"ports"`
		Env            []envVar `yaml:"env"`
		ReadinessProbe *probe   `yaml:"readinessProbe"`
		LivenessProbe  *probe   `yaml:"livenessProbe"`
		Resources      struct {
			Requests map[string]string `yaml:"requests"`
			Limits   map[string]string `yaml:"limits"`
		} `yaml:"resources"`
		SecurityContext struct {
			AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
			ReadOnlyRootFilesystem   bool  `yaml:"readOnlyRootFilesystem"`
			Privileged               bool  `yaml:"privileged"`
		} `yaml:"securityContext"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
			ReadOnly  bool   `yaml:"readOnly"`
		} `yaml:"volumeMounts"`
	}
	podSpec struct {
		TerminationGracePeriodSeconds *int `yaml:"terminationGracePeriodSeconds"`
		SecurityContext               struct {
			RunAsNonRoot *bool `yaml:"runAsNonRoot"`
			RunAsUser    *int  `yaml:"runAsUser"`
			FSGroup      *int  `yaml:"fsGroup"`
		} `yaml:"securityContext"`
		Containers []container `yaml:"containers"`
		Volumes    []struct {
			Name     string    `yaml:"name"`
			EmptyDir *struct{} `yaml:"emptyDir"`
			Secret   *struct {
				SecretName  string `yaml:"secretName"`
				DefaultMode *int   `yaml:"defaultMode"`
				Items       []struct {
					Key  string `yaml:"key"`
					Path string `yaml:"path"`
				} `yaml:"items"`
			} `yaml:"secret"`
		} `yaml:"volumes"`
	}
)

func readYAML(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// daemonFlags builds the daemon and reads its settings from --help: the
// variable of each flag and its default.
func daemonFlags(t *testing.T) (bin string, defaults map[string]string) {
	t.Helper()
	bin = filepath.Join(t.TempDir(), "sandbox-runtime")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../cmd/sandbox-runtime").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.CommandContext(ctx, bin, "--help").Output()
	if err != nil {
		t.Fatalf("--help: %v", err)
	}
	defaults = map[string]string{}
	re := regexp.MustCompile(`(?m)^      env (SANDBOXD?_[A-Z0-9_]+); default (.*)$`)
	for _, m := range re.FindAllStringSubmatch(string(out), -1) {
		defaults[m[1]] = strings.Trim(m[2], `"`)
	}
	if len(defaults) < 10 {
		t.Fatalf("read only %d settings from --help:\n%s", len(defaults), out)
	}
	return bin, defaults
}

func TestManifests(t *testing.T) {
	bin, defaults := daemonFlags(t)

	var pod struct {
		APIVersion string  `yaml:"apiVersion"`
		Kind       string  `yaml:"kind"`
		Spec       podSpec `yaml:"spec"`
	}
	readYAML(t, "pod.yaml", &pod)
	var tmpl struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Spec       struct {
			PodTemplate struct {
				Spec podSpec `yaml:"spec"`
			} `yaml:"podTemplate"`
		} `yaml:"spec"`
	}
	readYAML(t, "sandbox-template.yaml", &tmpl)
	var secret struct {
		Kind       string                `yaml:"kind"`
		Metadata   struct{ Name string } `yaml:"metadata"`
		StringData map[string]string     `yaml:"stringData"`
	}
	readYAML(t, "token-secret.yaml", &secret)

	if pod.APIVersion != "v1" || pod.Kind != "Pod" {
		t.Errorf("pod.yaml is %s %s", pod.APIVersion, pod.Kind)
	}
	if tmpl.APIVersion != "extensions.agents.x-k8s.io/v1alpha1" || tmpl.Kind != "SandboxTemplate" {
		t.Errorf("sandbox-template.yaml is %s %s", tmpl.APIVersion, tmpl.Kind)
	}
	// The two pod specs are one: a fix to one must reach the other.
	var podRaw, tmplRaw map[string]any
	readYAML(t, "pod.yaml", &podRaw)
	readYAML(t, "sandbox-template.yaml", &tmplRaw)
	tmplPodSpec := tmplRaw["spec"].(map[string]any)["podTemplate"].(map[string]any)["spec"]
	if !reflect.DeepEqual(podRaw["spec"], tmplPodSpec) {
		t.Errorf("the pod spec of sandbox-template.yaml differs from pod.yaml's")
	}

	spec := pod.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers; want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "SANDBOX_") {
			if _, ok := defaults[e.Name]; !ok {
				t.Errorf("env %s is not a setting of the daemon (--help lists %d)", e.Name, len(defaults))
			}
		}
		env[e.Name] = e.Value
	}
	setting := func(name string) string {
		if v, ok := env[name]; ok {
			return v
		}
		return defaults[name]
	}

	// Port: the container port is the one the daemon listens on.
	_, portText, err := net.SplitHostPort(setting("SANDBOX_RUNTIME_ADDR"))
	if err != nil {
		t.Fatalf("SANDBOX_RUNTIME_ADDR %q: %v", setting("SANDBOX_RUNTIME_ADDR"), err)
	}
	port, _ := strconv.Atoi(portText)
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != port {
		t.Errorf("container ports %+v; the daemon listens on %d", c.Ports, port)
	}
	portOf := func(p any) int {
		switch v := p.(type) {
		case int:
			return v
		case string:
			for _, cp := range c.Ports {
				if cp.Name == v {
					return cp.ContainerPort
				}
			}
		}
		return -1
	}

	// Probes: readiness on /v1/health (503 while draining), liveness on /.
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/v1/health" || portOf(c.ReadinessProbe.HTTPGet.Port) != port {
		t.Errorf("readiness probe %+v; want GET /v1/health on %d", c.ReadinessProbe, port)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/" || portOf(c.LivenessProbe.HTTPGet.Port) != port {
		t.Errorf("liveness probe %+v; want GET / on %d", c.LivenessProbe, port)
	}

	// Shutdown: the kubelet's SIGKILL comes after the daemon's budget.
	budget, err := strconv.ParseFloat(setting("SANDBOX_SHUTDOWN_TIMEOUT_SECONDS"), 64)
	if err != nil {
		t.Fatal(err)
	}
	if spec.TerminationGracePeriodSeconds == nil || float64(*spec.TerminationGracePeriodSeconds) < budget+5 {
		t.Errorf("terminationGracePeriodSeconds %v; want at least 5 s above the shutdown budget %v s", spec.TerminationGracePeriodSeconds, budget)
	}

	// Security: non-root, no privilege escalation, resources set.
	sc := spec.SecurityContext
	if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and a non-zero runAsUser", sc)
	}
	if p := c.SecurityContext.AllowPrivilegeEscalation; p == nil || *p || c.SecurityContext.Privileged {
		t.Errorf("container securityContext %+v: want allowPrivilegeEscalation false", c.SecurityContext)
	}
	for _, r := range []string{"cpu", "memory"} {
		if c.Resources.Requests[r] == "" || (r == "memory" && c.Resources.Limits[r] == "") {
			t.Errorf("resources %+v: want cpu and memory requests and a memory limit", c.Resources)
		}
	}

	// Volumes: the base dir is writable although the root is read-only, and
	// the token file is the Secret's key.
	mounts := map[string]string{} // mount path -> volume
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	vols := map[string]int{}
	for i, v := range spec.Volumes {
		vols[v.Name] = i
	}
	if c.SecurityContext.ReadOnlyRootFilesystem {
		// Every directory a command is expected to write lies on an
		// emptyDir: the base dir, /tmp, and HOME (pip install --user,
		// ~/.cache, ~/.codex), as the manifest or else the image sets it.
		img := imageEnv(t, c.Image)
		home := env["HOME"]
		if home == "" {
			home = img["HOME"]
		}
		if home == "" {
			t.Errorf("neither the manifest nor the image %s sets HOME", c.Image)
		}
		for _, dir := range []string{setting("SANDBOX_BASE_DIR"), "/tmp", home} {
			if !onEmptyDir(dir, c, spec) {
				t.Errorf("the root filesystem is read-only but %s is on no emptyDir mount (commands cannot write it)", dir)
			}
		}
	}
	tokenFile := env["SANDBOX_RUNTIME_TOKEN_FILE"]
	if tokenFile == "" {
		t.Fatal("no SANDBOX_RUNTIME_TOKEN_FILE: the manifests must require a token")
	}
	i, ok := vols[mounts[filepath.Dir(tokenFile)]]
	if !ok || spec.Volumes[i].Secret == nil {
		t.Fatalf("the token file %s is not in a Secret volume", tokenFile)
	}
	sv := spec.Volumes[i].Secret
	if sv.SecretName != secret.Metadata.Name || secret.Kind != "Secret" {
		t.Errorf("the token volume mounts Secret %q; token-secret.yaml defines %s %q", sv.SecretName, secret.Kind, secret.Metadata.Name)
	}
	found := false
	for _, it := range sv.Items {
		if it.Path == filepath.Base(tokenFile) && secret.StringData[it.Key] != "" {
			found = true
		}
	}
	if !found {
		t.Errorf("no item of the token Secret lands at %s", tokenFile)
	}
	if sv.DefaultMode == nil || *sv.DefaultMode&0o040 == 0 || sc.FSGroup == nil {
		t.Errorf("the token file must be group-readable with an fsGroup, or user %v cannot read it (defaultMode %v)", *sc.RunAsUser, sv.DefaultMode)
	}

	// The real daemon with the manifest's environment (paths moved into a
	// temporary directory, the port to a free one) starts, answers both
	// probes without a token, and refuses the rest without one.
	runWithManifestEnv(t, bin, c.Env, c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path)
}

// onEmptyDir reports whether dir is at or below the mount path of an
// emptyDir volume that is mounted writable in c.
func onEmptyDir(dir string, c container, spec podSpec) bool {
	for _, m := range c.VolumeMounts {
		rel, err := filepath.Rel(m.MountPath, dir)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || m.ReadOnly {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.EmptyDir != nil {
				return true
			}
		}
	}
	return false
}

// imageEnv returns the ENV of the Dockerfile target the manifest's image is
// built from ("sandbox-runtime-python:latest": target python), following its
// stages back to the first; later stages win.
func imageEnv(t *testing.T, image string) map[string]string {
	t.Helper()
	name, _, _ := strings.Cut(image, ":")
	target := strings.TrimPrefix(name, "sandbox-runtime-")
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	type stage struct {
		parent string
		env    [][2]string
	}
	stages := map[string]*stage{}
	var cur *stage
	fromRE := regexp.MustCompile(`^FROM\s+(\S+)\s+AS\s+(\S+)`)
	var cont string // an instruction continued with a backslash
	for _, line := range strings.Split(string(b), "\n") {
		if cont != "" || strings.HasPrefix(line, "ENV ") {
			cont += " " + strings.TrimSpace(line)
			if strings.HasSuffix(cont, "\\") {
				cont = strings.TrimSuffix(cont, "\\")
				continue
			}
			if cur != nil {
				for _, kv := range strings.Fields(strings.TrimPrefix(strings.TrimSpace(cont), "ENV ")) {
					if k, v, ok := strings.Cut(kv, "="); ok {
						cur.env = append(cur.env, [2]string{k, v})
					}
				}
			}
			cont = ""
			continue
		}
		if m := fromRE.FindStringSubmatch(line); m != nil {
			cur = &stage{parent: m[1]}
			stages[m[2]] = cur
		}
	}
	var chain []*stage
	for n := target; stages[n] != nil && len(chain) < 20; n = stages[n].parent {
		chain = append([]*stage{stages[n]}, chain...)
	}
	if len(chain) == 0 {
		t.Fatalf("image %s: no stage %q in the Dockerfile", image, target)
	}
	env := map[string]string{}
	for _, st := range chain {
		for _, kv := range st.env {
			env[kv[0]] = kv[1]
		}
	}
	return env
}

func runWithManifestEnv(t *testing.T, bin string, manifestEnv []envVar, readiness, liveness string) (listening map[string]any) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	os.WriteFile(token, []byte("manifest-test-token\n"), 0o600)
	base := filepath.Join(dir, "app")
	os.Mkdir(base, 0o755)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SANDBOX_") && !strings.HasPrefix(kv, "SANDBOXD_") {
			env = append(env, kv)
		}
	}
	for _, e := range manifestEnv {
		v := e.Value
		switch e.Name {
		case "SANDBOX_RUNTIME_ADDR":
			v = "127.0.0.1:0"
		case "SANDBOX_RUNTIME_TOKEN_FILE":
			v = token
		case "SANDBOX_BASE_DIR":
			v = base
		case "SANDBOXD_REST_ADDR", "SANDBOXD_GRPC_ADDR":
			v = "127.0.0.1:0" // loopback, as in the manifest
		}
		env = append(env, e.Name+"="+v)
	}
	cmd := exec.Command(bin)
	cmd.Env = env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("the daemon did not exit 0 on SIGTERM: %v", err)
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Error("the daemon did not exit within 30 s of SIGTERM")
		}
	})
	var addr string
	deadline := time.After(30 * time.Second)
	for addr == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("the daemon exited before listening")
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("the manifest asks for JSON logs, got %q", line)
			}
			if m["msg"] == "listening" {
				addr, _ = m["addr"].(string)
				listening = m
			}
		case <-deadline:
			t.Fatal("no listening line within 30 s")
		}
	}
	get := func(path, tok string) int {
		req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, p := range []string{readiness, liveness} {
		if code := get(p, ""); code != 200 {
			t.Errorf("probe GET %s without a token: %d; want 200 (probes carry no token)", p, code)
		}
	}
	if code := get("/v1/info", ""); code != 401 {
		t.Errorf("GET /v1/info without the token: %d; want 401", code)
	}
	if code := get("/v1/info", "manifest-test-token"); code != 200 {
		t.Errorf("GET /v1/info with the token: %d; want 200", code)
	}
	return listening
}

// TestSandboxdTemplate checks sandboxd-template.yaml, the template of the
// SDKs' sandboxd mode: sandboxd's REST and gRPC listeners on the pod's
// loopback at the ports the SDK forwards to (8080, 9090), every variable a setting of the
// daemon, the token on the main port, and probes the kubelet can pass.
// The kubelet's httpGet goes to the pod IP, where a loopback listener is
// not reachable: the probes must be on the main port (declared, public),
// never on the REST port. Then the real daemon runs with the manifest's
// environment: both probes answer without a token, sandboxd's /v1/health
// and /v1/files answer on its loopback listener without one, and so does
// an Execute on the gRPC listener.
func TestSandboxdTemplate(t *testing.T) {
	bin, defaults := daemonFlags(t)
	var tmpl struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Spec       struct {
			PodTemplate struct {
				Spec podSpec `yaml:"spec"`
			} `yaml:"podTemplate"`
		} `yaml:"spec"`
	}
	readYAML(t, "sandboxd-template.yaml", &tmpl)
	if tmpl.Kind != "SandboxTemplate" || !strings.HasPrefix(tmpl.APIVersion, "extensions.agents.x-k8s.io/") {
		t.Errorf("sandboxd-template.yaml is %s %s", tmpl.APIVersion, tmpl.Kind)
	}
	spec := tmpl.Spec.PodTemplate.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers; want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "SANDBOX_") || strings.HasPrefix(e.Name, "SANDBOXD_") {
			if _, ok := defaults[e.Name]; !ok {
				t.Errorf("env %s is not a setting of the daemon", e.Name)
			}
		}
		env[e.Name] = e.Value
	}
	for name, want := range map[string]string{"SANDBOXD_REST_ADDR": "8080", "SANDBOXD_GRPC_ADDR": "9090"} {
		host, port, err := net.SplitHostPort(env[name])
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() || port != want {
			t.Errorf("%s %q; want a loopback address on %s (the SDK's rest_port and grpc_port are 8080 and 9090)", name, env[name], want)
		}
	}
	if env["SANDBOX_RUNTIME_TOKEN_FILE"] == "" {
		t.Error("no SANDBOX_RUNTIME_TOKEN_FILE: the main port must require a token")
	}
	if env["SANDBOX_BASE_DIR"] == "" || !onEmptyDir(env["SANDBOX_BASE_DIR"], c, spec) {
		t.Errorf("the base dir %q (sandboxd's root) is on no writable emptyDir", env["SANDBOX_BASE_DIR"])
	}
	_, mainPort, err := net.SplitHostPort(env["SANDBOX_RUNTIME_ADDR"])
	if err != nil {
		t.Fatalf("SANDBOX_RUNTIME_ADDR %q: %v", env["SANDBOX_RUNTIME_ADDR"], err)
	}
	main, _ := strconv.Atoi(mainPort)
	portOf := func(p any) int {
		switch v := p.(type) {
		case int:
			return v
		case string:
			for _, cp := range c.Ports {
				if cp.Name == v {
					return cp.ContainerPort
				}
			}
		}
		return -1
	}
	for name, p := range map[string]*probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil {
			t.Errorf("no %s probe", name)
			continue
		}
		if got := portOf(p.HTTPGet.Port); got != main {
			t.Errorf("%s probe on port %v (%d); want the main port %d: the kubelet cannot reach a loopback listener", name, p.HTTPGet.Port, got, main)
		}
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/v1/health" {
		t.Errorf("readiness probe %+v; want GET /v1/health (503 while draining)", c.ReadinessProbe)
	}
	budget, _ := strconv.ParseFloat(env["SANDBOX_SHUTDOWN_TIMEOUT_SECONDS"], 64)
	if spec.TerminationGracePeriodSeconds == nil || budget == 0 || float64(*spec.TerminationGracePeriodSeconds) < budget+5 {
		t.Errorf("terminationGracePeriodSeconds %v; want at least 5 s above the shutdown budget %v s", spec.TerminationGracePeriodSeconds, budget)
	}
	if c.LivenessProbe == nil || c.ReadinessProbe == nil {
		t.FailNow()
	}
	listening := runWithManifestEnv(t, bin, c.Env, c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path)
	rest, _ := listening["sandboxd_rest_addr"].(string)
	grpcAddr, _ := listening["sandboxd_grpc_addr"].(string)
	if rest == "" || grpcAddr == "" {
		t.Fatalf("the daemon announces not both sandboxd listeners (sandboxd_rest_addr, sandboxd_grpc_addr): %v", listening)
	}
	// The SDK's commands.run: Execute of /bin/sh -c, no token, plaintext.
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := processv1.NewProcessServiceClient(conn).Execute(ctx, &processv1.ExecuteRequest{Config: &processv1.ProcessConfig{Command: []string{"/bin/sh", "-c", "echo hi"}}})
	if err != nil || string(res.GetStdout()) != "hi\n" || res.GetExitCode() != 0 {
		t.Errorf("Execute of echo hi on the sandboxd gRPC listener without a token: %v, %q exit %d; want hi, exit 0 (loopback)", err, res.GetStdout(), res.GetExitCode())
	}
	for _, p := range []string{"/v1/health", "/v1/files/"} {
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + rest + p)
		if err != nil {
			t.Fatalf("GET %s on the sandboxd listener: %v", p, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s on the sandboxd listener without a token: %d; want 200 (loopback)", p, resp.StatusCode)
		}
	}
}

// TestImagesLeaveSandboxdOff: the project's images (runtime, python, codex)
// set neither SANDBOXD_GRPC_ADDR nor SANDBOXD_REST_ADDR, and the sandboxd
// template sets both on an image of the project that does not: sandboxd's
// listeners are on only where a template asks for them (docs/images.md,
// "sandboxd's protocol"). On in an image, they would take the pod's
// loopback 8080 and 9090 from the agent's own servers in every pod made
// from it, and hand any container sharing the pod's network a way to run
// commands without the token.
func TestImagesLeaveSandboxdOff(t *testing.T) {
	for _, image := range []string{"sandbox-runtime:latest", "sandbox-runtime-python:latest", "sandbox-runtime-codex:latest"} {
		env := imageEnv(t, strings.Replace(image, "sandbox-runtime:", "sandbox-runtime-runtime:", 1))
		for k, v := range env {
			if strings.HasPrefix(k, "SANDBOXD_") {
				t.Errorf("image %s sets %s=%s; sandboxd's listeners belong to the sandboxd template only", image, k, v)
			}
		}
	}
	var tmpl struct {
		Spec struct {
			PodTemplate struct {
				Spec podSpec `yaml:"spec"`
			} `yaml:"podTemplate"`
		} `yaml:"spec"`
	}
	readYAML(t, "sandboxd-template.yaml", &tmpl)
	for _, c := range tmpl.Spec.PodTemplate.Spec.Containers {
		if !strings.HasPrefix(c.Image, "sandbox-runtime") {
			t.Errorf("the sandboxd template's image %q is not one of the project's", c.Image)
			continue
		}
		img := imageEnv(t, c.Image)
		set := map[string]bool{}
		for _, e := range c.Env {
			set[e.Name] = e.Value != ""
		}
		for _, k := range []string{"SANDBOXD_GRPC_ADDR", "SANDBOXD_REST_ADDR"} {
			if !set[k] || img[k] != "" {
				t.Errorf("%s: the template sets it: %v, the image %s: %q; want the template to turn it on", k, set[k], c.Image, img[k])
			}
		}
	}
}
