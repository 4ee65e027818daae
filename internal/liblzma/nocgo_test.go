//go:build !cgo

package liblzma

import "testing"

func TestNoCgo(t *testing.T) { t.Skip("liblzma is bound through cgo: nothing here without it") }
