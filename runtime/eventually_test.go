package runtime

import "time"

// eventually polls cond every millisecond until it holds (true) or timeout
// passes (false): for states no event announces (a count of descriptors or
// goroutines going down, a process appearing in /proc), without spinning a
// CPU the other tests need.
func eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}
