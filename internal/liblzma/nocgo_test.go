//go:build !cgo || tensorpress_nolzma

package liblzma

import "testing"

func TestNoCgo(t *testing.T) { t.Skip("liblzma is bound through cgo: nothing here without it") }
