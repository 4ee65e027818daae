package codec

import (
	"sync"

	"github.com/tensorpress/tensorpress/internal/view"
)

// Arena hands out 8-byte aligned scratch buffers for one frame and takes
// them all back at once with Reset, so that steady-state encoding does not
// allocate. It is not safe for concurrent use; each pipeline worker has its
// own. A nil *Arena allocates from the heap.
type Arena struct {
	slabs [][]byte
	cur   int // index of the slab being carved
	off   int // bytes used in slabs[cur]
}

const minSlab = 64 << 10

// Alloc returns n bytes (not zeroed) that stay valid until Reset.
func (a *Arena) Alloc(n int) []byte {
	if a == nil {
		return view.Bytes(n)
	}
	n8 := (n + 7) &^ 7
	for a.cur < len(a.slabs) {
		s := a.slabs[a.cur]
		if a.off+n8 <= len(s) {
			b := s[a.off : a.off+n : a.off+n]
			a.off += n8
			return b
		}
		a.cur++
		a.off = 0
	}
	// Grow by half of what the arena holds (at least the request): Reset
	// merges the slabs, so the next frame of this size needs one slab.
	total := 0
	for _, s := range a.slabs {
		total += len(s)
	}
	size := max(minSlab, n8, total/2)
	a.slabs = append(a.slabs, view.Bytes(size))
	a.cur = len(a.slabs) - 1
	a.off = n8
	return a.slabs[a.cur][:n:n]
}

// arenas holds the arenas of every Encoder, Decoder and Reader: a frame's
// scratch is the same whoever codes it, so a Writer or Reader made per
// message starts with warm arenas instead of growing its own (in a CPU
// profile of a Writer on 16 workers, fresh arenas made most of the
// large allocations).
var arenas sync.Pool // *Arena

// getArena returns an arena from the pool, or a new one.
func getArena() *Arena {
	if a, ok := arenas.Get().(*Arena); ok {
		return a
	}
	return &Arena{}
}

// putArena resets a and returns it to the pool.
func putArena(a *Arena) {
	a.Reset()
	arenas.Put(a)
}

// maxKeep is the most memory an arena keeps across Reset.
const maxKeep = 16 << 20

// Reset makes all memory handed out reusable. When the arena had to grow,
// its slabs are merged into one large enough for the whole frame, so the
// next frame of the same size is carved from a single slab; an arena never
// keeps more than 16 MiB across Reset.
func (a *Arena) Reset() {
	total := 0
	for _, s := range a.slabs {
		total += len(s)
	}
	switch {
	case total > maxKeep:
		a.slabs = nil
	case len(a.slabs) > 1:
		a.slabs = [][]byte{view.Bytes(total)}
	}
	a.cur, a.off = 0, 0
}
