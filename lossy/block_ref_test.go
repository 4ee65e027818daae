package lossy

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// Reference vectors made by numpy (testvectors/reference/gen.py, part
// "quant"; definitions in testvectors/reference/README.md): the codes,
// absmax and dequantized values must match bit for bit.

const refQuantDir = "../testvectors/reference/quant"

func quantNpy(t *testing.T, name string, dt codec.DType) []byte {
	t.Helper()
	return readNpyAs(t, filepath.Join(refQuantDir, name), dt)
}

func quantFloat32s(b []byte) []float32 {
	x := make([]float32, len(b)/4)
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return x
}

func TestReferenceVectors(t *testing.T) {
	for _, input := range []string{"normal", "weights"} {
		x := quantFloat32s(quantNpy(t, "x_"+input+".npy", codec.F32))
		for _, B := range []int{64, 4096} {
			for _, kind := range []string{"int8", "nf4", "fp4"} {
				name := fmt.Sprintf("%s_b%d_%s", kind, B, input)
				t.Run(name, func(t *testing.T) {
					op := mustBlockOp(t, fmt.Sprintf("%s(%d)", kind, B))
					xh, parts := quantRoundTrip(t, op, x)
					var codes []byte
					if kind == "int8" {
						codes = quantNpy(t, name+"_q.npy", codec.I8)
						if !bytes.Equal(parts[0].Data, codes) {
							t.Errorf("q differs at element %d", quantFirstDiff(parts[0].Data, codes))
						}
					} else {
						codes = quantNpy(t, name+"_codes.npy", codec.U8)
						got := make([]byte, len(x))
						for i := range got {
							got[i] = parts[0].Data[i/2] >> (4 * (i % 2)) & 15
						}
						if !bytes.Equal(got, codes) {
							i := quantFirstDiff(got, codes)
							t.Errorf("codes differ at element %d: %d, want %d (x = %v)", i, got[i], codes[i], x[i])
						}
					}
					absmax := quantNpy(t, name+"_absmax.npy", codec.F32)
					if !bytes.Equal(parts[1].Data, absmax) {
						t.Errorf("absmax differs in block %d", quantFirstDiff(parts[1].Data, absmax)/4)
					}
					deq := quantFloat32s(quantNpy(t, name+"_deq.npy", codec.F32))
					if !quantEqualBits(xh, deq) {
						for i := range deq {
							if math.Float32bits(xh[i]) != math.Float32bits(deq[i]) {
								t.Fatalf("deq differs at element %d: %v, want %v", i, xh[i], deq[i])
							}
						}
					}
					checkQuantBound(t, op, x)
				})
			}
		}
	}
}

func quantFirstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestBlockBoundsModel checks every stage's bound on the weights and
// gradients of the reference model (testvectors/reference/model).
func TestBlockBoundsModel(t *testing.T) {
	var files []string
	for _, dir := range []string{"weights", "grads"} {
		m, err := filepath.Glob(filepath.Join("../testvectors/reference/model", dir, "*.npy"))
		if err != nil || len(m) == 0 {
			t.Fatalf("no model %s: %v", dir, err)
		}
		files = append(files, m...)
	}
	for _, text := range blockRecipes {
		op := mustBlockOp(t, text)
		worst := 0.0
		for _, f := range files {
			st := checkQuantBound(t, op, quantFloat32s(readNpyAs(t, f, codec.F32)))
			worst = max(worst, st.MaxRatio)
		}
		t.Logf("%s: worst error / bound on the model's weights and gradients: %.4f", op, worst)
	}
}
