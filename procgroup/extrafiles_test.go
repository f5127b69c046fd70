//go:build linux

package procgroup

import (
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestExtraFiles: Spec.ExtraFiles become the child's fds 3, 4, … (a pipe
// it writes to on fd 4 and reads from on fd 3), and the parent's copies stay
// the caller's.
func TestExtraFiles(t *testing.T) {
	r := newReaper(t)
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Start(Spec{Argv: []string{"sh", "-c", "read line <&3; echo got $line >&4"}, Env: os.Environ(), ExtraFiles: []*os.File{inR, outW}})
	if err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	defer outR.Close()
	io.WriteString(inW, "ping\n")
	inW.Close()
	b, err := io.ReadAll(outR)
	if err != nil || strings.TrimSpace(string(b)) != "got ping" {
		t.Fatalf("fd 4 carried %q (%v); want got ping", b, err)
	}
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("sh did not exit")
	}
	p.Stdout.Close()
	p.Stderr.Close()
	if p.Exit().Code != 0 {
		t.Fatalf("exit %+v", p.Exit())
	}
}

// TestChildStdioFds: a child started without stdin or extra files holds
// exactly fds 0, 1 and 2: 0 is /dev/null opened read-only (the one the
// Reaper opens once and shares), 1 and 2 are pipes; none of the runtime's
// own fds (pidfds, cgroup dirs, the parent's ends of the pipes) reaches it.
// The test process first marks what it inherited, as main does
// (MarkInheritedFDs).
func TestChildStdioFds(t *testing.T) {
	MarkInheritedFDs()
	r := newReaper(t)
	p, err := r.Start(Spec{Argv: []string{"sleep", "60"}, Env: os.Environ()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		p.Signal(syscall.SIGKILL)
		select {
		case <-p.Done():
		case <-time.After(10 * time.Second):
			t.Error("sleep did not exit after SIGKILL")
		}
		p.Stdout.Close()
		p.Stderr.Close()
	}()
	// Start returns once the exec is past its point of no return (the
	// close-on-exec pipe closed), which is before the kernel renames the
	// task, and the dynamic loader then opens ld.so.cache and each library
	// on fd 3 and closes it again (CI runs listed that fd and failed to
	// read its link, and read the comm of the test binary). What the child
	// inherited is what it still holds once sleep sleeps: wait for its
	// comm to be sleep and for it to block in nanosleep.
	dir := "/proc/" + strconv.Itoa(p.Pid)
	deadline := time.Now().Add(10 * time.Second)
	for {
		comm, err := os.ReadFile(dir + "/comm")
		if err != nil {
			t.Fatal(err)
		}
		wchan, err := os.ReadFile(dir + "/wchan")
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(string(comm)) == "sleep" && strings.Contains(string(wchan), "nanosleep") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s the child is %q in %q; want sleep in nanosleep", comm, wchan)
		}
		runtime.Gosched()
	}
	ents, err := os.ReadDir(dir + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	var fds []string
	for _, e := range ents {
		target, _ := os.Readlink(dir + "/fd/" + e.Name())
		fds = append(fds, e.Name()+" "+target)
	}
	if len(fds) != 3 || fds[0] != "0 /dev/null" || !strings.HasPrefix(fds[1], "1 pipe:[") || !strings.HasPrefix(fds[2], "2 pipe:[") {
		t.Fatalf("the child's fds:\n%s\nwant exactly 0 /dev/null, 1 and 2 pipes", strings.Join(fds, "\n"))
	}
	info, err := os.ReadFile(dir + "/fdinfo/0")
	if err != nil {
		t.Fatal(err)
	}
	flags := ""
	for _, line := range strings.Split(string(info), "\n") {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			flags = strings.TrimSpace(v)
		}
	}
	// fdinfo's flags are octal; the access mode is the low 2 bits (0: O_RDONLY).
	if v, err := strconv.ParseUint(flags, 8, 64); err != nil || v&3 != 0 {
		t.Fatalf("fd 0 flags %q (%v); want read-only", flags, err)
	}
}
