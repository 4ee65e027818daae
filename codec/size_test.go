package codec_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

func TestDecodedSize(t *testing.T) {
	enc, err := codec.NewEncoder()
	if err != nil {
		t.Fatal(err)
	}
	var stream []byte
	want := int64(0)
	for _, n := range []int{0, 1, 1000, 70000} {
		stream, err = enc.AppendBytes(stream, make([]byte, n), nil)
		if err != nil {
			t.Fatal(err)
		}
		want += int64(n)
	}
	tt := codec.FromFloat32("w", make([]float32, 300), 300)
	if stream, err = enc.AppendTensor(stream, tt, nil); err != nil {
		t.Fatal(err)
	}
	want += 1200
	got, err := codec.DecodedSize(bytes.NewReader(stream), codec.Limits{})
	if err != nil || got != want {
		t.Fatalf("DecodedSize = %d, %v; want %d", got, err, want)
	}
	// Through a reader that is not an io.ByteReader.
	if got, err := codec.DecodedSize(io.MultiReader(bytes.NewReader(stream)), codec.Limits{}); err != nil || got != want {
		t.Fatalf("DecodedSize (plain reader) = %d, %v; want %d", got, err, want)
	}
	if _, err := codec.DecodedSize(bytes.NewReader(stream[:len(stream)-1]), codec.Limits{}); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut short: %v", err)
	}
	bad := bytes.Clone(stream)
	bad[3] ^= 0xff
	if _, err := codec.DecodedSize(bytes.NewReader(bad), codec.Limits{}); !errors.Is(err, codec.ErrCorrupt) && !errors.Is(err, codec.ErrChecksum) {
		t.Fatalf("corrupt header: %v", err)
	}
}

func FuzzDecodedSize(f *testing.F) {
	enc, _ := codec.NewEncoder()
	s, _ := enc.AppendBytes(nil, bytes.Repeat([]byte{1, 2, 3}, 500), nil)
	f.Add(s)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := codec.DecodedSize(bytes.NewReader(b), codec.Limits{})
		if err == nil && n < 0 {
			t.Fatalf("negative size %d", n)
		}
	})
}
