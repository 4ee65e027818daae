package codec

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestEncoderRefusesWriterOptions(t *testing.T) {
	for _, o := range []struct {
		name string
		opt  EOption
	}{
		{"WithChunkSize", WithChunkSize(4096)},
		{"WithStartFrame", WithStartFrame(1024)},
		{"WithEncoderConcurrency", WithEncoderConcurrency(2)},
		{"WithRecipe", WithRecipe(nil)},
		{"WithPolicy", WithPolicy(FixedPolicy{})},
		{"WithHello", WithHello(false)},
		{"WithPeerID", WithPeerID("p")},
	} {
		_, err := NewEncoder(o.opt)
		if err == nil || !strings.Contains(err.Error(), o.name) {
			t.Errorf("NewEncoder(%s): %v, want an error naming it", o.name, err)
		}
		w, err := NewWriter(&bytes.Buffer{}, o.opt)
		if err != nil {
			t.Errorf("NewWriter(%s): %v", o.name, err)
			continue
		}
		w.Close()
	}
	if _, err := NewEncoder(WithPayloadCRC(CRCOmitRaw)); err != nil {
		t.Errorf("NewEncoder(WithPayloadCRC): %v", err)
	}
}

func TestOptionsRefuseBadValues(t *testing.T) {
	for name, o := range map[string]EOption{
		"chunk 63":        WithChunkSize(MinChunkSize - 1),
		"chunk max+1":     WithChunkSize(MaxChunkSize + 1),
		"start -1":        WithStartFrame(-1),
		"concurrency 0":   WithEncoderConcurrency(0),
		"concurrency max": WithEncoderConcurrency(MaxConcurrency + 1),
		"policy nil":      WithPolicy(nil),
		"crc mode":        WithPayloadCRC(9),
		"peer too long":   WithPeerID(strings.Repeat("p", DefaultLimits().MaxNameLen+1)),
		"nil":             nil,
	} {
		if _, err := NewWriter(&bytes.Buffer{}, o); err == nil {
			t.Errorf("%s: NewWriter accepted it", name)
		}
	}
	for name, o := range map[string]DOption{
		"concurrency 0":   WithDecoderConcurrency(0),
		"concurrency max": WithDecoderConcurrency(MaxConcurrency + 1),
		"nil":             nil,
	} {
		if _, err := NewReader(&bytes.Buffer{}, o); err == nil {
			t.Errorf("%s: NewReader accepted it", name)
		}
	}
}

