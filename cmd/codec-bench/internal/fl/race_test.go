//go:build race

package fl

// raceEnabled is set under the race detector, which makes inflating the
// 47 MB training set and every training step about ten times slower: the
// tests then load only the part of the training set they use.
const raceEnabled = true
