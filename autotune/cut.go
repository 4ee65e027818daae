package autotune

import "github.com/tensorpress/tensorpress/sniff"

// Cut implements codec.Cutter: it returns how many bytes from the start of
// data go into the next frame of a byte stream, so that each frame holds
// one kind of data and gets the recipe that suits it.
//
// It reads a strip of 512 bytes at the start of every 64 KiB block (a few
// bit operations per 8 bytes; 16 strips, so 16 pages, per MiB) and
// classifies each as Sniff does (sniff.Cut); where a strip differs in kind from the
// frame so far (sparse against dense, or another element width), it finds
// the edge by bisection with small samples, to within a few hundred
// bytes, and cuts there. A piece of data much shorter than a block may go
// unseen between two strips.
//
// On loopback nothing is cut. (The first frames of a stream are kept
// small by the Writer: codec.WithStartFrame, which transport sets.)
func (t *Tuner) Cut(data []byte) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(data)
	if n == 0 || t.link.isLoopback() {
		return n
	}
	var prev *Class
	if t.sniffed {
		prev = &t.class
	}
	c, n := sniff.Cut(data[:n], prev)
	t.cutData, t.cutLen, t.cutClass = &data[0], n, c
	// A piece this short, cut off the start of the data (a few bytes
	// before the first whole element, or an edge found early), is stored
	// raw: it is too short to learn a class from.
	t.cutShort = n < sniff.MinBlock && n < len(data)
	t.class, t.sniffed = c, true
	return n
}
