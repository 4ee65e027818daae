package gpu

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
	"github.com/tensorpress/tensorpress/internal/float16"
	"github.com/tensorpress/tensorpress/internal/topk"
)

// The kernels on a real device against the CPU code they must agree
// with, on fresh random inputs (never zeros) at several sizes. They skip
// without a GPU; the emulation tests check the same logic on the host.

// upload copies b to new device memory, freed when the test ends.
func upload(t testing.TB, d *Device, b []byte) Ptr {
	t.Helper()
	p := alloc(t, d, len(b))
	if err := d.CopyHtoD(p, b); err != nil {
		t.Fatal(err)
	}
	return p
}

func alloc(t testing.TB, d *Device, n int) Ptr {
	t.Helper()
	p, err := d.Alloc(max(n, 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Free(p) })
	return p
}

func download(t testing.TB, d *Device, p Ptr, n int) []byte {
	t.Helper()
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, n)
	if err := d.CopyDtoH(b, p); err != nil {
		t.Fatal(err)
	}
	return b
}

func sizes(t *testing.T) []int {
	s := []int{1, 1000, 4099, 1<<20 + 3}
	if !testing.Short() {
		s = append(s, 1<<27)
	}
	return s
}

func TestGPUHalf(t *testing.T) { testHalf(t, needDevice(t), sizes(t)) }

func testHalf(t *testing.T, d *Device, sizes []int) {
	rng := rand.New(rand.NewPCG(11, 11))
	for _, n := range sizes {
		x := floatBits(rng, n)
		src := upload(t, d, u32bytes(x))
		dst := alloc(t, d, 2*n)
		for _, bf := range []bool{false, true} {
			var err error
			if bf {
				err = d.BF16(dst, src, n, nil)
			} else {
				err = d.F16(dst, src, n, nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			got := download(t, d, dst, 2*n)
			for i, v := range x {
				want := float16.F16FromF32(math.Float32frombits(v))
				if bf {
					want = float16.BF16FromF32(math.Float32frombits(v))
				}
				if g := binary.LittleEndian.Uint16(got[2*i:]); g != want {
					t.Fatalf("bf16 %t, n %d: x[%d] = %#08x: %#04x, want %#04x", bf, n, i, v, g, want)
				}
			}
		}
		d.Free(src)
		d.Free(dst)
	}
}

func TestGPUInt8(t *testing.T) { testInt8(t, needDevice(t), sizes(t)) }

func testInt8(t *testing.T, d *Device, sizes []int) {
	rng := rand.New(rand.NewPCG(12, 12))
	for _, n := range []int{1, 1000, 4099, 1<<20 + 3} {
		for _, bsize := range []int{64, 4096} {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.NormFloat64() * math.Pow(2, float64(i/bsize%30-15)))
			}
			nb := (n + bsize - 1) / bsize
			xs := upload(t, d, u32bytes(floatsBits(x)))
			q, sc, bad := alloc(t, d, n), alloc(t, d, 4*nb), alloc(t, d, 4)
			if err := d.Int8Blocks(q, sc, xs, n, bsize, bad, nil); err != nil {
				t.Fatal(err)
			}
			wq, ws, err := int8Reference(t, x, bsize)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(download(t, d, q, n), wq) || !bytes.Equal(download(t, d, sc, 4*nb), ws) {
				t.Fatalf("n %d, block %d: codes or scales differ from the int8 stage's", n, bsize)
			}
			if b := download(t, d, bad, 4); binary.LittleEndian.Uint32(b) != 0 {
				t.Fatalf("n %d: flagged non-finite", n)
			}
		}
	}
}

func TestGPUExact(t *testing.T) { testExact(t, needDevice(t), sizes(t)) }

func testExact(t *testing.T, d *Device, sizes []int) {
	sel, err := d.NewSelector()
	if err != nil {
		t.Fatal(err)
	}
	defer sel.Close()
	rng := rand.New(rand.NewPCG(13, 13))
	for _, n := range sizes {
		x := floatBits(rng, n)
		for i := range x {
			if rng.IntN(4) == 0 {
				x[i] = x[i]&^0x7fffff00 | 0x3f800000 // ties
			}
		}
		xf := f32s(x)
		xs := upload(t, d, u32bytes(x))
		for _, k := range slices.Compact([]int{1, max(1, n/1000), max(1, n/100), n / 2, n}) {
			if k == 0 {
				continue
			}
			idx, val := alloc(t, d, 4*k), alloc(t, d, 4*k)
			if err := sel.Exact(idx, val, xs, n, k, nil); err != nil {
				t.Fatal(err)
			}
			gi, gv := download(t, d, idx, 4*k), download(t, d, val, 4*k)
			want := topk.Exact(nil, xf, k, nil)
			for j, w := range want {
				if binary.LittleEndian.Uint32(gi[4*j:]) != w || binary.LittleEndian.Uint32(gv[4*j:]) != x[w] {
					t.Fatalf("n %d, k %d: element %d: index %d, want %d", n, k, j, binary.LittleEndian.Uint32(gi[4*j:]), w)
				}
			}
			d.Free(idx)
			d.Free(val)
		}
		d.Free(xs)
	}
}

