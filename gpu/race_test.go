//go:build race

package gpu

// raceEnabled: under the race detector the emulated kernels of the fake
// driver run about ten times slower, so their largest inputs are left to
// the plain test run, which checks them in full.
const raceEnabled = true
