// Package deps holds the dependency test of the module (deps_test.go): the
// import graph of the project's packages, as `go list -deps -json` reports
// it, must follow the one-way flow that docs/architecture.md describes
// (architecture_test.go holds that document's package table to the code);
// the transports use of ringbuf and shlex only the names listed there
// (transportMay), and no package below them re-exports those names or
// procgroup's by alias, so that no coupling is hidden from the rules.
package deps
