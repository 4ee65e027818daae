package gpu

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

// testPTX holds two kernels, written by hand in PTX ISA 6.0 for sm_70
// (which the driver compiles for any GPU since Volta):
//
//	add_u32(u32 *data, u32 add, u32 n):
//	    i = blockIdx.x*blockDim.x + threadIdx.x; if i < n { data[i] += add }
//	store_args(u8 *out, u32 a, u64 b, f32 c, f64 d, s32 e):
//	    out[0:4] = a; out[8:16] = b; out[16:20] = c; out[24:32] = d; out[32:36] = e
//
// The fake driver computes the same.
const testPTX = `
.version 6.0
.target sm_70
.address_size 64

.visible .entry add_u32(
	.param .u64 add_u32_data,
	.param .u32 add_u32_add,
	.param .u32 add_u32_n
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<8>;
	.reg .b64 	%rd<5>;

	ld.param.u64 	%rd1, [add_u32_data];
	ld.param.u32 	%r1, [add_u32_add];
	ld.param.u32 	%r2, [add_u32_n];
	mov.u32 	%r3, %ctaid.x;
	mov.u32 	%r4, %ntid.x;
	mov.u32 	%r5, %tid.x;
	mad.lo.u32 	%r6, %r3, %r4, %r5;
	setp.ge.u32 	%p1, %r6, %r2;
	@%p1 bra 	DONE;
	cvta.to.global.u64 	%rd2, %rd1;
	mul.wide.u32 	%rd3, %r6, 4;
	add.u64 	%rd4, %rd2, %rd3;
	ld.global.u32 	%r7, [%rd4];
	add.u32 	%r7, %r7, %r1;
	st.global.u32 	[%rd4], %r7;
DONE:
	ret;
}

.visible .entry store_args(
	.param .u64 store_args_out,
	.param .u32 store_args_a,
	.param .u64 store_args_b,
	.param .f32 store_args_c,
	.param .f64 store_args_d,
	.param .s32 store_args_e
)
{
	.reg .b32 	%r<3>;
	.reg .b64 	%rd<4>;
	.reg .f32 	%f<2>;
	.reg .f64 	%fd<2>;

	ld.param.u64 	%rd1, [store_args_out];
	cvta.to.global.u64 	%rd2, %rd1;
	ld.param.u32 	%r1, [store_args_a];
	st.global.u32 	[%rd2], %r1;
	ld.param.u64 	%rd3, [store_args_b];
	st.global.u64 	[%rd2+8], %rd3;
	ld.param.f32 	%f1, [store_args_c];
	st.global.f32 	[%rd2+16], %f1;
	ld.param.f64 	%fd1, [store_args_d];
	st.global.f64 	[%rd2+24], %fd1;
	ld.param.s32 	%r2, [store_args_e];
	st.global.s32 	[%rd2+32], %r2;
	ret;
}
`

// needDevice opens device 0 for the test and closes it at its end. It
// skips the test, with the reason ("gpu: no CUDA device: ..."), where no
// device can be used, and fails it where a device is there but does not
// open.
func needDevice(t testing.TB) *Device {
	t.Helper()
	d, err := Open(0)
	if errors.Is(err, ErrNoDevice) {
		t.Skip(err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return d
}

func random(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 11))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// driverError returns err as an *Error, failing the test if it is not.
func driverError(t *testing.T, what string, err error) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: got %v (%T), want an *Error", what, err, err)
	}
	return e
}

// suite runs on a real device (TestGPU) and on the fake driver
// (TestFakeDriver). Each test gets an open Device, closed after it.
var suite = []struct {
	name string
	run  func(t *testing.T, d *Device)
}{
	{"Info", testInfo},
	{"RoundTrip", testRoundTrip},
	{"Memset", testMemset},
	{"DtoD", testDtoD},
	{"Pinned", testPinned},
	{"Stream", testStream},
	{"Events", testEvents},
	{"Errors", testErrors},
	{"MemInfoBaseline", testMemInfoBaseline},
	{"Launch", testLaunch},
	{"LaunchArgs", testLaunchArgs},
	{"Closed", testClosed},
	{"Concurrent", testConcurrent},
}

