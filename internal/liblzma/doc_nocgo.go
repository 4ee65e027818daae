//go:build !cgo

// Package liblzma binds XZ Utils' liblzma through cgo; without cgo it is
// empty, and the xz stage uses its pure-Go backend.
package liblzma
