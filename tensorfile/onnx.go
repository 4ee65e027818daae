package tensorfile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tensorpress/tensorpress/codec"
)

// An ONNX model file is one protobuf message, ModelProto (onnx/onnx.proto),
// with no header of its own. The reader walks its wire format down one path
// and skips everything else by length:
//
//	ModelProto  producer_name = 2 (string), graph = 7 (GraphProto)
//	GraphProto  initializer = 5 (repeated TensorProto),
//	            sparse_initializer = 15 (refused)
//	TensorProto dims = 1 (repeated int64), data_type = 2 (int32),
//	            segment = 3 (refused), float_data = 4, int32_data = 5,
//	            string_data = 6, int64_data = 7, name = 8, raw_data = 9,
//	            double_data = 10, uint64_data = 11, external_data = 13
//	            (refused), data_location = 14 (EXTERNAL refused)
//
// A tensor's elements are in raw_data (fixed width, little-endian) or in the
// one packed repeated field its data_type calls for.
const (
	onnxModelProducer = 2
	onnxModelGraph    = 7

	onnxGraphInitializer       = 5
	onnxGraphSparseInitializer = 15

	onnxTensorDims         = 1
	onnxTensorDataType     = 2
	onnxTensorSegment      = 3
	onnxTensorFloatData    = 4
	onnxTensorInt32Data    = 5
	onnxTensorStringData   = 6
	onnxTensorInt64Data    = 7
	onnxTensorName         = 8
	onnxTensorRawData      = 9
	onnxTensorDoubleData   = 10
	onnxTensorUint64Data   = 11
	onnxTensorExternalData = 13
	onnxTensorDataLocation = 14

	onnxLocationExternal = 1 // TensorProto.DataLocation EXTERNAL
)

// onnxDTypes maps TensorProto.DataType codes to names and codec dtypes; ok
// is false for the codes tensorpress has no element type for.
var onnxDTypes = [...]struct {
	name string
	dt   codec.DType
	ok   bool
}{
	0:  {"UNDEFINED", 0, false},
	1:  {"FLOAT", codec.F32, true},
	2:  {"UINT8", codec.U8, true},
	3:  {"INT8", codec.I8, true},
	4:  {"UINT16", codec.U16, true},
	5:  {"INT16", codec.I16, true},
	6:  {"INT32", codec.I32, true},
	7:  {"INT64", codec.I64, true},
	8:  {"STRING", 0, false},
	9:  {"BOOL", codec.Bool, true},
	10: {"FLOAT16", codec.F16, true},
	11: {"DOUBLE", codec.F64, true},
	12: {"UINT32", codec.U32, true},
	13: {"UINT64", codec.U64, true},
	14: {"COMPLEX64", 0, false},
	15: {"COMPLEX128", 0, false},
	16: {"BFLOAT16", codec.BF16, true},
	17: {"FLOAT8E4M3FN", 0, false},
	18: {"FLOAT8E4M3FNUZ", 0, false},
	19: {"FLOAT8E5M2", 0, false},
	20: {"FLOAT8E5M2FNUZ", 0, false},
	21: {"UINT4", 0, false},
	22: {"INT4", 0, false},
	23: {"FLOAT4E2M1", 0, false},
	24: {"FLOAT8E8M0", 0, false},
	25: {"UINT2", 0, false},
	26: {"INT2", 0, false},
}

// onnxEnc is how a tensor's elements are stored.
type onnxEnc uint8

const (
	encNone   onnxEnc = iota // no data field: a tensor of no elements
	encRaw                   // raw_data, float_data or double_data: the bytes as they are
	encInt32                 // int32_data: one varint per element
	encInt64                 // int64_data: one varint per element
	encUint64                // uint64_data: one varint per element
)

// onnxDataField describes a typed data field of TensorProto.
type onnxDataField struct {
	name     string
	unpacked protowire.Type // the wire type of one element, unpacked
	width    int            // element width in bytes, 0 for varints
	enc      onnxEnc
	dtypes   []codec.DType // the data types it may hold that tensorpress has
}

