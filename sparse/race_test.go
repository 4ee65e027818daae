//go:build race

package sparse

// raceEnabled: the race detector slows the large round trips tenfold, so
// they run on smaller tensors (the plain test run does them in full).
const raceEnabled = true