// wantIndices checks the len(want) indices at idx (device memory) against
// want; what names the selection in a failure.
func wantIndices(t testing.TB, d *Device, idx Ptr, want []uint32, what string) {
	t.Helper()
	gi := download(t, d, idx, 4*len(want))
	for j, w := range want {
		if g := binary.LittleEndian.Uint32(gi[4*j:]); g != w {
			t.Fatalf("%s: element %d: index %d, want %d", what, j, g, w)
		}
	}
}

// fakeSelector opens a Device on a fake driver, and a Selector on it that
// the test closes.
func fakeSelector(t *testing.T) (*fakeDriver, *Device, *Selector) {
	t.Helper()
	f := installFake(t, 1)
	d := openFake(t, f)
	sel, err := d.NewSelector()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sel.Close() })
	return f, d, sel
}

func TestGPUExactAliased(t *testing.T) { testExactAliased(t, needDevice(t), nil) }

// testExactAliased: inputs whose every 64th element (from the 32nd: the
// positions exactSampled samples in 2^20+3 elements) is tiny, or huge,
// against the rest, so that the sample's threshold takes too many or too
// few; Exact still selects what topk.Exact does.
func testExactAliased(t *testing.T, d *Device, _ []int) {
	sel, err := d.NewSelector()
	if err != nil {
		t.Fatal(err)
	}
	defer sel.Close()
	rng := rand.New(rand.NewPCG(15, 15))
	n := 1<<20 + 3
	for _, sampledHuge := range []bool{false, true} {
		x := make([]uint32, n)
		for i := range x {
			m := uint32(0x3f000000) + rng.Uint32N(1<<23) // 0.5 to 1
			if i%64 == 32 == sampledHuge {
				m += 20 << 23 // 2^20 times larger
			}
			x[i] = m | rng.Uint32()&(1<<31)
		}
		xs := upload(t, d, u32bytes(x))
		for _, k := range []int{1, 1000, n / 20} {
			idx, val := alloc(t, d, 4*k), alloc(t, d, 4*k)
			if err := sel.Exact(idx, val, xs, n, k, nil); err != nil {
				t.Fatal(err)
			}
			wantIndices(t, d, idx, topk.Exact(nil, f32s(x), k, nil), fmt.Sprintf("sampled huge %v, k %d", sampledHuge, k))
			d.Free(idx)
			d.Free(val)
		}
		d.Free(xs)
	}
}

// The selections go to the device's worker in a few trips (batch), not
// one a launch: at most 3 for Exact and 3 plus one an adaptation for
// Sampled once the Selector's scratch is allocated (each trip costs
// BenchmarkFakeTrip's microseconds; the build before batching made 28
// and 17-28, counted once with a counter not kept).
func TestFakeSelectTrips(t *testing.T) {
	_, d, sel := fakeSelector(t)
	rng := rand.New(rand.NewPCG(18, 18))
	n, k := 1<<20, 1<<10 // the smallest n that Exact samples
	xs := upload(t, d, u32bytes(finite(rng, n)))
	idx, val, smp := alloc(t, d, 4*k), alloc(t, d, 4*k), alloc(t, d, 4*n)
	for i := range 3 {
		t0 := d.trips.Load()
		if err := sel.Exact(idx, val, xs, n, k, nil); err != nil {
			t.Fatal(err)
		}
		t1 := d.trips.Load()
		if _, err := sel.Sampled(idx, val, xs, n, k, topk.SampleOptions{Start: uint64(i), MaxIters: -1}, smp, nil); err != nil {
			t.Fatal(err)
		}
		t2 := d.trips.Load()
		if i > 0 && (t1-t0 > 3 || t2-t1 > 3) {
			t.Errorf("run %d: Exact %d trips, Sampled %d (no adaptation): want at most 3 each", i, t1-t0, t2-t1)
		}
	}
}

