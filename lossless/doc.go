// Package lossless holds the lossless stages of tensorpress: byte-shuffle,
// bytedelta, and the coders zstd, s2, xz and huff0. Importing the package
// registers them with codec under their permanent wire IDs (see ids.go and
// docs/FORMAT.md); store-raw is built into codec.
//
// All ops are immutable and safe for concurrent use; encoder and decoder
// state (zstd encoders per level, huff0 scratch) is pooled internally.
// Every decoder takes the exact expected output length from the frame and
// never writes more than that. One library limit remains: klauspost's zstd
// decoder may allocate about 1.25 times (length + 128 KiB) of scratch
// before it rejects a damaged frame. xz segments are decoded block by block
// with dictionaries no larger than their blocks, within 2 times the length
// plus 1 MiB in all, whatever the stream headers declare.
package lossless
