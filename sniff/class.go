package sniff

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/tensorpress/tensorpress/codec"
)

// Class is a kind of data, for which codec speeds and ratios are kept
// apart: float weights, sparse gradients and text compress differently.
type Class struct {
	DType  codec.DType // tensor frames: the tensor's; byte streams: Byte
	Period uint8       // element width found in the bytes (1: none found)
	Sparse bool        // most elements are zero (see sparseEnter)
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

// SameKind reports whether data of classes c and o belongs in one frame:
// the same sparsity and, for dense data, the same element width (the
// width found in sparse samples is too noisy to cut on).
func (c Class) SameKind(o Class) bool {
	return c.Sparse == o.Sparse && (c.Sparse || c.Period == o.Period)
}

// The sniffer's sampling: Frame reads sniffStrips strips of sniffStrip
// bytes spread over a frame; the cut scanner (Cut) reads a strip of
// cutStrip bytes at the start of every cutBlock bytes.
const (
	sniffStrips = 8
	sniffStrip  = 512
	cutBlock    = 64 << 10
	cutStrip    = 512
)

// Sparsity thresholds, as the share of zero elements: a frame is sparse
// from sparseEnter; while the frames before were sparse, down to
// sparseStay (hysteresis, so that data near one threshold, such as images
// with half their pixels black, does not flip from frame to frame).
const (
	sparseEnter = 0.85
	sparseStay  = 0.6
	// sparseStarts: the element width of sparse data is read from where
	// its runs of non-zero bytes start once there are this many.
	sparseStarts = 32
)

// scan holds what the sniffer reads off bytes, in one pass over their
// 8-byte words with a few bit operations per word.
type scan struct {
	words int
	zero  [4]int // zero elements of 1, 2, 4 and 8 bytes
	match [8]int // byte i of a word equals byte i of the word before, and is not zero
	start [8]int // a run of non-zero bytes starts at byte i of a word
}

const (
	lo7 = 0x7f7f7f7f7f7f7f7f
	hi7 = 0x8080808080808080
)

// zeroBytes returns x with the high bit of each zero byte set, and no
// other bit.
func zeroBytes(x uint64) uint64 { return ^((x&lo7 + lo7) | x | lo7) }

// add reads the whole 8-byte words of b as one strip: its first word has
// no word before it.
func (s *scan) add(b []byte) {
	var match, start uint64 // eight 8-bit counters each, flushed before they overflow
	var prev uint64
	prevNZ := uint64(hi7) // a strip does not start a run at its first byte
	n := 0
	flush := func() {
		for i := range 8 {
			s.match[i] += int(match >> (8 * i) & 0xff)
			s.start[i] += int(start >> (8 * i) & 0xff)
		}
		match, start = 0, 0
	}
	for i := 0; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		zb := zeroBytes(w)
		z16 := zb & (zb >> 8) & 0x0080008000800080 // both bytes of a 16-bit lane
		z32 := z16 & (z16 >> 16) & 0x0000008000000080
		s.zero[0] += bits.OnesCount64(zb)
		s.zero[1] += bits.OnesCount64(z16)
		s.zero[2] += bits.OnesCount64(z32)
		s.zero[3] += int(z32 & (z32 >> 32) >> 7)
		if i > 0 {
			match += (zeroBytes(w^prev) &^ zb) >> 7
		}
		nz := ^zb & hi7
		start += (nz &^ (nz<<8 | prevNZ>>56)) >> 7
		prev, prevNZ = w, nz
		if n++; n == 255 {
			flush()
			n = 0
		}
	}
	flush()
	s.words += len(b) / 8
}

// merge adds the counts of o.
func (s *scan) merge(o *scan) {
	s.words += o.words
	for i := range s.zero {
		s.zero[i] += o.zero[i]
	}
	for i := range s.match {
		s.match[i] += o.match[i]
		s.start[i] += o.start[i]
	}
}

// strips scans k strips of m bytes spread evenly over b (all of b when
// it is not longer).
func (s *scan) strips(b []byte, k, m int) {
	if len(b) <= k*m {
		s.add(b)
		return
	}
	step := (len(b) - m) / (k - 1)
	for i := range k {
		off := i * step &^ 7
		s.add(b[off : off+m])
	}
}

// class returns the class of the bytes scanned, and the phase of their
// elements: where the first element starts in the bytes (0 to width-1;
// 0 where the width is 1). prev is the class of the data before them,
// for the hysteresis (nil: none): a sparse class stays sparse down to
// sparseStay, and dense data keeps the element width of prev, at phase
// prevPhase, under a looser test (prevPhase < 0: not known, no
// hysteresis for the width).
func (s *scan) class(prev *Class, prevPhase int) (Class, uint8) {
	c := Class{DType: codec.Byte, Period: 1}
	if s.words == 0 {
		return c, 0
	}
	n := 8 * s.words
	var phase int
	switch {
	case 2*s.zero[0] >= n:
		// Many zero bytes make every plane look alike, but the runs of
		// non-zero bytes start on element boundaries.
		w, p := s.runWidth()
		c.Period, phase = uint8(w), p
	case prev != nil && typed(*prev) && prevPhase >= 0 && s.keeps(int(prev.Period), prevPhase):
		c.Period, phase = prev.Period, prevPhase
	default:
		w, p := s.planeWidth()
		c.Period, phase = uint8(w), p
	}
	k := bits.TrailingZeros8(c.Period) // 0, 1, 2, 3
	share := float64(s.zero[k]) / float64(n/int(c.Period))
	limit := sparseEnter
	if prev != nil && prev.Sparse {
		limit = sparseStay
	}
	c.Sparse = share >= limit
	return c, uint8(phase)
}

