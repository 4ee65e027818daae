package lossy

import "github.com/tensorpress/tensorpress/codec"

// Bits returns the narrowest quantizer width in r: 16, 8, 4, 2 or 1 bits
// per value, or 0 when r has no quantizer. Each stage declares its width
// in codec.Stage.Bits.
//
// Deprecated: use r.Bits() (codec.Recipe.Bits).
func Bits(r *codec.Recipe) int { return r.Bits() }
