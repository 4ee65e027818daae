package autotune

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/profile"
)

// DefaultCandidates are the lossless recipes a Tuner chooses among when
// given none: store raw, plane coding of the exponent bytes after a 4-byte
// shuffle, s2, zstd level 1, and zstd level 1 after the sparse layout
// (zeros as positions, for gradients and images with black background).
func DefaultCandidates() []*codec.Recipe {
	return []*codec.Recipe{
		nil,
		codec.MustParseRecipe("shuffle4 | plane3:huff0 | plane0..2:raw"),
		codec.MustParseRecipe("*:s2"),
		codec.MustParseRecipe("*:zstd(1)"),
		codec.MustParseRecipe("sparse | *:zstd(1)"),
	}
}

// DefaultLossyCandidates are the lossy recipes a profile rule with an
// error budget and auto adds (those of a width the rule's bits allow):
// half-precision floats with plane coding, blockwise int8 and nf4 with
// zstd. Each is measured for its error on the live data before use.
func DefaultLossyCandidates() []*codec.Recipe {
	return []*codec.Recipe{
		codec.MustParseRecipe("fp16 | shuffle2 | plane1:huff0 | plane0:raw"),
		codec.MustParseRecipe("bf16 | shuffle2 | plane1:huff0 | plane0:raw"),
		codec.MustParseRecipe("int8(4096) | *:zstd(1)"),
		codec.MustParseRecipe("nf4(64) | *:zstd(1)"),
	}
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

// Decision explains one switch of recipe.
type Decision struct {
	// Tensor is set for a density decision (Tuner.Density): From and To
	// are densities, Seq and Class are not used.
	Tensor      string
	Seq         uint64
	Class       Class
	From, To    string
	Estimate    Estimate
	Bandwidth   float64 // the bandwidth the cost model used (+Inf: unknown, assumed unlimited)
	Predictions []Prediction
	Reason      string
	Probe       bool // a probe for a faster link: the Tuner returns unless it finds one
	// Chosen is set when the frame went out with another recipe than
	// the one the Tuner chose (To is what was sent): the chosen one.
	Chosen string
}

// Prediction is the cost model's figure for one candidate.
type Prediction struct {
	Recipe     string
	Throughput float64 // decoded bytes per second through the whole pipeline
	Limit      string  // what bounds it: "encode", "link" or "decode"; "error" over the error budget
	Stats      Stats
}

func (d Decision) String() string {
	var b strings.Builder
	if d.Tensor != "" {
		fmt.Fprintf(&b, "tensor %s: %s -> %s: %s; bandwidth %s (%s)", d.Tensor, d.From, d.To, d.Reason, rate(d.Bandwidth), d.Estimate.Source)
		return b.String()
	}
	fmt.Fprintf(&b, "frame %d (%v): %s -> %s: %s; bandwidth %s (%s)", d.Seq, d.Class, d.From, d.To, d.Reason, rate(d.Bandwidth), d.Estimate.Source)
	if d.Chosen != "" {
		fmt.Fprintf(&b, "; sent as %s, chosen %s", d.To, d.Chosen)
	}
	for _, p := range d.Predictions {
		fmt.Fprintf(&b, "; %s %s (%s-bound, ratio %.3f", p.Recipe, rate(p.Throughput), p.Limit, p.Stats.Ratio)
		if p.Stats.ErrorSamples > 0 {
			fmt.Fprintf(&b, ", error %.2g", p.Stats.Error)
		}
		b.WriteByte(')')
	}
	return b.String()
}

func rate(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "unbounded"
	case v >= 1e9:
		return fmt.Sprintf("%.2f GB/s", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.2f MB/s", v/1e6)
	}
	return fmt.Sprintf("%.1f kB/s", v/1e3)
}

type candidate struct {
	r    *codec.Recipe // nil: stored raw
	name string
}

type classState struct {
	cur   int    // index into the rule's candidates
	since int    // frames since the last switch
	fresh bool   // no frame of the class was sent yet: the first choice is free
	sent  string // the recipe the last frame of the class was sent with
	other bool   // sent is not the recipe chosen for that frame
}

// ruleSet is what a Tuner may choose from for the frames of one profile
// rule (or, without a profile, for every frame).
type ruleSet struct {
	cands  []candidate
	static bool // autotune off: always the first candidate
	// budget is the largest relative RMS error a lossy candidate may
	// show on samples; 0 allows lossless candidates only.
	budget float64
}

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
	cands      []candidate // without a profile
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
	spent    time.Duration // time spent measuring samples
	switches int
	lastDec  Decision
	hasDec   bool

	initialBW float64 // bandwidth assumed before anything is measured
	budget    float64 // error budget of the candidates without a profile

	densities       map[string]*densityState // by tensor name
	keptBytes       float64                  // wire bytes per gradient element kept (0: not measured)
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

// Option configures a Tuner.
type Option func(*Tuner) error

// WithCandidates sets the recipes to choose among (nil: stored raw).
func WithCandidates(rs ...*codec.Recipe) Option {
	return func(t *Tuner) error {
		if len(rs) == 0 {
			return fmt.Errorf("autotune: no candidate recipes")
		}
		t.cands = t.cands[:0]
		for _, r := range rs {
			t.cands = append(t.cands, candidate{r: r, name: recipeName(r)})
		}
		return nil
	}
}

func recipeName(r *codec.Recipe) string {
	if r == nil {
		return "raw"
	}
	return r.String()
}

// WithErrorBudget sets the largest relative RMS error ||x - y|| / ||x||
// a lossy candidate given by WithCandidates may show on samples of the
// data before the Tuner uses it (default: no limit, the caller chose the
// candidates). 0 keeps to the lossless candidates. Profiles set a budget
// per rule instead (error_budget).
func WithErrorBudget(e float64) Option {
	return func(t *Tuner) error {
		if !(e >= 0) {
			return fmt.Errorf("autotune: error budget %v", e)
		}
		t.budget = e
		return nil
	}
}

// WithCores sets the cores encoding may use (default min(4, GOMAXPROCS),
// the Writer's default concurrency).
func WithCores(n int) Option {
	return func(t *Tuner) error {
		if n < 1 || n > 1024 {
			return fmt.Errorf("autotune: %d cores", n)
		}
		t.cores = n
		return nil
	}
}

// WithHysteresis sets the gain a candidate must promise over the current
// recipe to replace it (default 0.10: 10%).
func WithHysteresis(h float64) Option {
	return func(t *Tuner) error {
		if !(h >= 0 && h <= 10) {
			return fmt.Errorf("autotune: hysteresis %v outside [0, 10]", h)
		}
		t.hysteresis = h
		return nil
	}
}

// WithMinFrames sets how many frames a recipe stays before another switch
// (default 3).
func WithMinFrames(n int) Option {
	return func(t *Tuner) error {
		if n < 0 {
			return fmt.Errorf("autotune: min frames %d", n)
		}
		t.minFrames = n
		return nil
	}
}

// WithExplore sets the time spent trying other recipes on samples, as a
// share of the encoding time of the frames sent (default 0.03, at most
// 0.05). The first frame of each class of data tries every candidate once
// on a sample, whatever the share.
func WithExplore(share float64) Option {
	return func(t *Tuner) error {
		if !(share >= 0 && share <= 0.05) {
			return fmt.Errorf("autotune: explore share %v outside [0, 0.05]", share)
		}
		t.explore = share
		return nil
	}
}

// WithProbeInterval sets how long a bandwidth measured earlier is trusted
// while the current recipe, limited by its own speed, does not fill the
// link (default DefaultProbeInterval). Then the fastest candidate is tried
// for a few frames, to find out whether the link became faster. When it
// did not, the next probe waits 20 times as long as that one took (at
// least d, at most 8 s), so probing stays within 5% of the time: with
// small frames the link is probed every d, with large frames on a slow
// link more seldom. The interval starts again at d when the bandwidth
// changes.
func WithProbeInterval(d time.Duration) Option {
	return func(t *Tuner) error {
		if d <= 0 {
			return fmt.Errorf("autotune: probe interval %v", d)
		}
		t.probeMin = d
		return nil
	}
}

// WithProbeShare sets the share of the time that probes which find no
// faster link may take (default DefaultProbeShare, 5%): after such a
// probe the next waits its duration divided by the share (at least the
// probe interval, at most 8 s). A larger share finds a rise sooner where
// probes are costly (large frames on a slow link).
func WithProbeShare(f float64) Option {
	return func(t *Tuner) error {
		if !(f > 0 && f <= 1) {
			return fmt.Errorf("autotune: probe share %v outside (0, 1]", f)
		}
		t.probeShare = f
		return nil
	}
}

// WithProfile takes the autotune settings of p (cores times the CPU
// budget, exploration share, hysteresis, min frames, link hint) and its
// recipes: each frame's candidates are those of the rule its tensor
// matches (a byte stream matches as an unnamed tensor of dtype bytes and
// unknown size), with the default candidates added where the rule says
// auto. A rule of a profile with autotune off always gets its first
// recipe. Options after WithProfile override its settings.
func WithProfile(p *profile.Profile) Option {
	return func(t *Tuner) error {
		if p == nil {
			return fmt.Errorf("autotune: nil profile")
		}
		a := p.Autotune
		t.prof2 = p
		if a.Cores > 0 {
			t.cores = a.Cores
		}
		if a.CPUBudget > 0 {
			t.cores = max(1, int(math.Round(float64(t.cores)*a.CPUBudget)))
		}
		t.explore = min(a.Explore, 0.05)
		t.hysteresis = a.Hysteresis
		t.minFrames = a.MinFrames
		if a.LinkHint > 0 {
			t.link = NewLink(float64(a.LinkHint))
		}
		return nil
	}
}

// WithInitialBandwidth sets the bandwidth, in bytes per second, assumed
// before any is measured (default DefaultInitialBandwidth).
func WithInitialBandwidth(bw float64) Option {
	return func(t *Tuner) error {
		if !(bw > 0) {
			return fmt.Errorf("autotune: initial bandwidth %v", bw)
		}
		t.initialBW = bw
		return nil
	}
}

// UseConn tells the Tuner's link estimator which connection it sends on
// (see Link.UseConn); transport.Wrap calls it (transport.ConnUser).
func (t *Tuner) UseConn(c net.Conn) { t.link.UseConn(c) }

// WithLink uses l as the link estimator (to set a hint or TCP_INFO).
func WithLink(l *Link) Option {
	return func(t *Tuner) error { t.link = l; return nil }
}

// WithExplain calls f with every switch and the estimates behind it. f is
// called with the Tuner's lock held: it must not call the Tuner.
func WithExplain(f func(Decision)) Option {
	return func(t *Tuner) error { t.explain = f; return nil }
}

// WithLogger sends a debug line per switch to l (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(t *Tuner) error { t.log = l; return nil }
}

