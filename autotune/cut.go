package autotune

import "github.com/tensorpress/tensorpress/codec"

// Cut implements codec.Cutter: it returns how many bytes from the start of
// data go into the next frame of a byte stream, so that each frame holds
// one kind of data and gets the recipe that suits it.
//
// It reads 4 strips of 128 bytes of every 64 KiB block (a few bit
// operations per 8 bytes: about 5 µs per MiB) and classifies each block as
// Sniff does; where a block differs in kind from the frame so far (sparse
// against dense, or another element width), it finds the edge by bisection
// with small samples, to within a few hundred bytes, and cuts there.
//
// The first frames of a stream are small (WithStartFrame): the link is not
// measured yet and the receiver waits for whole frames, so the first
// bytes arrive early; each frame may be twice as large as the one before.
// On loopback nothing is cut but the first frames.
func (t *Tuner) Cut(data []byte) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(data)
	if t.frameCap > 0 {
		n = min(n, t.frameCap)
		if t.frameCap *= 2; t.frameCap >= codec.MaxChunkSize {
			t.frameCap = 0
		}
	}
	if n == 0 || t.link.isLoopback() {
		return n
	}
	var prev *Class
	if t.sniffed {
		prev = &t.class
	}
	c, n := cut(data[:n], prev)
	t.cutData, t.cutLen, t.cutClass = &data[0], n, c
	t.class, t.sniffed = c, true
	return n
}

// minBlock: a block shorter than this at the end of the data is not
// judged on its own (too few bytes to tell); it joins the frame.
const minBlock = 4 << 10

// cut returns the class of data's first block and the length of the run
// of blocks of the same kind from the start. Within a block that looks
// like the frame as a whole, two strips in a row of the other sparsity
// (zeros between floats or text, or the other way) are checked with a
// larger probe: a piece shorter than two blocks shows only there. The last
// bytes are probed too: a kind that starts in the last block shows there.
func cut(data []byte, prev *Class) (Class, int) {
	var s scan
	s.strips(data[:min(len(data), cutBlock)], cutStrips, cutStrip)
	c := s.class(prev)
	other := Class{DType: c.DType, Period: 1, Sparse: !c.Sparse}
	off := cutBlock
	for ; off+minBlock <= len(data); off += cutBlock {
		end := min(off+cutBlock, len(data))
		var b scan
		var pos [cutStrips]int
		flips := 0 // strips in a row of the other sparsity
		suspect := -1
		for i := range cutStrips {
			pos[i] = off + i*((end-off-cutStrip)/(cutStrips-1))&^7
			z := b.zero[0]
			b.add(data[pos[i]:min(pos[i]+cutStrip, end)])
			if sparse := 8*(b.zero[0]-z) >= 7*cutStrip; sparse != c.Sparse {
				if flips++; flips == 2 && suspect < 0 {
					suspect = i - 1
				}
			} else {
				flips = 0
			}
		}
		if k := b.class(&c); !k.sameKind(c) {
			return c, edge(data, off-cutBlock, end, c, k)
		}
		if suspect >= 0 {
			var p scan
			p.add(data[pos[suspect]:min(pos[suspect]+edgeProbe, len(data))])
			if p.looksLike(other, c) {
				lo := off - cutBlock/4
				if suspect > 0 {
					lo = pos[suspect-1]
				}
				return c, edge(data, lo, pos[suspect]+cutStrip, c, other)
			}
		}
	}
	if tail := len(data) - edgeProbe; tail > cutBlock/2 {
		var b scan
		b.add(data[tail:])
		if k := b.class(&c); !k.sameKind(c) {
			return c, edge(data, off-cutBlock, len(data), c, k)
		}
	}
	return c, len(data)
}

// edgeProbe is the bytes bisection classifies at each step, and
// edgeResolution where it stops.
const (
	edgeProbe      = 1 << 10
	edgeResolution = 256
)

// edge finds where data of class c gives way to data of class k between
// lo (where a block judged c as a whole starts) and hi, by bisection over
// small probes (looksLike).
func edge(data []byte, lo, hi int, c, k Class) int {
	for hi-lo > edgeResolution {
		mid := (lo + hi) / 2 &^ 7
		var s scan
		s.add(data[mid:min(mid+edgeProbe, len(data))])
		if s.looksLike(k, c) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi &^ 7
}

// looksLike reports whether a small sample looks more like data of class
// k than of class c, two classes of different kinds: by its share of zero
// bytes where one is sparse, else by whether it keeps the larger element
// width of the two.
func (s *scan) looksLike(k, c Class) bool {
	if s.words == 0 {
		return false
	}
	if k.Sparse != c.Sparse {
		sparse := float64(s.zero[0]) >= 0.7*float64(8*s.words)
		return sparse == k.Sparse
	}
	w, periodic := int(max(k.Period, c.Period)), k.Period > c.Period
	top, _, rest := s.planes(w)
	// Between planeWidth's test and keeps': neither class is favoured.
	return (top >= 2*rest+2 && top >= float64(s.words)/32) == periodic
}
