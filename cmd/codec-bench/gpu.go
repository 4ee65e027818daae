package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gpu"
	"github.com/tensorpress/tensorpress/gradient"
	"github.com/tensorpress/tensorpress/internal/topk"
)

const gpuText = `gpu measures the CUDA kernels of package gpu on the first GPU, each beside
a device-to-device copy of the same bytes (the bandwidth ceiling): exact
top-k at 0.1% and 1%, DGC's sampled selection at 0.1%, compensation with
momentum, fp16 and bf16 conversion, blockwise int8; and a gradient in
pinned host memory to its topk(0.01) frame on the host, by the GPU's
Sender against the CPU's on one core (the frames are the same bytes).

Each row: the median of --runs runs timed with CUDA events after three
warm-ups (the host frame: wall time), on --n float32 N(0, 1); GB/s counts
the bytes the operation must move, and "of copy" is that against the
copy's. Without a GPU it says why and exits with status 1. For torch's
figures in the same run, see gpu/bench/run.sh.
`

type gpuRow struct {
	Op     string  `json:"op"`
	Ms     float64 `json:"ms_median"`
	GBs    float64 `json:"gb_per_s"`
	OfCopy float64 `json:"of_copy"`
}

func cmdGPU(args []string, stdout, stderr io.Writer) error {
	f := newFlags("gpu", "gpu [flags]", gpuText, stderr)
	n := f.Int("n", 100_000_000, "`elements` (float32) per operation")
	runs := f.Int("runs", 20, "timed `runs` per operation")
	format := f.String("format", "table", "output: table or json (JSON Lines)")
	if _, err := f.parse(args, 0, 0); err != nil {
		return err
	}
	switch {
	case *n < 1000 || *n >= 1<<32:
		return usagef("--n %d outside [1000, 2^32)", *n)
	case *runs < 1:
		return usagef("--runs %d: want at least 1", *runs)
	case *format != "table" && *format != "json":
		return usagef("--format %q: want table or json", *format)
	}
	d, err := gpu.Open(0)
	if err != nil {
		return err
	}
	defer d.Close()
	fmt.Fprintf(stderr, "gpu: %s, driver %d, %d float32 a run\n", d.Name(), d.DriverVersion(), *n)
	rows, err := gpuRows(d, *n, *runs, stderr)
	if err != nil {
		return err
	}
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		for _, r := range rows {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "OP\tMS (MEDIAN)\tGB/S\tOF COPY")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%.3f\t%.1f\t%.2f\n", r.Op, r.Ms, r.GBs, r.OfCopy)
	}
	return tw.Flush()
}

func gpuRows(d *gpu.Device, n, runs int, stderr io.Writer) ([]gpuRow, error) {
	host, err := d.AllocHost(4 * n)
	if err != nil {
		return nil, err
	}
	defer d.FreeHost(host)
	rng := rand.New(rand.NewPCG(1, 1))
	for i := 0; i < len(host); i += 4 {
		binary.LittleEndian.PutUint32(host[i:], math.Float32bits(float32(rng.NormFloat64())))
	}
	rows, err := gpuKernelRows(d, host, n, runs, stderr)
	if err != nil {
		return nil, err
	}
	frames, err := gpuFrameRows(d, host, n, runs, stderr)
	if err != nil {
		return nil, err
	}
	return append(rows, frames...), nil
}

// gpuStep is one kernel measured: the bytes it moves and the launch.
type gpuStep struct {
	op    string
	moved float64
	f     func() error
}

// gpuKernelRows times each kernel on n float32 copied from host, against
// a device-to-device copy.
func gpuKernelRows(d *gpu.Device, host []byte, n, runs int, stderr io.Writer) (rows []gpuRow, err error) {
	var ptrs []gpu.Ptr
	defer func() {
		for _, p := range ptrs {
			err = errors.Join(err, d.Free(p))
		}
	}()
	alloc := func(bytes int) gpu.Ptr {
		if err != nil {
			return 0
		}
		var p gpu.Ptr
		if p, err = d.Alloc(bytes); err == nil {
			ptrs = append(ptrs, p)
		}
		return p
	}
	x, out, u, res := alloc(4*n), alloc(4*n), alloc(4*n), alloc(4*n)
	k1, k01 := n/100, n/1000
	idx, val, smp, bad := alloc(4*k1), alloc(4*k1), alloc(4*n), alloc(4)
	if err != nil {
		return nil, err
	}
	for _, p := range []gpu.Ptr{x, u, res} {
		if err := d.CopyHtoD(p, host); err != nil {
			return nil, err
		}
	}
	sel, err := d.NewSelector()
	if err != nil {
		return nil, err
	}
	defer sel.Close()
	nb := float64(4 * n)
	return gpuMeasure(d, runs, stderr, []gpuStep{
		{"copy d2d", 2 * nb, func() error { return d.CopyDtoD(out, x, 4*n) }},
		{"topk 0.1%", nb, func() error { return sel.Exact(idx, val, x, n, k01, nil) }},
		{"topk 1%", nb, func() error { return sel.Exact(idx, val, x, n, k1, nil) }},
		{"dgc sampled 0.1%", nb, func() error {
			_, err := sel.Sampled(idx, val, x, n, k01, topk.SampleOptions{Start: 1}, smp, nil)
			return err
		}},
		{"dgc compensate (g, u, res read; u, c written)", 5 * nb, func() error {
			return d.DGCCompensate(out, u, x, res, n, 0.9, false, 1, nil)
		}},
		{"fp16", nb + nb/2, func() error { return d.F16(out, x, n, nil) }},
		{"bf16", nb + nb/2, func() error { return d.BF16(out, x, n, nil) }},
		{"int8 blocks of 4096", nb + nb/4, func() error { return d.Int8Blocks(out, out+gpu.Ptr(n), x, n, 4096, bad, nil) }},
	})
}