// A selection that fails part way (a launch refused after the histogram
// counted) returns the error, and the next one is right: the histogram is
// cleared again before it is counted into.
func TestFakeSelectAfterFailure(t *testing.T) {
	f, d, sel := fakeSelector(t)
	rng := rand.New(rand.NewPCG(20, 20))
	for _, n := range []int{5000, 1<<20 + 3} { // the histogram's path, and the sample's
		x := finite(rng, n)
		xs := upload(t, d, u32bytes(x))
		k := n / 100
		idx, val := alloc(t, d, 4*k), alloc(t, d, 4*k)
		for _, kernel := range []string{"tp_topk_find", "tp_topk_count", "tp_topk_compact", "tp_take"} {
			f.failingKernel(kernel, 999)
			if err := sel.Exact(idx, val, xs, n, k, nil); err == nil {
				t.Fatalf("n %d: Exact with %s failing: no error", n, kernel)
			}
			f.failingKernel(kernel, 0)
			if err := sel.Exact(idx, val, xs, n, k, nil); err != nil {
				t.Fatal(err)
			}
			wantIndices(t, d, idx, topk.Exact(nil, f32s(x), k, nil), fmt.Sprintf("n %d, after %s failed", n, kernel))
		}
		for _, p := range []Ptr{idx, val, xs} {
			d.Free(p)
		}
	}
}

// Where the device has no room for the candidates, Exact and Sampled
// select without them (the fake driver, whose memory is small).
func TestFakeSelectLowMemory(t *testing.T) {
	f := installFake(t, 1)
	d := openFake(t, f)
	sel, err := d.NewSelector()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(16, 16))
	n, k := 1<<20+3, 10000
	x := finite(rng, n)
	xs := upload(t, d, u32bytes(x))
	idx, val, smp := alloc(t, d, 4*k), alloc(t, d, 4*k), alloc(t, d, 4*n)
	// Room for the sample (64 KiB) and the tiles' counts, not for the
	// candidates (8 bytes each, more than k).
	free, _, err := d.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	filler := alloc(t, d, int(free)-128<<10)
	if err := sel.Exact(idx, val, xs, n, k, nil); err != nil {
		t.Fatal(err)
	}
	wantIndices(t, d, idx, topk.Exact(nil, f32s(x), k, nil), "Exact")
	for _, start := range []uint64{0, 1, 2, 3, 12345} {
		opt := topk.SampleOptions{Start: start}
		c, err := sel.Sampled(idx, val, xs, n, k, opt, smp, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := topk.Sampled(nil, f32s(x), k, nil, opt)
		if c != len(want) {
			t.Fatalf("Sampled: %d selected, want %d", c, len(want))
		}
		wantIndices(t, d, idx, want, "Sampled")
	}
	if sel.candN != 0 {
		t.Fatalf("%d candidates' room: the filler left more memory than meant", sel.candN)
	}
	for _, p := range []Ptr{filler, idx, val, smp, xs} {
		d.Free(p)
	}
	sel.Close()
	f.check(t, false)
}

func TestGPUSampled(t *testing.T) { testSampled(t, needDevice(t), sizes(t)) }

func testSampled(t *testing.T, d *Device, sizes []int) {
	sel, err := d.NewSelector()
	if err != nil {
		t.Fatal(err)
	}
	defer sel.Close()
	rng := rand.New(rand.NewPCG(14, 14))
	ns := []int{1000, 1 << 15, 1<<20 + 3, 1 << 24}
	if raceEnabled {
		ns = ns[:3] // 16M elements: the plain run (46 s of the race run's emulator)
	}
	for _, n := range ns {
		x := finite(rng, n)
		xs := upload(t, d, u32bytes(x))
		smp := alloc(t, d, 4*n)
		for _, k := range []int{max(1, n/1000), n / 100} {
			for _, start := range []uint64{0, 12345} {
				opt := topk.SampleOptions{Start: start}
				idx, val := alloc(t, d, 4*k), alloc(t, d, 4*k)
				c, err := sel.Sampled(idx, val, xs, n, k, opt, smp, nil)
				if err != nil {
					t.Fatal(err)
				}
				want := topk.Sampled(nil, f32s(x), k, nil, opt)
				gi := download(t, d, idx, 4*k)
				if c != len(want) {
					t.Fatalf("n %d, k %d: %d selected, want %d", n, k, c, len(want))
				}
				for j, w := range want {
					if binary.LittleEndian.Uint32(gi[4*j:]) != w {
						t.Fatalf("n %d, k %d: element %d differs", n, k, j)
					}
				}
				d.Free(idx)
				d.Free(val)
			}
		}
	}
}