func TestDecoderRefusesReaderOptions(t *testing.T) {
	_, err := NewDecoder(WithDecoderConcurrency(2))
	if err == nil || !strings.Contains(err.Error(), "WithDecoderConcurrency") {
		t.Fatalf("NewDecoder(WithDecoderConcurrency): %v", err)
	}
	if _, err := NewReader(&bytes.Buffer{}, WithDecoderConcurrency(2), WithLimits(Limits{MaxDims: 3})); err != nil {
		t.Fatal(err)
	}
	// And the other way: DecodeAdd's option is not a Reader's.
	if _, err := NewReader(&bytes.Buffer{}, WithFiniteAdd(true)); err == nil || !strings.Contains(err.Error(), "WithFiniteAdd") {
		t.Fatalf("NewReader(WithFiniteAdd): %v", err)
	}
	d, err := NewDecoder(WithLimits(Limits{MaxDims: 1}))
	if err != nil {
		t.Fatal(err)
	}
	enc := mustEncoder()
	frame, err := enc.AppendTensor(nil, &Tensor{Name: "m", DType: U8, Shape: []int64{2, 2}, Data: make([]byte, 4)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.DecodeFrame(frame); err == nil {
		t.Fatal("a rank-2 tensor passed MaxDims 1")
	}
	if _, _, err := new(Decoder).DecodeFrame(frame); err != nil {
		t.Fatalf("zero Decoder: %v", err)
	}
}

// TestMaxEncodedLen checks the bounds on incompressible and compressible
// data, raw and coded, bytes and tensor frames, with and without CRCs.
func TestMaxEncodedLen(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 100, 127, 128, 4095, 70000} {
		noise := make([]byte, n)
		for i := range noise {
			noise[i] = byte(rng.Uint32())
		}
		zeros := make([]byte, n)
		for _, data := range [][]byte{noise, zeros} {
			for _, mode := range []CRCMode{CRCAlways, CRCOmitRaw} {
				enc, err := NewEncoder(WithPayloadCRC(mode))
				if err != nil {
					t.Fatal(err)
				}
				for _, rs := range []string{"", "raw", "*:zeros", "halve | data.lo:xor(3),zeros"} {
					var r *Recipe
					if rs != "" {
						r = MustParseRecipe(rs)
					}
					f, err := enc.AppendBytes(nil, data, r)
					if err != nil {
						t.Fatal(err)
					}
					if len(f) > MaxEncodedLen(n) {
						t.Errorf("bytes %d (%q): frame %d > MaxEncodedLen %d", n, rs, len(f), MaxEncodedLen(n))
					}
					if n%4 != 0 {
						continue
					}
					x := &Tensor{Name: "layer.weight", DType: F32, Shape: []int64{int64(n / 4)}, Data: data,
						Tags: Tags{Lossless: true, Extra: []Tag{{Key: "k", Value: "v"}}}, Version: 3, Base: 2}
					f, err = enc.AppendTensor(nil, x, r)
					if err != nil {
						t.Fatal(err)
					}
					if len(f) > MaxTensorLen(x) {
						t.Errorf("tensor %d (%q): frame %d > MaxTensorLen %d", n, rs, len(f), MaxTensorLen(x))
					}
				}
			}
		}
	}
}

// TestAppendRawTensorHead: head, data and tail are the frame AppendTensor
// makes with no recipe, with and without payload CRC, whole and chunk.
func TestAppendRawTensorHead(t *testing.T) {
	x := &Tensor{Name: "w", DType: F32, Shape: []int64{4, 4}, Data: make([]byte, 64), Tags: Tags{Lossless: true}, Version: 2}
	for i := range x.Data {
		x.Data[i] = byte(i * 3)
	}
	chunk := &Tensor{Name: "w", DType: F32, Shape: []int64{4, 4}, Offset: 4, Data: x.Data[16:48]}
	for _, mode := range []CRCMode{CRCAlways, CRCOmitRaw} {
		enc, err := NewEncoder(WithPayloadCRC(mode))
		if err != nil {
			t.Fatal(err)
		}
		for _, tn := range []*Tensor{x, chunk} {
			want, err := enc.AppendTensor(nil, tn, nil)
			if err != nil {
				t.Fatal(err)
			}
			head, tail, err := enc.AppendRawTensorHead([]byte("prefix"), tn)
			if err != nil {
				t.Fatal(err)
			}
			got := append(append(head[len("prefix"):], tn.Data...), tail...)
			if !bytes.Equal(got, want) || string(head[:6]) != "prefix" {
				t.Fatalf("mode %d, offset %d: head+data+tail differs from AppendTensor", mode, tn.Offset)
			}
		}
	}
	bad := &Tensor{Name: "w", DType: F32, Shape: []int64{3}, Data: make([]byte, 5)}
	if _, _, err := mustEncoder().AppendRawTensorHead(nil, bad); err == nil {
		t.Fatal("a tensor whose data does not fit its shape was accepted")
	}
}

func TestLimitsFill(t *testing.T) {
	d := DefaultLimits()
	got := Limits{MaxDims: 3, MaxFrameSize: -1}.Fill(d)
	want := d
	want.MaxDims = 3
	if got != want {
		t.Fatalf("Fill: %+v, want %+v", got, want)
	}
	if (Limits{}).Fill(d) != d {
		t.Fatal("the zero Limits filled is not the base")
	}
}