// New returns a Tuner.
func New(opts ...Option) (*Tuner, error) {
	t := &Tuner{
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
	return t.work, t.spent
}

// rule returns the index and candidates of the profile rule frame fi
// falls under.
func (t *Tuner) rule(fi *codec.FrameInfo) (int, *ruleSet) {
	if t.prof2 == nil {
		rs := t.sets[0]
		if rs == nil {
			rs = &ruleSet{cands: t.cands, budget: t.budget}
			t.sets[0] = rs
		}
		return 0, rs
	}
	size := int64(-1)
	if fi.Type == codec.FrameTensor {
		size = int64(fi.DType.Size())
		for _, d := range fi.Shape {
			size *= d
		}
	}
	// The rule's place in the profile, from 1 (0: the default rule when
	// none matches), whatever its Index says: a Profile built by hand may
	// leave Index 0.
	i := t.prof2.MatchIndex(fi.Name, fi.DType, size, fi.Tags)
	key := i + 1
	var r *profile.Rule
	if i >= 0 {
		r = &t.prof2.Rules[i]
	} else {
		d := profile.DefaultRule()
		r = &d
	}
	rs := t.sets[key]
	if rs == nil {
		rs = &ruleSet{static: !t.prof2.Autotune.Enabled, budget: r.ErrorBudget}
		seen := map[string]bool{}
		add := func(r *codec.Recipe) {
			if r != nil && (r.String() == "raw" || r.String() == "*:raw") {
				r = nil // stored raw: what the cost model treats as free
			}
			if name := recipeName(r); !seen[name] {
				seen[name] = true
				rs.cands = append(rs.cands, candidate{r: r, name: name})
			}
		}
		for _, nr := range r.Recipes {
			add(nr.Recipe)
		}
		if r.Auto && !rs.static {
			for _, c := range t.cands {
				add(c.r)
			}
			if r.ErrorBudget > 0 {
				for _, l := range DefaultLossyCandidates() {
					if len(r.Bits) == 0 || slices.Contains(r.Bits, l.Bits()) {
						add(l)
					}
				}
			}
		}
		if len(rs.cands) == 0 {
			add(nil)
		}
		t.sets[key] = rs
	}
	return key, rs
}

// allows reports whether cd may code frame fi: a lossy recipe only on a
// float tensor not tagged lossless (the Writer refuses the rest), and
// only under a rule with an error budget.
func (rs *ruleSet) allows(cd candidate, fi *codec.FrameInfo) bool {
	return cd.r == nil || !cd.r.Lossy() ||
		rs.budget > 0 && !fi.Tags.Lossless && fi.Type == codec.FrameTensor && fi.DType.IsFloat()
}

// withinBudget reports whether cd's error, measured on samples of class
// c, is within the rule's budget; a lossy candidate not yet measured is
// not.
func (t *Tuner) withinBudget(c Class, cd candidate, rs *ruleSet) bool {
	if cd.r == nil || !cd.r.Lossy() {
		return true
	}
	s, _ := t.prof.Get(c, cd.name)
	return s.ErrorSamples > 0 && s.Error <= rs.budget
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
	size := sampleSize
	if st == nil {
		st = &classState{fresh: true}
		t.states[key] = st
		todo, size = t.bootstrap(rs, &fi), bootstrapSize
	} else if t.spent < time.Duration(t.explore*float64(t.work)) {
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
			d, _ := t.prof.Measure(c, cd.name, cd.r, &fi, s, fi.Seq)
			spent += d
		}
		t.mu.Lock()
		t.spent += spent
		for _, cd := range todo {
			t.measured[profKey{c, cd.name}] = fi.Seq
		}
	}
	d := t.decide(c, rs, &fi, st)
	cd := rs.cands[st.cur]
	if !t.usable(rs, cd, &fi) || !t.withinBudget(c, cd, rs) {
		cd = candidate{name: "raw"}
	}
	t.classes[fi.Seq%uint64(len(t.classes))] = seqClass{seq: fi.Seq, class: c, name: cd.name, st: st, dec: d}
	st.since++
	t.sinceProbe++
	return cd.r
}

