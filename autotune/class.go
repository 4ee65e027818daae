package autotune

import (
	"bytes"
	"encoding/binary"
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
// streams (protobuf, .npy, anything) it reads the element width from a
// known header at the start of the frame (.npy, safetensors), or else
// looks for typed numeric runs: an element width of 2, 4 or 8 whose byte
// planes have clearly lower entropy than the bytes taken together, as
// float and integer arrays do, so that shuffle and plane coding are tried
// where they help.
func Sniff(fi codec.FrameInfo) Class {
	c := Class{DType: fi.DType, Period: 1}
	b := fi.Data
	if len(b) > sniffSample {
		off := (len(b)/2 - sniffSample/2) &^ 7
		b = b[off : off+sniffSample]
	}
	if fi.DType != codec.Byte {
		c.Period = uint8(fi.DType.Size())
	} else if w := headerWidth(fi.Data); w > 0 {
		c.Period = w
	} else if w, ok := runPeriod(b); ok {
		// Sparse: the zeros make every plane look alike, but the runs
		// of non-zero bytes start on element boundaries.
		c.Period = w
	} else if len(b) >= 512 {
		r := entropy.PlaneRatios(b)
		best := r[0]
		for i, w := range []uint8{2, 4, 8} {
			// A width must beat the plain bytes and the best smaller
			// width by 5%: 8 wins over 4 only when it is really 8.
			if r[i+1] > best*1.05 {
				best, c.Period = r[i+1], w
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

// runPeriod finds the element width of sparse data from where its runs of
// non-zero bytes start: in an array of mostly zero elements of width w,
// a run starts at an element's first byte, so the starts fall on one
// residue modulo w. ok is false when the data is not sparse (fewer than a
// quarter of its 8-byte words are zero) or has too few runs to tell; the
// width is then judged on the byte planes.
func runPeriod(b []byte) (w uint8, ok bool) {
	words, zero := len(b)/8, 0
	for i := 0; i+8 <= len(b); i += 8 {
		if binary.LittleEndian.Uint64(b[i:]) == 0 {
			zero++
		}
	}
	if words == 0 || 4*zero < words {
		return 0, false
	}
	var mod [8]int
	starts := 0
	for i := 1; i < len(b); i++ {
		if b[i] != 0 && b[i-1] == 0 {
			mod[i%8]++
			starts++
		}
	}
	if starts < 32 {
		return 0, false
	}
	for _, w := range []int{8, 4, 2} {
		top := 0
		for r := range w {
			n := 0
			for j := r; j < 8; j += w {
				n += mod[j]
			}
			top = max(top, n)
		}
		if 10*top >= 8*starts {
			return uint8(w), true
		}
	}
	return 1, true
}

// headerWidth returns the element width announced by a .npy or safetensors
// header at the start of b (all the arrays of a safetensors file: the
// first dtype of its header), or 0.
func headerWidth(b []byte) uint8 {
	const npyMagic = "\x93NUMPY"
	var hdr []byte
	switch {
	case len(b) >= 10 && string(b[:6]) == npyMagic:
		hdr = b[min(len(b), 10):min(len(b), 10+int(binary.LittleEndian.Uint16(b[8:10])))]
		i := bytes.Index(hdr, []byte("'descr'"))
		if i < 0 {
			return 0
		}
		hdr = hdr[i+7:]
		// 'descr': '<f4': the digits after the kind letter are the width.
		j := bytes.IndexAny(hdr, "0123456789")
		if j < 0 {
			return 0
		}
		switch hdr[j] {
		case '2':
			return 2
		case '4':
			return 4
		case '8':
			return 8
		}
	case len(b) >= 10 && b[8] == '{':
		n := binary.LittleEndian.Uint64(b[:8])
		if n < 2 || n > uint64(len(b)-8) || n > 100<<20 {
			return 0
		}
		hdr = b[8 : 8+n]
		i := bytes.Index(hdr, []byte(`"dtype"`))
		if i < 0 {
			return 0
		}
		for _, d := range []struct {
			name string
			w    uint8
		}{{`"F16"`, 2}, {`"BF16"`, 2}, {`"I16"`, 2}, {`"F32"`, 4}, {`"I32"`, 4}, {`"F64"`, 8}, {`"I64"`, 8}} {
			if bytes.HasPrefix(bytes.TrimLeft(hdr[i+7:], ": "), []byte(d.name)) {
				return d.w
			}
		}
	}
	return 0
}
