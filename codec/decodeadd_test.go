package codec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

func floatTensor(name string, n int, seed float32) *Tensor {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(math.Sin(float64(seed) + float64(i)))
	}
	return FromFloat32(name, v, int64(n))
}

func TestDecodeAdd(t *testing.T) {
	enc := mustEncoder()
	dec := new(Decoder)
	x := floatTensor("w", 1000, 1)
	xv, _ := View[float32](x)
	for _, recipe := range []string{"", "halve | *:xor(5)", "halve,halve | data.lo.lo:zeros"} {
		frame, err := enc.AppendTensor(nil, x, MustParseRecipe(recipe))
		if err != nil {
			t.Fatal(err)
		}
		acc := make([]float32, 1000)
		for i := range acc {
			acc[i] = float32(i)
		}
		n, err := dec.DecodeAdd(frame, -0.5, func(tt *Tensor) ([]float32, error) {
			if tt.Name != "w" || tt.Data != nil {
				t.Errorf("target sees %q with %d data bytes", tt.Name, len(tt.Data))
			}
			return acc, nil
		})
		if err != nil || n != len(frame) {
			t.Fatalf("%q: DecodeAdd = %d, %v; want %d", recipe, n, err, len(frame))
		}
		for i := range acc {
			if want := float32(i) + -0.5*xv[i]; acc[i] != want {
				t.Fatalf("%q: acc[%d] = %v, want %v", recipe, i, acc[i], want)
			}
		}
	}
}

func TestDecodeAddChunks(t *testing.T) {
	x := floatTensor("w", 5000, 2)
	xv, _ := View[float32](x)
	var buf bytes.Buffer
	w, err := NewWriter(&buf, WithRecipe(MustParseRecipe("halve | *:xor(1)")), WithChunkSize(4096))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteTensor(x); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	src := buf.Bytes()
	dec := new(Decoder)
	acc := make([]float32, 5000)
	frames := 0
	for len(src) > 0 {
		f, n, err := dec.DecodeFrame(src)
		if err != nil {
			t.Fatal(err)
		}
		if f.Header.Type == FrameTensor {
			if _, err := dec.DecodeAdd(src, 2, func(*Tensor) ([]float32, error) { return acc, nil }); err != nil {
				t.Fatal(err)
			}
			frames++
		} else if f.Header.Type != FrameHello && f.Header.Type != FrameEnd {
			t.Fatalf("unexpected %v frame", f.Header.Type)
		}
		src = src[n:]
	}
	if frames < 2 {
		t.Fatalf("%d tensor frames, want chunks", frames)
	}
	for i := range acc {
		if acc[i] != 2*xv[i] {
			t.Fatalf("acc[%d] = %v, want %v", i, acc[i], 2*xv[i])
		}
	}
}