func TestGPUDGCCompensate(t *testing.T) { testDGCCompensate(t, needDevice(t), sizes(t)) }

func testDGCCompensate(t *testing.T, d *Device, sizes []int) {
	rng := rand.New(rand.NewPCG(15, 15))
	for _, n := range []int{1, 1000, 1<<20 + 3} {
		g, u, r := finite(rng, n), finite(rng, n), finite(rng, n)
		for _, nesterov := range []bool{false, true} {
			for _, scale := range []float32{1, 0.37} {
				const m = float32(0.9)
				gp, up, rp, cp := upload(t, d, u32bytes(g)), upload(t, d, u32bytes(u)), upload(t, d, u32bytes(r)), alloc(t, d, 4*n)
				if err := d.DGCCompensate(cp, up, gp, rp, n, m, nesterov, scale, nil); err != nil {
					t.Fatal(err)
				}
				gu, gc := download(t, d, up, 4*n), download(t, d, cp, 4*n)
				wu, wc := dgcCompensate(f32s(g), f32s(u), f32s(r), m, nesterov, scale)
				for i := range n {
					if binary.LittleEndian.Uint32(gu[4*i:]) != math.Float32bits(wu[i]) || binary.LittleEndian.Uint32(gc[4*i:]) != math.Float32bits(wc[i]) {
						t.Fatalf("n %d nesterov %t scale %v: element %d differs", n, nesterov, scale, i)
					}
				}
			}
		}
		// The sum of squares for clipping, block by block.
		gp, part := upload(t, d, u32bytes(g)), alloc(t, d, 8*((n+4095)/4096))
		ss, err := d.SumSquares(gp, n, 4096, part, nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := gradient.SumSquares(f32s(g), 4096); math.Float64bits(ss) != math.Float64bits(want) {
			t.Fatalf("n %d: sum of squares %v, want %v", n, ss, want)
		}
	}
}

// TestGPUMemoryBaseline: device memory is back at its baseline (within 2
// MiB) after 10,000 mixed calls of varying sizes, and after Close.
func TestGPUMemoryBaseline(t *testing.T) { testMemoryBaseline(t, needDevice(t), sizes(t)) }

func testMemoryBaseline(t *testing.T, d *Device, sizes []int) {
	if _, err := d.kernel("tp_zero"); err != nil { // the module stays loaded until Close
		t.Fatal(err)
	}
	free0, _, err := d.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(16, 16))
	sel, err := d.NewSelector()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10000 {
		n := 1 + rng.IntN(1<<16)
		if i%1000 == 0 {
			n = 1 << 22
		}
		x := finite(rng, n)
		xs, err := d.Alloc(4 * n)
		if err != nil {
			t.Fatal(err)
		}
		d.CopyHtoD(xs, u32bytes(x))
		out, _ := d.Alloc(4 * n)
		switch i % 4 {
		case 0:
			err = d.F16(out, xs, n, nil)
		case 1:
			err = sel.Exact(out, out+Ptr(4*(n/2)), xs, n, n/2, nil)
		case 2:
			err = d.AddF32(out, xs, xs, n, nil)
		case 3:
			err = d.BF16(out, xs, n, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
		d.Free(xs)
		d.Free(out)
	}
	if err := sel.Close(); err != nil {
		t.Fatal(err)
	}
	d.Synchronize()
	free1, _, _ := d.MemInfo()
	if diff := int64(free0) - int64(free1); diff > 2<<20 {
		t.Fatalf("device memory: %d bytes less free after 10,000 calls", diff)
	}
	t.Logf("free before %d, after %d", free0, free1)
}

// A forced out-of-memory is an error, not a crash.
func TestGPUOutOfMemory(t *testing.T) { testOutOfMemory(t, needDevice(t), sizes(t)) }

func testOutOfMemory(t *testing.T, d *Device, sizes []int) {
	_, err := d.Alloc(int(d.TotalMem()) * 2)
	if !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("allocating twice the device's memory: %v", err)
	}
}

// Benchmarks: 100M float32 N(0, 1) on the device, the median of the
// iterations timed with CUDA events (ms), and GB/s counting the bytes the
// operation must move. gpu/bench/run.sh runs them beside torch.

const benchN = 100_000_000

func benchInput(b *testing.B, d *Device) Ptr {
	rng := rand.New(rand.NewPCG(21, 21))
	x := make([]uint32, benchN)
	for i := range x {
		x[i] = math.Float32bits(float32(rng.NormFloat64()))
	}
	return upload(b, d, u32bytes(x))
}

// events times f b.N times and reports the median.
func events(b *testing.B, d *Device, moved int64, f func() error) {
	b.Helper()
	e0, err := d.NewEvent()
	if err != nil {
		b.Fatal(err)
	}
	e1, _ := d.NewEvent()
	defer e0.Close()
	defer e1.Close()
	for range 3 {
		if err := f(); err != nil {
			b.Fatal(err)
		}
	}
	var ms []float64
	b.ResetTimer()
	for b.Loop() {
		e0.Record(nil)
		if err := f(); err != nil {
			b.Fatal(err)
		}
		e1.Record(nil)
		e1.Synchronize()
		el, err := Elapsed(e0, e1)
		if err != nil {
			b.Fatal(err)
		}
		ms = append(ms, float64(el)/float64(time.Millisecond))
	}
	sort.Float64s(ms)
	med := ms[len(ms)/2]
	b.ReportMetric(med, "ms-median")
	b.ReportMetric(float64(moved)/med/1e6, "GB/s")
}

func BenchmarkGPU(b *testing.B) {
	d := needDevice(b)
	x := benchInput(b, d)
	out := alloc(b, d, 4*benchN)
	sel, err := d.NewSelector()
	if err != nil {
		b.Fatal(err)
	}
	defer sel.Close()
	nb := int64(4 * benchN)
	b.Run("copy-d2d", func(b *testing.B) { events(b, d, 2*nb, func() error { return d.CopyDtoD(out, x, 4*benchN) }) })
	for _, r := range []float64{0.001, 0.01} {
		k := int(r * benchN)
		idx, val := alloc(b, d, 4*k), alloc(b, d, 4*k)
		b.Run(fmt.Sprintf("topk-%g", r), func(b *testing.B) {
			events(b, d, nb, func() error { return sel.Exact(idx, val, x, benchN, k, nil) })
		})
		// The five passes over x that Exact made before it selected among
		// the first pass's candidates, in the same run.
		b.Run(fmt.Sprintf("topk-%g-5pass", r), func(b *testing.B) {
			events(b, d, nb, func() error {
				q := &batch{d: d}
				if err := sel.exact(q, idx, val, x, benchN, k, false); err != nil {
					return err
				}
				return sel.runQ(q)
			})
		})
	}
	// The parts: the first radix pass (histogram of 2048 bins, its bin
	// found), and a count with the tiles' offsets.
	b.Run("topk-hist-pass", func(b *testing.B) {
		events(b, d, nb, func() error {
			q := &batch{d: d}
			sel.setState(q, benchN/1000, 0)
			sel.radix(q, x, benchN, radixPasses[0])
			return sel.runQ(q)
		})
	})
	b.Run("topk-count-pass", func(b *testing.B) {
		events(b, d, nb, func() error {
			_, err := sel.countAtOrAbove(&batch{d: d}, x, benchN, math.Float32bits(3))
			return err
		})
	})
	k := benchN / 1000
	idx, val, smp := alloc(b, d, 4*k), alloc(b, d, 4*k), alloc(b, d, 4*benchN/50)
	b.Run("dgc-sampled-0.001", func(b *testing.B) {
		events(b, d, nb, func() error {
			_, err := sel.Sampled(idx, val, x, benchN, k, topk.SampleOptions{Start: 1}, smp, nil)
			return err
		})
	})
	u, res := alloc(b, d, 4*benchN), alloc(b, d, 4*benchN)
	d.CopyDtoD(u, x, 4*benchN)
	d.CopyDtoD(res, x, 4*benchN)
	b.Run("dgc-compensate", func(b *testing.B) {
		// g, u and res read; u and c written.
		events(b, d, 5*nb, func() error { return d.DGCCompensate(out, u, x, res, benchN, 0.9, false, 1, nil) })
	})
	b.Run("fp16", func(b *testing.B) { events(b, d, nb+nb/2, func() error { return d.F16(out, x, benchN, nil) }) })
	b.Run("bf16", func(b *testing.B) { events(b, d, nb+nb/2, func() error { return d.BF16(out, x, benchN, nil) }) })
	bad := alloc(b, d, 4)
	b.Run("int8-4096", func(b *testing.B) {
		events(b, d, nb+nb/4, func() error { return d.Int8Blocks(out, out+Ptr(benchN), x, benchN, 4096, bad, nil) })
	})
}

// BenchmarkHostFrame: a 100M float32 gradient in pinned host memory to its
// topk(0.01) frame on the host (compensation, selection, the frame, the
// residual staged and committed), by the device's Sender and by the CPU's
// gradient.Sender on one core, in the same run; the frames are the same
// bytes.
func BenchmarkHostFrame(b *testing.B) {
	d := needDevice(b)
	host, err := d.AllocHost(4 * benchN)
	if err != nil {
		b.Fatal(err)
	}
	defer d.FreeHost(host)
	rng := rand.New(rand.NewPCG(22, 22))
	for i := 0; i < len(host); i += 4 {
		binary.LittleEndian.PutUint32(host[i:], math.Float32bits(float32(rng.NormFloat64())))
	}
	g := &codec.Tensor{Name: "layer.weight", DType: codec.F32, Shape: []int64{benchN}, Data: host}
	c := gradient.TopK{Ratio: 0.01}
	var frame []byte
	b.Run("device", func(b *testing.B) {
		s, err := d.NewSender(c, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		b.SetBytes(4 * benchN)
		for b.Loop() {
			if frame, err = s.Append(frame[:0], g); err != nil {
				b.Fatal(err)
			}
			s.Commit()
		}
	})
	b.Run("cpu-1core", func(b *testing.B) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		s, err := gradient.NewSender(c)
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(4 * benchN)
		for b.Loop() {
			if frame, err = s.Append(frame[:0], g); err != nil {
				b.Fatal(err)
			}
			s.Commit()
		}
	})
}

// TestFakeOps runs the device tests of the kernels on the fake driver,
// whose kernels are Go (fakekernels_test.go): the Go side of the kernels,
// without a GPU.
func TestFakeOps(t *testing.T) {
	for _, c := range []struct {
		name string
		run  func(*testing.T, *Device, []int)
	}{
		{"Half", testHalf}, {"Int8", testInt8}, {"Exact", testExact}, {"ExactAliased", testExactAliased}, {"Sampled", testSampled},
		{"DGCCompensate", testDGCCompensate}, {"OutOfMemory", testOutOfMemory},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := installFake(t, 1)
			c.run(t, openFake(t, f), []int{1, 1000, 4099, 1<<20 + 3})
			f.check(t, false)
		})
	}
}

