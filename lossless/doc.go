// Package lossless holds the lossless stages of tensorpress: byte-shuffle,
// bytedelta, and the coders zstd, s2, xz and huff0. Importing the package
// registers them with codec under their permanent wire IDs (see ids.go and
// docs/FORMAT.md); store-raw is built into codec.
//
// All ops are immutable and safe for concurrent use; encoder and decoder
// state (zstd encoders per level, huff0 scratch) is pooled internally.
// Every decoder takes the exact expected output length from the frame and
// never writes or allocates more than that.
package lossless
