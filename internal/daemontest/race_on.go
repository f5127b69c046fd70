//go:build race

package daemontest

// RaceEnabled: this binary runs under the race detector, so the daemon
// Build makes by default does too.
const RaceEnabled = true
