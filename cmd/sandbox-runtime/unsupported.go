//go:build !linux

// sandbox-runtime runs only on Linux: process groups with setpgid, a child
// subreaper (PR_SET_CHILD_SUBREAPER), one wait4 reaper and /proc are what it
// is made of, and it is PID 1 of a Linux container. Rather than build a
// binary that fails at start, or stub those parts out, the build fails here
// with a message that says so; build it for Linux (GOOS=linux) instead, e.g.
// with the Dockerfile.
//
// Every other file of this package is for Linux only, so that this is the
// only error a non-Linux build reports (config_test.go
// TestNonLinuxBuildFailsClearly checks it).

package main

var _ = sandbox_runtime_builds_only_for_linux__set_GOOS_linux_or_use_the_Dockerfile
