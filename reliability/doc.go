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
// This file carries no build tag so that the package exists (and `go vet
// ./...` sees it) without the tag.
package reliability
