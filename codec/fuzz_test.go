package codec

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func fuzzSeeds(f *testing.F) {
	enc, _ := NewEncoder()
	x := randTensor("w", F32, 1, 3, 10)
	x.Tags.Extra = []Tag{{"a", "b"}}
	for _, r := range []string{"", "*:zeros", "halve | data.lo:xor(3),zeros", "halve,halve"} {
		fr, _ := enc.AppendTensor(nil, x, MustParseRecipe(r))
		f.Add(fr)
	}
	fr, _ := enc.AppendTensors(nil, []*Tensor{x, randTensor("b", U8, 2, 5)}, nil)
	f.Add(fr)
	fr, _ = enc.AppendBytes(nil, []byte("some bytes"), MustParseRecipe("halve"))
	f.Add(fr)
	f.Add(AppendHello(nil, &Hello{Peer: "p", Stages: []StageID{1, 2}}))
	f.Add(AppendControl(nil, 1024, []byte("x")))
	f.Add(AppendEnd(nil, End{Frames: 1, Bytes: 2}))
	f.Add([]byte{})
	f.Add([]byte{0x21, 0x80})
}

// FuzzDecodeFrame: any input decodes or fails with a typed error, never a
// panic; what decodes re-encodes to a frame that decodes to the same data.
func FuzzDecodeFrame(f *testing.F) {
	fuzzSeeds(f)
	d, err := NewDecoder(WithLimits(Limits{MaxDecodedSize: 1 << 20, MaxFrameSize: 1 << 20, MaxTensorSize: 1 << 24}))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		fr, n, err := d.DecodeFrame(in)
		if err != nil {
			if !typed(err) {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		if n > len(in) || int64(n) != fr.Header.FrameLen() {
			t.Fatalf("consumed %d of %d (frame length %d)", n, len(in), fr.Header.FrameLen())
		}
		enc, _ := NewEncoder()
		for _, x := range fr.Tensors {
			if err := x.Validate(); err != nil {
				t.Fatalf("decoded tensor invalid: %v", err)
			}
			out, err := enc.AppendTensor(nil, x, nil)
			if err != nil {
				t.Fatal(err)
			}
			back, _, err := d.DecodeFrame(out)
			if err != nil || !bytes.Equal(back.Tensors[0].Data, x.Data) {
				t.Fatalf("re-encoded frame: %v", err)
			}
		}
	})
}

// FuzzReader: a stream reader over arbitrary input never panics and ends
// with io.EOF or a typed error.
func FuzzReader(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := NewReader(bytes.NewReader(in), WithLimits(Limits{MaxDecodedSize: 1 << 20, MaxFrameSize: 1 << 20, MaxTensorSize: 1 << 24}))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 1000; i++ {
			_, err := r.ReadTensor()
			if err == io.EOF {
				return
			}
			if err != nil {
				if !typed(err) {
					t.Fatalf("untyped error: %v", err)
				}
				return
			}
		}
	})
}

// FuzzParseRecipe: parsing never panics; what parses prints to a form that
// parses to the same print.
func FuzzParseRecipe(f *testing.F) {
	for _, s := range []string{"", "raw", "xor(7) | *:zeros", "halve | data.lo+data.hi:xor(key=3),zeros", "plane0..2:raw", "a..b:", "((", "*:,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRecipe(s)
		if err != nil {
			if !errors.Is(err, ErrRecipe) {
				t.Fatalf("error does not wrap ErrRecipe: %v", err)
			}
			return
		}
		p := r.String()
		r2, err := ParseRecipe(p)
		if err != nil {
			t.Fatalf("printed form %q of %q does not parse: %v", p, s, err)
		}
		if r2.String() != p {
			t.Fatalf("%q -> %q -> %q", s, p, r2.String())
		}
	})
}