func TestDecodeAddErrors(t *testing.T) {
	enc := mustEncoder()
	dec := new(Decoder)
	x := floatTensor("w", 100, 3)
	frame, err := enc.AppendTensor(nil, x, MustParseRecipe("halve | *:xor(5)"))
	if err != nil {
		t.Fatal(err)
	}
	acc := make([]float32, 99)
	if _, err := dec.DecodeAdd(frame, 1, func(*Tensor) ([]float32, error) { return acc, nil }); !errors.Is(err, ErrRecipe) {
		t.Errorf("wrong accumulator length: %v, want ErrRecipe", err)
	}
	for _, v := range acc {
		if v != 0 {
			t.Fatal("a failed DecodeAdd changed the accumulator")
		}
	}
	boom := errors.New("no such tensor")
	if _, err := dec.DecodeAdd(frame, 1, func(*Tensor) ([]float32, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Errorf("target error: %v", err)
	}
	i8 := randTensor("b", I8, 1, 64)
	frame8, err := enc.AppendTensor(nil, i8, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dec.DecodeAdd(frame8, 1, func(*Tensor) ([]float32, error) { return acc, nil }); !errors.Is(err, ErrUnsupported) {
		t.Errorf("int8 tensor: %v, want ErrUnsupported", err)
	}
	if _, err := dec.DecodeAdd(AppendControl(nil, 1, []byte("x")), 1, nil); !errors.Is(err, ErrUnsupported) {
		t.Errorf("control frame: %v, want ErrUnsupported", err)
	}
	bad := bytes.Clone(frame)
	bad[len(bad)-5] ^= 1
	if _, err := dec.DecodeAdd(bad, 1, func(*Tensor) ([]float32, error) { return make([]float32, 100), nil }); !typed(err) {
		t.Errorf("damaged frame: %v", err)
	}
	if _, err := dec.DecodeAdd(frame[:len(frame)-1], 1, nil); !typed(err) {
		t.Errorf("short frame: %v", err)
	}
}

// TestDecodeAddFinite: with WithFiniteAdd, an entry that would add a NaN
// or an infinity (a value, or a value times alpha past float32's range),
// raw or coded, is refused with ErrNonFinite and adds nothing; without
// it, the values are added as they are.
func TestDecodeAddFinite(t *testing.T) {
	enc := mustEncoder()
	strict, err := NewDecoder(WithFiniteAdd(true))
	if err != nil {
		t.Fatal(err)
	}
	for _, recipe := range []string{"", "halve | *:xor(5)"} {
		for _, c := range []struct {
			value, alpha float32
		}{{float32(math.NaN()), 1}, {float32(math.Inf(1)), 1}, {3e38, -2}, {1, float32(math.NaN())}} {
			x := floatTensor("w", 100, 1)
			xv, _ := View[float32](x)
			xv[40] = c.value
			frame, err := enc.AppendTensor(nil, x, MustParseRecipe(recipe))
			if err != nil {
				t.Fatal(err)
			}
			acc := make([]float32, 100)
			into := func(*Tensor) ([]float32, error) { return acc, nil }
			if _, err := strict.DecodeAdd(frame, c.alpha, into); !errors.Is(err, ErrNonFinite) {
				t.Errorf("%q, %v times %v: %v", recipe, c.alpha, c.value, err)
			}
			for i, v := range acc {
				if v != 0 {
					t.Fatalf("%q, %v times %v: acc[%d] = %v after the refusal", recipe, c.alpha, c.value, i, v)
				}
			}
			if _, err := new(Decoder).DecodeAdd(frame, c.alpha, into); err != nil {
				t.Fatal(err)
			}
			if v := acc[40]; v-v == 0 {
				t.Errorf("%q, %v times %v: the default Decoder added %v", recipe, c.alpha, c.value, v)
			}
		}
	}
}

// TestAddFloatsAlignment: the adds and the check agree whether the values
// are aligned for a float32 view or not.
func TestAddFloatsAlignment(t *testing.T) {
	buf := AlignedBytes(4*1001 + 1)
	for _, off := range []int{0, 1} {
		b := buf[off : off+4*1001]
		for i := range 1001 {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(i)-500))
		}
		acc := make([]float32, 1001)
		if err := addFloats(&Ctx{Finite: true}, acc, 2, b); err != nil {
			t.Fatal(err)
		}
		for i, v := range acc {
			if v != 2*(float32(i)-500) {
				t.Fatalf("offset %d: acc[%d] = %v", off, i, v)
			}
		}
		binary.LittleEndian.PutUint32(b[4*1000:], math.Float32bits(float32(math.Inf(-1))))
		if err := addFloats(&Ctx{Finite: true}, acc, 2, b); !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), "element 1000") {
			t.Errorf("offset %d: %v", off, err)
		}
	}
}

// TestDecodeAddFiniteFallback: an AddDecoder that does not declare that it
// checks (halveadd adds whatever it holds) is not handed the entry when
// WithFiniteAdd asks for the check: the entry is decoded whole, checked
// and refused, the accumulator untouched. Without the check, its own
// DecodeAdd adds the NaN.
func TestDecodeAddFiniteFallback(t *testing.T) {
	v := make([]float32, 100)
	for i := 25; i < 100; i++ {
		v[i] = float32(i)
	}
	v[70] = float32(math.NaN())
	frame, err := mustEncoder().AppendTensor(nil, FromFloat32("w", v, 100), MustParseRecipe("halveadd | data.lo:zeros"))
	if err != nil {
		t.Fatal(err)
	}
	if h, err := parseFrameHeader(frame, &defaultLimits); err != nil || !h.Entries[0].Coded {
		t.Fatalf("the frame is not coded through halveadd: %v", err)
	}
	strict, _ := NewDecoder(WithFiniteAdd(true))
	acc := make([]float32, 100)
	into := func(*Tensor) ([]float32, error) { return acc, nil }
	if _, err := strict.DecodeAdd(frame, 1, into); !errors.Is(err, ErrNonFinite) {
		t.Fatalf("WithFiniteAdd: %v", err)
	}
	if slices.ContainsFunc(acc, func(x float32) bool { return x != 0 }) {
		t.Fatal("the refused entry changed the accumulator")
	}
	if _, err := new(Decoder).DecodeAdd(frame, 1, into); err != nil || acc[70] == acc[70] || acc[99] != 99 {
		t.Fatalf("unchecked: %v, acc[70] %v, acc[99] %v", err, acc[70], acc[99])
	}
}
