//go:build !cgo

package lossless

// Pure-Go twin of xz_cgo.go for builds without cgo: ulikunitz/xz encodes
// and decodes.
var xzBackend xzCoder = xzGo{}

// xzLiblzma is nil: no C library in this build.
var xzLiblzma xzCoder
