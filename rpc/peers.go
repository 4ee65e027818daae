//go:build tools

package rpc

// The interop tests build a peer program (testdata/mostynb) with
// github.com/mostynb/go-grpc-compression's zstd; this file, built only
// with the tag "tools", keeps that module in go.mod.
import _ "github.com/mostynb/go-grpc-compression/zstd"
