package procgroup

// Members returns the processes of the command now: with a cgroup of its
// own, those of that cgroup (every descendant, whatever group it moved
// to); otherwise the members of its process group the shared process
// index knows (one /proc scan per 250 ms however many callers). Bounded
// by maxCgroupProcs / indexMaxProcs. The list may hold pids that have
// exited since; callers tolerate them.
func (p *Process) Members() []int { return p.groupMembers(p.Pid) }
