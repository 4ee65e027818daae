package lossy

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Reference vectors made by numpy (testvectors/reference/gen.py, part
// "quant"; definitions in testvectors/reference/README.md): the codes,
// absmax and dequantized values must match bit for bit.

const refQuantDir = "../testvectors/reference/quant"

// quantNpyArray is a decoded .npy file: its descr and shape, and its raw
// little-endian data.
type quantNpyArray struct {
	descr string
	shape []int
	data  []byte
}

var quantNpyHeaderRE = regexp.MustCompile(`^\{'descr': '([<>|][a-z][0-9]+)', 'fortran_order': (True|False), 'shape': \(([0-9, ]*)\), \}\s*$`)

// quantReadNpy reads the .npy files np.save writes (version 1.0, 2.0 or 3.0,
// C order, a little-endian or byte-sized descr).
func quantReadNpy(path string) (*quantNpyArray, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) < 10 || string(b[:6]) != "\x93NUMPY" {
		return nil, fmt.Errorf("%s: not a .npy file", path)
	}
	var hlen, off int
	switch b[6] {
	case 1:
		hlen, off = int(binary.LittleEndian.Uint16(b[8:])), 10
	case 2, 3:
		if len(b) < 12 {
			return nil, fmt.Errorf("%s: truncated", path)
		}
		hlen, off = int(binary.LittleEndian.Uint32(b[8:])), 12
	default:
		return nil, fmt.Errorf("%s: .npy version %d.%d", path, b[6], b[7])
	}
	if off+hlen > len(b) {
		return nil, fmt.Errorf("%s: truncated header", path)
	}
	m := quantNpyHeaderRE.FindStringSubmatch(string(b[off : off+hlen]))
	if m == nil {
		return nil, fmt.Errorf("%s: header %q", path, b[off:off+hlen])
	}
	if m[2] != "False" || m[1][0] == '>' {
		return nil, fmt.Errorf("%s: Fortran order or big-endian data", path)
	}
	a := &quantNpyArray{descr: m[1], data: b[off+hlen:]}
	size, _ := strconv.Atoi(m[1][2:])
	n := 1
	for _, d := range strings.Split(m[3], ",") {
		if d = strings.TrimSpace(d); d == "" {
			continue
		}
		v, err := strconv.Atoi(d)
		if err != nil {
			return nil, fmt.Errorf("%s: shape %q", path, m[3])
		}
		a.shape = append(a.shape, v)
		n *= v
	}
	if len(a.data) != n*size {
		return nil, fmt.Errorf("%s: %d data bytes for %d elements of %s", path, len(a.data), n, a.descr)
	}
	return a, nil
}

func quantNpy(t *testing.T, name, descr string) []byte {
	t.Helper()
	a, err := quantReadNpy(filepath.Join(refQuantDir, name))
	if err != nil {
		t.Fatal(err)
	}
	if a.descr != descr || len(a.shape) != 1 {
		t.Fatalf("%s: %s %v, want a vector of %s", name, a.descr, a.shape, descr)
	}
	return a.data
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
		x := quantFloat32s(quantNpy(t, "x_"+input+".npy", "<f4"))
		for _, B := range []int{64, 4096} {
			for _, kind := range []string{"int8", "nf4", "fp4"} {
				name := fmt.Sprintf("%s_b%d_%s", kind, B, input)
				t.Run(name, func(t *testing.T) {
					op := mustBlockOp(t, fmt.Sprintf("%s(%d)", kind, B))
					xh, parts := quantRoundTrip(t, op, x)
					var codes []byte
					if kind == "int8" {
						codes = quantNpy(t, name+"_q.npy", "|i1")
						if !bytes.Equal(parts[0].Data, codes) {
							t.Errorf("q differs at element %d", quantFirstDiff(parts[0].Data, codes))
						}
					} else {
						codes = quantNpy(t, name+"_codes.npy", "|u1")
						got := make([]byte, len(x))
						for i := range got {
							got[i] = parts[0].Data[i/2] >> (4 * (i % 2)) & 15
						}
						if !bytes.Equal(got, codes) {
							i := quantFirstDiff(got, codes)
							t.Errorf("codes differ at element %d: %d, want %d (x = %v)", i, got[i], codes[i], x[i])
						}
					}
					absmax := quantNpy(t, name+"_absmax.npy", "<f4")
					if !bytes.Equal(parts[1].Data, absmax) {
						t.Errorf("absmax differs in block %d", quantFirstDiff(parts[1].Data, absmax)/4)
					}
					deq := quantFloat32s(quantNpy(t, name+"_deq.npy", "<f4"))
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
			a, err := quantReadNpy(f)
			if err != nil || a.descr != "<f4" {
				t.Fatalf("%s: %v %v", f, a, err)
			}
			st := checkQuantBound(t, op, quantFloat32s(a.data))
			worst = max(worst, st.MaxRatio)
		}
		t.Logf("%s: worst error / bound on the model's weights and gradients: %.4f", op, worst)
	}
}