// classify returns the class of frame fi: the one Cut found for its data,
// else what Sniff finds, with the class of the frame before for the
// sparsity hysteresis where the data is of the same type.
func (t *Tuner) classify(fi *codec.FrameInfo) Class {
	var c Class
	if fi.Type == codec.FrameBytes && t.cutData == &fi.Data[0] && t.cutLen == len(fi.Data) {
		c = t.cutClass
	} else {
		var prev *Class
		if t.sniffed && t.class.DType == fi.DType {
			prev = &t.class
		}
		c = sniff(*fi, prev)
	}
	t.cutData = nil
	t.class, t.sniffed = c, true
	return c
}

// sample returns the middle size bytes of the frame's data.
func sample(fi *codec.FrameInfo, size int) []byte {
	b := fi.Data
	if len(b) > size {
		off := (len(b) - size) / 2 &^ 7
		b = b[off : off+size]
	}
	return b
}

// bootstrap returns the candidates to measure on a sample of the first
// frame of a class: all that the frame allows.
func (t *Tuner) bootstrap(rs *ruleSet, fi *codec.FrameInfo) []candidate {
	var todo []candidate
	for _, cd := range rs.cands {
		if t.usable(rs, cd, fi) {
			todo = append(todo, cd)
		}
	}
	return todo
}

