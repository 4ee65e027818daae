//go:build !race

package fl

// raceEnabled is set under the race detector (see race_test.go).
const raceEnabled = false