// TestGPU runs the suite on device 0; without one it skips, saying why.
// On a GPU host: CGO_ENABLED=0 go test -c -o gpu.test ./gpu, then
// ./gpu.test -test.v -test.run GPU.
func TestGPU(t *testing.T) {
	if err := Available(); errors.Is(err, ErrNoDevice) {
		t.Skip(err.Error())
	}
	for _, c := range suite {
		t.Run(c.name, func(t *testing.T) { c.run(t, needDevice(t)) })
	}
}

func testInfo(t *testing.T, d *Device) {
	if d.Name() == "" || d.TotalMem() == 0 || d.DriverVersion() <= 0 || d.Ordinal() != 0 {
		t.Errorf("Name %q, TotalMem %d, DriverVersion %d, Ordinal %d", d.Name(), d.TotalMem(), d.DriverVersion(), d.Ordinal())
	}
	n, err := Count()
	if err != nil || n < 1 {
		t.Errorf("Count() = %d, %v", n, err)
	}
	free, total, err := d.MemInfo()
	if err != nil || total != d.TotalMem() || free > total {
		t.Errorf("MemInfo() = %d, %d, %v; TotalMem %d", free, total, err, d.TotalMem())
	}
	t.Logf("%s: %d MiB, %d MiB free, driver %d", d.Name(), total>>20, free>>20, d.DriverVersion())
}

func testRoundTrip(t *testing.T, d *Device) {
	for i, n := range []int{0, 1, 1000, 1<<20 + 3} {
		src := random(n, uint64(i))
		p, err := d.Alloc(n)
		if err != nil {
			t.Fatalf("Alloc(%d): %v", n, err)
		}
		if (p == 0) != (n == 0) {
			t.Errorf("Alloc(%d) = %#x", n, p)
		}
		if err := d.CopyHtoD(p, src); err != nil {
			t.Fatalf("CopyHtoD %d bytes: %v", n, err)
		}
		got := make([]byte, n)
		if err := d.CopyDtoH(got, p); err != nil {
			t.Fatalf("CopyDtoH %d bytes: %v", n, err)
		}
		if !bytes.Equal(got, src) {
			t.Errorf("%d bytes: the round trip changed them", n)
		}
		if err := d.Free(p); err != nil {
			t.Fatalf("Free: %v", err)
		}
	}
}

func testMemset(t *testing.T, d *Device) {
	const n = 4097
	p, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(p)
	if err := d.Memset(p, 0xab, n); err != nil {
		t.Fatal(err)
	}
	if err := d.Memset(p+100, 0, 200); err != nil {
		t.Fatal(err)
	}
	if err := d.Memset(p, 1, 0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n)
	if err := d.CopyDtoH(got, p); err != nil {
		t.Fatal(err)
	}
	for i, b := range got {
		want := byte(0xab)
		if i >= 100 && i < 300 {
			want = 0
		}
		if b != want {
			t.Fatalf("byte %d = %#x, want %#x", i, b, want)
		}
	}
}

func testDtoD(t *testing.T, d *Device) {
	const n = 1<<16 + 5
	src := random(n, 3)
	a, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.Alloc(n + 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.CopyHtoD(a, src); err != nil {
		t.Fatal(err)
	}
	if err := d.Memset(b, 0x5a, n+64); err != nil {
		t.Fatal(err)
	}
	if err := d.CopyDtoD(b+32, a, n); err != nil {
		t.Fatal(err)
	}
	if err := d.CopyDtoD(b, a, 0); err != nil {
		t.Fatal(err)
	}
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n+64)
	if err := d.CopyDtoH(got, b); err != nil {
		t.Fatal(err)
	}
	want := append(append(bytes.Repeat([]byte{0x5a}, 32), src...), bytes.Repeat([]byte{0x5a}, 32)...)
	if !bytes.Equal(got, want) {
		t.Error("CopyDtoD: wrong bytes")
	}
	for _, p := range []Ptr{a, b} {
		if err := d.Free(p); err != nil {
			t.Error(err)
		}
	}
}