var onnxDataFields = map[protowire.Number]*onnxDataField{
	onnxTensorFloatData:  {"float_data", protowire.Fixed32Type, 4, encRaw, []codec.DType{codec.F32}},
	onnxTensorInt32Data:  {"int32_data", protowire.VarintType, 0, encInt32, []codec.DType{codec.I32, codec.I16, codec.I8, codec.U16, codec.U8, codec.Bool, codec.F16, codec.BF16}},
	onnxTensorStringData: {"string_data", protowire.BytesType, 0, encNone, nil},
	onnxTensorInt64Data:  {"int64_data", protowire.VarintType, 0, encInt64, []codec.DType{codec.I64}},
	onnxTensorDoubleData: {"double_data", protowire.Fixed64Type, 8, encRaw, []codec.DType{codec.F64}},
	onnxTensorUint64Data: {"uint64_data", protowire.VarintType, 0, encUint64, []codec.DType{codec.U32, codec.U64}},
}

// onnxWindow is the size of the window the reader decodes through.
const onnxWindow = 32 << 10

// ONNX is an opened ONNX model file: the initializers of its graph. Only the
// protobuf structure down to each initializer is read when it is opened;
// tensor data is read when asked for. Its methods are safe for concurrent
// use when the io.ReaderAt is (an *os.File is).
type ONNX struct {
	r        io.ReaderAt
	size     int64
	producer string
	tensors  []onnxTensor
	index    map[string]int
	limits   Limits
}

// onnxTensor is an initializer: where its data is and how it is coded.
type onnxTensor struct {
	TensorInfo
	enc    onnxEnc
	field  string // the data field, for messages
	n      int64  // elements
	nbytes int64  // elements times the element size: what Read allocates
}

// OpenONNX reads the structure of the ONNX model of the given size that r
// reads: the producer name and, for each initializer of the main graph, its
// name, data type, shape and where its data lies. It skips the graph's
// nodes, the rest of the model and the tensors' data without reading them.
//
// Refused with an error wrapping codec.ErrUnsupported: initializers stored
// outside the file (external_data, data_location EXTERNAL), segments,
// sparse initializers, and data types tensorpress has no element type for
// (STRING, complex, 8-, 4- and 2-bit types, unknown codes). Refused as
// codec.ErrCorrupt: malformed protobuf (bad varints or tags, groups, fields
// of the wrong wire type, lengths past the end of their message, a second
// graph or a second name, data_type, raw_data or data field in a tensor), a
// model with no graph, an initializer with no name, a name that is not
// UTF-8 or repeats, negative dimensions, a shape whose byte size
// overflows, more or fewer data than the shape needs, a data field the
// data type does not use. Lengths past the end of the file wrap
// io.ErrUnexpectedEOF as well. Limits (codec.ErrLimit): MaxTensors
// initializers, MaxDims dimensions, MaxNameLen bytes in a name or the
// producer name. The option that applies is WithLimits.
func OpenONNX(r io.ReaderAt, size int64, opts ...Option) (*ONNX, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if size < 0 {
		return nil, fmt.Errorf("tensorfile: onnx: negative file size %d", size)
	}
	p := &pbReader{r: r, size: size, limit: size, buf: make([]byte, 0, min(onnxWindow, size)), where: "the model"}
	m := &ONNX{r: r, size: size, index: make(map[string]int), limits: c.limits}
	var seenProducer, seenGraph bool
	for p.pos < size {
		start := p.pos
		num, typ, err := p.tag(size)
		if err != nil {
			return nil, err
		}
		switch num {
		case onnxModelProducer:
			if err := p.want(start, num, "producer_name", typ, protowire.BytesType); err != nil {
				return nil, err
			}
			if seenProducer {
				return nil, p.corrupt(start, "a second producer_name")
			}
			seenProducer = true
			if m.producer, err = p.str(size, "producer_name", c.limits.MaxNameLen); err != nil {
				return nil, err
			}
		case onnxModelGraph:
			if err := p.want(start, num, "graph", typ, protowire.BytesType); err != nil {
				return nil, err
			}
			if seenGraph {
				return nil, p.corrupt(start, "a second graph")
			}
			seenGraph = true
			n, err := p.length(size, "graph")
			if err != nil {
				return nil, err
			}
			if err := m.readGraph(p, p.pos+n); err != nil {
				return nil, err
			}
			p.where = "the model"
		default:
			if err := p.skip(typ, size); err != nil {
				return nil, err
			}
		}
	}
	if !seenGraph {
		return nil, onnxErr(isCorrupt, "the model has no graph (not an ONNX model?)")
	}
	return m, nil
}

