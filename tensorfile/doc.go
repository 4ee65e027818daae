// Package tensorfile reads and writes the tensor files of the wider world,
// safetensors and numpy's .npy, and reads the weights of ONNX models and
// TensorFlow.js graph models, as codec.Tensor values.
//
// # Safetensors
//
// OpenSafetensors (OpenSafetensorsFile for a path) reads and validates the
// header of a file through an io.ReaderAt; Safetensors.Read and ReadIndex
// read one tensor, Section streams one. NewSafetensorsWriter writes the
// header and then takes the tensors' bytes as a stream; WriteSafetensors
// writes whole tensors at once.
//
// The reader checks, and refuses with an error naming the problem and the
// tensor:
//
//   - the header length against the file size and Limits.MaxHeaderSize;
//   - the header: valid UTF-8, starting with '{', one JSON object and
//     nothing after it but whitespace (the reference writer's padding is
//     spaces), no duplicate key anywhere (encoding/json would keep the
//     last one silently; the reader walks the tokens instead);
//   - "__metadata__": an object whose values are all strings (or null,
//     which the reference also reads as no metadata);
//   - each tensor entry: exactly the fields dtype, shape and data_offsets;
//     a dtype tensorpress has (BOOL U8 I8 I16 U16 F16 BF16 I32 U32 F32 F64
//     I64 U64; F8_E5M2, F8_E4M3, F8_E8M0, F4, F6_*, C64 and unknown names
//     are refused with codec.ErrUnsupported); non-negative integer
//     dimensions; data_offsets of two integers with begin <= end and
//     end-begin equal to the element size times the product of the shape,
//     computed without overflow;
//   - the layout: sorted by offset, each tensor begins where the previous
//     ended, the first at 0, the last at the end of the file: no hole, no
//     overlap, no trailing bytes, nothing past the end;
//   - Limits: tensors, dimensions, name and metadata key lengths.
//
// Errors are *FormatError values that wrap codec.ErrCorrupt,
// codec.ErrUnsupported, codec.ErrLimit or io.ErrUnexpectedEOF (a tensor that
// reaches past the end of the file wraps both ErrCorrupt and
// ErrUnexpectedEOF). Texts start with "tensorfile: ". Bad input never
// panics.
//
// # Canonical safetensors layout
//
// A file is canonical when it is byte for byte what WriteSafetensors writes
// for its tensors and metadata; Safetensors.Canonical tells. That is the
// layout of the reference writer, huggingface/safetensors
// (safetensors/src/tensor.rs, prepare and Metadata's Serialize; the Python
// save_file functions call it):
//
//   - tensors sorted by dtype, descending in the order of the reference's
//     Dtype enum (U64 I64 F64 F32 U32 I32 BF16 F16 U16 I16 I8 U8 BOOL for
//     the dtypes here), then by name ascending, bytewise; their data back
//     to back from offset 0 in that order;
//   - the header is serde_json's compact output: "__metadata__" first when
//     there is metadata (an empty map gives "__metadata__":{}, nil gives
//     none), then the tensors in data order, each as
//     {"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}; strings escape
//     only '"', '\\' and control characters (\b \t \n \f \r by name, others
//     as \u00xx), leaving '/', DEL and non-ASCII as they are;
//   - padded with spaces to a multiple of 8 bytes.
//
// One difference is unavoidable: the reference keeps metadata in a Rust
// HashMap, so with two or more keys its order is random per process; this
// package writes metadata keys sorted. A file that is not canonical (other
// key orders, whitespace, another tensor order, such metadata) is still
// reproduced byte for byte by NewSafetensorsWriterFromHeader with
// Safetensors.RawHeader and the data in file order; WithKeepOrder keeps a
// given tensor order. The reference's own golden bytes are in this
// package's tests.
//
// # npy
//
// ReadNpy reads one array from an io.Reader, reading exactly the preamble
// and the data it announces; ReadNpyHeader reads only the preamble. The
// header dict is parsed by a small strict parser (no eval): keys in any
// order, a trailing comma or none, True/False, tuples (), (5,), (2, 3).
// Versions 1.0, 2.0 and 3.0 are read, with descr f2 f4 f8 i1 i2 i4 i8 u1
// u2 u4 u8 b1, little-endian ('<'; '|' and '=' are taken as little-endian,
// the host order tensorpress requires). Refused: big-endian ('>'),
// fortran_order True, object, structured, complex, string and datetime
// dtypes, bad dict syntax, negative dimensions, shapes whose byte size
// overflows, headers over Limits.MaxNpyHeaderSize, data over
// Limits.MaxTensorBytes; input that ends early gives io.ErrUnexpectedEOF.
//
// WriteNpy writes what np.save (numpy 1.24 and later) writes for the same
// array, header padding included, so a numpy-written file round-trips byte
// for byte (NpyHeader.Canonical; pass WithNpyVersion(h.Major) for files in
// version 2.0 or 3.0). Files of other writers (16-byte alignment, other
// key order) are read but written back in numpy's form.
//
// # ONNX
//
// OpenONNX (OpenONNXFile for a path) reads the initializers of an ONNX
// model's main graph through an io.ReaderAt. It walks the protobuf wire
// format down ModelProto.graph and GraphProto.initializer, skipping nodes
// and every other field by length, so the file is never read whole and
// tensor data only by ONNX.Read and ReadIndex. raw_data, float_data and
// double_data are returned as stored; int32_data (FLOAT16 and BFLOAT16 bit
// patterns included), int64_data and uint64_data are decoded, counted and
// range-checked. Read: FLOAT DOUBLE FLOAT16 BFLOAT16 INT8 INT16 INT32 INT64
// UINT8 UINT16 UINT32 UINT64 BOOL. Refused with codec.ErrUnsupported: STRING,
// complex, 8-, 4- and 2-bit types, external data, segments, unpacked data
// fields and sparse initializers. Refused as corrupt: malformed protobuf,
// lengths past their message or the file, a repeated graph, name, data_type
// or data field, unnamed or duplicate names, negative dims, data that does
// not match the shape. Weights in Constant nodes or subgraphs are not read.
//
// # TensorFlow.js
//
// OpenTFJS (OpenTFJSFile for a path) reads and validates a graph model's
// JSON through an fs.FS and stats the shard files its weightsManifest
// names; TFJS.Read and ReadIndex read one weight, opening the one or two
// shards it lies in and reading only its bytes. No file stays open: there
// is nothing to close. Weights come as stored: float32, int32 and bool, and
// quantized float32 weights as F16, or as U8/U16 integers whose values are
// TFJSWeight.Min + Scale*q. Refused, with an error naming the group or
// weight: a format other than "graph-model"; duplicate keys anywhere
// (modelTopology included) and unknown keys; missing fields; dtypes string,
// complex64 and unknown ones (codec.ErrUnsupported); quantization of other
// than float32; negative, non-integer or overflowing shapes; duplicate
// names; shard paths that are not plain relative paths under the JSON's
// directory; groups whose weights do not fill their shards exactly. The
// model JSON is bounded by Limits.MaxHeaderSize.
//
// # Limits, memory and ownership
//
// Every reader is bounded by Limits (DefaultLimits: safetensors header
// 100,000,000 bytes, npy header 65536 bytes, 262144 tensors, 64 dimensions,
// 4096-byte names, 4 GiB per tensor read into memory), checked before the
// allocation it guards. The safetensors reader holds the header and the
// tensor list, and reads only the tensors asked for; the file is never read
// whole. ReadNpy allocates as data arrives, doubling its buffer from 16 MiB,
// so a header that lies about the size costs at most about three times the
// bytes actually received, or 16 MiB.
// Tensors returned by Read, ReadIndex and ReadNpy own their Data, a fresh
// buffer aligned to 8 bytes so that codec.View works; writers only read the
// caller's tensors and keep no reference to them.
//
// # Concurrency
//
// A Safetensors is immutable once opened: Read, ReadIndex and Section may be
// called concurrently when the io.ReaderAt allows concurrent ReadAt calls,
// as *os.File does. A SafetensorsWriter is for one goroutine. The host must
// be little-endian, as everywhere in tensorpress.
package tensorfile