// planeWidth returns the element width of dense data and its phase: the
// largest w of 8, 4 and 2 for which the top byte of every w-byte element
// (sign and exponent of a float, the high byte of an integer), at the
// phase where it repeats most, repeats from one word to the next far more
// often than the other bytes do; 1 when none does. Elements may start
// anywhere in the bytes: an opaque stream puts them where it likes.
func (s *scan) planeWidth() (w, phase int) {
	floor := max(3, float64(s.words)/32) // the top bytes repeat in at least 3% of the words
	// The largest width first: the top bytes of 2-byte elements repeat at
	// every other byte, so 4 fails on them, while 2 passes on 4-byte
	// floats only where noise lifts their middle bytes.
	for _, w := range []int{8, 4, 2} {
		p := s.phase(w)
		top, low, rest := s.planes(w, p)
		if w == 8 && (float64(s.match[(p+3)%8]) > 2*rest+1 || top < float64(s.words)/5) {
			// The byte 4 before the top one repeats as well: floats
			// of 4 bytes among other data (a sample across an edge),
			// not 8-byte elements. And one byte in eight is a noisy
			// figure: the sign and exponent of doubles repeat in a
			// third of the words or more.
			continue
		}
		if top >= floor && low >= 2*rest+1 && top >= 3*rest+2 {
			return w, p
		}
	}
	return 1, 0
}

// keeps reports whether dense data still fits element width w at phase
// p, which the data before had: a looser test than planeWidth's, so that
// a small sample's noise does not end a run of floats.
func (s *scan) keeps(w, p int) bool {
	top, low, rest := s.planes(w, p)
	return top >= max(2, float64(s.words)/32) && low >= rest+1 && top >= 2*rest+1
}

// phase returns where w-byte elements would start (0 to w-1) for their
// top bytes to repeat most often.
func (s *scan) phase(w int) int {
	best, most := 0, -1.0
	for p := range w {
		if top, _, _ := s.planes(w, p); top > most {
			best, most = p, top
		}
	}
	return best
}

// planes returns, for w-byte elements starting at phase p, how often on
// average the top byte of an element repeats from one word to the next,
// how often the top byte position that repeats least does, and how often
// on average the other bytes do.
func (s *scan) planes(w, p int) (top, low, rest float64) {
	var nt, nr int
	at := (p + w - 1) % w
	low = float64(s.words)
	for i, m := range s.match {
		if i%w == at {
			top += float64(m)
			low = min(low, float64(m))
			nt++
		} else {
			rest += float64(m)
			nr++
		}
	}
	return top / float64(nt), low, rest / float64(nr)
}

// runWidth returns the element width of sparse data and its phase from
// where its runs of non-zero bytes start: in an array of mostly zero
// elements of width w, a run starts at an element's first byte, so the
// starts fall on one residue modulo w, the phase. With fewer than
// sparseStarts runs it is 1.
func (s *scan) runWidth() (w, phase int) {
	starts := 0
	for _, v := range s.start {
		starts += v
	}
	if starts < sparseStarts {
		return 1, 0
	}
	for _, w := range []int{8, 4, 2} {
		top, at := 0, 0
		for r := range w {
			n := 0
			for j := r; j < 8; j += w {
				n += s.start[j]
			}
			if n > top {
				top, at = n, r
			}
		}
		if 10*top >= 8*starts {
			return w, at
		}
	}
	return 1, 0
}

// Frame classifies a frame from its info and samples of its data. For
// tensor frames the dtype gives the element width; for opaque byte
// streams (protobuf, .npy, anything) it reads the element width from a
// known header at the start of the frame (.npy, safetensors), or else
// looks for typed numeric runs: an element width of 2, 4 or 8 whose top
// byte repeats from element to element far more often than the other
// bytes do, as the sign and exponent of floats and the high byte of
// integers do, so that shuffle and plane coding are tried where they
// help. It reads 8 strips of 512 bytes spread over the frame, a few bit
// operations per 8 bytes.
func Frame(fi codec.FrameInfo) Class {
	return FrameAfter(fi, nil)
}

// FrameAfter is Frame for a frame that follows one of class prev (nil:
// none) of the same type: sparse data stays sparse down to a lower share
// of zeros (the hysteresis of sparseStay).
func FrameAfter(fi codec.FrameInfo, prev *Class) Class {
	var s scan
	s.strips(fi.Data, sniffStrips, sniffStrip)
	if fi.DType != codec.Byte {
		c := Class{DType: fi.DType, Period: uint8(max(1, min(8, fi.DType.Size())))}
		k := bits.TrailingZeros8(c.Period)
		if n := 8 * s.words / int(c.Period); n > 0 && 1<<k == int(c.Period) {
			limit := sparseEnter
			if prev != nil && prev.Sparse {
				limit = sparseStay
			}
			c.Sparse = float64(s.zero[k]) >= limit*float64(n)
		}
		return c
	}
	c, _ := s.class(prev, -1)
	if w := headerWidth(fi.Data); w > 0 {
		c.Period = w
	}
	return c
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
