package view

import "testing"

func TestBytesAligned(t *testing.T) {
	for n := 0; n < 40; n++ {
		b := Bytes(n)
		if len(b) != n || !Aligned(b, Align) {
			t.Fatalf("Bytes(%d): len %d aligned %v", n, len(b), Aligned(b, Align))
		}
	}
}

func TestAs(t *testing.T) {
	if !LittleEndian {
		t.Skip("big-endian host")
	}
	b := Bytes(16)
	f, ok := As[float32](b)
	if !ok || len(f) != 4 {
		t.Fatalf("As[float32]: ok=%v len=%d", ok, len(f))
	}
	f[1] = 1.0
	if b[4] != 0 || b[7] != 0x3f || b[6] != 0x80 {
		t.Fatalf("float32 1.0 bytes = % x", b[4:8])
	}
	if _, ok := As[float32](b[1:5]); ok {
		t.Fatal("misaligned view accepted")
	}
	if _, ok := As[float32](b[:6]); ok {
		t.Fatal("ragged length accepted")
	}
	if got := Of(f); len(got) != 16 || &got[0] != &b[0] {
		t.Fatal("Of does not alias")
	}
}

func TestAsCopy(t *testing.T) {
	b := Bytes(17)
	for i := range b {
		b[i] = byte(i)
	}
	odd := b[1:17]
	s := AsCopy[uint32](odd, Bytes)
	if len(s) != 4 || !Aligned(Of(s), 4) {
		t.Fatalf("AsCopy of a misaligned slice: %d elements", len(s))
	}
	if string(Of(s)) != string(odd) {
		t.Fatal("AsCopy changed the bytes")
	}
	if a := AsCopy[uint32](b[:16], Bytes); &Of(a)[0] != &b[0] {
		t.Fatal("AsCopy copied an aligned slice")
	}
}