// readGraph reads the GraphProto that ends at end.
func (m *ONNX) readGraph(p *pbReader, end int64) error {
	p.where = "the graph"
	for p.pos < end {
		start := p.pos
		num, typ, err := p.tag(end)
		if err != nil {
			return err
		}
		switch num {
		case onnxGraphInitializer:
			if err := p.want(start, num, "initializer", typ, protowire.BytesType); err != nil {
				return err
			}
			if len(m.tensors) >= m.limits.MaxTensors {
				return onnxErr(isLimit, "more than %d initializers", m.limits.MaxTensors)
			}
			n, err := p.length(end, "initializer")
			if err != nil {
				return err
			}
			if err := m.readTensor(p, p.pos+n); err != nil {
				return err
			}
			p.where = "the graph"
		case onnxGraphSparseInitializer:
			return onnxErr(isUnsupported, "the graph has sparse initializers, which are not supported")
		default:
			if err := p.skip(typ, end); err != nil {
				return err
			}
		}
	}
	return nil
}

// readTensor reads the TensorProto that ends at end and adds it to m.
func (m *ONNX) readTensor(p *pbReader, end int64) error {
	idx, recStart := len(m.tensors), p.pos
	p.where = fmt.Sprintf("initializer #%d", idx)
	t := onnxTensor{TensorInfo: TensorInfo{Shape: []int64{}}}
	var (
		dataType              uint64
		location              uint64
		seen                  uint64 // bit num: a field that may appear once was seen
		data                  *onnxDataField
		dataFields            int // data fields seen, raw_data included
		unpacked              string
		segment, external     bool
		hasName, hasDataType  bool
		dataBegin, dataLength int64
	)
	once := func(start int64, num protowire.Number, name string) error {
		if seen&(1<<num) != 0 {
			return p.corrupt(start, "a second %s field", name)
		}
		seen |= 1 << num
		return nil
	}
	for p.pos < end {
		start := p.pos
		num, typ, err := p.tag(end)
		if err != nil {
			return err
		}
		switch num {
		case onnxTensorDims:
			switch typ {
			case protowire.VarintType:
				if err := t.addDim(p, end, m.limits.MaxDims); err != nil {
					return err
				}
			case protowire.BytesType:
				n, err := p.length(end, "dims")
				if err != nil {
					return err
				}
				for e := p.pos + n; p.pos < e; {
					if err := t.addDim(p, e, m.limits.MaxDims); err != nil {
						return err
					}
				}
			default:
				return p.wrongType(start, num, "dims", typ)
			}
		case onnxTensorDataType:
			if err := p.want(start, num, "data_type", typ, protowire.VarintType); err != nil {
				return err
			}
			if err := once(start, num, "data_type"); err != nil {
				return err
			}
			if dataType, err = p.varint(end); err != nil {
				return err
			}
			hasDataType = true
		case onnxTensorName:
			if err := p.want(start, num, "name", typ, protowire.BytesType); err != nil {
				return err
			}
			if err := once(start, num, "name"); err != nil {
				return err
			}
			if t.Name, err = p.str(end, "name", m.limits.MaxNameLen); err != nil {
				return err
			}
			hasName = true
		case onnxTensorRawData:
			if err := p.want(start, num, "raw_data", typ, protowire.BytesType); err != nil {
				return err
			}
			if err := once(start, num, "raw_data"); err != nil {
				return err
			}
			n, err := p.length(end, "raw_data")
			if err != nil {
				return err
			}
			dataFields++
			dataBegin, dataLength = p.pos, n
			t.enc, t.field = encRaw, "raw_data"
			data = nil
			p.pos += n
		case onnxTensorFloatData, onnxTensorInt32Data, onnxTensorStringData,
			onnxTensorInt64Data, onnxTensorDoubleData, onnxTensorUint64Data:
			f := onnxDataFields[num]
			switch {
			case num == onnxTensorStringData:
				// Repeated bytes, one field per string: count it as a data
				// field once. No data type tensorpress has uses it.
				if err := p.want(start, num, f.name, typ, protowire.BytesType); err != nil {
					return err
				}
				if err := p.skip(typ, end); err != nil {
					return err
				}
				if seen&(1<<num) == 0 {
					seen |= 1 << num
					dataFields++
					data = f
				}
				continue
			case typ == f.unpacked:
				unpacked = f.name // refused once the tensor is named
				if err := p.skip(typ, end); err != nil {
					return err
				}
				continue
			case typ != protowire.BytesType:
				return p.wrongType(start, num, f.name, typ)
			}
			if err := once(start, num, f.name); err != nil {
				return err
			}
			n, err := p.length(end, f.name)
			if err != nil {
				return err
			}
			dataFields++
			dataBegin, dataLength = p.pos, n
			t.enc, t.field, data = f.enc, f.name, f
			p.pos += n
		case onnxTensorSegment:
			segment = true
			if err := p.skip(typ, end); err != nil {
				return err
			}
		case onnxTensorExternalData:
			external = true
			if err := p.skip(typ, end); err != nil {
				return err
			}
		case onnxTensorDataLocation:
			if err := p.want(start, num, "data_location", typ, protowire.VarintType); err != nil {
				return err
			}
			if err := once(start, num, "data_location"); err != nil {
				return err
			}
			if location, err = p.varint(end); err != nil {
				return err
			}
		default:
			if err := p.skip(typ, end); err != nil {
				return err
			}
		}
	}

	// The record is whole: check what it says, naming the tensor.
	if !hasName || t.Name == "" {
		return formatErr(fmtONNX, recStart, isCorrupt, "initializer #%d has no name", idx)
	}
	if !utf8.ValidString(t.Name) {
		return formatErr(fmtONNX, recStart, isCorrupt, "initializer #%d: name %q is not valid UTF-8", idx, t.Name)
	}
	if _, dup := m.index[t.Name]; dup {
		return formatErr(fmtONNX, recStart, isCorrupt, "duplicate initializer %q", t.Name)
	}
	what := fmt.Sprintf("tensor %q", t.Name)
	switch {
	case segment:
		return formatErr(fmtONNX, recStart, isUnsupported, "%s is a segment of a larger tensor, which is not supported", what)
	case external || location == onnxLocationExternal:
		return formatErr(fmtONNX, recStart, isUnsupported, "%s: external data (stored outside the model file) is not supported", what)
	case location != 0:
		return formatErr(fmtONNX, recStart, isUnsupported, "%s: unknown data_location %d", what, location)
	case !hasDataType || dataType == 0:
		return formatErr(fmtONNX, recStart, isCorrupt, "%s has no data_type", what)
	case dataType >= uint64(len(onnxDTypes)):
		return formatErr(fmtONNX, recStart, isUnsupported, "%s: unknown data_type %d", what, int64(dataType))
	case !onnxDTypes[dataType].ok:
		return formatErr(fmtONNX, recStart, isUnsupported, "%s: data_type %s is not supported (tensorpress has no such element type)", what, onnxDTypes[dataType].name)
	case unpacked != "":
		return formatErr(fmtONNX, recStart, isUnsupported, "%s: %s is not packed, which is not supported", what, unpacked)
	case dataFields > 1:
		return formatErr(fmtONNX, recStart, isCorrupt, "%s has more than one data field (raw_data or a typed *_data field)", what)
	}
	t.DType = onnxDTypes[dataType].dt
	dtName := onnxDTypes[dataType].name
	if data != nil && !slices.Contains(data.dtypes, t.DType) {
		return formatErr(fmtONNX, recStart, isCorrupt, "%s: %s does not hold %s values", what, data.name, dtName)
	}
	for _, d := range t.Shape {
		if d < 0 {
			return formatErr(fmtONNX, recStart, isCorrupt, "%s: negative dimension in dims %v", what, t.Shape)
		}
	}
	want, ok := byteSize(t.DType, t.Shape)
	if !ok {
		return formatErr(fmtONNX, recStart, isCorrupt, "%s: dims %v of %s overflow", what, t.Shape, dtName)
	}
	t.nbytes = want
	t.n = want / int64(t.DType.Size())
	if dataFields == 0 {
		// No data: a tensor of no elements. Its empty range sits at the
		// end of its record.
		if t.n != 0 {
			return formatErr(fmtONNX, recStart, isCorrupt, "%s: dims %v of %s need %d elements, but there is no data field", what, t.Shape, dtName, t.n)
		}
		dataBegin = end
		t.enc, t.field = encNone, ""
	}
	t.Begin, t.End = dataBegin, dataBegin+dataLength
	switch {
	case t.enc == encRaw && data == nil && dataLength != want:
		return formatErr(fmtONNX, recStart, isCorrupt, "%s: raw_data holds %d bytes, but dims %v of %s need %d", what, dataLength, t.Shape, dtName, want)
	case t.enc == encRaw && data != nil && dataLength != want:
		return formatErr(fmtONNX, recStart, isCorrupt, "%s: %s holds %d values, but dims %v need %d", what, data.name, dataLength/int64(data.width), t.Shape, t.n)
	case data != nil && data.width == 0 && (dataLength < t.n || (dataLength+9)/10 > t.n):
		// One varint is 1 to 10 bytes; Read counts them exactly.
		return formatErr(fmtONNX, recStart, isCorrupt, "%s: %s of %d bytes cannot hold the %d values dims %v need", what, data.name, dataLength, t.n, t.Shape)
	}
	m.index[t.Name] = idx
	m.tensors = append(m.tensors, t)
	return nil
}

