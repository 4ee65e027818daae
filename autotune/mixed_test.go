package autotune

import (
	"encoding/binary"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/netsim"
	"github.com/tensorpress/tensorpress/lossless"
	"github.com/tensorpress/tensorpress/transport"
)

// Kinds of data in a mixed stream.
const (
	kindWeights = iota // float32 N(0, 0.02)
	kindSparse         // float32, 99% exact zeros
	kindText           // words
)

// mixed returns n bytes of float weights, sparse gradients and text in
// pieces of random size (64 to 512 KiB, multiples of 4) and random
// order, and where each piece ends with its kind.
func mixed(n int, seed uint64) (data []byte, ends []int, kinds []int) {
	rng := rand.New(rand.NewPCG(seed, 5))
	for len(data) < n {
		size := min(64<<10+4*rng.IntN(112<<10), n-len(data))
		k := rng.IntN(3)
		var b []byte
		switch k {
		case kindWeights:
			b = weights(size/4, rng.Uint64())
		case kindSparse:
			b = make([]byte, size)
			for i := 0; i+4 <= size; i += 4 {
				if rng.IntN(100) == 0 {
					binary.LittleEndian.PutUint32(b[i:], math.Float32bits(float32(0.01*rng.NormFloat64())))
				}
			}
		default:
			b = text(size, rng.Uint64())
		}
		data = append(data, b...)
		ends, kinds = append(ends, len(data)), append(kinds, k)
	}
	return data, ends, kinds
}

// kindAt returns the kind of the piece that holds byte i.
func kindAt(ends, kinds []int, i int) int {
	j, _ := slices.BinarySearch(ends, i+1)
	return kinds[j]
}

// Frames cut by the Tuner hold one kind of data each, but for a few
// hundred bytes at an edge, and end at the edges they meet.
func TestCutFollowsData(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		cutFollowsData(t, seed)
	}
}

func cutFollowsData(t *testing.T, seed uint64) {
	data, ends, kinds := mixed(16<<20, seed)
	tu, err := New()
	if err != nil {
		t.Fatal(err)
	}
	// The data comes in Writes of random sizes, as an application makes
	// them, each cut into frames of at most a chunk: Writes cut floats in
	// two, and frames of floats must still start on a float.
	const chunk = 1 << 20
	rng := rand.New(rand.NewPCG(seed, 6))
	frames, stray := 0, 0
	for off, end := 0, 0; off < len(data); frames++ {
		if off == end {
			end = min(off+1+rng.IntN(3<<20), len(data))
		}
		n := tu.Cut(data[off:min(off+chunk, end)])
		if n < 1 || off+n > end {
			t.Fatalf("cut %d at %d", n, off)
		}
		if j, _ := slices.BinarySearch(ends, off+1); kinds[j] == kindWeights && n >= 64 && kindAt(ends, kinds, off+n-1) == kindWeights {
			start := 0
			if j > 0 {
				start = ends[j-1]
			}
			if (off-start)%4 != 0 {
				t.Errorf("seed %d: a frame of %d bytes of floats starts at %d, %d bytes into a float", seed, n, off, (off-start)%4)
			}
		}
		// The kind of most of the frame, and the bytes of other kinds.
		var count [3]int
		for i := off; i < off+n; i += 64 {
			count[kindAt(ends, kinds, i)] += 64
		}
		major := slices.Index(count[:], slices.Max(count[:]))
		stray += n - count[major]
		if other := n - count[major]; other > 2<<10 {
			t.Errorf("seed %d: frame at %d, %d bytes: %v bytes of each kind", seed, off, n, count)
		}
		off += n
	}
	// Pieces are 64 to 512 KiB: a frame per piece or two, and per Write
	// (up to two more: a few bytes to the next float), not one per block.
	if pieces := len(ends); frames > 2*pieces+len(data)/chunk+3*len(data)/(3<<19) {
		t.Errorf("%d frames for %d pieces", frames, pieces)
	}
	t.Logf("seed %d: %d frames for %d pieces; %d bytes (%.3f%%) in frames of another kind", seed, frames, len(ends), stray, 100*float64(stray)/float64(len(data)))
}

