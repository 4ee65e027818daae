//go:build cgo

package main

import (
	"slices"
	"testing"
)

// TestLayout holds internal/cabi's structs to the C structs of the header.
func TestLayout(t *testing.T) {
	for name, l := range layouts() {
		if !slices.Equal(l[0], l[1]) {
			t.Errorf("%s: C layout %v, Go %v", name, l[0], l[1])
		}
	}
}

// TestVersion checks the static strings.
func TestVersion(t *testing.T) {
	if tp_abi_version() != abiVersion || tp_version() == nil {
		t.Fatal("version")
	}
}
