package procgroup

import (
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
)

// DefaultReservedThreads is how many OS threads the daemon makes up front
// (ReserveThreads): more than the runtime ever needs at once for its Ps, the
// system monitor, signal handling and the syscalls that can block a thread
// (forks in progress, file I/O, log writes), so that it never has to create
// one while commands hold every pid the pod may use.
const DefaultReservedThreads = 64

// ReserveThreads makes the Go runtime start n OS threads now and keep them:
// n goroutines each lock a thread and wait until all n are locked, then unlock
// and return. The runtime never destroys an idle thread (only one whose
// goroutine exits while locked), so later demand is served from these, and a
// process limit that commands have filled cannot make the runtime fail to
// create a thread (fatal: "newosproc" / "pthread_create failed"). It returns
// the process's thread count afterwards (0 if /proc cannot tell).
func ReserveThreads(n int) int {
	var locked, release, done sync.WaitGroup
	locked.Add(n)
	release.Add(1)
	done.Add(n)
	for range n {
		go func() {
			defer done.Done()
			goruntime.LockOSThread()
			locked.Done()
			release.Wait() // parks the goroutine with its thread: the next one needs a new thread
			goruntime.UnlockOSThread()
		}()
	}
	locked.Wait()
	release.Done()
	done.Wait()
	return ThreadCount()
}

// ThreadCount returns the number of OS threads of the process, from
// /proc/self/status (0 if it cannot be read).
func ThreadCount() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}
