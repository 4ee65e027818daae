//go:build !cgo

package lossless

// Pure-Go twin of zstd_cgo.go for builds without cgo: the DataDog/zstd
// backend does not exist here, SetZstdBackend("datadog") fails, and the
// klauspost backend encodes and decodes. Frames are the same standard
// zstd frames either way.

// datadogZstd is nil: no C library in this build.
var datadogZstd zstdBackend

func zstdDefault() *zstdSelection {
	return &zstdSelection{name: ZstdKlauspost, be: klauspostZstd{}}
}
