// Package deps holds the dependency test of the module (deps_test.go): the
// import graph of the project's packages, as `go list -deps -json` reports
// it, must follow the one-way flow that docs/architecture.md describes
// (architecture_test.go holds that document's package table to the code).
package deps
