//go:build race

package float16

// raceEnabled: the race detector slows the 2^32-input sweeps tenfold, so
// they take a sample instead (the plain test run does them in full).
const raceEnabled = true
