package runtime

import (
	"errors"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// sysPidfdOpen is pidfd_open(2), the same number on every architecture.
const sysPidfdOpen = 434

// waitExited waits, on the kernel's event rather than by polling, until
// process pid has exited (a pidfd of it is readable then: a zombie or
// reaped already), for at most timeout. It reports false on timeout. It
// works for any process this test may see, not only its children.
func waitExited(t testing.TB, pid int, timeout time.Duration) bool {
	t.Helper()
	fd, _, e := syscall.Syscall(sysPidfdOpen, uintptr(pid), 0, 0)
	switch {
	case e == syscall.ESRCH:
		return true // gone already
	case e != 0:
		t.Fatalf("pidfd_open(%d): %v", pid, e)
	}
	defer syscall.Close(int(fd))
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left < 0 {
			return false
		}
		pfd := struct {
			fd             int32
			events, revent int16
		}{fd: int32(fd), events: 0x1} // POLLIN
		ts := syscall.NsecToTimespec(left.Nanoseconds())
		n, _, e := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		switch {
		case e == syscall.EINTR:
			continue
		case e != 0:
			t.Fatalf("ppoll of the pidfd of %d: %v", pid, e)
		}
		if n > 0 {
			return true
		}
	}
}

// waitZombie blocks until this process's child pid has exited, without
// reaping it (waitid with WNOWAIT: the Reaper still collects it): true
// when it was a zombie then, false when the Reaper had collected it
// already (ECHILD). It waits on the kernel's event; the child must end by
// itself (or by its command's timeout), which bounds the wait.
func waitZombie(t testing.TB, pid int) bool {
	t.Helper()
	var info [128]byte // siginfo_t
	for {
		_, _, e := syscall.Syscall6(syscall.SYS_WAITID, 1 /* P_PID */, uintptr(pid), uintptr(unsafe.Pointer(&info[0])),
			syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		switch {
		case e == 0:
			return true
		case e == syscall.EINTR:
			continue
		case errors.Is(e, syscall.ECHILD):
			return false
		}
		t.Fatalf("waitid(%d): %v", pid, e)
	}
}

// waitReaped waits until process pid has exited and been reaped (kill(pid,
// 0) fails): the exit on its event, then the Reaper's collection, which
// follows at once, by polling at 1 ms. False on timeout.
func waitReaped(t testing.TB, pid int, timeout time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(timeout)
	if !waitExited(t, pid, timeout) {
		return false
	}
	return eventually(time.Until(deadline), func() bool { return syscall.Kill(pid, 0) != nil })
}
