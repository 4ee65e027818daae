//go:build race

package main

// raceEnabled: under the race detector the processes that fed and hub
// start are the command built without it (plainChild).
const raceEnabled = true
