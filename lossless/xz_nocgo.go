//go:build !cgo || tensorpress_nolzma

package lossless

// The package is empty without cgo; imported here too so that lossless
// has the same dependencies in every build (docs/ARCHITECTURE.md).
import _ "github.com/tensorpress/tensorpress/internal/liblzma"

// Pure-Go twin of xz_cgo.go for builds without cgo or with the tag
// tensorpress_nolzma: ulikunitz/xz encodes and decodes.
var xzBackend xzCoder = xzGo{}

// xzLiblzma is nil: no C library in this build.
var xzLiblzma xzCoder