// A misaligned address is refused before any launch: on the device the
// access would fault and spoil the context for the rest of the process.
func TestMisalignedRefused(t *testing.T) {
	var d Device
	sel := &Selector{d: &d}
	_, errSampled := sel.Sampled(0x100, 0x202, 0x300, 10, 5, topk.SampleOptions{}, 0x400, nil)
	_, errSum := d.SumSquares(0x100, 10, 4, 0x204, nil)
	_, errPack := d.PackIndices(0x100, 0x103, 10, 0x200, nil)
	for _, c := range []struct {
		op  string
		err error
	}{
		{"F16", d.F16(0x101, 0x200, 10, nil)},
		{"F16", d.F16(0x100, 0x202, 10, nil)},
		{"BF16", d.BF16(0x100, 0x201, 10, nil)},
		{"Int8Blocks", d.Int8Blocks(0x101, 0x202, 0x300, 10, 4, 0x400, nil)},
		{"Q4Blocks", d.Q4Blocks(0x101, 0x200, 0x300, 10, 8, false, 0x401, nil)},
		{"Exact", sel.Exact(0x100, 0x100+2*9, 0x300, 9, 4, nil)},
		{"Sampled", errSampled},
		{"DGCCompensate", d.DGCCompensate(0x100, 0x200, 0x301, 0, 10, 0.9, false, 1, nil)},
		{"SumSquares", errSum},
		{"AddF32", d.AddF32(0x100, 0x200, 0x306, 10, nil)},
		{"ScatterZero", d.ScatterZero(0x101, 0x200, 3, nil)},
		{"Take", d.Take(0x100, 0x200, 0x305, 3, nil)},
		{"Put", d.Put(0x102, 0x200, 0x300, 3, nil)},
		{"ZeroNonFinite", d.ZeroNonFinite(0x103, 10, nil)},
		{"PackIndices", errPack},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), "gpu: "+c.op+": address") {
			t.Errorf("%s: %v, want a refused address", c.op, c.err)
		}
	}
}
