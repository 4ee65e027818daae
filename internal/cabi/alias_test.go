package cabi

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/testvectors"
)

// scribble overwrites b, as a caller reusing the memory of a recipe or
// spec text after the call returns would.
func scribble(b []byte) {
	for i := range b {
		b[i] = '#'
	}
}

// TestRecipeTextNotRetained: the recipe cache must not keep the caller's
// text memory. The parsed recipe's selectors once aliased it, so a cached
// "int8(64) | q:huff0" whose text was freed and reused matched no segment
// "q" any more: later frames stored q raw (decoding to the same values, so
// only the size showed it).
func TestRecipeTextNotRetained(t *testing.T) {
	ct := testvectors.Normal("w", 1<<14, 0.02, 1)
	d, done := desc(ct)
	defer done()
	encode := func(text string) []byte {
		rec := []byte(text)
		out := make([]byte, codec.MaxTensorLen(ct))
		n, spill, code, msg := Encode(d, &rec[0], int64(len(rec)), 0, CRCAlways, unsafe.Pointer(&out[0]), int64(len(out)))
		if code != OK || spill != 0 {
			t.Fatalf("Encode: %d %s (spill %d)", code, msg, spill)
		}
		scribble(rec)
		return out[:n]
	}
	const text = "int8(64) | q:huff0 | scale:zstd(1)"
	first := encode(text)
	for i := range 3 {
		if got := encode(text); !bytes.Equal(got, first) {
			t.Fatalf("encode %d: %d bytes, first encode %d: the cached recipe changed with the caller's memory", i+2, len(got), len(first))
		}
	}
}

// TestSenderSpecTextNotRetained: the same for the spec text a Sender
// caches per compress call.
func TestSenderSpecTextNotRetained(t *testing.T) {
	ct := testvectors.Normal("w", 1<<14, 1, 2)
	d, done := desc(ct)
	defer done()
	const text = "topk(0.5) | val:fp16"
	compress := func() {
		base := []byte("topk(0.5)")
		s, code, msg := SenderNew(&base[0], int64(len(base)))
		if code != OK {
			t.Fatal(msg)
		}
		defer Close(s)
		sp := []byte(text)
		out := make([]byte, 2*len(ct.Data))
		first, spill, code, msg := SenderCompress(s, d, &sp[0], int64(len(sp)), 0, unsafe.Pointer(&out[0]), int64(len(out)))
		if code != OK || spill != 0 {
			t.Fatalf("SenderCompress: %d %s (spill %d)", code, msg, spill)
		}
		if code, msg := SenderCommit(s, 1); code != OK {
			t.Fatal(msg)
		}
		scribble(sp)
		sp = []byte(text)
		n, _, code, msg := SenderCompress(s, d, &sp[0], int64(len(sp)), 0, unsafe.Pointer(&out[0]), int64(len(out)))
		if code != OK {
			t.Fatal(msg)
		}
		if n > first+first/8 {
			t.Fatalf("second compress with the cached spec: %d bytes, first %d: the cached spec changed with the caller's memory", n, first)
		}
	}
	compress()
}

// TestNameLengthCheckedBeforeUse: a bogus name length is refused before
// the name is read (copying 1 TiB from a 2-byte buffer once came first).
func TestNameLengthCheckedBeforeUse(t *testing.T) {
	name := []byte("w")
	d := &Tensor{Name: &name[0], NameLen: 1 << 40, DType: int32(codec.F32)}
	out := make([]byte, 64)
	if _, _, code, msg := Encode(d, nil, 0, 0, CRCAlways, unsafe.Pointer(&out[0]), 64); code != EARG {
		t.Fatalf("Encode: %d %s, want EARG", code, msg)
	}
}
