package autotune

import (
	"log/slog"
	"math"
	"net"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/profile"
)

// DefaultCandidates are the lossless recipes a Tuner chooses among when
// given none: store raw; for 4-byte elements, plane coding of the exponent
// bytes after a 4-byte shuffle, and every plane Huffman-coded (the planes
// of mantissa bits that are all zero, as in bf16 values held as float32,
// cost next to nothing; others are stored); for 2-byte elements (bf16,
// fp16), the high byte plane coded; s2, zstd level 1, and zstd level 1
// after the sparse layout (zeros as positions, for gradients and images
// with black background), and the same over 4-byte elements for mostly
// zero byte streams of floats (width); for float tensors the exponent
// field apart, Huffman-coded in small blocks (fsplit: bfloat16 weights
// gain most), for bfloat16 also two exponents to a Huffman symbol
// (huff0p: 0.2% larger on real weights, decodes 1.3-1.5x as fast; docs/
// BENCHMARKS.md); for floats of any width, floatrank's context model
// (0.6-2.9% smaller than those on real weights, at tens of MB/s: chosen
// where the link is slower than that). A recipe that starts with a shuffle of a fixed width is
// weighed only on data of that element width; one that starts with width,
// only on mostly-zero bytes.
func DefaultCandidates() []*codec.Recipe {
	return []*codec.Recipe{
		nil,
		codec.MustParseRecipe("shuffle4 | plane3:huff0 | plane0..2:raw"),
		codec.MustParseRecipe("shuffle4 | *:huff0"),
		codec.MustParseRecipe("shuffle2 | plane1:huff0 | plane0:raw"),
		codec.MustParseRecipe("fsplit | exp:huff0b(14)"),
		codec.MustParseRecipe("fsplit | exp:huff0p(15)"),
		codec.MustParseRecipe("fsplit | exp:huff0b(13) | sm:shuffle(3) | *:huff0b(13)"),
		codec.MustParseRecipe("floatrank"),
		codec.MustParseRecipe("*:s2"),
		codec.MustParseRecipe("*:zstd(1)"),
		codec.MustParseRecipe("sparse | *:zstd(1)"),
		codec.MustParseRecipe("width(4) | sparse | *:zstd(1)"),
	}
}

// DefaultLossyCandidates are the lossy recipes a profile rule with an
// error budget and auto adds (those of a width the rule's bits allow):
// half-precision floats with plane coding, blockwise int8 and nf4 with
// zstd. Each is measured for its error on the live data before use. The
// quantizers are the lossy package's stages: a program that links neither
// it nor transport (which links every standard stage) gets none.
func DefaultLossyCandidates() []*codec.Recipe {
	var rs []*codec.Recipe
	for _, s := range []string{
		"fp16 | shuffle2 | plane1:huff0 | plane0:raw",
		"bf16 | shuffle2 | plane1:huff0 | plane0:raw",
		"int8(4096) | *:zstd(1)",
		"nf4(64) | *:zstd(1)",
	} {
		if r, err := codec.ParseRecipe(s); err == nil {
			rs = append(rs, r)
		}
	}
	return rs
}

// Defaults of the Tuner's settings.
const (
	DefaultHysteresis = 0.10
	DefaultMinFrames  = 3
	DefaultExplore    = 0.005
	// sampleSize is the bytes of a frame an alternative recipe is tried
	// on; bootstrapSize, on the first frame of a class, where every
	// candidate is tried.
	sampleSize    = 64 << 10
	bootstrapSize = 16 << 10
	// tinyFrame: shorter frames are stored raw without a choice.
	tinyFrame = 64
)

type classState struct {
	cur   int    // index into the rule's candidates
	since int    // frames since the last switch
	fresh bool   // no frame of the class was sent yet: the first choice is free
	sent  string // the recipe the last frame of the class was sent with
	other bool   // sent is not the recipe chosen for that frame
	// drift: a frame sent came out more than driftGap off its recipe's
	// estimate (the data changed): the other candidates are sampled
	// again, at most once per resampleEvery minimum-frame spans of the
	// class's own frames (frames: the class's frames so far; resampled:
	// frames+1 at the last time).
	drift     bool
	frames    uint64
	resampled uint64
}

// driftGap is how far a frame sent may come out from its recipe's
// estimated ratio before the class's other candidates are sampled again;
// resampleEvery, in minimum-frame units, how often at most.
const (
	driftGap      = 0.10
	resampleEvery = 2
)

