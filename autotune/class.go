package autotune

import (
	"fmt"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/entropy"
)

// Class is a kind of data, for which codec speeds and ratios are kept
// apart: float weights, sparse gradients and text compress differently.
type Class struct {
	DType  codec.DType // tensor frames: the tensor's; byte streams: Byte
	Period uint8       // element width found in the bytes (1: none found)
	Sparse bool        // at least half the elements are zero
}

func (c Class) String() string {
	s := c.DType.String()
	if c.DType == codec.Byte && c.Period > 1 {
		s += fmt.Sprintf("/period%d", c.Period)
	}
	if c.Sparse {
		s += "/sparse"
	}
	return s
}

// sniffSample is how many bytes Sniff looks at.
const sniffSample = 8 << 10

// Sniff classifies a frame from its info and a sample of its data. For
// tensor frames the dtype gives the element width; for opaque byte
// streams (protobuf, .npy, anything) it looks for typed numeric runs: an
// element width of 2, 4 or 8 whose byte planes have clearly lower entropy
// than the bytes taken together, as float and integer arrays do, so that
// shuffle and plane coding are tried where they help.
func Sniff(fi codec.FrameInfo) Class {
	c := Class{DType: fi.DType, Period: 1}
	b := fi.Data
	if len(b) > sniffSample {
		off := (len(b)/2 - sniffSample/2) &^ 7
		b = b[off : off+sniffSample]
	}
	if fi.DType != codec.Byte {
		c.Period = uint8(fi.DType.Size())
	} else if len(b) >= 512 {
		_, best := entropy.PlaneBound(b, 1)
		for _, w := range []int{2, 4, 8} {
			// A width must beat the plain bytes and the best smaller
			// width by 5%: 8 wins over 4 only when it is really 8.
			if _, r := entropy.PlaneBound(b, w); r > best*1.05 {
				best, c.Period = r, uint8(w)
			}
		}
	}
	w := max(int(c.Period), 1)
	if n := len(b) / w; n > 0 {
		zero := 0
		for i := 0; i+w <= len(b); i += w {
			z := true
			for _, x := range b[i : i+w] {
				z = z && x == 0
			}
			if z {
				zero++
			}
		}
		c.Sparse = 2*zero >= n
	}
	return c
}