// addDim reads one dimension, an int64 varint.
func (t *onnxTensor) addDim(p *pbReader, end int64, maxDims int) error {
	if len(t.Shape) >= maxDims {
		return formatErr(fmtONNX, p.pos, isLimit, "%s: more than %d dimensions", p.where, maxDims)
	}
	v, err := p.varint(end)
	if err != nil {
		return err
	}
	t.Shape = append(t.Shape, int64(v))
	return nil
}

// Producer is the model's producer_name ("pytorch", say), or "" when it
// has none.
func (m *ONNX) Producer() string { return m.producer }

// Tensors describes the initializers in file order. Begin and End are
// byte offsets in the file of the field that holds the data: raw_data, or
// the packed typed field (float_data, int32_data, ...), so Size is the
// bytes stored, which for varint-coded fields is not the bytes Read
// returns. A tensor with no data field has Begin == End at the end of its
// record. The slice is the caller's.
func (m *ONNX) Tensors() []TensorInfo {
	out := make([]TensorInfo, len(m.tensors))
	for i := range m.tensors {
		out[i] = m.tensors[i].TensorInfo
		out[i].Shape = slices.Clone(out[i].Shape)
	}
	return out
}

// Read reads the named initializer; see ReadIndex. A name the model lacks
// gives an error wrapping ErrNotFound.
func (m *ONNX) Read(name string) (*codec.Tensor, error) {
	return readNamed(m.index, name, m.ReadIndex)
}

