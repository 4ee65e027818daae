package autotune

import (
	"math"
	"sync"
	"time"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/distortion"
)

// Stats are the running estimates for one recipe on one class of data.
type Stats struct {
	Ratio  float64 // decoded bytes per wire byte (header included)
	Encode float64 // decoded bytes per second, on one core
	Decode float64 // decoded bytes per second, on one core (0: not measured)
	// Live is the encode speed of the frames actually sent with the
	// recipe (0: none sent yet). It includes waiting for a core, so it is
	// only used to cap Encode where a sample was far too optimistic
	// (slow levels run faster on a 64 KiB sample than on whole frames).
	Live    float64
	Samples int    // measurements behind the estimates
	Seq     uint64 // frame sequence number of the last measurement
	// Error is the largest relative RMS error ||x - y|| / ||x|| of the
	// decoded values over the samples of a lossy recipe (+Inf where it
	// cannot be measured: a lossy recipe on data that is not float);
	// ErrorSamples counts them. Lossless recipes keep 0 and 0.
	Error        float64
	ErrorSamples int
}

// ewma is the weight of a new measurement in the running estimates.
const ewma = 0.3

func (s *Stats) add(ratio, enc, dec float64, seq uint64) {
	mix := func(old, v float64) float64 {
		switch {
		case v <= 0:
			return old
		case old <= 0:
			return v
		}
		return (1-ewma)*old + ewma*v
	}
	s.Ratio = mix(s.Ratio, ratio)
	s.Encode = mix(s.Encode, enc)
	s.Decode = mix(s.Decode, dec)
	s.Samples++
	s.Seq = max(s.Seq, seq) // Observe may come after a later frame's sample
}

type profKey struct {
	class  Class
	recipe string
}

// Profiler keeps Stats per recipe and class of data, from the frames
// actually sent (ratio and encode speed) and from samples of them coded
// with other recipes (ratio, encode and decode speed). It is safe for
// concurrent use.
type Profiler struct {
	mu    sync.Mutex
	stats map[profKey]*Stats
	enc   *codec.Encoder
	dec   *codec.Decoder
	buf   []byte
	warm  map[string]bool // recipes coded once already (their coders set up)
	// codeMu guards enc, dec, buf and warm: Measure codes under it alone.
	codeMu sync.Mutex
}

// NewProfiler returns an empty Profiler.
func NewProfiler() *Profiler {
	enc, err := codec.NewEncoder()
	if err != nil {
		panic(err) // no options: cannot fail
	}
	return &Profiler{stats: map[profKey]*Stats{}, enc: enc, dec: new(codec.Decoder), warm: map[string]bool{}}
}

// Get returns the estimates for recipe name on class c.
func (p *Profiler) Get(c Class, name string) (Stats, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.stats[profKey{c, name}]
	if !ok {
		return Stats{}, false
	}
	return *s, true
}

func (p *Profiler) entry(c Class, name string) *Stats {
	k := profKey{c, name}
	s := p.stats[k]
	if s == nil {
		s = &Stats{}
		p.stats[k] = s
	}
	return s
}

// Observe records a frame sent with recipe name: raw decoded bytes, wire
// bytes and encode time. The ratio joins the estimates; the speed is kept
// apart (Live): a frame's encode time in the writer's pipeline includes
// waiting for a core, which the samples of the other candidates do not,
// and comparing the two would favour whatever is not running.
func (p *Profiler) Observe(c Class, name string, raw, wire int, encode time.Duration, seq uint64) {
	if raw <= 0 || wire <= 0 {
		return
	}
	p.mu.Lock()
	s := p.entry(c, name)
	obs := float64(raw) / float64(wire)
	if s.Ratio > 0 && math.Abs(obs/s.Ratio-1) > driftGap {
		s.Ratio = obs // a whole frame far off the estimate: the data changed
		s.Samples++
		s.Seq = max(s.Seq, seq)
	} else {
		s.add(obs, 0, 0, seq)
	}
	if encode > 0 {
		v := float64(raw) / encode.Seconds()
		if s.Live > 0 {
			v = (1-ewma)*s.Live + ewma*v
		}
		s.Live = v
	}
	p.mu.Unlock()
}

// Measure codes sample with r as frame fi would be (a tensor chunk or
// bytes), decodes it back, and records ratio and both speeds. It returns
// the time it spent.
func (p *Profiler) Measure(c Class, name string, r *codec.Recipe, fi *codec.FrameInfo, sample []byte, seq uint64) (time.Duration, error) {
	return p.measure(c, name, r, fi, sample, seq, false)
}

// measure is Measure; with fresh, the sample's ratio replaces the estimate
// instead of joining it (the data changed), once the sample is coded.
func (p *Profiler) measure(c Class, name string, r *codec.Recipe, fi *codec.FrameInfo, sample []byte, seq uint64, fresh bool) (time.Duration, error) {
	// The coders have a lock of their own: Observe (the writer's output
	// goroutine) waits for the estimates only, not for a sample's coding.
	p.codeMu.Lock()
	defer p.codeMu.Unlock()
	in := sample // the values coded
	var t *codec.Tensor
	if esz := fi.DType.Size(); fi.Type == codec.FrameTensor && fi.DType != codec.Byte && esz > 0 {
		n := len(sample) / esz
		in = sample[:n*esz]
		t = &codec.Tensor{Name: fi.Name, DType: fi.DType, Shape: []int64{int64(n)}, Data: in}
	}
	code := func() ([]byte, error) {
		if t != nil {
			return p.enc.AppendTensor(p.buf[:0], t, r)
		}
		return p.enc.AppendBytes(p.buf[:0], sample, r)
	}
	t00 := time.Now()
	if !p.warm[name] {
		// The first use of a recipe sets up its coders (tables, windows,
		// buffers): not what coding a frame costs. Code once untimed.
		p.warm[name] = true
		if out, err := code(); err == nil {
			p.buf = out
		}
	}
	t0 := time.Now()
	out, err := code()
	t1 := time.Now()
	if err != nil {
		return t1.Sub(t00), err
	}
	p.buf = out
	f, _, err := p.dec.DecodeFrame(out)
	if err != nil {
		return time.Since(t00), err
	}
	t2 := time.Now()
	ratio := float64(len(sample)) / float64(len(out))
	e := 0.0
	if r.Lossy() {
		e = math.Inf(1)
		if len(f.Tensors) == 1 {
			var es distortion.Stats
			if es.Add(fi.DType, in, f.Tensors[0].Data) == nil {
				e = es.RelL2()
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.entry(c, name)
	if fresh {
		s.Ratio = 0
	}
	if r.Lossy() {
		s.Error = max(s.Error, e)
		s.ErrorSamples++
	}
	s.add(ratio, float64(len(sample))/max(t1.Sub(t0), time.Microsecond).Seconds(),
		float64(len(sample))/max(t2.Sub(t1), time.Microsecond).Seconds(), seq)
	return t2.Sub(t00), nil
}
