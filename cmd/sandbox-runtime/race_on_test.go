//go:build race

package main

// raceEnabled: the tests run under the race detector, and so does the
// daemon binary the end-to-end tests build.
const raceEnabled = true