// ReadIndex reads initializer i of file order into a new tensor whose Data
// is a fresh 8-byte aligned buffer owned by the caller, little-endian
// whatever field held it. Tensors over Limits.MaxTensorBytes are refused
// with codec.ErrLimit before allocating. Values of varint-coded fields are
// counted and range-checked (an INT8 in int32_data must fit in 8 bits, a
// BOOL must be 0 or 1): a mismatch is codec.ErrCorrupt. A file that turns
// out shorter than its size gives an error wrapping io.ErrUnexpectedEOF.
func (m *ONNX) ReadIndex(i int) (*codec.Tensor, error) {
	if i < 0 || i >= len(m.tensors) {
		return nil, fmt.Errorf("tensorfile: onnx: tensor index %d out of range [0, %d)", i, len(m.tensors))
	}
	t := &m.tensors[i]
	data, err := m.limits.alloc(fmtONNX, "tensor", t.Name, t.nbytes)
	if err != nil {
		return nil, err
	}
	switch t.enc {
	case encNone:
	case encRaw:
		if err := readFullAt(m.r, data, t.Begin); err != nil {
			return nil, fmt.Errorf("tensorfile: onnx: reading tensor %q: %w", t.Name, err)
		}
	default:
		if err := m.readVarints(t, data); err != nil {
			return nil, err
		}
	}
	return &codec.Tensor{Name: t.Name, DType: t.DType, Shape: slices.Clone(t.Shape), Data: data}, nil
}

