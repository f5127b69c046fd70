//go:build !race

package main

// raceEnabled: the tests run without the race detector.
const raceEnabled = false
