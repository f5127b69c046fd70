// Package runtime is the managed-command table of sandbox-runtime: admission,
// states, timeouts, expiry, stdin, output and the legacy one-shot execution.
//
// It knows nothing of HTTP. The api package decodes requests into the types of
// this package, calls a Manager, and maps the sentinel errors of errors.go to
// status codes in one place. Processes are started and reaped by package
// procgroup; output is kept in a ringbuf.Ring per command, and Command.Read
// returns the ring's own records (ringbuf.Record, ringbuf.ReadResult), which
// the transports name as they are (internal/deps lists what they may use).
//
// Ownership: every command has exactly one owner goroutine (Command.run). It
// waits for the process, decides when the command has ended (protocol.md §2 "End
// of a command"), and Command.finish sets the final state (the transition
// table of state.go), closes the ring and then closes the done channel. Everyone else observes a command through
// Status snapshots, the done channel, or the ring.
package runtime
