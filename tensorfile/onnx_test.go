package tensorfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tensorpress/tensorpress/codec"
)

// ONNX TensorProto.DataType codes used by the tests.
const (
	onnxFLOAT    = 1
	onnxUINT8    = 2
	onnxINT8     = 3
	onnxINT32    = 6
	onnxINT64    = 7
	onnxSTRING   = 8
	onnxBOOL     = 9
	onnxFLOAT16  = 10
	onnxDOUBLE   = 11
	onnxUINT32   = 12
	onnxBFLOAT16 = 16
	onnxFLOAT8   = 17
)

// Protobuf field builders.

func pbVarint(num protowire.Number, v uint64) []byte {
	b := protowire.AppendTag(nil, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func pbBytes(num protowire.Number, v []byte) []byte {
	b := protowire.AppendTag(nil, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func pbPackedVarints(num protowire.Number, vals ...uint64) []byte {
	var p []byte
	for _, v := range vals {
		p = protowire.AppendVarint(p, v)
	}
	return pbBytes(num, p)
}

// Tensor fields.

func tDims(dims ...int64) []byte { // unpacked, as onnx.proto declares dims
	var b []byte
	for _, d := range dims {
		b = append(b, pbVarint(onnxTensorDims, uint64(d))...)
	}
	return b
}

func tDimsPacked(dims ...int64) []byte {
	vals := make([]uint64, len(dims))
	for i, d := range dims {
		vals[i] = uint64(d)
	}
	return pbPackedVarints(onnxTensorDims, vals...)
}

func tType(code uint64) []byte { return pbVarint(onnxTensorDataType, code) }
func tName(s string) []byte    { return pbBytes(onnxTensorName, []byte(s)) }
func tRaw(b []byte) []byte     { return pbBytes(onnxTensorRawData, b) }

func tInt32s(vals ...int32) []byte {
	u := make([]uint64, len(vals))
	for i, v := range vals {
		u[i] = uint64(int64(v)) // int32 varints are sign-extended
	}
	return pbPackedVarints(onnxTensorInt32Data, u...)
}

func tInt64s(vals ...int64) []byte {
	u := make([]uint64, len(vals))
	for i, v := range vals {
		u[i] = uint64(v)
	}
	return pbPackedVarints(onnxTensorInt64Data, u...)
}

func tFloats(vals ...float32) []byte {
	var p []byte
	for _, v := range vals {
		p = binary.LittleEndian.AppendUint32(p, math.Float32bits(v))
	}
	return pbBytes(onnxTensorFloatData, p)
}

func tDoubles(vals ...float64) []byte {
	var p []byte
	for _, v := range vals {
		p = binary.LittleEndian.AppendUint64(p, math.Float64bits(v))
	}
	return pbBytes(onnxTensorDoubleData, p)
}

func onnxCat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// onnxTensorProto is a TensorProto of the given fields, in order.
func onnxTensorProto(fields ...[]byte) []byte { return onnxCat(fields...) }

// onnxModelParts builds a ModelProto the way exporters lay it out, with
// fields the reader must skip at each level: ir_version, producer_name,
// producer_version, doc_string, the graph (nodes, its name, the
// initializers, doc_string, inputs) and opset_import after it. It returns
// the model and the offset where the graph field ends.
func onnxModelParts(producer string, inits ...[]byte) ([]byte, int) {
	node := onnxCat(pbBytes(1, []byte("x")), pbBytes(2, []byte("y")), pbBytes(4, []byte("Relu")))
	graph := onnxCat(pbBytes(1, node), pbBytes(1, node), pbBytes(2, []byte("main_graph")))
	for _, t := range inits {
		graph = append(graph, pbBytes(onnxGraphInitializer, t)...)
	}
	graph = onnxCat(graph, pbBytes(10, []byte("graph doc")), pbBytes(11, pbBytes(1, []byte("x"))))
	m := pbVarint(1, 8)
	if producer != "" {
		m = append(m, pbBytes(onnxModelProducer, []byte(producer))...)
	}
	m = onnxCat(m, pbBytes(3, []byte("2.1.0")), pbBytes(6, []byte("model doc")), pbBytes(onnxModelGraph, graph))
	graphEnd := len(m)
	opset := onnxCat(pbBytes(1, nil), pbVarint(2, 17))
	return onnxCat(m, pbBytes(8, opset)), graphEnd
}

func onnxModel(producer string, inits ...[]byte) []byte {
	m, _ := onnxModelParts(producer, inits...)
	return m
}

func openONNXBytes(b []byte, opts ...Option) (*ONNX, error) {
	return OpenONNX(bytes.NewReader(b), int64(len(b)), opts...)
}

// tensorOf makes a tensor of the given little-endian data.
func onnxTensorOf(name string, dt codec.DType, data []byte, shape ...int64) *codec.Tensor {
	t := codec.NewTensor(name, dt, shape...)
	copy(t.Data, data)
	return t
}

func onnxLE16(vals ...uint16) []byte {
	var b []byte
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint16(b, v)
	}
	return b
}

func onnxLE32(vals ...uint32) []byte {
	var b []byte
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return b
}

func onnxLE64(vals ...uint64) []byte {
	var b []byte
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}

// onnxGood is a model of every storage the reader takes, and the tensors it
// holds, in file order.
func onnxGood() ([]byte, []*codec.Tensor) {
	f32 := onnxLE32(math.Float32bits(1.5), math.Float32bits(-2), 0, math.Float32bits(float32(math.Inf(1))), 7, 8)
	f16 := onnxLE16(0x3c00, 0xc000, 0x7c00)
	inits := [][]byte{
		onnxTensorProto(tDims(2, 3), tType(onnxFLOAT), tName("w.f32"), tRaw(f32)),
		onnxTensorProto(tDims(3), tType(onnxFLOAT16), tName("w.f16"), tRaw(f16), pbBytes(12, []byte("doc"))),
		onnxTensorProto(tDimsPacked(2, 2), tType(onnxBFLOAT16), tInt32s(0x3f80, 0xbf80, 0x7fc0, 0), tName("w.bf16")),
		onnxTensorProto(tDims(4), tType(onnxINT64), tInt64s(-1, 0, math.MaxInt64, math.MinInt64), tName("shape.i64")),
		onnxTensorProto(tType(onnxFLOAT), tDims(1, 2), tFloats(0.25, -3), tName("f.floats")),
		onnxTensorProto(tDims(2), tType(onnxDOUBLE), tName("d"), tDoubles(math.Pi, -1)),
		onnxTensorProto(tDims(3), tType(onnxINT8), tName("i8"), tInt32s(-128, 0, 127)),
		onnxTensorProto(tDims(2), tType(onnxUINT8), tName("u8"), tInt32s(0, 255)),
		onnxTensorProto(tDims(2), tType(onnxBOOL), tName("b"), tInt32s(1, 0)),
		onnxTensorProto(tDims(2), tType(onnxINT32), tName("i32"), tInt32s(math.MinInt32, math.MaxInt32)),
		onnxTensorProto(tDims(2), tType(onnxUINT32), tName("u32"), pbPackedVarints(onnxTensorUint64Data, 0, math.MaxUint32)),
		onnxTensorProto(tType(onnxINT64), tName("scalar"), tInt64s(42)), // no dims: a scalar
		onnxTensorProto(tDims(0, 3), tType(onnxFLOAT), tName("empty")),
		onnxTensorProto(tDims(2, 0), tType(onnxFLOAT16), tName("empty.raw"), tRaw(nil),
			pbBytes(16, onnxCat(pbBytes(1, []byte("k")), pbBytes(2, []byte("v"))))), // metadata_props
		// Unknown fields of every wire type are skipped.
		onnxTensorProto(tName("unknown.fields"), tType(onnxUINT8), tDims(1),
			protowire.AppendFixed32(protowire.AppendTag(nil, 100, protowire.Fixed32Type), 7),
			protowire.AppendFixed64(protowire.AppendTag(nil, 101, protowire.Fixed64Type), 7),
			pbVarint(102, 1<<63), pbBytes(103, []byte("zz")), tRaw([]byte{9})),
	}
	want := []*codec.Tensor{
		onnxTensorOf("w.f32", codec.F32, f32, 2, 3),
		onnxTensorOf("w.f16", codec.F16, f16, 3),
		onnxTensorOf("w.bf16", codec.BF16, onnxLE16(0x3f80, 0xbf80, 0x7fc0, 0), 2, 2),
		onnxTensorOf("shape.i64", codec.I64, onnxLE64(math.MaxUint64, 0, math.MaxInt64, 1<<63), 4),
		onnxTensorOf("f.floats", codec.F32, onnxLE32(math.Float32bits(0.25), math.Float32bits(-3)), 1, 2),
		onnxTensorOf("d", codec.F64, onnxLE64(math.Float64bits(math.Pi), math.Float64bits(-1)), 2),
		onnxTensorOf("i8", codec.I8, []byte{0x80, 0, 0x7f}, 3),
		onnxTensorOf("u8", codec.U8, []byte{0, 255}, 2),
		onnxTensorOf("b", codec.Bool, []byte{1, 0}, 2),
		onnxTensorOf("i32", codec.I32, onnxLE32(1<<31, math.MaxInt32), 2),
		onnxTensorOf("u32", codec.U32, onnxLE32(0, math.MaxUint32), 2),
		onnxTensorOf("scalar", codec.I64, onnxLE64(42)),
		onnxTensorOf("empty", codec.F32, nil, 0, 3),
		onnxTensorOf("empty.raw", codec.F16, nil, 2, 0),
		onnxTensorOf("unknown.fields", codec.U8, []byte{9}, 1),
	}
	// Skipped fields in the graph and the model between initializers.
	return onnxModel("pytorch", inits...), want
}

func TestONNXRead(t *testing.T) {
	file, want := onnxGood()
	m, err := openONNXBytes(file)
	if err != nil {
		t.Fatal(err)
	}
	if m.Producer() != "pytorch" {
		t.Errorf("Producer() = %q", m.Producer())
	}
	infos := m.Tensors()
	if len(infos) != len(want) {
		t.Fatalf("%d tensors, want %d", len(infos), len(want))
	}
	for i, w := range want {
		ti := infos[i]
		if ti.Name != w.Name || ti.DType != w.DType || !slices.Equal(ti.Shape, w.Shape) {
			t.Errorf("Tensors()[%d] = %+v, want %q %v %v", i, ti, w.Name, w.DType, w.Shape)
		}
		if ti.Begin < 0 || ti.Begin > ti.End || ti.End > int64(len(file)) {
			t.Errorf("%q: Begin, End = %d, %d in a file of %d bytes", ti.Name, ti.Begin, ti.End, len(file))
		}
		got, err := m.ReadIndex(i)
		if err != nil {
			t.Fatalf("ReadIndex(%d): %v", i, err)
		}
		sameTensor(t, w.Name, w, got)
		got, err = m.Read(w.Name)
		if err != nil {
			t.Fatalf("Read(%q): %v", w.Name, err)
		}
		sameTensor(t, w.Name, w, got)
	}
	// raw_data and float_data ranges are the stored little-endian bytes.
	for _, i := range []int{0, 1, 4, 5} {
		if ti := infos[i]; !bytes.Equal(file[ti.Begin:ti.End], want[i].Data) {
			t.Errorf("%q: file[Begin:End] is not its data", ti.Name)
		}
	}
	// Tensors returns copies.
	infos[0].Shape[0] = 99
	if m.Tensors()[0].Shape[0] != 2 {
		t.Error("Tensors shares its shapes")
	}
	if _, err := m.Read("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Read(unknown) = %v, want ErrNotFound", err)
	}
	for _, i := range []int{-1, len(want)} {
		if _, err := m.ReadIndex(i); err == nil {
			t.Errorf("ReadIndex(%d): no error", i)
		}
	}
}

func TestONNXNoProducerNoInitializers(t *testing.T) {
	m, err := openONNXBytes(onnxModel(""))
	if err != nil {
		t.Fatal(err)
	}
	if m.Producer() != "" || len(m.Tensors()) != 0 {
		t.Fatalf("Producer %q, %d tensors; want none", m.Producer(), len(m.Tensors()))
	}
}

func TestOpenONNXFile(t *testing.T) {
	file, want := onnxGood()
	path := filepath.Join(t.TempDir(), "m.onnx")
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := OpenONNXFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.Read(want[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	sameTensor(t, "file", want[0], got)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenONNXFile(filepath.Join(t.TempDir(), "missing.onnx")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if err := os.WriteFile(path, file[:len(file)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenONNXFile(path); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated file: %v", err)
	}
}

// onnxBadCase is a model the reader must refuse.
type onnxBadCase struct {
	name   string
	file   []byte
	limits Limits
	want   []error
	substr string
}

func onnxBadCases() []onnxBadCase {
	f32x2 := tRaw(make([]byte, 8))
	good := func(name string) []byte { return onnxTensorProto(tDims(2), tType(onnxFLOAT), tName(name), f32x2) }
	model := onnxModel
	graphOnly := func(graph []byte) []byte { return pbBytes(onnxModelGraph, graph) }
	return []onnxBadCase{
		{"empty file", nil, Limits{}, isCorrupt, "no graph"},
		{"no graph", pbVarint(1, 8), Limits{}, isCorrupt, "no graph"},
		{"graph length past end", append(protowire.AppendTag(nil, onnxModelGraph, protowire.BytesType), 100, 1, 2), Limits{}, isCutShort, "past the end of the file"},
		{"initializer length past graph", onnxCat(graphOnly(onnxCat(protowire.AppendTag(nil, onnxGraphInitializer, protowire.BytesType), []byte{50, 1}, pbBytes(1, nil))), pbBytes(6, make([]byte, 60))), Limits{}, isCorrupt, "initializer of 50 bytes runs past its end"},
		{"raw_data length past tensor", model("", onnxCat(tName("a"), tType(onnxFLOAT), []byte{0x4a, 40}, make([]byte, 8))), Limits{}, isCorrupt, "raw_data of 40 bytes runs past its end"},
		{"truncated varint", append(pbVarint(1, 8), 0x80), Limits{}, isCutShort, "varint"},
		{"varint overflow", append(pbVarint(1, 8), 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f), Limits{}, isCorrupt, "bad varint"},
		{"field number 0", []byte{0x02, 0x00}, Limits{}, isCorrupt, "bad field number"},
		{"group", onnxCat(protowire.AppendTag(nil, 9, protowire.StartGroupType)), Limits{}, isCorrupt, "group"},
		{"wire type 7", []byte{0x0f}, Limits{}, isCorrupt, "unknown wire type"},
		{"graph as varint", pbVarint(onnxModelGraph, 1), Limits{}, isCorrupt, "(graph) has wire type 0"},
		{"two graphs", onnxCat(graphOnly(nil), graphOnly(nil)), Limits{}, isCorrupt, "second graph"},
		{"two producers", onnxCat(pbBytes(2, []byte("a")), pbBytes(2, []byte("b")), graphOnly(nil)), Limits{}, isCorrupt, "second producer_name"},
		{"external data", model("", onnxCat(good("w"), pbBytes(onnxTensorExternalData, pbBytes(1, []byte("location"))))), Limits{}, isUnsupported, `tensor "w": external data`},
		{"data_location EXTERNAL", model("", onnxTensorProto(tDims(2), tType(onnxFLOAT), tName("w"), pbVarint(onnxTensorDataLocation, 1))), Limits{}, isUnsupported, "external data"},
		{"data_location 5", model("", onnxCat(good("w"), pbVarint(onnxTensorDataLocation, 5))), Limits{}, isUnsupported, "data_location 5"},
		{"segment", model("", onnxCat(good("w"), pbBytes(onnxTensorSegment, pbVarint(1, 0)))), Limits{}, isUnsupported, "segment"},
		{"sparse initializer", graphOnly(pbBytes(onnxGraphSparseInitializer, nil)), Limits{}, isUnsupported, "sparse"},
		{"string dtype", model("", onnxTensorProto(tDims(1), tType(onnxSTRING), tName("s"), pbBytes(onnxTensorStringData, []byte("x")))), Limits{}, isUnsupported, "STRING"},
		{"float8 dtype", model("", onnxTensorProto(tDims(1), tType(onnxFLOAT8), tName("w"), tRaw([]byte{1}))), Limits{}, isUnsupported, "FLOAT8E4M3FN"},
		{"unknown dtype", model("", onnxTensorProto(tDims(1), tType(99), tName("w"), tRaw([]byte{1}))), Limits{}, isUnsupported, "unknown data_type 99"},
		{"no dtype", model("", onnxTensorProto(tDims(1), tName("w"), tRaw([]byte{1}))), Limits{}, isCorrupt, "no data_type"},
		{"no name", model("", onnxTensorProto(tDims(2), tType(onnxFLOAT), f32x2)), Limits{}, isCorrupt, "initializer #0 has no name"},
		{"empty name", model("", onnxTensorProto(tDims(2), tType(onnxFLOAT), tName(""), f32x2)), Limits{}, isCorrupt, "has no name"},
		{"bad UTF-8 name", model("", onnxTensorProto(tDims(2), tType(onnxFLOAT), tName("a\xff"), f32x2)), Limits{}, isCorrupt, "UTF-8"},
		{"duplicate name", model("", good("w"), good("w")), Limits{}, isCorrupt, `duplicate initializer "w"`},
		{"second name", model("", onnxCat(good("w"), tName("v"))), Limits{}, isCorrupt, "second name"},
		{"second data_type", model("", onnxCat(good("w"), tType(onnxFLOAT))), Limits{}, isCorrupt, "second data_type"},
		{"second raw_data", model("", onnxCat(good("w"), f32x2)), Limits{}, isCorrupt, "second raw_data"},
		{"second float_data", model("", onnxTensorProto(tDims(2), tType(onnxFLOAT), tName("w"), tFloats(1), tFloats(2))), Limits{}, isCorrupt, "second float_data"},
		{"raw_data and float_data", model("", onnxCat(good("w"), tFloats(1, 2))), Limits{}, isCorrupt, "more than one data field"},
		{"unpacked float_data", model("", onnxTensorProto(tDims(1), tType(onnxFLOAT), tName("w"), protowire.AppendFixed32(protowire.AppendTag(nil, onnxTensorFloatData, protowire.Fixed32Type), 0))), Limits{}, isUnsupported, "not packed"},
		{"float_data as varint", model("", onnxTensorProto(tDims(1), tType(onnxFLOAT), tName("w"), pbVarint(onnxTensorFloatData, 0))), Limits{}, isCorrupt, "(float_data) has wire type 0"},
		{"dims as fixed64", model("", onnxTensorProto(protowire.AppendFixed64(protowire.AppendTag(nil, onnxTensorDims, protowire.Fixed64Type), 1), tType(onnxFLOAT), tName("w"))), Limits{}, isCorrupt, "(dims) has wire type 1"},
		{"int64_data for FLOAT", model("", onnxTensorProto(tDims(1), tType(onnxFLOAT), tName("w"), tInt64s(1))), Limits{}, isCorrupt, "int64_data does not hold FLOAT"},
		{"raw size mismatch", model("", onnxTensorProto(tDims(3), tType(onnxFLOAT), tName("w"), f32x2)), Limits{}, isCorrupt, "raw_data holds 8 bytes, but dims [3] of FLOAT need 12"},
		{"float_data count", model("", onnxTensorProto(tDims(3), tType(onnxFLOAT), tName("w"), tFloats(1, 2))), Limits{}, isCorrupt, "float_data holds 2 values"},
		{"float_data ragged", model("", onnxTensorProto(tDims(1), tType(onnxFLOAT), tName("w"), pbBytes(onnxTensorFloatData, []byte{1, 2, 3}))), Limits{}, isCorrupt, "float_data holds 0 values"},
		{"int64_data too short", model("", onnxTensorProto(tDims(3), tType(onnxINT64), tName("w"), tInt64s(1, 2))), Limits{}, isCorrupt, "cannot hold the 3 values"},
		{"no data", model("", onnxTensorProto(tDims(2), tType(onnxFLOAT), tName("w"))), Limits{}, isCorrupt, "no data field"},
		{"negative dim", model("", onnxTensorProto(tDims(-2), tType(onnxFLOAT), tName("w"), f32x2)), Limits{}, isCorrupt, "negative dimension"},
		{"dims overflow", model("", onnxTensorProto(tDims(1<<40, 1<<40), tType(onnxFLOAT), tName("w"), f32x2)), Limits{}, isCorrupt, "overflow"},
		{"too many tensors", model("", good("a"), good("b"), good("c")), Limits{MaxTensors: 2}, isLimit, "more than 2 initializers"},
		{"too many dims", model("", onnxTensorProto(tDims(1, 1, 1, 2), tType(onnxFLOAT), tName("w"), f32x2)), Limits{MaxDims: 3}, isLimit, "more than 3 dimensions"},
		{"too many packed dims", model("", onnxTensorProto(tDimsPacked(1, 1, 1, 2), tType(onnxFLOAT), tName("w"), f32x2)), Limits{MaxDims: 3}, isLimit, "more than 3 dimensions"},
		{"name too long", model("", good("abcdef")), Limits{MaxNameLen: 5}, isLimit, "name of 6 bytes is over the limit of 5"},
		{"producer too long", model("abcdef"), Limits{MaxNameLen: 5}, isLimit, "producer_name of 6 bytes"},
	}
}

func TestONNXErrors(t *testing.T) {
	for _, c := range onnxBadCases() {
		_, err := openONNXBytes(c.file, WithLimits(c.limits))
		checkErr(t, c.name, err, c.want, c.substr)
	}
}

// TestONNXReadErrors checks what only Read finds: varint counts and ranges,
// and MaxTensorBytes.
func TestONNXReadErrors(t *testing.T) {
	for _, c := range []struct {
		name   string
		tensor []byte
		limits Limits
		want   []error
		substr string
	}{
		{"int64_data too few", onnxTensorProto(tDims(2), tType(onnxINT64), tName("w"), pbPackedVarints(onnxTensorInt64Data, 1<<62)), Limits{}, isCorrupt, "int64_data holds 1 values, but dims [2] need 2"},
		{"int64_data too many", onnxTensorProto(tDims(2), tType(onnxINT64), tName("w"), tInt64s(1, 2, 3)), Limits{}, isCorrupt, "holds more than the 2 values"},
		{"int64_data cut varint", onnxTensorProto(tDims(2), tType(onnxINT64), tName("w"), pbBytes(onnxTensorInt64Data, []byte{1, 0x80})), Limits{}, isCorrupt, "varint runs past its end"},
		{"int8 out of range", onnxTensorProto(tDims(2), tType(onnxINT8), tName("w"), tInt32s(1, 128)), Limits{}, isCorrupt, "value 128 (element 1) is out of range for i8"},
		{"uint8 negative", onnxTensorProto(tDims(1), tType(onnxUINT8), tName("w"), tInt32s(-1)), Limits{}, isCorrupt, "out of range for u8"},
		{"bool 2", onnxTensorProto(tDims(1), tType(onnxBOOL), tName("w"), tInt32s(2)), Limits{}, isCorrupt, "out of range for bool"},
		{"float16 over 16 bits", onnxTensorProto(tDims(1), tType(onnxFLOAT16), tName("w"), tInt32s(1<<16)), Limits{}, isCorrupt, "out of range for f16"},
		{"int32 not sign-extended", onnxTensorProto(tDims(1), tType(onnxINT32), tName("w"), pbPackedVarints(onnxTensorInt32Data, 1<<32-1)), Limits{}, isCorrupt, "out of range for i32"},
		{"uint32 over 32 bits", onnxTensorProto(tDims(1), tType(onnxUINT32), tName("w"), pbPackedVarints(onnxTensorUint64Data, 1<<32)), Limits{}, isCorrupt, "value 4294967296 (element 0) is out of range for u32"},
		{"over MaxTensorBytes", onnxTensorProto(tDims(3), tType(onnxFLOAT), tName("w"), tFloats(1, 2, 3)), Limits{MaxTensorBytes: 11}, isLimit, "12 bytes is over the limit of 11"},
	} {
		m, err := openONNXBytes(onnxModel("", c.tensor), WithLimits(c.limits))
		if err != nil {
			t.Fatalf("%s: open: %v", c.name, err)
		}
		_, err = m.Read("w")
		checkErr(t, c.name, err, c.want, c.substr)
	}
}

// TestONNXTruncated cuts the model at every byte: up to the end of the
// graph every cut is an error; after it (opset_import follows) a cut at a
// field boundary is a valid model of the same tensors. A reader shorter
// than the size it is opened with fails with io.ErrUnexpectedEOF, on open
// or on read.
func TestONNXTruncated(t *testing.T) {
	inits := [][]byte{
		onnxTensorProto(tDims(2), tType(onnxFLOAT), tName("a"), tRaw(onnxLE32(1, 2))),
		onnxTensorProto(tDims(2), tType(onnxINT64), tName("b"), tInt64s(-1, 300)),
	}
	file, graphEnd := onnxModelParts("pytorch", inits...)
	whole, err := openONNXBytes(file)
	if err != nil {
		t.Fatal(err)
	}
	for cut := range len(file) {
		m, err := openONNXBytes(file[:cut])
		if err != nil {
			if !wrapsSentinel(err) {
				t.Fatalf("cut at %d: error wraps no sentinel: %v", cut, err)
			}
			continue
		}
		if cut < graphEnd {
			t.Fatalf("cut at %d of %d (graph ends at %d): no error", cut, len(file), graphEnd)
		}
		if !slices.EqualFunc(m.Tensors(), whole.Tensors(), onnxSameInfo) {
			t.Fatalf("cut at %d: tensors %v, want %v", cut, m.Tensors(), whole.Tensors())
		}
	}
	for cut := range len(file) {
		m, err := OpenONNX(bytes.NewReader(file[:cut]), int64(len(file)))
		if err == nil {
			for i := range m.Tensors() {
				if _, err = m.ReadIndex(i); err != nil {
					break
				}
			}
		}
		if cut < graphEnd && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("reader cut at %d: %v, want io.ErrUnexpectedEOF", cut, err)
		}
	}
}

func onnxSameInfo(a, b TensorInfo) bool {
	return a.Name == b.Name && a.DType == b.DType && slices.Equal(a.Shape, b.Shape) && a.Begin == b.Begin && a.End == b.End
}

// TestONNXRealFile opens an fp16 model exported by PyTorch when it is
// there (it is not committed): the one 'codec-bench run --weights' puts
// together in the user's cache.
func TestONNXRealFile(t *testing.T) {
	path := filepath.Join(weightsCache(), "imgly-background-removal-data-1.4.5", "medium.onnx")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s: %v", path, err)
	}
	start := time.Now()
	f, err := OpenONNXFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	opened := time.Since(start)
	infos := f.Tensors()
	var total int64
	for _, ti := range infos {
		if ti.DType != codec.F16 {
			t.Errorf("%q: dtype %v, want f16", ti.Name, ti.DType)
		}
		total += ti.Size()
	}
	t.Logf("opened in %v: %d initializers, %d bytes of data, producer %q", opened, len(infos), total, f.Producer())
	if len(infos) != 238 || total != 88_035_980 || f.Producer() != "pytorch" {
		t.Fatalf("%d initializers, %d bytes, producer %q; want 238, 88035980, \"pytorch\"", len(infos), total, f.Producer())
	}
	for _, i := range []int{0, len(infos) / 2, len(infos) - 1} {
		x, err := f.ReadIndex(i)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(x.Data)) != infos[i].Size() || x.NumBytes() != infos[i].Size() {
			t.Fatalf("%q: %d bytes, want %d", x.Name, len(x.Data), infos[i].Size())
		}
		y, err := f.Read(x.Name)
		if err != nil {
			t.Fatal(err)
		}
		sameTensor(t, x.Name, x, y)
	}
}

// onnxFuzzLimits keep the fuzzer's allocations small.
var onnxFuzzLimits = WithLimits(Limits{MaxTensors: 64, MaxDims: 8, MaxNameLen: 64, MaxTensorBytes: 1 << 16})

// FuzzOpenONNX opens any input and reads every tensor. It must not panic,
// must fail only with the package's errors, and what it reads must match
// what Tensors describes.
func FuzzOpenONNX(f *testing.F) {
	good, _ := onnxGood()
	f.Add(good)
	for _, c := range onnxBadCases() {
		f.Add(c.file)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := openONNXBytes(data, onnxFuzzLimits)
		if err != nil {
			if !wrapsSentinel(err) {
				t.Fatalf("error wraps no sentinel: %v", err)
			}
			return
		}
		for i, ti := range m.Tensors() {
			if ti.Begin < 0 || ti.Begin > ti.End || ti.End > int64(len(data)) || ti.Name == "" {
				t.Fatalf("tensor %d: %+v in %d bytes", i, ti, len(data))
			}
			x, err := m.ReadIndex(i)
			if err != nil {
				if !wrapsSentinel(err) {
					t.Fatalf("tensor %q: error wraps no sentinel: %v", ti.Name, err)
				}
				continue
			}
			if err := x.Validate(); err != nil || !x.IsWhole() || x.Name != ti.Name || x.DType != ti.DType || !slices.Equal(x.Shape, ti.Shape) {
				t.Fatalf("tensor %q: read %q %v %v %d bytes (%v)", ti.Name, x.Name, x.DType, x.Shape, len(x.Data), err)
			}
		}
	})
}
