//go:build !cgo || tensorpress_nolzma

// Package liblzma binds XZ Utils' liblzma through cgo; without cgo, or
// with the build tag tensorpress_nolzma (a machine without liblzma's
// headers), it is empty, and the xz stage uses its pure-Go backend.
package liblzma
