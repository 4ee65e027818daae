package testvectors

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

func typed(err error) bool {
	for _, e := range []error{codec.ErrCorrupt, codec.ErrChecksum, codec.ErrLimit, codec.ErrUnsupported, io.ErrUnexpectedEOF} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// FuzzDecodeReal mutates the golden and malformed frames, which use every
// registered stage: decoding never panics and fails only with typed errors.
func FuzzDecodeReal(f *testing.F) {
	fs.WalkDir(FS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (bytes.HasSuffix([]byte(path), []byte(".tpf")) || bytes.HasSuffix([]byte(path), []byte(".bin"))) {
			b, _ := fs.ReadFile(FS(), path)
			f.Add(b)
		}
		return nil
	})
	lim := codec.Limits{MaxDecodedSize: 4 << 20, MaxFrameSize: 4 << 20, MaxTensorSize: 16 << 20}
	d, err := codec.NewDecoder(codec.WithLimits(lim))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if _, _, err := d.DecodeFrame(in); err != nil && !typed(err) {
			t.Fatalf("untyped error: %v", err)
		}
		r, err := codec.NewReader(bytes.NewReader(in), codec.WithLimits(lim))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 100; i++ {
			if _, err := r.Next(); err != nil {
				if err != io.EOF && !typed(err) {
					t.Fatalf("reader: untyped error: %v", err)
				}
				return
			}
		}
	})
}

var fuzzRecipes = []string{
	"", "shuffle4", "shuffle2 | *:s2", "shuffle4 | plane3:huff0 | plane0..2:raw", "shuffle8 | bytedelta | *:zstd(1)",
	"*:zstd(3)", "*:huff0", "shuffle | bytedelta | *:huff0", "*:s2(better)",
}

// FuzzRoundTrip: any bytes, as a byte stream or an f32/i16 tensor, under
// any recipe, come back unchanged.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte("hello hello hello"), uint8(0), uint8(1))
	f.Add(bytes.Repeat([]byte{0, 0, 0x80, 0x3f}, 300), uint8(3), uint8(2))
	f.Add(make([]byte, 4096), uint8(4), uint8(0))
	enc, _ := codec.NewEncoder()
	d := new(codec.Decoder)
	f.Fuzz(func(t *testing.T, data []byte, ri, kind uint8) {
		r := codec.MustParseRecipe(fuzzRecipes[int(ri)%len(fuzzRecipes)])
		var frame []byte
		var err error
		switch kind % 3 {
		case 0:
			frame, err = enc.AppendBytes(nil, data, r)
		case 1, 2:
			dt := codec.F32
			if kind%3 == 2 {
				dt = codec.I16
			}
			n := len(data) / dt.Size()
			x := codec.NewTensor("t", dt, int64(n))
			copy(x.Data, data)
			frame, err = enc.AppendTensor(nil, x, r)
			data = x.Data
		}
		if err != nil {
			if errors.Is(err, codec.ErrRecipe) {
				return // e.g. shuffle on a 1-byte element type
			}
			t.Fatal(err)
		}
		fr, _, err := d.DecodeFrame(frame)
		if err != nil {
			t.Fatalf("recipe %q: %v", r, err)
		}
		got := fr.Bytes
		if len(fr.Tensors) > 0 {
			got = fr.Tensors[0].Data
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("recipe %q: round trip differs", r)
		}
	})
}