type stateKey struct {
	rule  int // the rule's place in the profile, from 1; 0 without a profile
	class Class
}

// Tuner is a codec.Policy that chooses, per frame, the recipe that moves
// data fastest through the whole pipeline: encoding on the cores the
// writer may use, the link, and decoding on the receiver. It measures all
// three on the data flowing (Profiler, Link), predicts each candidate's
// throughput (min of cores×encode speed, bandwidth×ratio, decode speed),
// and switches when another candidate is predicted to be better by the
// hysteresis margin, no sooner than MinFrames frames after the last
// switch. The first frame of a class goes with the best recipe for an
// assumed link (DefaultInitialBandwidth); a writer that is then not held
// back takes the link as unlimited, so the fastest recipe wins until the
// link becomes the bottleneck, its rate is measured and compressing
// recipes win (the backpressure path, as zstd --adapt moves its level
// with the output's pace). Receiver feedback and an application-limited
// TCP_INFO rate only show that the link is at least that fast.
//
// A Tuner serves one writer (one connection). It implements
// codec.FeedbackObserver for the receiver's reports.
type Tuner struct {
	mu         sync.Mutex
	now        func() time.Time // the clock of the encoders' load (tests set their own)
	cands      []candidate      // without a profile
	prof2      *profile.Profile
	sets       map[int]*ruleSet
	link       *Link
	prof       *Profiler
	cores      int
	hysteresis float64
	minFrames  int
	explore    float64
	explain    func(Decision)
	log        *slog.Logger

	states   map[stateKey]*classState
	measured map[profKey]uint64 // frame of each candidate's last sample
	class    Class              // of the last frame
	sniffed  bool               // class is set
	inline   bool               // the last frame was encoded on the writing goroutine
	classes  [256]seqClass      // class of frame seq, for Observe

	// The encoders' load: encode time and wall time, each decayed with
	// time constant loadWindow, since cpuAt.
	cpuAt   time.Time
	cpuBusy float64
	cpuWall float64

	// Cut: the data it cut last with its class, which Choose takes
	// instead of sniffing again.
	cutData  *byte
	cutLen   int
	cutClass Class
	cutShort bool

	// The stages the peer decodes (nil: not known, all allowed), and
	// whether each candidate uses only those.
	peer     map[codec.StageID]bool
	peerOK   map[string]bool
	work     time.Duration // encode time of the frames sent
	spent    time.Duration // time spent measuring samples but the first frame's of each class
	boot     time.Duration // and those
	paced    time.Duration // the frames' time: each its encoding or its time on the link, the longer
	switches int
	lastDec  Decision
	hasDec   bool

	initialBW float64 // bandwidth assumed before anything is measured
	budget    float64 // error budget of the candidates without a profile

	densities       map[string]*densityState // by tensor name
	kept            map[float64]float64      // wire bytes per gradient element kept, by density measured
	densitySwitches int

	probeMin   time.Duration // first probe interval
	probeEvery time.Duration // current probe interval (probeMin to probeMax)
	probeShare float64       // of the time probes that find nothing may take
	lastProbe  time.Time
	probing    bool // a probe is under way: the next switch ends it
	probes     int
	sinceProbe int     // frames since the last probe
	knownBW    float64 // bandwidth at the last probe decision
}

// DefaultInitialBandwidth is the bandwidth a Tuner assumes before it has
// measured anything (100 Mbit/s): the first frames go with the best recipe
// for a wide-area link rather than raw, since a slow link may carry only a
// few frames in all, and a fast one shows itself within a few frames.
const DefaultInitialBandwidth = 12.5e6

// liveMargin: the encode speed of frames sent caps a sample's estimate
// at this multiple (frames wait for cores, samples do not).
const liveMargin = 1.5

// Probe intervals: how long a bandwidth measured earlier is trusted while
// the current recipe does not fill the link.
const (
	DefaultProbeInterval = time.Second
	probeMax             = 8 * time.Second
	// DefaultProbeShare: a probe that did not find a faster link took
	// this share of the time until the next one at most, so probes with
	// large frames on a slow link come seldom and those with small frames
	// often.
	DefaultProbeShare = 0.05
	// probeFrames: a probe comes at least this many times MinFrames
	// frames after the last one, so probes stay a small share of the
	// frames however slow each frame is.
	probeFrames = 8
)

type seqClass struct {
	seq   uint64
	class Class
	name  string
	st    *classState
	dec   *Decision // a switch at this frame, reported once the frame is sent
}

