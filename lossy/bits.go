package lossy

import "github.com/tensorpress/tensorpress/codec"

// widths are the bits per value of each quantizer, as profiles list them
// (profile rules' bits): qsgd's codes are int8 whatever its levels.
var widths = map[string]int{
	"fp16": 16, "bf16": 16,
	"int8": 8, "qsgd": 8,
	"nf4": 4, "fp4": 4,
	"ternary": 2,
	"sign":    1,
}

// Bits returns the narrowest quantizer width in r: 16, 8, 4, 2 or 1 bits
// per value, or 0 when r has no quantizer (a lossless recipe, or one whose
// only lossy stages sparsify).
func Bits(r *codec.Recipe) int {
	if r == nil {
		return 0
	}
	bits := 0
	for _, st := range r.Steps {
		for _, op := range st.Ops {
			if w := widths[op.Stage().Name]; w > 0 && (bits == 0 || w < bits) {
				bits = w
			}
		}
	}
	return bits
}
