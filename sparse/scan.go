package sparse

import (
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/tensorpress/tensorpress/codec"
)

var errCorrupt = codec.ErrCorrupt

// An element is zero when all its bits are zero: -0.0 is a non-zero value
// here, so sparse coding stays lossless for every bit pattern.

// Density returns the fraction of elements of w bytes in b that are not
// zero (bitwise), exactly: 0 for no elements. A trailing partial element
// is ignored. w must be 1, 2, 4 or 8.
func Density(b []byte, w int) float64 {
	n := len(b) / w
	if n == 0 {
		return 0
	}
	return float64(CountNonZero(b[:n*w], w)) / float64(n)
}

// CountNonZero counts the elements of w bytes in b whose bits are not all
// zero. len(b) must be a multiple of w, and w 1, 2, 4 or 8.
func CountNonZero(b []byte, w int) int {
	nz := 0
	i := 0
	// 32 bytes at a time: all-zero runs are the common case in sparse data.
	for ; i+32 <= len(b); i += 32 {
		c := b[i : i+32 : i+32]
		if binary.LittleEndian.Uint64(c)|binary.LittleEndian.Uint64(c[8:])|
			binary.LittleEndian.Uint64(c[16:])|binary.LittleEndian.Uint64(c[24:]) == 0 {
			continue
		}
		nz += countSlow(c, w)
	}
	return nz + countSlow(b[i:], w)
}

func countSlow(b []byte, w int) int {
	nz := 0
	switch w {
	case 1:
		for _, x := range b {
			if x != 0 {
				nz++
			}
		}
	case 2:
		for i := 0; i+2 <= len(b); i += 2 {
			if binary.LittleEndian.Uint16(b[i:]) != 0 {
				nz++
			}
		}
	case 4:
		for i := 0; i+4 <= len(b); i += 4 {
			if binary.LittleEndian.Uint32(b[i:]) != 0 {
				nz++
			}
		}
	default:
		for i := 0; i+8 <= len(b); i += 8 {
			if binary.LittleEndian.Uint64(b[i:]) != 0 {
				nz++
			}
		}
	}
	return nz
}

// SampleDensity estimates Density from about samples elements spread
// evenly over b (in runs of 64 consecutive elements, so that clustered
// zeros are seen as such). With samples >= the element count it is exact.
func SampleDensity(b []byte, w, samples int) float64 {
	n := len(b) / w
	if n == 0 {
		return 0
	}
	const run = 64
	if samples >= n || n <= run {
		return Density(b, w)
	}
	runs := max(1, samples/run)
	stride := n / runs
	seen, nz := 0, 0
	for r := range runs {
		start := r * stride
		end := min(start+run, n)
		nz += CountNonZero(b[start*w:end*w], w)
		seen += end - start
	}
	return float64(nz) / float64(seen)
}

// gather appends the positions of the non-zero elements of src (w-byte
// elements) to pos and their bytes to val.
func gather(src []byte, w int, pos []uint32, val []byte) ([]uint32, []byte) {
	i := 0
	if w == 4 {
		// float32, the common case: the non-zero elements of a 32-byte
		// block as a bit mask, then its set bits, with no branch per
		// element to mispredict at scattered positions.
		for ; i+32 <= len(src); i += 32 {
			c := src[i : i+32 : i+32]
			a, b := binary.LittleEndian.Uint64(c), binary.LittleEndian.Uint64(c[8:])
			d, e := binary.LittleEndian.Uint64(c[16:]), binary.LittleEndian.Uint64(c[24:])
			if a|b|d|e == 0 {
				continue
			}
			m := nz2(a) | nz2(b)<<2 | nz2(d)<<4 | nz2(e)<<6
			base := uint32(i / 4)
			for ; m != 0; m &= m - 1 {
				k := bits.TrailingZeros8(m)
				pos = append(pos, base+uint32(k))
				val = append(val, c[4*k&31:4*k&31+4]...)
			}
		}
	}
	for ; i+32 <= len(src); i += 32 {
		c := src[i : i+32 : i+32]
		if binary.LittleEndian.Uint64(c)|binary.LittleEndian.Uint64(c[8:])|
			binary.LittleEndian.Uint64(c[16:])|binary.LittleEndian.Uint64(c[24:]) == 0 {
			continue
		}
		pos, val = gatherSlow(c, w, i/w, pos, val)
	}
	return gatherSlow(src[i:], w, i/w, pos, val)
}

// nz2 returns which of the two 4-byte elements of x are not zero: bit 0
// the low one, bit 1 the high one.
func nz2(x uint64) uint8 {
	var lo, hi uint8
	if uint32(x) != 0 {
		lo = 1
	}
	if x>>32 != 0 {
		hi = 2
	}
	return lo | hi
}

func gatherSlow(b []byte, w, base int, pos []uint32, val []byte) ([]uint32, []byte) {
	switch w {
	case 1:
		for j, x := range b {
			if x != 0 {
				pos = append(pos, uint32(base+j))
				val = append(val, x)
			}
		}
	case 2:
		for j := 0; j+2 <= len(b); j += 2 {
			if x := binary.LittleEndian.Uint16(b[j:]); x != 0 {
				pos = append(pos, uint32(base+j/2))
				val = binary.LittleEndian.AppendUint16(val, x)
			}
		}
	case 4:
		for j := 0; j+4 <= len(b); j += 4 {
			if x := binary.LittleEndian.Uint32(b[j:]); x != 0 {
				pos = append(pos, uint32(base+j/4))
				val = binary.LittleEndian.AppendUint32(val, x)
			}
		}
	default:
		for j := 0; j+8 <= len(b); j += 8 {
			if x := binary.LittleEndian.Uint64(b[j:]); x != 0 {
				pos = append(pos, uint32(base+j/8))
				val = binary.LittleEndian.AppendUint64(val, x)
			}
		}
	}
	return pos, val
}

// scatter writes the elements of val (w bytes each) at positions pos of
// dst, which the caller has zeroed.
func scatter(dst []byte, w int, pos []uint32, val []byte) {
	switch w {
	case 1:
		for i, p := range pos {
			dst[p] = val[i]
		}
	case 2:
		for i, p := range pos {
			copy(dst[int(p)*2:int(p)*2+2], val[i*2:i*2+2])
		}
	case 4:
		for i, p := range pos {
			binary.LittleEndian.PutUint32(dst[int(p)*4:], binary.LittleEndian.Uint32(val[i*4:]))
		}
	default:
		for i, p := range pos {
			binary.LittleEndian.PutUint64(dst[int(p)*8:], binary.LittleEndian.Uint64(val[i*8:]))
		}
	}
}

// elemWidth is the element size of a segment the sparse stages accept.
func elemWidth(in codec.SegInfo) (int, error) {
	w := in.Elem.Size()
	switch w {
	case 1, 2, 4, 8:
	default:
		return 0, fmt.Errorf("segment %q has %d-byte %v elements; sparse stages take 1, 2, 4 or 8", in.Name, w, in.Elem)
	}
	if in.Len >= 0 && in.Len%w != 0 {
		return 0, fmt.Errorf("segment %q of %d bytes is not a whole number of %d-byte elements", in.Name, in.Len, w)
	}
	if in.Len >= 0 && uint64(in.Len/w) > maxElems {
		return 0, fmt.Errorf("segment %q has %d elements; sparse stages take at most %d per frame (use smaller chunks)", in.Name, in.Len/w, uint64(maxElems))
	}
	return w, nil
}

// maxElems is the most elements a sparse segment may have: positions are
// 32-bit.
const maxElems = 1<<32 - 1
