//go:build cgo && !tensorpress_nolzma

package liblzma

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os/exec"
	"testing"
)

// encodeBlock returns Encode's stream for src and the raw LZMA2 data of
// its one block: after the block header (its first byte gives its size),
// up to the unpadded size that the index's one record gives (no check).
func encodeBlock(t *testing.T, src []byte, dict int) (stream, data []byte) {
	t.Helper()
	out := make([]byte, Bound(len(src)))
	n, err := Encode(out, src, dict)
	if err != nil {
		t.Fatal(err)
	}
	stream = out[:n]
	hlen := (int(stream[12]) + 1) * 4
	back := (int(stream[n-8]) | int(stream[n-7])<<8 | int(stream[n-6])<<16 | int(stream[n-5])<<24 + 1) * 4 // the footer's backward size
	index := stream[n-12-back : n-12]
	if index[0] != 0 || index[1] != 1 {
		t.Fatalf("index %x: want one record", index[:2])
	}
	unpadded, k := uvarint(index[2:])
	if k == 0 {
		t.Fatal("bad index record")
	}
	return stream, stream[12+hlen : 12+int(unpadded)]
}

func uvarint(b []byte) (uint64, int) {
	var v uint64
	for i, c := range b {
		v |= uint64(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return v, i + 1
		}
	}
	return 0, 0
}

func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 100, 70000, 1 << 20} {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(rng.IntN(7)) // compressible
		}
		stream, data := encodeBlock(t, src, 1<<20)
		if len(stream) >= n && n > 100 {
			t.Errorf("n %d: %d bytes coded", n, len(stream))
		}
		out := make([]byte, n)
		if err := DecodeBlock(out, data, 1<<20); err != nil || !bytes.Equal(out, src) {
			t.Fatalf("n %d: %v", n, err)
		}
		// The xz tool reads the stream.
		if xz, err := exec.LookPath("xz"); err == nil {
			cmd := exec.Command(xz, "-d", "-c")
			cmd.Stdin = bytes.NewReader(stream)
			if got, err := cmd.Output(); err != nil || !bytes.Equal(got, src) {
				t.Errorf("n %d: xz -d: %v", n, err)
			}
		}
		// Too small an output, a cut block, damage: errors, never a crash.
		if n > 1 {
			if err := DecodeBlock(out[:n-1], data, 1<<20); err == nil {
				t.Errorf("n %d: a block decoded into one byte less than it holds", n)
			}
			if err := DecodeBlock(out, data[:len(data)/2], 1<<20); err == nil {
				t.Errorf("n %d: half the block decoded", n)
			}
			bad := bytes.Clone(data)
			bad[len(bad)/3] ^= 0x55
			if err := DecodeBlock(out, bad, 1<<20); err == nil && bytes.Equal(out, src) {
				t.Errorf("n %d: damaged block decoded to the original", n)
			}
		}
		if err := DecodeBlock(out, append(bytes.Clone(data), 0), 1<<20); !errors.Is(err, ErrTrailing) {
			t.Errorf("n %d: a byte past the block: %v, want ErrTrailing", n, err)
		}
	}
}

func TestEncodeRefuses(t *testing.T) {
	if _, err := Encode(make([]byte, 10), make([]byte, 1000), 1<<20); err == nil {
		t.Error("Encode into too small a buffer: no error")
	}
	if _, err := Encode(make([]byte, Bound(10)), make([]byte, 10), 1); err == nil {
		t.Error("Encode with a 1-byte dictionary: no error")
	}
}