// frameStages returns the stages a data frame applied.
func frameStages(h *codec.FrameHeader) []codec.StageID {
	var ids []codec.StageID
	for _, e := range h.Entries {
		for _, s := range e.Steps {
			ids = append(ids, s.Stage)
		}
	}
	return ids
}

// Every switch in the explain log names the recipe its frame went out
// with, as a receiver reads it off the frames: a receiver that decodes
// every stage, and one without huff0, for which plane coding is never
// chosen (nor reported).
func TestExplainMatchesSent(t *testing.T) {
	for _, c := range []struct {
		name  string
		lacks codec.StageID
	}{{"all stages", 0}, {"no huff0", lossless.Huff0ID}} {
		t.Run(c.name, func(t *testing.T) {
			var stages []codec.StageID
			for _, s := range codec.Stages() {
				if s.ID != c.lacks {
					stages = append(stages, s.ID)
				}
			}
			var mu sync.Mutex
			var decs []Decision
			tu, err := New(WithExplain(func(d Decision) { mu.Lock(); decs = append(decs, d); mu.Unlock() }))
			if err != nil {
				t.Fatal(err)
			}
			a, b := netsim.Pipe(netsim.Link{Rate: 4e6})
			ca, err := transport.Wrap(a, transport.WithPolicy(tu))
			if err != nil {
				t.Fatal(err)
			}
			// The receiver: a hello, then every frame's stages by data frame
			// number, then the end-ack.
			if _, err := b.Write(codec.AppendHello(nil, &codec.Hello{MinVersion: 1, MaxVersion: 1, Stages: stages})); err != nil {
				t.Fatal(err)
			}
			got := make(chan [][]codec.StageID, 1)
			rerr := make(chan error, 1)
			go func() {
				var frames [][]codec.StageID
				r, err := codec.NewReader(b)
				if err != nil {
					rerr <- err
					got <- nil
					return
				}
				for {
					f, err := r.Next()
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						rerr <- err
						return
					}
					if f.Header.Type == codec.FrameBytes {
						frames = append(frames, frameStages(f.Header))
					}
				}
				got <- frames
				_, err = b.Write(codec.AppendControl(nil, transport.ControlEndAck, nil))
				rerr <- err
			}()
			data, _, _ := mixed(6<<20, 2)
			for off := 0; off < len(data); {
				n := min(len(data)-off, 300<<10+off%(700<<10))
				if _, err := ca.Write(data[off : off+n]); err != nil {
					t.Fatal(err)
				}
				off += n
			}
			if err := ca.Close(); err != nil {
				t.Fatal(err)
			}
			if err := <-rerr; err != nil {
				t.Fatal(err)
			}
			frames := <-got
			b.Close()
			mu.Lock()
			defer mu.Unlock()
			if len(decs) < 3 {
				t.Fatalf("%d switches: %v", len(decs), decs)
			}
			for _, d := range decs {
				if d.Seq >= uint64(len(frames)) {
					t.Fatalf("switch at frame %d of %d", d.Seq, len(frames))
				}
				var want []codec.StageID
				if d.To != "raw" {
					for _, s := range codec.MustParseRecipe(d.To).Steps {
						for _, op := range s.Ops {
							want = append(want, op.Stage().ID)
						}
					}
				}
				sent := frames[d.Seq]
				if len(sent) == 0 && len(want) > 0 {
					t.Errorf("frame %d went out raw; the log says %s", d.Seq, d.To)
				}
				for _, id := range sent {
					if !slices.Contains(want, id) {
						t.Errorf("frame %d applied stage %d; the log says %s", d.Seq, id, d.To)
					}
				}
				if c.lacks != 0 && slices.Contains(want, c.lacks) {
					t.Errorf("frame %d: %s uses a stage the peer lacks", d.Seq, d.To)
				}
				if d.Chosen != "" {
					t.Errorf("frame %d sent as %s, chosen %s", d.Seq, d.To, d.Chosen)
				}
			}
			t.Logf("%d frames, %d switches", len(frames), len(decs))
		})
	}
}