// exploreOne returns the candidate sampled longest ago, the current one
// included (its frames give its ratio, not its speed), to measure again.
func (t *Tuner) exploreOne(c Class, rs *ruleSet, fi *codec.FrameInfo) []candidate {
	if len(rs.cands) < 2 {
		return nil
	}
	pick, oldest := -1, uint64(math.MaxUint64)
	for i, cd := range rs.cands {
		if !t.usable(rs, cd, fi) {
			continue
		}
		if at := t.measured[profKey{c, cd.name}]; at < oldest { // 0: never
			pick, oldest = i, at
		}
	}
	if pick < 0 {
		return nil
	}
	return []candidate{rs.cands[pick]}
}

// Above fastLink bytes per second, a coding recipe must promise
// fastHysteresis more than raw to replace it.
const (
	fastLink       = 250e6
	fastHysteresis = 0.3
)

// Load: loadWindow is the time constant of the encoders' load, and
// minLoad the least load the cost model assumes.
const (
	loadWindow = time.Second
	minLoad    = 0.5
)

// observeLoad adds a frame's encode time to the load figures. Only the
// time of coded frames counts: frames stored raw take no encoder, and a
// stream sent raw says nothing of how busy coding it would keep them (on
// a fast link, all of it: counting the raw frames' time would make coding
// look free and the Tuner swing between the two).
func (t *Tuner) observeLoad(enc time.Duration, coded bool, now time.Time) {
	if !coded {
		t.cpuAt = now
		return
	}
	if !t.cpuAt.IsZero() {
		dt := now.Sub(t.cpuAt).Seconds()
		decay := math.Exp(-dt / loadWindow.Seconds())
		t.cpuBusy = t.cpuBusy*decay + enc.Seconds()
		t.cpuWall = t.cpuWall*decay + dt
	}
	t.cpuAt = now
}

