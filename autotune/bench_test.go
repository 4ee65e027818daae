package autotune

import (
	"compress/gzip"
	"encoding/binary"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/netsim"
	"github.com/tensorpress/tensorpress/profile"
)

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// paced is a link of the given rate in bytes per second: Write sleeps
// (using no CPU) as long as the bytes take to send.
type paced struct{ rate float64 }

func (p *paced) Write(b []byte) (int, error) {
	time.Sleep(time.Duration(float64(len(b)) / p.rate * float64(time.Second)))
	return len(b), nil
}

// BenchmarkTunerOverhead writes 16 MiB of float weights through a Writer
// (1 MiB frames, two encoders) to a 200 MB/s link, once with a Tuner
// (settled beforehand on plane coding, as on a live connection) and once
// with plane coding fixed. The CPU time per run of
// the two (cpu-ns/op) gives the cost of sniffing, profiling and exploring;
// explore-% is the Tuner's own count of the time it spent on samples, as a
// share of the encoding time.
func BenchmarkTunerOverhead(b *testing.B) {
	data := weights(4<<20, 42)
	planes := codec.MustParseRecipe(planes)
	run := func(b *testing.B, p codec.Policy, tu *Tuner) {
		w, err := codec.NewWriter(&paced{rate: 200e6}, codec.WithPolicy(p), codec.WithEncoderConcurrency(2))
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		write := func() {
			for off := 0; off < len(data); off += 1 << 20 {
				w.Write(data[off : off+1<<20])
			}
			if err := w.Flush(); err != nil {
				b.Fatal(err)
			}
		}
		var work0, spent0 time.Duration
		if tu != nil {
			write() // settle: bootstrap and the first frames on raw
			work0, spent0 = tu.Costs()
		}
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		c0 := cpuTime()
		for b.Loop() {
			write()
		}
		b.ReportMetric(float64((cpuTime()-c0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		if tu != nil {
			work, spent := tu.Costs()
			b.ReportMetric(100*float64(spent-spent0)/float64(work-work0), "explore-%")
			if d, ok := tu.LastDecision(); !ok || d.To != planes.String() || tu.Switches() != 1 {
				b.Fatalf("the tuner did not settle on %s in one switch: %v; %d switches", planes, d, tu.Switches())
			}
		}
	}
	b.Run("fixed", func(b *testing.B) { run(b, codec.FixedPolicy{Recipe: planes}, nil) })
	b.Run("tuner", func(b *testing.B) {
		tu, err := New(WithCores(2))
		if err != nil {
			b.Fatal(err)
		}
		run(b, tu, tu)
	})
}

// timedSpy records when each frame was written and with which recipe.
type timedSpy struct {
	*Tuner
	mu     sync.Mutex
	at     []time.Time
	recipe []string
}

func (s *timedSpy) Observe(fs codec.FrameStats) {
	s.Tuner.Observe(fs)
	s.mu.Lock()
	s.at = append(s.at, time.Now())
	s.recipe = append(s.recipe, recipeName(fs.Recipe))
	s.mu.Unlock()
}

// BenchmarkTunerRateChange sends text (64 KiB frames) through
// transport.Wrap over a simulated link whose rate drops 10x after 1 s and
// rises back 4.5 s later, with xz and raw to choose from and the default
// probe interval: raw is best at the high rate (6x xz's measured speed
// per core), xz at the low one. It reports how long after each change the
// Tuner first sent with the new best recipe (drop-ms, rise-ms) and how
// many switches it made per step besides probes (a probe is a switch to
// the fastest recipe and back).
func BenchmarkTunerRateChange(b *testing.B) {
	e := xzOnText(b)
	fast := 6 * e.Encode
	const before, low, after = time.Second, 4500 * time.Millisecond, 2 * time.Second
	for b.Loop() {
		var decs []Decision
		tu, err := New(WithCores(2), WithCandidates(nil, xz), WithExplain(func(d Decision) { decs = append(decs, d) }))
		if err != nil {
			b.Fatal(err)
		}
		sp := &timedSpy{Tuner: tu}
		a, ca, finish := wrappedLink(b, netsim.Link{Rate: fast, Burst: 16 << 10}, sp, 64<<10)
		start := time.Now()
		drop, rise := start.Add(before), start.Add(before+low)
		phase := 0
		for i := 0; time.Since(start) < before+low+after; i++ {
			if phase == 0 && time.Now().After(drop) {
				a.SetRate(fast / 10)
				phase = 1
			}
			if phase == 1 && time.Now().After(rise) {
				a.SetRate(fast)
				phase = 2
			}
			if _, err := ca.Write(text(64<<10, uint64(i))); err != nil {
				b.Fatal(err)
			}
		}
		finish()
		sp.mu.Lock()
		// settle: time from the change to the first frame sent with want,
		// and whether the phase's last frame outside a probe used it.
		settle := func(from, to time.Time, want string) time.Duration {
			first := -1
			last := ""
			for i, at := range sp.at {
				if at.Before(from) || !at.Before(to) {
					continue
				}
				if first < 0 && sp.recipe[i] == want {
					first = i
				}
				last = sp.recipe[i]
			}
			if first < 0 {
				b.Fatalf("no frame with %s between %v and %v", want, from.Sub(start), to.Sub(start))
			}
			if last != want && !lastIsProbe(decs, sp.at, from, to) {
				b.Fatalf("the phase from %v ends on %s, not %s", from.Sub(start), last, want)
			}
			return sp.at[first].Sub(from)
		}
		end := start.Add(time.Hour)
		d, r := settle(drop, rise, xz.String()), settle(rise, end, "raw")
		sp.mu.Unlock()
		// steps counts the switches in [from, to) that changed the
		// choice: a probe and its return count for none, a probe that
		// found a faster link and stayed for one.
		steps := func(from, to time.Time) (sw, pr int) {
			for i, d := range decs {
				if at := decisionTime(d, sp.at); at.Before(from) || !at.Before(to) {
					continue
				}
				returned := i+1 < len(decs) && !decs[i+1].Probe && decs[i+1].To == d.From
				isReturn := i > 0 && decs[i-1].Probe && !d.Probe && d.To == decs[i-1].From
				switch {
				case d.Probe:
					pr++
					if !returned {
						sw++
					}
				case !isReturn:
					sw++
				}
			}
			return sw, pr
		}
		dsw, dpr := steps(drop, rise)
		rsw, rpr := steps(rise, end)
		b.ReportMetric(float64(d.Milliseconds()), "drop-ms")
		b.ReportMetric(float64(r.Milliseconds()), "rise-ms")
		b.ReportMetric(float64(dsw), "drop-switches")
		b.ReportMetric(float64(rsw), "rise-switches")
		b.ReportMetric(float64(dpr+rpr), "probes")
		b.ReportMetric(e.Encode/1e6, "xz-MB/s")
	}
}

// decisionTime is when the frame a decision applied to was written.
func decisionTime(d Decision, at []time.Time) time.Time {
	if int(d.Seq) < len(at) {
		return at[d.Seq]
	}
	return at[len(at)-1]
}

// lastIsProbe reports whether the last decision in [from, to) was a probe
// (its frames are exploration, not the choice).
func lastIsProbe(decs []Decision, at []time.Time, from, to time.Time) bool {
	var last *Decision
	for i := range decs {
		if t := decisionTime(decs[i], at); !t.Before(from) && t.Before(to) {
			last = &decs[i]
		}
	}
	return last != nil && last.Probe
}

// BenchmarkTunerChoose times what a settled Tuner adds to each 1 MiB
// frame of float weights besides sampling (WithExplore(0)): Choose
// (rule, sniffing every 8th frame, link estimate, cost model) and
// Observe; "encode" times plane coding the same frame on one core, for
// the ratio.
func BenchmarkTunerChoose(b *testing.B) {
	data := weights(256<<10, 42)
	planes := codec.MustParseRecipe(planes)
	b.Run("encode", func(b *testing.B) {
		enc, err := codec.NewEncoder()
		if err != nil {
			b.Fatal(err)
		}
		var out []byte
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			if out, err = enc.AppendBytes(out[:0], data, planes); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("choose", func(b *testing.B) {
		tu, err := New(WithCores(2), WithExplore(0), WithLink(NewLink(100e6)))
		if err != nil {
			b.Fatal(err)
		}
		fi := codec.FrameInfo{Type: codec.FrameBytes, DType: codec.Byte, Len: len(data), Data: data, First: true}
		tu.Choose(fi) // bootstrap: every candidate measured once
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		var seq uint64
		for b.Loop() {
			seq++
			fi.Seq = seq
			r := tu.Choose(fi)
			tu.Observe(codec.FrameStats{Info: codec.FrameInfo{Seq: seq, Type: codec.FrameBytes, DType: codec.Byte, Len: len(data)},
				Recipe: r, RawBytes: len(data), FrameBytes: len(data) * 85 / 100, Encode: 600 * time.Microsecond, Blocked: 5 * time.Millisecond})
		}
	})
}

// fashionImages returns the Fashion-MNIST training images (uint8 pixels)
// from Debian's dataset-fashion-mnist, or skips.
func fashionImages(tb testing.TB) []byte {
	f, err := os.Open("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
	if err != nil {
		tb.Skipf("Fashion-MNIST: %v (apt-get install dataset-fashion-mnist; make test does it)", err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	b, err := io.ReadAll(z)
	if err != nil || len(b) < 16+784 {
		tb.Fatalf("Fashion-MNIST images: %v", err)
	}
	return b[16:] // after the IDX header
}

// flStream returns n bytes of traffic like federated learning's, as the
// link benchmark's mixed workload: float32 weights N(0, 0.02) (60% of the
// bytes), float32 gradients with 99% exact zeros (25%) and uint8 images
// (15%), in tensors of 128 KiB to 2 MiB in random order.
func flStream(n int, seed uint64, images []byte) []byte {
	rng := rand.New(rand.NewPCG(seed, 9))
	data := make([]byte, 0, n)
	for len(data) < n {
		size := min(128<<10+4*rng.IntN((2<<20-128<<10)/4), n-len(data))
		switch u := rng.Float64(); {
		case u < 0.6:
			data = append(data, weights(size/4, rng.Uint64())...)
		case u < 0.85:
			b := make([]byte, size)
			for i := 0; i+4 <= size; i += 4 {
				if rng.IntN(100) == 0 {
					binary.LittleEndian.PutUint32(b[i:], math.Float32bits(float32(0.01*rng.NormFloat64())))
				}
			}
			data = append(data, b...)
		default:
			off := 784 * rng.IntN(len(images)/784-size/784-1)
			data = append(data, images[off:off+size]...)
		}
	}
	return data
}

// BenchmarkTunerChooseMixed times what the Tuner does for each frame of a
// mixed stream (flStream, 64 MiB) with the lossless-fast profile on a 100
// Mbit/s link (a simulated clock: each frame takes its wire bytes' time):
// cutting the stream where the data changes (Cut), classifying, the cost
// model, the samples it codes (exploration) and Observe, against encoding
// the frames with the recipes it chose on one core. choose-% is the first
// as a share of the second, samples-% the part of it spent on samples,
// ratio the stream's compression. "settled" runs a Tuner that has seen the
// stream once, as on a live connection; "fresh" a new Tuner per run of 64
// MiB, whose first frame of each class tries every candidate (and whose
// codecs set up their encoders).
func BenchmarkTunerChooseMixed(b *testing.B) {
	data := flStream(64<<20, 1, fashionImages(b))
	prof, err := profile.Builtin("lossless-fast")
	if err != nil {
		b.Fatal(err)
	}
	enc, err := codec.NewEncoder()
	if err != nil {
		b.Fatal(err)
	}
	const bw = 12.5e6
	var out []byte
	newTuner := func() (*Tuner, *time.Time) {
		tu, err := New(WithProfile(prof))
		if err != nil {
			b.Fatal(err)
		}
		clock := time.Now()
		tu.link.now = func() time.Time { return clock }
		return tu, &clock
	}
	// pass sends the stream through tu and returns the time spent choosing
	// and encoding, and the wire bytes.
	pass := func(tu *Tuner, clock *time.Time, seq *uint64) (choose, encode time.Duration, wire int) {
		for off := 0; off < len(data); *seq++ {
			t0 := time.Now()
			chunk := data[off:min(off+prof.ChunkSize, len(data))]
			n := tu.Cut(chunk)
			fi := codec.FrameInfo{Seq: *seq, Type: codec.FrameBytes, DType: codec.Byte, Len: n, First: true, Data: chunk[:n]}
			r := tu.Choose(fi)
			t1 := time.Now()
			if out, err = enc.AppendBytes(out[:0], chunk[:n], r); err != nil {
				b.Fatal(err)
			}
			t2 := time.Now()
			blocked := time.Duration(float64(len(out)) / bw * float64(time.Second))
			*clock = clock.Add(blocked)
			fi.Data = nil
			tu.Observe(codec.FrameStats{Info: fi, Recipe: r, RawBytes: n, FrameBytes: len(out), Encode: t2.Sub(t1), Blocked: blocked})
			choose += t1.Sub(t0) + time.Since(t2)
			encode += t2.Sub(t1)
			wire += len(out)
			off += n
		}
		return choose, encode, wire
	}
	report := func(b *testing.B, choose, encode, samples time.Duration, wire int) {
		b.ReportMetric(100*choose.Seconds()/encode.Seconds(), "choose-%")
		b.ReportMetric(100*samples.Seconds()/encode.Seconds(), "samples-%")
		b.ReportMetric(float64(b.N)*float64(len(data))/float64(wire), "ratio")
	}
	b.Run("settled", func(b *testing.B) {
		tu, clock := newTuner()
		var seq uint64
		pass(tu, clock, &seq)
		_, spent0 := tu.Costs()
		var choose, encode time.Duration
		var wire int
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			c, e, w := pass(tu, clock, &seq)
			choose, encode, wire = choose+c, encode+e, wire+w
		}
		_, spent := tu.Costs()
		report(b, choose, encode, spent-spent0, wire)
	})
	b.Run("fresh", func(b *testing.B) {
		var choose, encode, samples time.Duration
		var wire int
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			tu, clock := newTuner()
			var seq uint64
			c, e, w := pass(tu, clock, &seq)
			_, s := tu.Costs()
			choose, encode, samples, wire = choose+c, encode+e, samples+s, wire+w
		}
		report(b, choose, encode, samples, wire)
	})
}
