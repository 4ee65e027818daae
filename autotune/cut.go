package autotune

import "github.com/tensorpress/tensorpress/codec"

// Cut implements codec.Cutter: it returns how many bytes from the start of
// data go into the next frame of a byte stream, so that each frame holds
// one kind of data and gets the recipe that suits it.
//
// It reads a strip of 512 bytes at the start of every 64 KiB block (a few
// bit operations per 8 bytes; 16 strips, so 16 pages, per MiB) and
// classifies each as Sniff does; where a strip differs in kind from the
// frame so far (sparse against dense, or another element width), it finds
// the edge by bisection with small samples, to within a few hundred
// bytes, and cuts there. A piece of data much shorter than a block may go
// unseen between two strips.
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

// minFrame is the shortest frame Cut makes at an edge: a first strip
// whose kind ends sooner was a stray (a few KiB of zeros in an image).
const minFrame = 16 << 10

// minBlock: a block shorter than this at the end of the data is not
// judged on its own (too few bytes to tell); it joins the frame.
const minBlock = 4 << 10

// cut returns the class of data's first run of one kind of data and its
// length. It reads a strip at the start of every block, and the last
// bytes; where a strip differs in kind from the first, it finds the edge
// between it and the strip before. The class returned is that of all the
// strips read in the run, with prev for the sparsity hysteresis.
func cut(data []byte, prev *Class) (Class, int) {
	var first scan
	first.add(data[:min(len(data), cutStrip)])
	c := first.class(prev)
	run := first
	last := 0 // where the last strip of c's kind starts
	next := func(pos int) (Class, int, bool) {
		var s scan
		s.add(data[pos:min(pos+cutStrip, len(data))])
		if k := s.class(&c); !k.sameKind(c) {
			if n := edge(data, last, min(pos+cutStrip, len(data)), c, k); n >= minFrame {
				return run.class(prev), n, true
			}
			// The first strip's kind ends within a few KiB: no frame
			// that short; the frame takes the next kind.
			c, run = k, s
		} else {
			run.merge(&s)
		}
		last = pos
		return Class{}, 0, false
	}
	for pos := cutBlock; pos+minBlock <= len(data); pos += cutBlock {
		if rc, n, ok := next(pos); ok {
			return rc, n
		}
	}
	if tail := len(data) - cutStrip; tail >= last+minBlock {
		if rc, n, ok := next(tail); ok {
			return rc, n
		}
	}
	return run.class(prev), len(data)
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
