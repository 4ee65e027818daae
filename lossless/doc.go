// Package lossless holds the lossless stages of tensorpress: byte-shuffle,
// bytedelta, fsplit (a float's exponent apart from its sign and mantissa),
// and the coders zstd, s2, xz, huff0, huff0b (huff0 with smaller blocks),
// huff0p (huff0 over 4-bit codes of each block's commonest bytes, two to a
// symbol: exponents decode faster), lenbits (integers as bit lengths in context and the bits below them) and
// floatcm (floats through an adaptive context model and a range coder: the
// densest coding of model weights here, at some MB/s per core, for slow
// links and archives) and floatrank (a lighter model of the same fields:
// a few tenths of a percent larger on weights, at tens of MB/s). Importing
// the package
// registers them with codec under their permanent wire IDs (see ids.go and
// docs/FORMAT.md); store-raw is built into codec.
//
// All ops are immutable and safe for concurrent use; encoder and decoder
// state (zstd encoders per level, huff0 scratch, floatcm's model: 2.3 MiB
// for float32 and bfloat16, set up lazily per context; floatrank's shares
// it) is pooled
// internally.
// Every decoder takes the exact expected output length from the frame and
// never writes more than that. One library limit remains: klauspost's zstd
// decoder may allocate about 1.25 times (length + 128 KiB) of scratch
// before it rejects a damaged frame. xz segments are decoded block by block
// with dictionaries no larger than their blocks, within 2 times the length
// plus 1 MiB in all, whatever the stream headers declare.
//
// Two coders have a C backend where cgo is on, the library of the tool
// that reads their streams: zstd (libzstd through DataDog/zstd) and xz
// (liblzma through internal/liblzma, preset 6's settings: `xz -6`'s
// ratio). Pure-Go builds use klauspost/compress and ulikunitz/xz; the
// streams are standard either way, and each backend decodes the other's.
package lossless
