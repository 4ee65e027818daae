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
// with small samples, to within a few hundred bytes, and cuts there. A
// frame holds at least half a block (32 KiB) unless data is shorter.
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
	return n
}

// minBlock: a block shorter than this at the end of the data is not
// judged on its own (too few bytes to tell); it joins the frame.
const minBlock = 4 << 10

// cut returns the class of data's first block and the length of the run
// of blocks of the same kind from the start.
func cut(data []byte, prev *Class) (Class, int) {
	var s scan
	s.strips(data[:min(len(data), cutBlock)], cutStrips, cutStrip)
	c := s.class(prev)
	for off := cutBlock; off+minBlock <= len(data); off += cutBlock {
		var b scan
		b.strips(data[off:min(off+cutBlock, len(data))], cutStrips, cutStrip)
		if !b.class(&c).sameKind(c) {
			return c, edge(data, off, c)
		}
	}
	return c, len(data)
}

// edgeProbe is the bytes bisection classifies at each step, and
// edgeResolution where it stops.
const (
	edgeProbe      = 512
	edgeResolution = 256
)

// edge finds where the data of class c ends near off, the first block
// that differs: the edge lies past the middle of the block before (which
// looked like c as a whole) and before the end of the block at off. It
// bisects, taking a probe that looks like c as the frame going on.
func edge(data []byte, off int, c Class) int {
	lo, hi := off-cutBlock/2, min(off+cutBlock, len(data))
	for hi-lo > edgeResolution {
		mid := (lo + hi) / 2 &^ 7
		var s scan
		s.add(data[mid:min(mid+edgeProbe, len(data))])
		if s.class(&c).sameKind(c) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi &^ 7
}
