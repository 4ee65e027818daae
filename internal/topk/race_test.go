//go:build race

package topk

// raceEnabled shrinks the largest test inputs under the race detector.
const raceEnabled = true