// FuzzFrameFields builds frames with valid CRCs around fuzzed header and
// payload bytes, so the fuzzer reaches the header parser and the stage
// decoders behind the checksums.
func FuzzFrameFields(f *testing.F) {
	f.Add(byte(FrameTensor), []byte{tflagCoded, 1, 'x', byte(U8), 1, 4, 1, byte(xorID), 1, 0, 4, 1, 7, 1, 4}, []byte{1, 2, 3, 4}, true)
	f.Add(byte(FrameTensor), []byte{tflagCoded, 0, byte(U8), 1, 4, 2, byte(halveID), 1, 0, 4, 0, byte(shrinkID), 1, 0, 2, 0, 2, 2, 2}, []byte{0, 1, 3, 4}, false)
	f.Add(byte(FrameTensors), []byte{2, 0, 0, byte(U8), 1, 1, tflagChunk, 0, byte(I16), 1, 4, 1, 2}, []byte{1, 2, 3, 4, 5}, true)
	f.Add(byte(FrameBytes), []byte{tflagCoded, 4, 1, byte(xorID), 1, 0, 4, 1, 7, 1, 4}, []byte{1, 2, 3, 4}, true)
	f.Add(byte(FrameHello), append([]byte("TPRS\x01\x01"), make([]byte, 19)...), []byte{}, false)
	d, err := NewDecoder(WithLimits(Limits{MaxDecodedSize: 1 << 20, MaxFrameSize: 1 << 20, MaxTensorSize: 1 << 24}))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, typ byte, hdr, payload []byte, withCRC bool) {
		frame := appendFrame(nil, FrameType(typ&leadTypeMask), hdr, [][]byte{payload}, withCRC)
		_, _, err := d.DecodeFrame(frame)
		if err != nil && !typed(err) {
			t.Fatalf("untyped error: %v", err)
		}
	})
}

// FuzzChunks: streams of chunks of one tensor in any order, with gaps,
// overlaps and repeats. ReadTensor returns the tensor only when its chunks
// came in order and covered it exactly (then it is the tensor, byte for
// byte); otherwise it fails with a typed error. Next agrees with it.
func FuzzChunks(f *testing.F) {
	f.Add([]byte{0, 10, 10, 20, 30, 10})
	f.Add([]byte{0, 10, 20, 10, 10, 10})
	f.Add([]byte{0, 40})
	f.Add([]byte{30, 10})
	f.Add([]byte{0, 10, 5, 10, 15, 25})
	f.Add([]byte{0, 20, 0, 20, 20, 20})
	x := randTensor("x", U8, 7, 40)
	enc := mustEncoder()
	f.Fuzz(func(t *testing.T, ops []byte) {
		var s []byte
		next, valid := 0, true // whether the chunks so far follow the rules
		for i := 0; i+1 < len(ops) && i < 40; i += 2 {
			off, n := int(ops[i])%40, 1+int(ops[i+1])%40
			n = min(n, 40-off)
			c := &Tensor{Name: x.Name, DType: x.DType, Shape: x.Shape, Offset: int64(off), Data: x.Data[off : off+n]}
			var err error
			if s, err = enc.AppendTensor(s, c, nil); err != nil {
				t.Fatal(err)
			}
			switch {
			case n == 40:
				valid = valid && next == 0
			case off != next:
				valid = false
			default:
				next = (next + n) % 40
			}
		}
		valid = valid && next == 0
		r, rerr := NewReader(bytes.NewReader(s))
		if rerr != nil {
			t.Fatal(rerr)
		}
		for {
			got, err := r.ReadTensor()
			if err != nil {
				rerr = err
				break
			}
			if !got.IsWhole() || !bytes.Equal(got.Data, x.Data) {
				t.Fatalf("ReadTensor returned %d bytes at %d that are not the tensor", len(got.Data), got.Offset)
			}
		}
		if (rerr == io.EOF) != valid || rerr != io.EOF && !typed(rerr) {
			t.Fatalf("ops %v: ReadTensor ends with %v; the chunks follow the rules: %v", ops, rerr, valid)
		}
		r, nerr := NewReader(bytes.NewReader(s))
		if nerr != nil {
			t.Fatal(nerr)
		}
		for nerr == nil {
			_, nerr = r.Next()
		}
		if (nerr == io.EOF) != valid {
			t.Fatalf("ops %v: Next ends with %v, ReadTensor with %v", ops, nerr, rerr)
		}
	})
}
