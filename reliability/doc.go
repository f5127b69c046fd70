// Package reliability is the hostile-input, fault and soak suite of
// sandbox-runtime: it builds the real daemon (cmd/sandbox-runtime), starts it
// on 127.0.0.1 and proves over HTTP, raw TCP and /proc that it keeps working
// and loses nothing under fuzzing, floods, disconnects, process-tree kills,
// running as PID 1, long soaks and shutdown under load.
//
// The tests are behind the build tag "reliability" so that a plain
// `go test ./...` stays fast:
//
//	go test -tags reliability -v -timeout 20m ./reliability/          # full (~10 min)
//	go test -tags reliability -v -short -timeout 8m ./reliability/    # CI subset (<= 4 min)
//
// Every test logs the numbers it asserts on as lines starting with
// "FIGURE:"; set RELIABILITY_FIGURES=/path/to/file to also collect them in
// one file. RELIABILITY_SEED fixes the seed of the randomised tests (the seed
// used is always logged); RELIABILITY_RACE=1 builds the daemon with -race.
//
// A failure fails: there is no mode that turns a known defect into a skip
// (RELIABILITY_STRICT is gone). A skip names a machine precondition only
// (no pid namespaces, no -race daemon).
//
// Bounds of the hostile-input tests (issue 10), each measured on the real
// daemon process (/proc/PID/status VmHWM, /proc/PID/fd), full size / -short:
//
//   - TestPID1Signals: the daemon as PID 1 of a pid namespace; commands send
//     it every signal 1…64 but TERM and INT; it survives, logs the
//     catchable ones, keeps a stream open, then exits 0 on SIGTERM.
//   - TestSandboxdGRPCHostile: sandboxd's gRPC listener (SANDBOXD_GRPC_ADDR)
//     gets malformed frames, a message declaring 2 GiB, 2000 / 500 concurrent
//     calls (Start, unknown ids, Execute), 300 / 100 cancelled Starts and 8
//     never-reading 256 MiB streams: every raw connection closed, the 2 GiB
//     message RESOURCE_EXHAUSTED, no unexpected status, no process left, RSS
//     <= idle + 96 MiB with the readers stalled, goroutines and fds back to
//     idle (slack 3), PID alive.
//   - TestExecuteMemory: 12 concurrent /execute writing 100 MB / 16 MB of
//      to each stream (cap 8 MiB / 2 MiB): VmHWM <= idle + 8 × 2 × cap +
//     32 MiB, at most 8 running at once, every answer exact.
//   - TestExecuteNonReader: a client that never reads its 48 MiB answer is
//     cut (256 KiB/s after 10 s), freeing the only slot for the next call.
//   - TestRetainedEnvsMemory: 64 retained handles with ~1 MiB of envs each:
//     VmHWM <= idle + 128 MiB; re-posts still compare (200 / 409).
//   - TestExecuteBodyMemory: 8 concurrent 1 MiB bodies [[],[],…]: all 422,
//     VmHWM <= idle + 8 × 8 MiB + 32 MiB.
//   - TestSlowBodies: 10,000 / 3,000 PUTs sending a byte a second and
//     1,000 / 300 idle connections, fd limit 20,000 / 6,000: health answers
//     within 5 s throughout, slow bodies are cut (400) or refused (503),
//     never another 5xx, all gone within 30 s, fds stay below the limit.
//
// This file carries no build tag so that the package exists (and `go vet
// ./...` sees it) without the tag.
package reliability