// gpuMeasure times each step (the median of runs after 3 warm-up runs,
// between two events) and gives its speed as a share of the first's.
func gpuMeasure(d *gpu.Device, runs int, stderr io.Writer, steps []gpuStep) ([]gpuRow, error) {
	e0, err := d.NewEvent()
	if err != nil {
		return nil, err
	}
	defer e0.Close()
	e1, err := d.NewEvent()
	if err != nil {
		return nil, err
	}
	defer e1.Close()
	var rows []gpuRow
	var copyGBs float64
	for _, s := range steps {
		fmt.Fprintf(stderr, "gpu: %s\n", s.op)
		ms, err := gpuMedianMs(e0, e1, runs, s.f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.op, err)
		}
		r := gpuRow{Op: s.op, Ms: ms, GBs: s.moved / ms / 1e6}
		if copyGBs == 0 {
			copyGBs = r.GBs
		}
		r.OfCopy = r.GBs / copyGBs
		rows = append(rows, r)
	}
	return rows, nil
}

// gpuMedianMs runs f 3 + runs times between events e0 and e1 and returns
// the median of the last runs, in milliseconds.
func gpuMedianMs(e0, e1 *gpu.Event, runs int, f func() error) (float64, error) {
	var ms []float64
	for i := range runs + 3 {
		if err := e0.Record(nil); err != nil {
			return 0, err
		}
		if err := f(); err != nil {
			return 0, err
		}
		if err := errors.Join(e1.Record(nil), e1.Synchronize()); err != nil {
			return 0, err
		}
		el, err := gpu.Elapsed(e0, e1)
		if err != nil {
			return 0, err
		}
		if i >= 3 {
			ms = append(ms, float64(el)/float64(time.Millisecond))
		}
	}
	slices.Sort(ms)
	return ms[len(ms)/2], nil
}

// gpuFrameRows times a host gradient's frame (TopK 1%, wall time): the
// GPU's Sender against the CPU's on one core, and says whether their
// frames are the same.
func gpuFrameRows(d *gpu.Device, host []byte, n, runs int, stderr io.Writer) ([]gpuRow, error) {
	g := &codec.Tensor{Name: "layer.weight", DType: codec.F32, Shape: []int64{int64(n)}, Data: host}
	c := gradient.TopK{Ratio: 0.01}
	fmt.Fprintln(stderr, "gpu: host frame, GPU")
	gs, err := d.NewSender(c, nil)
	if err != nil {
		return nil, err
	}
	defer gs.Close()
	gms, gframe, err := frameMedianMs(gs, g, func() { gs.Commit() }, max(3, runs/4))
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(stderr, "gpu: host frame, CPU on one core")
	prev := runtime.GOMAXPROCS(1)
	cs, err := gradient.NewSender(c)
	var cms float64
	var cframe []byte
	if err == nil {
		cms, cframe, err = frameMedianMs(cs, g, cs.Commit, 3)
	}
	runtime.GOMAXPROCS(prev)
	if err != nil {
		return nil, err
	}
	same := "same frames"
	if !slices.Equal(gframe, cframe) {
		same = "FRAMES DIFFER"
	}
	nb := float64(4 * n)
	return []gpuRow{
		{Op: "host frame topk 1%, GPU", Ms: gms, GBs: nb / gms / 1e6},
		{Op: fmt.Sprintf("host frame topk 1%%, CPU 1 core (%.1fx the GPU's time; %s)", cms/gms, same), Ms: cms, GBs: nb / cms / 1e6},
	}, nil
}

// frameMedianMs appends g's frame with s reps times, committing each, and
// returns the median wall time in milliseconds and the first frame (the
// later ones carry the residuals of the runs before, and the two senders
// make different numbers of runs).
func frameMedianMs(s interface {
	Append([]byte, *codec.Tensor) ([]byte, error)
}, g *codec.Tensor, commit func(), reps int) (float64, []byte, error) {
	var ms []float64
	var frame, first []byte
	for range reps {
		t0 := time.Now()
		var err error
		if frame, err = s.Append(frame[:0], g); err != nil {
			return 0, nil, err
		}
		commit()
		ms = append(ms, float64(time.Since(t0))/float64(time.Millisecond))
		if first == nil {
			first = slices.Clone(frame)
		}
	}
	slices.Sort(ms)
	return ms[len(ms)/2], first, nil
}
