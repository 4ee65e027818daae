package sniff

// Cutting a byte stream where the kind of data changes: Cut reads a strip
// of 512 bytes at the start of every 64 KiB block (a few bit operations
// per 8 bytes; 16 strips, so 16 pages, per MiB) and classifies each as
// Frame does; where a strip differs in kind from the frame so far (sparse
// against dense, or another element width), it finds the edge by
// bisection with small samples, to within a few hundred bytes.

// minFrame is the shortest frame Cut makes at an edge: a first strip
// whose kind ends sooner was a stray (a few KiB of zeros in an image).
const minFrame = 16 << 10

// MinBlock: a block shorter than this at the end of the data is not
// judged on its own (too few bytes to tell); it joins the frame. A piece
// shorter than this that Cut cuts off the start of the data is too short
// to learn a class from.
const MinBlock = 4 << 10

// Cut returns the class of data's first run of one kind of data and its
// length. It reads a strip at the start of every block, and the last
// bytes; where a strip differs in kind from the first (or, for typed
// elements, in phase: another tensor), it finds the edge between it and
// the strip before. The class returned is that of all the strips read in
// the run, with prev for the sparsity hysteresis.
//
// Frames start on an element: where the first strip's elements start ph
// bytes in (a Write of a stream cut a float in two), the first frame is
// those ph bytes, and an edge before typed elements is moved to where
// they start.
func Cut(data []byte, prev *Class) (Class, int) {
	var first scan
	first.add(data[:min(len(data), cutStrip)])
	c, ph := first.class(prev, -1)
	if typed(c) && ph != 0 && int(ph) < len(data) {
		return c, int(ph)
	}
	run := first
	last := 0 // where the last strip of the run starts
	next := func(pos int) (Class, int, bool) {
		var s scan
		s.add(data[pos:min(pos+cutStrip, len(data))])
		k, kph := s.class(&c, int(ph))
		if k.SameKind(c) && (!typed(c) || kph == ph) {
			run.merge(&s)
			last = pos
			return Class{}, 0, false
		}
		n := edge(data, last, min(pos+cutStrip, len(data)), c, ph, k, kph)
		if typed(k) {
			n += int(kph) // the first whole element of k
		}
		if len(data)-n < MinBlock {
			// What is left after the edge is too short to tell (the end
			// of a Write, read by the tail probe): it joins this frame.
			run.merge(&s)
			last = pos
			return Class{}, 0, false
		}
		if n >= minFrame || typed(k) && n < len(data) {
			rc, _ := run.class(prev, -1)
			return rc, n, true
		}
		// The first strip's kind ends within a few KiB: no frame that
		// short; the frame takes the next kind.
		c, ph, run, last = k, kph, s, pos
		return Class{}, 0, false
	}
	for pos := cutBlock; pos+MinBlock <= len(data); pos += cutBlock {
		if rc, n, ok := next(pos); ok {
			return rc, n
		}
	}
	if tail := (len(data) - cutStrip) &^ 7; tail >= last+MinBlock {
		if rc, n, ok := next(tail); ok {
			return rc, n
		}
	}
	rc, _ := run.class(prev, -1)
	return rc, len(data)
}

// typed reports whether data of class c has elements wider than a byte
// that plane coding codes by their position: dense data with a period.
func typed(c Class) bool { return c.Period > 1 && !c.Sparse }

// edgeProbe is the bytes bisection classifies at each step, and
// edgeResolution where it stops.
const (
	edgeProbe      = 1 << 10
	edgeResolution = 256
)

// edge finds where data of class c (elements at phase ph) gives way to
// data of class k (at phase kph) between lo (where a strip of c starts)
// and hi, by bisection over small probes (looksLike). The edge returned
// is a multiple of 8.
func edge(data []byte, lo, hi int, c Class, ph uint8, k Class, kph uint8) int {
	for hi-lo > edgeResolution {
		// A probe centred on mid tells on which side of mid the edge is.
		mid := (lo + hi) / 2 &^ 7
		var s scan
		s.add(data[max(0, mid-edgeProbe/2):min(mid+edgeProbe/2, len(data))])
		if s.looksLike(k, kph, c, ph) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi &^ 7
}

// looksLike reports whether a small sample looks more like data of class
// k (elements at phase kph) than like data of class c (at phase ph): by
// its share of zero bytes where one is sparse; where one has wider
// elements, by whether its top bytes at that one's phase repeat; else by
// the phase of its elements.
func (s *scan) looksLike(k Class, kph uint8, c Class, ph uint8) bool {
	if s.words == 0 {
		return false
	}
	switch {
	case k.Sparse != c.Sparse:
		sparse := float64(s.zero[0]) >= 0.7*float64(8*s.words)
		return sparse == k.Sparse
	case k.Period != c.Period:
		w, p := int(k.Period), int(kph)
		if c.Period > k.Period {
			w, p = int(c.Period), int(ph)
		}
		top, _, rest := s.planes(w, p)
		// Between planeWidth's test and keeps': neither is favoured.
		periodic := top >= 2*rest+2 && top >= float64(s.words)/32
		return periodic == (k.Period > c.Period)
	}
	return s.phase(int(k.Period)) == int(kph)
}
