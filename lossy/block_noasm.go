//go:build !amd64 || noasm || !gc

package lossy

// The pure-Go twin of block_amd64.go: no accelerated kernels, so the
// reference loops of block.go, int8.go and fourbit.go do all the work,
// with the same results.

const blockHasAVX2 = false

// No multi-block kernels: blockHasAVX2 is false, so these are never called.
var (
	int8QuantizeFast   func(o *blockOp, q, scale []byte, x []float32) int
	nf4QuantizeFast    func(o *blockOp, q, scale []byte, x []float32) int
	fp4QuantizeFast    func(o *blockOp, q, scale []byte, x []float32) int
	int8DequantizeFast func(o *blockOp, x []float32, q, scale []byte) (int, bool)
	dequant4Fast       func(o *blockOp, x []float32, q, scale []byte) (int, bool)
)

func sums16Asm(x []float32, sq bool, acc *[16]float64) (int, uint32)       { return 0, 0 }
func sumAboveAsm(x []float32, tb uint32, acc *[16]float64) (int, int)      { return 0, 0 }
func packSignsAsm(q []byte, x []float32) int                               { return 0 }
func packTernaryAsm(q []byte, x []float32, tb uint32) int                  { return 0 }
func quantQSGDAsm(q []byte, x []float32, k float32, key, j0, s uint32) int { return 0 }
func signDequantAsm(x []float32, q []byte, sbits uint32) int               { return 0 }
func ternaryDequantAsm(x []float32, q []byte, lut *[8]uint32) (int, bool)  { return 0, true }