// load is the share of the time the encoders spent encoding lately (1
// when not known): where the link holds the writer back, the encoders
// wait most of the time.
func (t *Tuner) load(cores int) float64 {
	if t.cpuWall <= 0 {
		return 1
	}
	return min(1, t.cpuBusy/(float64(cores)*t.cpuWall))
}

// predict is the cost model: a pipelined writer encodes on t.cores cores
// while earlier frames are on the link, and the receiver decodes on one
// goroutine, so the slowest of the three sets the pace. The encoders'
// speed counts as if the load of the frames lately were all of one
// class: a stream mixes kinds of data, and where the link is the
// bottleneck the encoders wait most of the time, so a class that codes
// slowly but well (zeros between gradients) may take the time they wait;
// its frames' turn on the link is what the other classes wait for. The
// load is taken as at least minLoad.
func (t *Tuner) predict(c Class, cd candidate, bw float64) Prediction {
	s, _ := t.prof.Get(c, cd.name)
	p := Prediction{Recipe: cd.name, Throughput: math.Inf(1), Limit: "encode", Stats: s}
	if cd.r == nil {
		// Stored raw, a frame costs what the same bytes cost without
		// tensorpress: a copy on each side, which a sample's timing of a
		// few KiB overstates many times (0.7 GB/s where memory copies at
		// 10): the link alone sets its pace.
		if s.Samples == 0 {
			p.Throughput = 0
		} else if s.Ratio > 0 {
			p.Throughput, p.Limit = bw*s.Ratio, "link"
		}
		return p
	}
	if enc := s.Encode; enc > 0 {
		if s.Live > 0 {
			// Frames sent show the sample far too optimistic: trust
			// them, with a margin for their waiting for a core.
			enc = min(enc, liveMargin*s.Live)
		}
		cores := t.cores
		if t.inline {
			cores = 1 // the frames are encoded one at a time, as they are written
		}
		p.Throughput = enc * float64(cores) / max(t.load(cores), minLoad)
	}
	if s.Ratio > 0 {
		if v := bw * s.Ratio; v < p.Throughput {
			p.Throughput, p.Limit = v, "link"
		}
	}
	if s.Decode > 0 && s.Decode < p.Throughput {
		p.Throughput, p.Limit = s.Decode, "decode"
	}
	if s.Samples == 0 {
		p.Throughput = 0 // never measured: not chosen
	}
	return p
}