// UseConn tells the Tuner's link estimator which connection it sends on
// (see Link.UseConn); transport.Wrap calls it (transport.ConnUser).
func (t *Tuner) UseConn(c net.Conn) { t.link.UseConn(c) }

// New returns a Tuner.
func New(opts ...Option) (*Tuner, error) {
	t := &Tuner{
		now:        time.Now,
		cores:      min(4, runtime.GOMAXPROCS(0)),
		hysteresis: DefaultHysteresis,
		minFrames:  DefaultMinFrames,
		explore:    DefaultExplore,
		prof:       NewProfiler(),
		states:     map[stateKey]*classState{},
		sets:       map[int]*ruleSet{},
		measured:   map[profKey]uint64{},
		log:        slog.Default(),
		probeMin:   DefaultProbeInterval,
		probeShare: DefaultProbeShare,
		initialBW:  DefaultInitialBandwidth,
		budget:     math.Inf(1),
	}
	for _, r := range DefaultCandidates() {
		t.cands = append(t.cands, candidate{r: r, name: recipeName(r)})
	}
	for _, o := range opts {
		if err := o(t); err != nil {
			return nil, err
		}
	}
	if t.link == nil {
		t.link = NewLink(0)
	}
	t.probeEvery = t.probeMin
	return t, nil
}

// Link returns the Tuner's link estimator.
func (t *Tuner) Link() *Link { return t.link }

// Profiler returns the Tuner's profiler.
func (t *Tuner) Profiler() *Profiler { return t.prof }

// Switches returns how many times the Tuner changed recipe.
func (t *Tuner) Switches() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.switches
}

// Probes returns how many of the switches were probes for a faster link.
func (t *Tuner) Probes() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.probes
}

// Costs returns the encoding time of the frames sent and the time spent
// measuring samples (exploration and profiling).
func (t *Tuner) Costs() (work, explore time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.work, t.spent + t.boot
}

// Choose implements codec.Policy.
func (t *Tuner) Choose(fi codec.FrameInfo) *codec.Recipe {
	t.mu.Lock()
	defer t.mu.Unlock()
	ri, rs := t.rule(&fi)
	if rs.static {
		// The rule's first recipe the frame allows (a lossy one codes
		// float tensors not tagged lossless only), else raw.
		for _, cd := range rs.cands {
			if rs.allows(cd, &fi) {
				return cd.r
			}
		}
		return nil
	}
	if t.link.isLoopback() && slices.ContainsFunc(rs.cands, func(c candidate) bool { return c.r == nil }) {
		return nil // nothing beats raw on loopback: no sampling either
	}
	if len(fi.Data) < tinyFrame || t.cutShort && fi.Type == codec.FrameBytes && t.cutData == &fi.Data[0] {
		// Nothing to code, nor to learn from: empty, or the few bytes
		// Cut sends on their own so that the next frame starts on an
		// element.
		return nil
	}
	c := t.classify(&fi)
	key := stateKey{ri, c}
	st := t.states[key]
	var todo []candidate
	var fresh, boot bool
	size := sampleSize
	if st == nil {
		st = &classState{fresh: true}
		t.states[key] = st
		todo, size, boot = t.bootstrap(c, rs, &fi), bootstrapSize, true
	} else if st.drift && t.explore > 0 && (st.resampled == 0 || st.frames+1 >= st.resampled+uint64(resampleEvery*max(t.minFrames, 1))) {
		// The data changed under the current recipe: what the others
		// were measured on may be stale too (their ratios are replaced).
		st.drift, st.resampled, fresh = false, st.frames+1, true
		for i, cd := range rs.cands {
			if i != st.cur && t.usable(rs, cd, &fi, c) {
				todo = append(todo, cd)
			}
		}
	} else if t.spent < time.Duration(t.explore*float64(t.paced)) {
		todo = t.exploreOne(c, rs, &fi)
	}
	if len(todo) > 0 {
		// Samples are coded without the lock: Observe, from the Writer's
		// output goroutine, must not wait for them. Choose itself is
		// called from one goroutine at a time (the Writer's caller).
		t.mu.Unlock()
		var spent time.Duration
		s := sample(&fi, size)
		for _, cd := range todo {
			d, _ := t.prof.measure(c, cd.name, cd.r, &fi, s, fi.Seq, fresh)
			spent += d
		}
		t.mu.Lock()
		if boot {
			// Outside the exploration's share (WithExplore): once per
			// class, and a slow candidate's sample would otherwise hold
			// the class's next explorations back for many frames.
			t.boot += spent
		} else {
			t.spent += spent
		}
		for _, cd := range todo {
			t.measured[profKey{c, cd.name}] = fi.Seq
		}
	}
	d := t.decide(c, rs, &fi, st)
	cd := rs.cands[st.cur]
	if !t.usable(rs, cd, &fi, c) || !t.withinBudget(c, cd, rs) {
		cd = candidate{name: "raw"}
	}
	t.classes[fi.Seq%uint64(len(t.classes))] = seqClass{seq: fi.Seq, class: c, name: cd.name, st: st, dec: d}
	st.since++
	st.frames++
	t.sinceProbe++
	return cd.r
}

