package codec

import (
	"fmt"
	"strings"
)

// DType is a tensor element type. Its numeric value is a permanent wire ID
// (see docs/FORMAT.md); the names are for humans, the CLI and YAML.
type DType uint8

// Element types. Byte is the element type of opaque byte streams and of
// coded segments. Bool is one byte per element, 0 or 1.
const (
	Byte DType = 0
	F64  DType = 1
	F32  DType = 2
	F16  DType = 3
	BF16 DType = 4
	I64  DType = 5
	I32  DType = 6
	I16  DType = 7
	I8   DType = 8
	U8   DType = 9
	Bool DType = 10
	U16  DType = 11
	U32  DType = 12
	U64  DType = 13

	numDTypes = 14
)

var dtypeInfo = [numDTypes]struct {
	name  string
	size  int
	float bool
}{
	Byte: {"bytes", 1, false},
	F64:  {"f64", 8, true},
	F32:  {"f32", 4, true},
	F16:  {"f16", 2, true},
	BF16: {"bf16", 2, true},
	I64:  {"i64", 8, false},
	I32:  {"i32", 4, false},
	I16:  {"i16", 2, false},
	I8:   {"i8", 1, false},
	U8:   {"u8", 1, false},
	Bool: {"bool", 1, false},
	U16:  {"u16", 2, false},
	U32:  {"u32", 4, false},
	U64:  {"u64", 8, false},
}

// Valid reports whether d is a known element type.
func (d DType) Valid() bool { return d < numDTypes }

// Size is the element size in bytes; 0 for an unknown type.
func (d DType) Size() int {
	if !d.Valid() {
		return 0
	}
	return dtypeInfo[d].size
}

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool { return d.Valid() && dtypeInfo[d].float }

func (d DType) String() string {
	if !d.Valid() {
		return fmt.Sprintf("dtype(%d)", uint8(d))
	}
	return dtypeInfo[d].name
}

// ParseDType accepts the names String returns and the common aliases
// (float32, fp16, bfloat16, int64, uint8, ...), case-insensitively.
func ParseDType(s string) (DType, error) {
	key := strings.ToLower(strings.TrimSpace(s))
	if d, ok := dtypeAliases[key]; ok {
		return d, nil
	}
	for i := range dtypeInfo {
		if dtypeInfo[i].name == key {
			return DType(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown dtype %q (want one of f64 f32 f16 bf16 i64 i32 i16 i8 u8 u16 u32 u64 bool bytes)", ErrUnsupported, s)
}

var dtypeAliases = map[string]DType{
	"float64": F64, "double": F64, "fp64": F64,
	"float32": F32, "float": F32, "fp32": F32,
	"float16": F16, "half": F16, "fp16": F16,
	"bfloat16": BF16,
	"int64":    I64, "long": I64,
	"int32": I32, "int": I32,
	"int16": I16, "short": I16,
	"int8": I8, "uint8": U8, "byte": U8,
	"uint16": U16, "uint32": U32, "uint64": U64,
	"boolean": Bool, "raw": Byte,
}