// usable reports whether cd may code frame fi: the rule allows it and
// the peer decodes every stage it uses.
func (t *Tuner) usable(rs *ruleSet, cd candidate, fi *codec.FrameInfo) bool {
	if !rs.allows(cd, fi) {
		return false
	}
	if cd.r == nil || t.peer == nil {
		return true
	}
	ok, seen := t.peerOK[cd.name]
	if !seen {
		ok = true
		for _, s := range cd.r.Steps {
			for _, op := range s.Ops {
				ok = ok && t.peer[op.Stage().ID]
			}
		}
		t.peerOK[cd.name] = ok
	}
	return ok
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

// decide chooses the recipe of the class's next frame and returns the
// switch it made, if any.
func (t *Tuner) decide(c Class, rs *ruleSet, fi *codec.FrameInfo, st *classState) *Decision {
	cands := rs.cands
	est := t.link.Estimate()
	bw := est.Bandwidth
	switch {
	case bw <= 0 && est.Source == "":
		// Nothing measured yet: assume a wide-area link.
		bw = t.initialBW
		est.Source = "initial guess"
	case est.Bound || bw <= 0:
		bw = math.Inf(1)
	}
	probe := false
	now := time.Now()
	if t.probing && now.Sub(t.lastProbe) > probeMax {
		t.probing = false // the probe found a faster link and stayed
	}
	if est.Kept {
		if t.knownBW > 0 && math.Abs(est.Bandwidth/t.knownBW-1) > 0.25 {
			t.probeEvery = t.probeMin // the link changed: probe again soon
		}
		t.knownBW = est.Bandwidth
		if now.Sub(est.At) > t.probeEvery && now.Sub(t.lastProbe) > t.probeEvery && t.sinceProbe >= probeFrames*max(t.minFrames, 1) {
			// The current recipe has not filled the link for a while: try
			// the fastest pipeline, as if the link were unlimited. If the
			// link is as slow as before, the writer is held back at once,
			// the rate is measured again and the Tuner comes back.
			bw, probe = math.Inf(1), true
		}
	}
	preds := make([]Prediction, len(cands))
	raw := -1
	for i, cd := range cands {
		preds[i] = t.predict(c, cd, bw)
		switch {
		case !t.usable(rs, cd, fi):
			preds[i].Throughput = 0
		case !t.withinBudget(c, cd, rs):
			preds[i].Throughput, preds[i].Limit = 0, "error"
		}
		if cd.r == nil {
			raw = i
		}
	}
	// A recipe that does not shrink the data cannot beat storing it raw,
	// whatever its measured speed: the difference is noise, and raw costs
	// the least CPU.
	if raw >= 0 && preds[raw].Stats.Ratio > 0 {
		for i := range preds {
			if i != raw && preds[i].Stats.Ratio <= 1.01*preds[raw].Stats.Ratio {
				preds[i].Throughput = min(preds[i].Throughput, 0.99*preds[raw].Throughput)
			}
		}
	}
	best, bestThr := st.cur, -1.0
	for i, p := range preds {
		if p.Throughput > bestThr {
			best, bestThr = i, p.Throughput
		}
	}
	cur := preds[st.cur].Throughput
	fresh := st.fresh
	st.fresh = false
	h := t.hysteresis
	if cands[st.cur].r == nil && bw > fastLink && !math.IsInf(bw, 1) {
		// Leaving raw on a link faster than 2 Gbit/s: there the rate
		// measured moves with the CPU (a link between two processes of
		// one machine is the CPU), which coding takes from it.
		h = max(h, fastHysteresis)
	}
	if best == st.cur || !fresh && (st.since < t.minFrames && preds[st.cur].Throughput > 0 || !(bestThr > cur*(1+h))) {
		return nil
	}
	switch {
	case probe:
		t.lastProbe, t.probing = now, true
		t.probes++
		t.sinceProbe = 0
	case t.probing:
		// Back from a probe that found the link as slow as before: wait
		// long enough that probing stays within its share of the time.
		t.probing = false
		t.probeEvery = min(max(time.Duration(float64(now.Sub(t.lastProbe))/t.probeShare), t.probeMin), probeMax)
	}
	d := Decision{
		Seq: fi.Seq, Class: c, From: cands[st.cur].name, To: cands[best].name,
		Estimate: est, Bandwidth: bw, Predictions: preds,
		Reason: fmt.Sprintf("predicted %s against %s (+%.0f%%)", rate(bestThr), rate(cur), 100*(bestThr/max(cur, 1e-9)-1)),
		Probe:  probe,
	}
	switch {
	case fresh:
		d.Reason = "first frame of its class: the best for " + est.Source + " " + rate(bw)
	case probe:
		d.Reason += fmt.Sprintf("; probe: the link rate %s was measured %v ago and the current recipe does not fill it", rate(est.Bandwidth), time.Since(est.At).Round(time.Millisecond))
	case est.Bound || est.Bandwidth <= 0:
		d.Reason += "; link not yet the bottleneck: fastest pipeline first"
	}
	st.cur, st.since = best, 0
	t.switches++
	t.link.Restart(fi.Seq)
	return &d
}

// report explains a switch once its frame was sent, with the recipe sent.
func (t *Tuner) report(d Decision) {
	t.lastDec, t.hasDec = d, true
	if t.explain != nil {
		t.explain(d)
	}
	if t.log != nil && t.log.Enabled(context.Background(), slog.LevelDebug) {
		t.log.Debug("autotune: switch", "frame", d.Seq, "class", d.Class.String(), "from", d.From, "to", d.To,
			"chosen", d.Chosen, "bandwidth", rate(d.Bandwidth), "source", d.Estimate.Source, "reason", d.Reason)
	}
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
	t.observeLoad(fs.Encode, fs.Recipe != nil, time.Now())
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
