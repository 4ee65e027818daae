package gpu

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// testAppendTensor encodes tensors on the device and with the codec on
// the CPU: the same frames, for recipes that start with fp16, bf16 or
// int8; other recipes are refused, and a block with an infinity is refused
// as the int8 stage refuses it.
func testAppendTensor(t *testing.T, d *Device) {
	enc, err := codec.NewEncoder()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(51, 51))
	for _, n := range []int{1, 1001, 70000} {
		x := finite(rng, n)
		tn := codec.FromFloat32("layer.weight", f32s(x), int64(n))
		tn.Tags.Extra = []codec.Tag{{Key: "k", Value: "v"}}
		xp := upload(t, d, u32bytes(x))
		for _, text := range []string{"fp16", "bf16 | *:zstd(1)", "fp16 | shuffle2 | *:huff0", "int8(64)", "int8(4096) | q:zstd(3)", "nf4(64)", "fp4(128) | *:zstd(1)", "nf4 | q:huff0"} {
			r := codec.MustParseRecipe(text)
			want, err := enc.AppendTensor(nil, tn, r)
			if err != nil {
				t.Fatal(err)
			}
			meta := *tn
			meta.Data = nil
			got, err := d.AppendTensor(enc, nil, &meta, xp, r)
			if err != nil {
				t.Fatalf("n %d, %s: %v", n, text, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("n %d, %s: the frames differ (%d and %d bytes)", n, text, len(got), len(want))
			}
		}
	}
	xp := upload(t, d, u32bytes([]uint32{0x3f800000, math.Float32bits(float32(math.Inf(1))), 0x40000000}))
	tn := &codec.Tensor{Name: "x", DType: codec.F32, Shape: []int64{3}}
	if _, err := d.AppendTensor(enc, nil, tn, xp, codec.MustParseRecipe("int8(64)")); !errors.Is(err, ErrNonFinite) {
		t.Errorf("an infinity: %v", err)
	}
	if _, err := d.AppendTensor(enc, nil, tn, xp, codec.MustParseRecipe("nf4(64)")); !errors.Is(err, ErrNonFinite) {
		t.Errorf("an infinity, nf4: %v", err)
	}
	for _, text := range []string{"zstd(1)", "shuffle4 | *:zstd(1)", "qsgd(127)"} {
		if _, err := d.AppendTensor(enc, nil, tn, xp, codec.MustParseRecipe(text)); !errors.Is(err, codec.ErrUnsupported) {
			t.Errorf("%s: %v", text, err)
		}
	}
}

func TestGPUAppendTensor(t *testing.T) { testAppendTensor(t, needDevice(t)) }

func TestFakeAppendTensor(t *testing.T) {
	f := installFake(t, 1)
	testAppendTensor(t, openFake(t, f))
	f.check(t, false)
}
