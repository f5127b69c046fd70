// Package cli is the command-line client: the sandbox-runtime binary, with a
// subcommand as its first argument, talks to a daemon over the v1 API
// (package client). Without a subcommand the binary is the daemon;
// cmd/sandbox-runtime's main decides which (IsCommand) and calls Run.
//
//	sandbox-runtime exec [-i] [-t] [-e K=V]… [-w DIR] [--timeout S] [--hold S] -- ARGV…
//	sandbox-runtime run -d [-e K=V]… [-w DIR] [--timeout S] -- ARGV…
//	sandbox-runtime ps [-q] [--state STATE]
//	sandbox-runtime logs [-f] ID
//	sandbox-runtime attach [--no-stdin] [--cursor N] [--hold S] ID
//	sandbox-runtime kill [-s SIGNAL] ID
//	sandbox-runtime cp SRC DST        (":path" is in the sandbox, "-" is stdin/stdout)
//
// Every subcommand takes --url (SANDBOX_RUNTIME_URL, default
// http://127.0.0.1:8888) and --token-file; the token may also come from
// SANDBOX_RUNTIME_TOKEN (the token itself) or SANDBOX_RUNTIME_TOKEN_FILE
// (the daemon's own variable, so that the client works inside the pod).
//
// On a terminal (exec -t, or attach to a command that has one) the local
// terminal is raw: every key, Ctrl-C included, goes to the remote
// program; window-size changes follow; Ctrl-] detaches and leaves the
// command running, and attach ID re-attaches, replaying the retained
// screen. A dropped connection is re-dialled from the last cursor, so
// nothing is lost or repeated.
//
// Exit codes: exec, run and attach exit with the command's code, 128+N
// when signal N ended it (as shells do); 125 when the client or the daemon
// failed, and when output was lost to the daemon's ring while the command
// itself succeeded; 141 when stdout is a pipe whose reader has gone (as
// SIGPIPE); 128+N when signal N came before the command started (or could
// not be forwarded); 126 when the command could not be started, 127 when
// it was not found; 2 for a usage error. Every non-zero exit that is not
// the command's own is explained on stderr (but 141).
//
// One run of a subcommand is a value of its own (the unexported cli
// type): its flags, its connection, its output errors, whether the local
// stdin failed. The package holds no mutable state, so runs in one process
// (tests) never see each other's. What a run starts (the signal relay, the
// SIGWINCH watch) ends with it, and nothing it says reaches Stdout or
// Stderr after Run returns. One limit: a read of Stdin that is still
// blocked when the run ends (a terminal nobody types on) returns only
// with the next input or the end, which it then drops.
//
// The package imports of this module only client, wire and
// internal/tokenfile (the token file's reading, shared with the daemon):
// never the server's packages (internal/deps holds it to that).
package cli
