// Package inthash holds the integer hashes that wire formats depend on: the
// qsgd dither, randk's positions and the Bloom filter's probes are defined
// with them in docs/FORMAT.md, so there is one definition of each.
package inthash

// Gamma is splitmix64's increment (the golden ratio in 64 bits).
const Gamma = 0x9e3779b97f4a7c15

// Mix64 is splitmix64's output function:
// z = (z ^ z>>30)·0xbf58476d1ce4e5b9; z = (z ^ z>>27)·0x94d049bb133111eb; z ^ z>>31.
func Mix64(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// Lowbias32 is Chris Wellons' 32-bit integer hash:
// x ^= x>>16; x *= 0x7feb352d; x ^= x>>15; x *= 0x846ca68b; x ^ x>>16.
func Lowbias32(x uint32) uint32 {
	x ^= x >> 16
	x *= 0x7feb352d
	x ^= x >> 15
	x *= 0x846ca68b
	return x ^ x>>16
}