func testPinned(t *testing.T, d *Device) {
	const n = 1<<20 + 3
	in, err := d.AllocHost(n)
	if err != nil {
		t.Fatal(err)
	}
	out, err := d.AllocHost(n)
	if err != nil {
		t.Fatal(err)
	}
	if len(in) != n || len(out) != n {
		t.Fatalf("AllocHost lengths %d, %d", len(in), len(out))
	}
	copy(in, random(n, 5))
	p, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.CopyHtoD(p, in); err != nil {
		t.Fatal(err)
	}
	if err := d.CopyDtoH(out, p); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(in, out) {
		t.Error("pinned round trip changed the bytes")
	}
	// Asynchronous copies take pinned memory only.
	if err := d.CopyHtoDAsync(p, make([]byte, 10), nil); err == nil {
		t.Error("CopyHtoDAsync from Go memory: no error")
	}
	if err := d.CopyDtoHAsync(out[n-5:], p, nil); err != nil {
		t.Errorf("CopyDtoHAsync into the end of a pinned buffer: %v", err)
	}
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if b, err := d.AllocHost(0); b != nil || err != nil {
		t.Errorf("AllocHost(0) = %v, %v", b, err)
	}
	if err := d.FreeHost(nil); err != nil {
		t.Errorf("FreeHost(nil): %v", err)
	}
	if e := driverError(t, "FreeHost of Go memory", d.FreeHost(make([]byte, 8))); e.Code != codeInvalidValue {
		t.Errorf("FreeHost of Go memory: %v", e)
	}
	if err := d.FreeHost(in); err != nil {
		t.Fatal(err)
	}
	if e := driverError(t, "FreeHost twice", d.FreeHost(in)); e.Call != "cuMemFreeHost" {
		t.Errorf("FreeHost twice: %v", e)
	}
	if err := d.FreeHost(out[:1]); err != nil { // a slice of it from its start
		t.Fatal(err)
	}
	if err := d.Free(p); err != nil {
		t.Fatal(err)
	}
}