// readVarints decodes the varint-coded field of t into data, one element
// per varint, checking each value's range and the count.
func (m *ONNX) readVarints(t *onnxTensor, data []byte) error {
	p := &pbReader{
		r: m.r, size: m.size, limit: t.End, pos: t.Begin, off: t.Begin,
		buf:   make([]byte, 0, min(onnxWindow, t.Size())),
		where: fmt.Sprintf("tensor %q: %s", t.Name, t.field),
	}
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64) // int32_data and int64_data values' range
	if t.enc == encInt32 {
		switch t.DType {
		case codec.I32:
			lo, hi = math.MinInt32, math.MaxInt32
		case codec.I16:
			lo, hi = math.MinInt16, math.MaxInt16
		case codec.I8:
			lo, hi = math.MinInt8, math.MaxInt8
		case codec.U16, codec.F16, codec.BF16:
			lo, hi = 0, math.MaxUint16
		case codec.U8:
			lo, hi = 0, math.MaxUint8
		case codec.Bool:
			lo, hi = 0, 1
		}
	}
	size := t.DType.Size()
	for k := int64(0); k < t.n; k++ {
		if p.pos == t.End {
			return onnxErr(isCorrupt, "tensor %q: %s holds %d values, but dims %v need %d", t.Name, t.field, k, t.Shape, t.n)
		}
		u, err := p.varint(t.End)
		if err != nil {
			return err
		}
		if t.enc == encUint64 {
			if t.DType == codec.U32 && u > math.MaxUint32 {
				return onnxErr(isCorrupt, "tensor %q: %s value %d (element %d) is out of range for %s", t.Name, t.field, u, k, t.DType)
			}
		} else if v := int64(u); v < lo || v > hi {
			return onnxErr(isCorrupt, "tensor %q: %s value %d (element %d) is out of range for %s", t.Name, t.field, v, k, t.DType)
		}
		b := data[k*int64(size):]
		switch size {
		case 1:
			b[0] = byte(u)
		case 2:
			binary.LittleEndian.PutUint16(b, uint16(u))
		case 4:
			binary.LittleEndian.PutUint32(b, uint32(u))
		default:
			binary.LittleEndian.PutUint64(b, u)
		}
	}
	if p.pos != t.End {
		return onnxErr(isCorrupt, "tensor %q: %s holds more than the %d values dims %v need", t.Name, t.field, t.n, t.Shape)
	}
	return nil
}

// ONNXFile is an ONNX model reading from a file it owns.
type ONNXFile struct {
	*ONNX
	f *os.File
}

// OpenONNXFile opens the file at path with OpenONNX. Close it when done.
func OpenONNXFile(path string, opts ...Option) (*ONNXFile, error) {
	m, f, err := openFile(path, func(r io.ReaderAt, size int64) (*ONNX, error) { return OpenONNX(r, size, opts...) })
	if err != nil {
		return nil, err
	}
	return &ONNXFile{ONNX: m, f: f}, nil
}

// Close closes the file.
func (f *ONNXFile) Close() error { return f.f.Close() }

// pbReader decodes protobuf wire format from an io.ReaderAt through a
// window of at most onnxWindow bytes, so that a model is walked without
// being read whole: a field skipped by its length is never read.
type pbReader struct {
	r     io.ReaderAt
	size  int64  // the file size
	limit int64  // the window never reaches at or past limit (<= size)
	buf   []byte // the window: file bytes [off, off+len(buf))
	off   int64
	pos   int64  // the next byte to decode
	where string // what is being decoded, for messages
}

// peek returns the bytes from pos on that the window holds, at least
// min(n, limit-pos) of them, moving the window when it holds fewer.
func (p *pbReader) peek(n int) ([]byte, error) {
	need := min(int64(n), p.limit-p.pos)
	if p.pos >= p.off && p.pos-p.off+need <= int64(len(p.buf)) {
		return p.buf[p.pos-p.off:], nil
	}
	b := p.buf[:min(int64(cap(p.buf)), p.limit-p.pos)]
	if err := readFullAt(p.r, b, p.pos); err != nil {
		p.buf = p.buf[:0]
		return nil, fmt.Errorf("tensorfile: onnx: reading %s at byte %d: %w", p.where, p.pos, err)
	}
	p.buf, p.off = b, p.pos
	return b, nil
}

func (p *pbReader) corrupt(off int64, msg string, args ...any) error {
	return formatErr(fmtONNX, off, isCorrupt, p.where+": "+msg, args...)
}

