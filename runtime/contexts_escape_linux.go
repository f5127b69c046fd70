package runtime

import (
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// killPipeHolders kills every process other than the daemon that holds one
// of the pipes ids (the interpreter's stdout and stderr) open: what the code started
// and that left the process group (setsid, start_new_session) and so is not
// reached by the group's SIGKILL, in threads mode where there is no
// cgroup.kill. It is found through /proc/*/fd, pinned with a pidfd and
// checked again before the signal, so a pid reused meanwhile is never hit.
// A process that left the group and closed the pipes is not found (no
// cgroup: nothing names it as the context's); docs/contexts.md says so.
func killPipeHolders(ids []string) int {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	if len(want) == 0 {
		return 0
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	self := os.Getpid()
	killed := 0
	for _, d := range procs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == self {
			continue
		}
		if !holds(pid, want) {
			continue
		}
		pfd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		if holds(pid, want) && unix.PidfdSendSignal(pfd, unix.SIGKILL, nil, 0) == nil {
			killed++
		}
		unix.Close(pfd)
	}
	return killed
}

// pipeIDs names the pipes of files as /proc/*/fd links do (pipe:[inode]).
// Taken at the start, before the readers may close them.
func pipeIDs(files ...*os.File) []string {
	var ids []string
	for _, f := range files {
		if f == nil {
			continue
		}
		rc, err := f.SyscallConn() // not Fd(): it would make f blocking
		if err != nil {
			continue
		}
		rc.Control(func(fd uintptr) {
			var st syscall.Stat_t
			if syscall.Fstat(int(fd), &st) == nil {
				ids = append(ids, "pipe:["+strconv.FormatUint(st.Ino, 10)+"]")
			}
		})
	}
	return ids
}

// holds reports whether pid has one of the want files open.
func holds(pid int, want map[string]bool) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd/"
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, fd := range fds {
		if l, err := os.Readlink(dir + fd.Name()); err == nil && want[l] {
			return true
		}
	}
	return false
}
