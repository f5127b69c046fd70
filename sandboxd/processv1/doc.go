// Package processv1 is the Go code generated from process.proto, upstream
// sandboxd's process.v1.ProcessService (kubernetes-sigs/agent-sandbox,
// packages/sandboxd/spec/process/v1) with only its go_package changed.
// Nothing here is written by hand but this file, gen.sh and the test that
// regenerating changes nothing (gen_test.go).
package processv1

//go:generate sh gen.sh