// pastEnd reports that what runs past end, the end of the message being
// decoded: past the end of the file, that is a truncated file.
func (p *pbReader) pastEnd(end int64, what string) error {
	if end >= p.size {
		return formatErr(fmtONNX, p.pos, isCutShort, "%s: %s runs past the end of the file (%d bytes)", p.where, what, p.size)
	}
	return formatErr(fmtONNX, p.pos, isCorrupt, "%s: %s runs past its end (byte %d)", p.where, what, end)
}

// varint reads a varint that ends before end.
func (p *pbReader) varint(end int64) (uint64, error) {
	b, err := p.peek(binary.MaxVarintLen64)
	if err != nil {
		return 0, err
	}
	if rem := end - p.pos; int64(len(b)) > rem {
		b = b[:rem]
	}
	v, n := protowire.ConsumeVarint(b)
	if n < 0 {
		if err := protowire.ParseError(n); !errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, p.corrupt(p.pos, "bad varint: %v", err)
		}
		return 0, p.pastEnd(end, "a varint")
	}
	p.pos += int64(n)
	return v, nil
}

// tag reads a field's tag: its number and wire type. Groups (wire types 3
// and 4, which ONNX does not use) and unknown wire types are refused.
func (p *pbReader) tag(end int64) (protowire.Number, protowire.Type, error) {
	start := p.pos
	v, err := p.varint(end)
	if err != nil {
		return 0, 0, err
	}
	num, typ := protowire.DecodeTag(v)
	if !num.IsValid() {
		return 0, 0, p.corrupt(start, "bad field number in tag %#x", v)
	}
	switch typ {
	case protowire.VarintType, protowire.Fixed32Type, protowire.Fixed64Type, protowire.BytesType:
		return num, typ, nil
	case protowire.StartGroupType, protowire.EndGroupType:
		return 0, 0, p.corrupt(start, "field %d is a group (wire type %d), which ONNX does not use", num, typ)
	}
	return 0, 0, p.corrupt(start, "field %d has unknown wire type %d", num, typ)
}

// want checks that the field num, called name, has wire type typ.
func (p *pbReader) want(start int64, num protowire.Number, name string, typ, want protowire.Type) error {
	if typ != want {
		return p.wrongType(start, num, name, typ)
	}
	return nil
}

func (p *pbReader) wrongType(start int64, num protowire.Number, name string, typ protowire.Type) error {
	return p.corrupt(start, "field %d (%s) has wire type %d", num, name, typ)
}

// length reads the length of a length-delimited field called what and
// checks that its bytes end by end.
func (p *pbReader) length(end int64, what string) (int64, error) {
	v, err := p.varint(end)
	if err != nil {
		return 0, err
	}
	if v > uint64(end-p.pos) {
		return 0, p.pastEnd(end, fmt.Sprintf("%s of %d bytes", what, v))
	}
	return int64(v), nil
}

// skip skips the value of a field of wire type typ.
func (p *pbReader) skip(typ protowire.Type, end int64) error {
	var n int64
	switch typ {
	case protowire.VarintType:
		_, err := p.varint(end)
		return err
	case protowire.Fixed32Type:
		n = 4
	case protowire.Fixed64Type:
		n = 8
	default: // BytesType: tag refuses the others
		var err error
		if n, err = p.length(end, "a field"); err != nil {
			return err
		}
	}
	if n > end-p.pos {
		return p.pastEnd(end, fmt.Sprintf("a %d-byte value", n))
	}
	p.pos += n
	return nil
}

// str reads a string field called what of at most max bytes, checked
// before it is read.
func (p *pbReader) str(end int64, what string, max int) (string, error) {
	n, err := p.length(end, what)
	if err != nil {
		return "", err
	}
	if n > int64(max) {
		return "", formatErr(fmtONNX, p.pos, isLimit, "%s: %s of %d bytes is over the limit of %d", p.where, what, n, max)
	}
	var s string
	if n <= int64(cap(p.buf)) {
		b, err := p.peek(int(n))
		if err != nil {
			return "", err
		}
		s = string(b[:n])
	} else {
		b := make([]byte, n)
		if err := readFullAt(p.r, b, p.pos); err != nil {
			return "", fmt.Errorf("tensorfile: onnx: reading %s at byte %d: %w", p.where, p.pos, err)
		}
		s = string(b)
	}
	p.pos += n
	return s, nil
}