// ObservePeer implements codec.PeerObserver: from now on only the
// candidates whose stages the peer decodes are chosen.
func (t *Tuner) ObservePeer(h *codec.Hello) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.peer = make(map[codec.StageID]bool, len(h.Stages))
	for _, id := range h.Stages {
		t.peer[id] = true
	}
	t.peerOK = map[string]bool{}
}

// Observe implements codec.Policy.
func (t *Tuner) Observe(fs codec.FrameStats) {
	if fs.Err != nil {
		return
	}
	t.link.ObserveWrite(fs.Info.Seq, fs.FrameBytes, fs.Blocked)
	if fs.Foreign {
		return // its bytes took the link; its recipe was not ours
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.inline = fs.Inline
	t.work += fs.Encode
	// Exploration is paid from the frames' time: their encoding, or
	// their time on the link where that is longer. A raw frame costs no
	// encoding: on encoding time alone, a class stored raw (incompressible
	// at first, or every coder measured slow in a busy moment) would never
	// try the others again.
	paced := fs.Encode
	if bw := t.link.Estimate().Bandwidth; bw > 0 && !math.IsInf(bw, 1) {
		paced = max(paced, time.Duration(float64(fs.FrameBytes)/bw*float64(time.Second)))
	}
	t.paced += paced
	t.observeLoad(fs.Encode, fs.Recipe != nil, t.now())
	sc := &t.classes[fs.Info.Seq%uint64(len(t.classes))]
	if sc.seq != fs.Info.Seq || sc.st == nil {
		return
	}
	// The explanation tells what was sent: the Writer may have sent
	// another recipe than the one chosen (a tensor keeps a lossy or
	// block recipe for all its chunks).
	sent := recipeName(fs.Recipe)
	switch d := sc.dec; {
	case d != nil:
		if d.To != sent {
			d.Chosen, d.To = d.To, sent
		}
		t.report(*d)
	case sent != sc.st.sent && (sent != sc.name || sc.st.other):
		// Not a switch of the Tuner's: the frame went out otherwise than
		// chosen, or as chosen again after that.
		d := Decision{Seq: fs.Info.Seq, Class: sc.class, From: sc.st.sent, To: sent,
			Reason: "sent as chosen again"}
		if sent != sc.name {
			d.Chosen, d.Reason = sc.name, "the writer sent another recipe than the one chosen"
		}
		t.report(d)
	}
	sc.dec, sc.st.sent, sc.st.other = nil, sent, sent != sc.name
	// Only the chosen recipe's frames teach.
	if sc.name != "" && sc.name == sent {
		// An estimate from the first frame's 16 KiB sample alone is not
		// held against the first whole frame: they often differ by more.
		if e, ok := t.prof.Get(sc.class, sc.name); ok && e.Samples > 1 && e.Ratio > 0 && fs.RawBytes > 0 && fs.FrameBytes > 0 {
			if obs := float64(fs.RawBytes) / float64(fs.FrameBytes); math.Abs(obs/e.Ratio-1) > driftGap {
				sc.st.drift = true
			}
		}
		t.prof.Observe(sc.class, sc.name, fs.RawBytes, fs.FrameBytes, fs.Encode, fs.Info.Seq)
	}
}

// ObserveFeedback implements codec.FeedbackObserver.
func (t *Tuner) ObserveFeedback(fb codec.Feedback) {
	t.link.ObserveFeedback(fb.WireBytes)
}

// LastDecision returns the last switch, if any.
func (t *Tuner) LastDecision() (Decision, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastDec, t.hasDec
}

var (
	_ codec.Policy           = (*Tuner)(nil)
	_ codec.Cutter           = (*Tuner)(nil)
	_ codec.FeedbackObserver = (*Tuner)(nil)
	_ codec.PeerObserver     = (*Tuner)(nil)
)
