//go:build race

package main

// raceEnabled: built with the race detector.
const raceEnabled = true