func testStream(t *testing.T, d *Device) {
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	const n = 3 << 20
	in, err := d.AllocHost(n)
	if err != nil {
		t.Fatal(err)
	}
	out, err := d.AllocHost(n)
	if err != nil {
		t.Fatal(err)
	}
	copy(in, random(n, 9))
	p, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.CopyHtoDAsync(p, in, s); err != nil {
		t.Fatal(err)
	}
	if err := d.CopyDtoHAsync(out, p, s); err != nil {
		t.Fatal(err)
	}
	if err := d.CopyHtoDAsync(p, in[:0], s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(in, out) {
		t.Error("stream round trip changed the bytes")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := s.Synchronize(); !errors.Is(err, ErrClosed) {
		t.Errorf("Synchronize after Close: %v", err)
	}
	if err := d.CopyHtoDAsync(p, in, s); !errors.Is(err, ErrClosed) {
		t.Errorf("CopyHtoDAsync on a closed stream: %v", err)
	}
	// Left for Close: a stream, the pinned buffers, the allocation.
	if _, err := d.NewStream(); err != nil {
		t.Fatal(err)
	}
}

func testEvents(t *testing.T, d *Device) {
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start, err := d.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	end, err := d.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Elapsed(start, end); err == nil {
		t.Error("Elapsed of events never recorded: no error")
	}
	const n = 64 << 20
	p, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	if err := start.Record(s); err != nil {
		t.Fatal(err)
	}
	if err := d.Memset(p, 1, n); err != nil { // default stream: s waits for it
		t.Fatal(err)
	}
	if err := end.Record(s); err != nil {
		t.Fatal(err)
	}
	if err := end.Synchronize(); err != nil {
		t.Fatal(err)
	}
	el, err := Elapsed(start, end)
	if err != nil {
		t.Fatal(err)
	}
	if el < 0 || el > 10e9 {
		t.Errorf("Elapsed = %v", el)
	}
	t.Logf("memset of %d MiB: %v", n>>20, el)
	if err := start.Record(nil); err != nil {
		t.Fatal(err)
	}
	if err := start.Close(); err != nil {
		t.Fatal(err)
	}
	if err := start.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := Elapsed(start, end); !errors.Is(err, ErrClosed) {
		t.Errorf("Elapsed with a closed event: %v", err)
	}
	// end and p are left for Close.
}

func testErrors(t *testing.T, d *Device) {
	if e := driverError(t, "Free of a bogus address", d.Free(Ptr(0xdead0000))); e.Code != codeInvalidValue || e.Call != "cuMemFree_v2" {
		t.Errorf("Free of a bogus address: %v", e)
	}
	p, err := d.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Free(p); err != nil {
		t.Fatal(err)
	}
	driverError(t, "Free twice", d.Free(p))
	if _, err := d.Alloc(-1); err == nil {
		t.Error("Alloc(-1): no error")
	}
	_, err = d.Alloc(int(min(d.TotalMem()*2, math.MaxInt64/2)))
	if !errors.Is(err, ErrOutOfMemory) {
		t.Errorf("Alloc of twice the device's memory: %v, want ErrOutOfMemory", err)
	} else {
		t.Log(err)
	}
	_, err = d.LoadModule([]byte("this is not PTX"))
	driverError(t, "LoadModule of garbage", err)
	if _, err := d.LoadModule(nil); err == nil {
		t.Error("LoadModule(nil): no error")
	}
	m, err := d.LoadModule([]byte(testPTX))
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Function("no_such_kernel")
	if e := driverError(t, "Function of a missing name", err); e.Code != 500 || e.Name != "CUDA_ERROR_NOT_FOUND" {
		t.Errorf("Function of a missing name: %v", e)
	}
	if _, err := m.Function("a\x00b"); err == nil {
		t.Error("Function with a NUL in the name: no error")
	}
	// The device still works.
	testRoundTrip(t, d)
}

// testMemInfoBaseline: the free memory goes back to its baseline after
// many allocations and frees, and after a Device that leaves everything
// allocated is closed.
func testMemInfoBaseline(t *testing.T, d *Device) {
	const slack = 2 << 20
	// Warm up: the first allocations may set up pools of the context.
	for _, n := range []int{1, 1 << 20, 32 << 20} {
		p, err := d.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Free(p); err != nil {
			t.Fatal(err)
		}
	}
	base, _, err := d.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	near := func(what string) {
		t.Helper()
		free, _, err := d.MemInfo()
		if err != nil {
			t.Fatal(err)
		}
		if diff := int64(free) - int64(base); diff < -slack || diff > slack {
			t.Errorf("%s: %d bytes free, %d at the start (%+d)", what, free, base, diff)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var held []Ptr
	for i := range 10000 {
		n := 1 + rng.IntN(1<<(1+i%20)) // 1 B to 1 MiB
		p, err := d.Alloc(n)
		if err != nil {
			t.Fatalf("pair %d: Alloc(%d): %v", i, n, err)
		}
		held = append(held, p)
		if len(held) == 8 || i == 9999 { // a few live at once, freed out of order
			rng.Shuffle(len(held), func(a, b int) { held[a], held[b] = held[b], held[a] })
			for _, p := range held {
				if err := d.Free(p); err != nil {
					t.Fatalf("pair %d: Free: %v", i, err)
				}
			}
			held = held[:0]
		}
	}
	near("after 10,000 allocations and frees")

	d2, err := Open(d.Ordinal())
	if err != nil {
		t.Fatal(err)
	}
	for range 64 {
		if _, err := d2.Alloc(1 << 20); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d2.AllocHost(1 << 20); err != nil {
		t.Fatal(err)
	}
	if _, err := d2.NewStream(); err != nil {
		t.Fatal(err)
	}
	if _, err := d2.NewEvent(); err != nil {
		t.Fatal(err)
	}
	if _, err := d2.LoadModule([]byte(testPTX)); err != nil {
		t.Fatal(err)
	}
	free, _, err := d.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	if free > base-60<<20 {
		t.Errorf("64 MiB held by a second Device: %d bytes free, %d before", free, base)
	}
	if err := d2.Close(); err != nil {
		t.Fatal(err)
	}
	near("after a second Device that freed nothing is closed")
}

func testLaunch(t *testing.T, d *Device) {
	m, err := d.LoadModule([]byte(testPTX))
	if err != nil {
		t.Fatal(err)
	}
	f, err := m.Function("add_u32")
	if err != nil {
		t.Fatal(err)
	}
	if f.Name() != "add_u32" {
		t.Errorf("Name() = %q", f.Name())
	}
	const n = 1000
	src := random(4*n+8, 21) // 2 guard elements past n
	p, err := d.Alloc(len(src))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.CopyHtoD(p, src); err != nil {
		t.Fatal(err)
	}
	const add = 0x9e3779b9
	// 4 blocks of 256 threads: 24 threads past n do nothing.
	if err := d.Launch(f, [3]uint32{4, 1, 1}, [3]uint32{256, 1, 1}, 0, nil, p, uint32(add), uint32(n)); err != nil {
		t.Fatal(err)
	}
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Launch(f, [3]uint32{1, 1, 1}, [3]uint32{1024, 1, 1}, 0, s, p, uint32(1), uint32(n)); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(src))
	if err := d.CopyDtoH(got, p); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n+2; i++ {
		v := binary.LittleEndian.Uint32(src[4*i:])
		if i < n {
			v += add + 1
		}
		if g := binary.LittleEndian.Uint32(got[4*i:]); g != v {
			t.Fatalf("element %d = %#x, want %#x", i, g, v)
		}
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Launch(f, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, nil, p, uint32(1), uint32(n)); !errors.Is(err, ErrClosed) {
		t.Errorf("Launch of an unloaded module's function: %v", err)
	}
	if _, err := m.Function("add_u32"); !errors.Is(err, ErrClosed) {
		t.Errorf("Function of an unloaded module: %v", err)
	}
}

// testLaunchArgs passes each supported width and checks what the kernel
// saw; then refuses unsupported types without launching.
func testLaunchArgs(t *testing.T, d *Device) {
	m, err := d.LoadModule([]byte(testPTX))
	if err != nil {
		t.Fatal(err)
	}
	f, err := m.Function("store_args")
	if err != nil {
		t.Fatal(err)
	}
	out, err := d.Alloc(40)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Memset(out, 0xee, 40); err != nil {
		t.Fatal(err)
	}
	one := [3]uint32{1, 1, 1}
	if err := d.Launch(f, one, one, 0, nil, out, uint32(0xdeadbeef), uint64(0x0123456789abcdef), float32(1.5), float64(-2.25), int32(-7)); err != nil {
		t.Fatal(err)
	}
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 40)
	if err := d.CopyDtoH(got, out); err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	if a := le.Uint32(got[0:]); a != 0xdeadbeef {
		t.Errorf("u32 = %#x", a)
	}
	if b := le.Uint64(got[8:]); b != 0x0123456789abcdef {
		t.Errorf("u64 = %#x", b)
	}
	if c := math.Float32frombits(le.Uint32(got[16:])); c != 1.5 {
		t.Errorf("f32 = %v", c)
	}
	if dd := math.Float64frombits(le.Uint64(got[24:])); dd != -2.25 {
		t.Errorf("f64 = %v", dd)
	}
	if e := int32(le.Uint32(got[32:])); e != -7 {
		t.Errorf("s32 = %d", e)
	}
	// The other spellings of the same widths.
	if err := d.Launch(f, one, one, 0, nil, uintptr(out), int32(1), int64(2), float32(0), float64(0), int32(3)); err != nil {
		t.Fatal(err)
	}
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if err := d.CopyDtoH(got, out); err != nil {
		t.Fatal(err)
	}
	if le.Uint32(got[0:]) != 1 || le.Uint64(got[8:]) != 2 || le.Uint32(got[32:]) != 3 {
		t.Errorf("uintptr/int32/int64 arguments: got % x", got)
	}
	before := append([]byte(nil), got...)
	for _, bad := range [][]any{
		{out, 7, uint64(1), float32(0), float64(0), int32(0)},                     // int
		{out, uint32(7), "x", float32(0), float64(0), int32(0)},                   // string
		{out, uint32(7), uint64(1), []byte{1}, float64(0), int32(0)},              // slice
		{out, uint32(7), uint64(1), float32(0), float64(0), int32(0), struct{}{}}, // struct
		{nil},
	} {
		err := d.Launch(f, one, one, 0, nil, bad...)
		if err == nil || !strings.Contains(err.Error(), "argument") {
			t.Errorf("Launch with %T arguments: %v", bad, err)
		}
	}
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if err := d.CopyDtoH(got, out); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, before) {
		t.Error("a refused Launch ran the kernel")
	}
	if err := d.Launch(nil, one, one, 0, nil); err == nil {
		t.Error("Launch(nil): no error")
	}
}

func testClosed(t *testing.T, d *Device) {
	d2, err := Open(d.Ordinal())
	if err != nil {
		t.Fatal(err)
	}
	s, err := d2.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	e, err := d2.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	m, err := d2.LoadModule([]byte(testPTX))
	if err != nil {
		t.Fatal(err)
	}
	f, err := m.Function("add_u32")
	if err != nil {
		t.Fatal(err)
	}
	p, err := d2.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	// Resources of one Device are refused by another.
	if err := d.Launch(f, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, nil, p, uint32(1), uint32(1)); err == nil {
		t.Error("Launch of another Device's function: no error")
	}
	if err := d.CopyHtoDAsync(p, nil, s); err == nil {
		t.Error("a stream of another Device: no error")
	}
	if err := d2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d2.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	for what, err := range map[string]error{
		"Alloc":       func() error { _, err := d2.Alloc(1); return err }(),
		"Alloc(0)":    func() error { _, err := d2.Alloc(0); return err }(),
		"Free":        d2.Free(p),
		"CopyHtoD":    d2.CopyHtoD(p, []byte{1}),
		"CopyHtoD 0":  d2.CopyHtoD(p, nil),
		"MemInfo":     func() error { _, _, err := d2.MemInfo(); return err }(),
		"Synchronize": d2.Synchronize(),
		"Stream":      s.Synchronize(),
		"Event":       e.Record(nil),
		"Function":    func() error { _, err := m.Function("add_u32"); return err }(),
		"Launch":      d2.Launch(f, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, nil, p, uint32(1), uint32(1)),
		"NewStream":   func() error { _, err := d2.NewStream(); return err }(),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", what, err)
		}
	}
	for what, err := range map[string]error{"Stream": s.Close(), "Event": e.Close(), "Module": m.Close()} {
		if err != nil {
			t.Errorf("%s.Close after the Device's: %v", what, err)
		}
	}
}

func testConcurrent(t *testing.T, d *Device) {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				n := 1 + (g*131+i*17)%5000
				src := random(n, uint64(g*1000+i))
				p, err := d.Alloc(n)
				if err != nil {
					errs <- err
					return
				}
				got := make([]byte, n)
				if err := errors.Join(d.CopyHtoD(p, src), d.CopyDtoH(got, p), d.Free(p)); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got, src) {
					errs <- errors.New("concurrent round trip changed the bytes")
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
