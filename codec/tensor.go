package codec

import (
	"fmt"
	"math"

	"github.com/tensorpress/tensorpress/internal/view"
)

// Tag is a free-form key/value annotation carried with a tensor.
type Tag struct {
	Key, Value string
}

// Tags annotate a tensor. Lossless is the one the writer enforces: a tensor
// tagged lossless never meets a lossy stage.
type Tags struct {
	Lossless bool
	Extra    []Tag
}

// Tensor is a named, typed, shaped block of little-endian data, or a chunk
// of one.
//
// A whole tensor has Offset 0 and len(Data) == NumBytes(). A chunk carries
// the elements [Offset, Offset+len(Data)/DType.Size()) of the tensor
// described by Shape, in row-major order. Version and Base number successive
// versions of a tensor: a frame with Base != 0 carries a delta against
// version Base (reserved for later use; tensorpress passes them through).
//
// Data is owned by whoever made the Tensor. Tensors returned by a Reader own
// their Data, allocated aligned to 8 bytes so the typed views below work.
type Tensor struct {
	Name    string
	DType   DType
	Shape   []int64
	Tags    Tags
	Offset  int64 // first element of Data within the tensor (chunks)
	Version uint64
	Base    uint64
	Data    []byte
}

// NumElements is the product of Shape (1 for a scalar), or -1 when a
// dimension is negative or the product overflows int64.
func (t *Tensor) NumElements() int64 { return numElements(t.Shape) }

// NumBytes is NumElements times the element size, or -1 on overflow.
func (t *Tensor) NumBytes() int64 {
	n := t.NumElements()
	sz := int64(t.DType.Size())
	if n < 0 || sz == 0 || n > math.MaxInt64/sz {
		return -1
	}
	return n * sz
}

// IsWhole reports whether t holds all of its elements rather than a chunk.
func (t *Tensor) IsWhole() bool {
	return t.Offset == 0 && int64(len(t.Data)) == t.NumBytes()
}

// Validate checks that dtype, shape, offset and data length agree.
func (t *Tensor) Validate() error {
	if !t.DType.Valid() || t.DType == Byte {
		return fmt.Errorf("%w: tensor %q: dtype %v", ErrUnsupported, t.Name, t.DType)
	}
	total := t.NumBytes()
	if total < 0 {
		return fmt.Errorf("%w: tensor %q: shape %v overflows", ErrCorrupt, t.Name, t.Shape)
	}
	sz := int64(t.DType.Size())
	if int64(len(t.Data))%sz != 0 {
		return fmt.Errorf("%w: tensor %q: %d data bytes is not a whole number of %v elements", ErrCorrupt, t.Name, len(t.Data), t.DType)
	}
	if t.Offset < 0 || t.Offset > total/sz || int64(len(t.Data)) > total-t.Offset*sz {
		return fmt.Errorf("%w: tensor %q: elements [%d, +%d) outside shape %v", ErrCorrupt, t.Name, t.Offset, int64(len(t.Data))/sz, t.Shape)
	}
	return nil
}

func numElements(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return -1
		}
		if d != 0 && n > math.MaxInt64/d {
			return -1
		}
		n *= d
	}
	return n
}

// NewTensor allocates a zeroed, 8-byte aligned tensor of the given dtype
// and shape. It panics if the shape is negative or overflows: that is a
// programmer error, not a data error.
func NewTensor(name string, dt DType, shape ...int64) *Tensor {
	t := &Tensor{Name: name, DType: dt, Shape: append([]int64(nil), shape...)}
	n := t.NumBytes()
	if n < 0 || !dt.Valid() || dt == Byte {
		panic(fmt.Sprintf("codec: NewTensor(%q, %v, %v): bad dtype or shape", name, dt, shape))
	}
	t.Data = AlignedBytes(int(n))
	return t
}

// AlignedBytes returns n zeroed bytes aligned to 8 bytes, suitable for any
// of the typed views.
func AlignedBytes(n int) []byte { return view.Bytes(n) }

// View returns the tensor data as a []T without copying. T must match the
// element size of the dtype (float32 for F32, uint16 for F16 and BF16 bits,
// and so on); the data must be aligned for T, which Reader output and
// NewTensor guarantee. The host must be little-endian.
func View[T int8 | uint8 | int16 | uint16 | int32 | uint32 | int64 | uint64 | float32 | float64](t *Tensor) ([]T, error) {
	if !view.LittleEndian {
		return nil, fmt.Errorf("%w: typed views need a little-endian host", ErrUnsupported)
	}
	var zero T
	if sz := sizeOf(zero); sz != t.DType.Size() {
		return nil, fmt.Errorf("codec: View: %d-byte element for %v tensor %q", sz, t.DType, t.Name)
	}
	s, ok := view.As[T](t.Data)
	if !ok {
		return nil, fmt.Errorf("codec: View: data of tensor %q is not aligned for its element type; copy it into AlignedBytes", t.Name)
	}
	return s, nil
}

func sizeOf[T int8 | uint8 | int16 | uint16 | int32 | uint32 | int64 | uint64 | float32 | float64](T) int {
	var z T
	switch any(z).(type) {
	case int8, uint8:
		return 1
	case int16, uint16:
		return 2
	case int32, uint32, float32:
		return 4
	default:
		return 8
	}
}

// FromFloat32 wraps float32 values as an F32 tensor without copying.
func FromFloat32(name string, v []float32, shape ...int64) *Tensor {
	if len(shape) == 0 {
		shape = []int64{int64(len(v))}
	}
	return &Tensor{Name: name, DType: F32, Shape: shape, Data: view.Of(v)}
}
