//go:build !race

package main

// raceEnabled: built with the race detector.
const raceEnabled = false
