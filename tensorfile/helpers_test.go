package tensorfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/tensorpress/tensorpress/codec"
)

// allDTypes are the dtypes both formats share, plus BF16 (safetensors only).
var allDTypes = []codec.DType{
	codec.Bool, codec.U8, codec.I8, codec.I16, codec.U16, codec.F16, codec.BF16,
	codec.I32, codec.U32, codec.F32, codec.F64, codec.I64, codec.U64,
}

// testShapes cover 0-d, empty, 1-d and 3-d.
var testShapes = [][]int64{{}, {0}, {2, 0, 3}, {5}, {3, 4}, {2, 3, 4}, {1, 1, 1, 7}}

// randTensor makes a tensor of random content (0/1 for Bool).
func randTensor(rng *rand.Rand, name string, dt codec.DType, shape ...int64) *codec.Tensor {
	t := codec.NewTensor(name, dt, shape...)
	for i := range t.Data {
		t.Data[i] = byte(rng.Uint32())
		if dt == codec.Bool {
			t.Data[i] &= 1
		}
	}
	return t
}

// sameTensor fails the test unless a and b agree in name, dtype, shape and
// data, and b's data is 8-byte aligned.
func sameTensor(t *testing.T, what string, want, got *codec.Tensor) {
	t.Helper()
	if got.Name != want.Name || got.DType != want.DType || !slices.Equal(got.Shape, want.Shape) || !bytes.Equal(got.Data, want.Data) {
		t.Fatalf("%s: got %q %v %v (%d bytes), want %q %v %v (%d bytes)", what,
			got.Name, got.DType, got.Shape, len(got.Data), want.Name, want.DType, want.Shape, len(want.Data))
	}
	if len(got.Data) > 0 && uintptr(unsafe.Pointer(&got.Data[0]))%8 != 0 {
		t.Fatalf("%s: data not 8-byte aligned", what)
	}
}

// stFile builds a safetensors file from a header as it is (no padding) and
// data.
func stFile(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

// npyFile builds an .npy file from a version, a dict as it is and data.
func npyFile(major byte, dict string, data []byte) []byte {
	b := []byte(npyMagic)
	b = append(b, major, 0)
	if major == 1 {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(dict)))
	} else {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(dict)))
	}
	b = append(b, dict...)
	return append(b, data...)
}

// sentinels are the errors every data-dependent failure must wrap.
var sentinels = []error{codec.ErrCorrupt, codec.ErrUnsupported, codec.ErrLimit, io.ErrUnexpectedEOF}

func wrapsSentinel(err error) bool {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// checkErr fails unless err wraps every one of want and contains substr,
// and its text starts with "tensorfile: ".
func checkErr(t *testing.T, what string, err error, want []error, substr string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %v %q", what, want, substr)
	}
	for _, w := range want {
		if !errors.Is(err, w) {
			t.Errorf("%s: error %q does not wrap %v", what, err, w)
		}
	}
	if !strings.Contains(err.Error(), substr) {
		t.Errorf("%s: error %q does not contain %q", what, err, substr)
	}
	if !strings.HasPrefix(err.Error(), "tensorfile: ") {
		t.Errorf("%s: error %q does not start with \"tensorfile: \"", what, err)
	}
}

// shapeString formats a shape as the reference manifest does: 2x3x4, or
// "scalar" for 0-d.
func shapeString(shape []int64) string {
	if len(shape) == 0 {
		return "scalar"
	}
	parts := make([]string, len(shape))
	for i, d := range shape {
		parts[i] = strconv.FormatInt(d, 10)
	}
	return strings.Join(parts, "x")
}
