package gpu

import (
	"encoding/binary"
	"math"
	"reflect"
	"regexp"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// fakeDriver is a CUDA driver in Go, installed in place of the bound
// functions, so that the package's own logic (the worker thread, the
// tracking, Close, zero-length no-ops, kernel parameters) is tested on
// machines without a GPU. It checks what the real driver would refuse
// and more: a call without a context current on its thread, a zero-size
// allocation or copy, an address outside every allocation, a handle
// unknown or destroyed. Its two kernels compute what testPTX's do.
type fakeDriver struct {
	mu      sync.Mutex
	devices int
	next    uint64                    // next device address
	mem     map[uint64][]byte         // device allocations by address
	host    map[unsafe.Pointer][]byte // pinned host buffers
	refs    int                       // primary context references
	current map[int]uintptr           // context current per OS thread
	handles map[uintptr]string        // live streams, events, modules, functions: their kind
	images  map[uintptr]string        // module handle -> PTX text
	funcs   map[uintptr]string        // function handle -> kernel name
	fnMod   map[uintptr]uintptr       // function handle -> module handle
	code    map[uintptr]uint64        // module handle -> its code's allocation
	events  map[uintptr]time.Time     // recorded events
	nextH   uintptr
	fail    map[string]cuResult // calls made to fail (all their calls)
	failK   map[string]cuResult // launches of these kernels made to fail
	calls   map[string]int
	bad     []string // violations, reported by check
}

const (
	fakeTotal    = 1 << 30
	fakeCtxBytes = 64 << 20 // what a retained context takes
	fakeCtx      = uintptr(0xC0C0)
)

var fakeNames = map[cuResult][]byte{}

func init() {
	for code, name := range knownNames {
		fakeNames[cuResult(code)] = append([]byte(name), 0)
	}
}

// installFake puts a fake driver with the given number of devices in
// place of the real one, for the rest of the test.
func installFake(t testing.TB, devices int) *fakeDriver {
	t.Helper()
	Available() // the real load has happened (or failed) and will not run again
	saved := make([]reflect.Value, len(symbols))
	for i, s := range symbols {
		v := reflect.ValueOf(s.fn).Elem()
		saved[i] = reflect.ValueOf(v.Interface())
	}
	savedErr, savedCount, savedVersion := drv.err, drv.count, drv.version
	t.Cleanup(func() {
		for i, s := range symbols {
			reflect.ValueOf(s.fn).Elem().Set(saved[i])
		}
		drv.err, drv.count, drv.version = savedErr, savedCount, savedVersion
	})
	f := &fakeDriver{
		devices: devices,
		next:    0x7f00_0000,
		mem:     map[uint64][]byte{},
		host:    map[unsafe.Pointer][]byte{},
		current: map[int]uintptr{},
		handles: map[uintptr]string{},
		images:  map[uintptr]string{},
		funcs:   map[uintptr]string{},
		fnMod:   map[uintptr]uintptr{},
		code:    map[uintptr]uint64{},
		events:  map[uintptr]time.Time{},
		nextH:   0x1000,
		fail:    map[string]cuResult{},
		calls:   map[string]int{},
	}
	f.install()
	drv.err, drv.count, drv.version = nil, devices, 12040
	return f
}

// failing makes every later call of the named function return code.
func (f *fakeDriver) failing(call string, code cuResult) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[call] = code
}

// failingKernel makes every later launch of the named kernel return
// code (0: launch it again).
func (f *fakeDriver) failingKernel(name string, code cuResult) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failK == nil {
		f.failK = map[string]cuResult{}
	}
	f.failK[name] = code
}

func (f *fakeDriver) count(call string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[call]
}

// enter locks f, counts the call and returns an injected failure.
func (f *fakeDriver) enter(call string) cuResult {
	f.mu.Lock()
	f.calls[call]++
	return f.fail[call]
}

// inContext reports whether a context is current on the calling thread,
// noting a violation if not.
func (f *fakeDriver) inContext(call string) bool {
	if f.current[threadID()] == 0 {
		f.bad = append(f.bad, call+" without a current context on its thread")
		return false
	}
	return true
}

func (f *fakeDriver) violation(s string) { f.bad = append(f.bad, s) }

// span returns the bytes [p, p+n) of device memory, or nil when they are
// not inside one allocation.
func (f *fakeDriver) span(p uint64, n uintptr) []byte {
	for base, b := range f.mem {
		if base <= p && p+uint64(n) <= base+uint64(len(b)) {
			return b[p-base : p-base+uint64(n)]
		}
	}
	return nil
}

func (f *fakeDriver) handle(kind string) uintptr {
	f.nextH += 0x10
	f.handles[f.nextH] = kind
	return f.nextH
}

func (f *fakeDriver) live(h uintptr, kind string) bool { return h != 0 && f.handles[h] == kind }

func (f *fakeDriver) stream(h uintptr) bool { return h == 0 || f.live(h, "stream") }

func hostBytes(p unsafe.Pointer, n uintptr) []byte { return unsafe.Slice((*byte)(p), n) }

func cStringAt(p *byte) string { return goString(p, 1<<24) }

var entryRE = regexp.MustCompile(`\.entry\s+([A-Za-z_$][A-Za-z0-9_$]*)\s*\(`)

func (f *fakeDriver) install() {
	cuInit = func(uint32) cuResult { return 0 }
	cuDriverGetVersion = func(v *int32) cuResult { *v = 12040; return 0 }
	cuDeviceGetCount = func(n *int32) cuResult { *n = int32(f.devices); return 0 }
	cuGetErrorName = func(code cuResult, name **byte) cuResult {
		b, ok := fakeNames[code]
		if !ok {
			return codeInvalidValue
		}
		*name = &b[0]
		return 0
	}
	cuDeviceGet = func(dev *int32, ordinal int32) cuResult {
		defer f.mu.Unlock()
		if r := f.enter("cuDeviceGet"); r != 0 {
			return r
		}
		if ordinal < 0 || int(ordinal) >= f.devices {
			return 101
		}
		*dev = ordinal
		return 0
	}
	cuDeviceGetName = func(name *byte, n int32, dev int32) cuResult {
		defer f.mu.Unlock()
		if r := f.enter("cuDeviceGetName"); r != 0 {
			return r
		}
		s := append([]byte("Fake GPU"), 0)
		copy(unsafe.Slice(name, n), s)
		return 0
	}
	cuDeviceTotalMem = func(b *uintptr, dev int32) cuResult {
		defer f.mu.Unlock()
		if r := f.enter("cuDeviceTotalMem_v2"); r != 0 {
			return r
		}
		*b = fakeTotal
		return 0
	}
	cuDevicePrimaryCtxRetain = func(ctx *uintptr, dev int32) cuResult {
		defer f.mu.Unlock()
		if r := f.enter("cuDevicePrimaryCtxRetain"); r != 0 {
			return r
		}
		f.refs++
		*ctx = fakeCtx
		return 0
	}
	cuDevicePrimaryCtxRelease = func(dev int32) cuResult {
		defer f.mu.Unlock()
		if r := f.enter("cuDevicePrimaryCtxRelease_v2"); r != 0 {
			return r
		}
		if f.refs == 0 {
			f.violation("primary context released more often than retained")
			return 201
		}
		f.refs--
		if f.refs == 0 {
			// The context is destroyed with what it holds, as the real
			// driver does; check reports it if anything was left.
			if len(f.mem) > 0 || len(f.handles) > 0 {
				f.violation("context destroyed with resources left in it")
			}
		}
		return 0
	}
	cuCtxSetCurrent = func(ctx uintptr) cuResult {
		defer f.mu.Unlock()
		if r := f.enter("cuCtxSetCurrent"); r != 0 {
			return r
		}
		if ctx != 0 && (ctx != fakeCtx || f.refs == 0) {
			return 201
		}
		f.current[threadID()] = ctx
		return 0
	}
	cuCtxSynchronize = func() cuResult {
		defer f.mu.Unlock()
		if r := f.enter("cuCtxSynchronize"); r != 0 {
			return r
		}
		if !f.inContext("cuCtxSynchronize") {
			return 201
		}
		return 0
	}
	cuMemAlloc = func(p *uint64, n uintptr) cuResult {
		defer f.mu.Unlock()
		if r := f.enter("cuMemAlloc_v2"); r != 0 {
			return r
		}
		if !f.inContext("cuMemAlloc_v2") {
			return 201
		}
		if n == 0 {
			f.violation("cuMemAlloc_v2 of 0 bytes")
			return codeInvalidValue
		}
		if uint64(n) > f.free() {
			return codeOutOfMemory
		}
		*p = f.next
		f.mem[f.next] = make([]byte, n)
		f.next += (uint64(n) + 511) &^ 255
		return 0
	}
	cuMemFree = func(p uint64) cuResult {
		defer f.mu.Unlock()
		if r := f.enter("cuMemFree_v2"); r != 0 {
			return r
		}
		if !f.inContext("cuMemFree_v2") {
			return 201
		}
		if _, ok := f.mem[p]; !ok {
			f.violation("cuMemFree_v2 of an address not allocated")
			return codeInvalidValue
		}
		delete(f.mem, p)
		return 0
	}
	cuMemAllocHost = func(pp *unsafe.Pointer, n uintptr) cuResult {
		defer f.mu.Unlock()
		if r := f.enter("cuMemAllocHost_v2"); r != 0 {
			return r
		}
		if !f.inContext("cuMemAllocHost_v2") {
			return 201
		}
		if n == 0 {
			f.violation("cuMemAllocHost_v2 of 0 bytes")
			return codeInvalidValue
		}
		b := make([]byte, n)
		*pp = unsafe.Pointer(&b[0])
		f.host[*pp] = b
		return 0
	}
	cuMemFreeHost = func(p unsafe.Pointer) cuResult {
		defer f.mu.Unlock()
		if r := f.enter("cuMemFreeHost"); r != 0 {
			return r
		}
		if !f.inContext("cuMemFreeHost") {
			return 201
		}
		if _, ok := f.host[p]; !ok {
			f.violation("cuMemFreeHost of a buffer not allocated")
			return codeInvalidValue
		}
		delete(f.host, p)
		return 0
	}
	copyHD := func(call string, dst uint64, src unsafe.Pointer, n uintptr, stream uintptr) cuResult {
		defer f.mu.Unlock()
		if r := f.enter(call); r != 0 {
			return r
		}
		if !f.inContext(call) || !f.stream(stream) {
			return 400
		}
		if n == 0 {
			f.violation(call + " of 0 bytes")
			return codeInvalidValue
		}
		d := f.span(dst, n)
		if d == nil {
			return codeInvalidValue
		}
		copy(d, hostBytes(src, n))
		return 0
	}
	copyDH := func(call string, dst unsafe.Pointer, src uint64, n uintptr, stream uintptr) cuResult {
		defer f.mu.Unlock()
		if r := f.enter(call); r != 0 {
			return r
		}
		if !f.inContext(call) || !f.stream(stream) {
			return 400
		}
		if n == 0 {
			f.violation(call + " of 0 bytes")
			return codeInvalidValue
		}
		s := f.span(src, n)
		if s == nil {
			return codeInvalidValue
		}
		copy(hostBytes(dst, n), s)
		return 0
	}
	cuMemcpyHtoD = func(dst uint64, src unsafe.Pointer, n uintptr) cuResult {
		return copyHD("cuMemcpyHtoD_v2", dst, src, n, 0)
	}
	cuMemcpyDtoH = func(dst unsafe.Pointer, src uint64, n uintptr) cuResult {
		return copyDH("cuMemcpyDtoH_v2", dst, src, n, 0)
	}
	cuMemcpyHtoDAsync = func(dst uint64, src unsafe.Pointer, n uintptr, stream uintptr) cuResult {
		return copyHD("cuMemcpyHtoDAsync_v2", dst, src, n, stream)
	}
	cuMemcpyDtoHAsync = func(dst unsafe.Pointer, src uint64, n uintptr, stream uintptr) cuResult {
		return copyDH("cuMemcpyDtoHAsync_v2", dst, src, n, stream)
	}
	cuMemcpyDtoD = func(dst, src uint64, n uintptr) cuResult {
		defer f.mu.Unlock()
		if r := f.enter("cuMemcpyDtoD_v2"); r != 0 {
			return r
		}
		if !f.inContext("cuMemcpyDtoD_v2") {
			return 201
		}
		if n == 0 {
			f.violation("cuMemcpyDtoD_v2 of 0 bytes")
			return codeInvalidValue
		}
		d, s := f.span(dst, n), f.span(src, n)
		if d == nil || s == nil {
			return codeInvalidValue
		}
		copy(d, s)
		return 0
	}
	cuMemsetD8 = func(dst uint64, b uint8, n uintptr) cuResult {
		defer f.mu.Unlock()
		if r := f.enter("cuMemsetD8_v2"); r != 0 {
			return r
		}
		if !f.inContext("cuMemsetD8_v2") {
			return 201
		}
		if n == 0 {
			f.violation("cuMemsetD8_v2 of 0 bytes")
			return codeInvalidValue
		}
		d := f.span(dst, n)
		if d == nil {
			return codeInvalidValue
		}
		for i := range d {
			d[i] = b
		}
		return 0
	}
	cuMemGetInfo = func(free, total *uintptr) cuResult {
		defer f.mu.Unlock()
		if r := f.enter("cuMemGetInfo_v2"); r != 0 {
			return r
		}
		if !f.inContext("cuMemGetInfo_v2") {
			return 201
		}
		*free, *total = uintptr(f.free()), fakeTotal
		return 0
	}
	cuModuleLoadData = func(mod *uintptr, image unsafe.Pointer) cuResult {
		defer f.mu.Unlock()
		if r := f.enter("cuModuleLoadData"); r != 0 {
			return r
		}
		if !f.inContext("cuModuleLoadData") {
			return 201
		}
		text := cStringAt((*byte)(image)) // the driver reads a C string
		if !entryRE.MatchString(text) {
			return 218 // CUDA_ERROR_INVALID_PTX
		}
		*mod = f.handle("module")
		f.images[*mod] = text
		f.mem[f.next] = make([]byte, 4096) // the module's code
		f.code[*mod] = f.next
		f.next += 4096
		return 0
	}
	cuModuleUnload = func(mod uintptr) cuResult {
		defer f.mu.Unlock()
		if r := f.enter("cuModuleUnload"); r != 0 {
			return r
		}
		if !f.inContext("cuModuleUnload") {
			return 201
		}
		if !f.live(mod, "module") {
			return 400
		}
		delete(f.mem, f.code[mod])
		delete(f.code, mod)
		delete(f.handles, mod)
		delete(f.images, mod)
		for fn, m := range f.fnMod {
			if m == mod {
				delete(f.handles, fn)
				delete(f.funcs, fn)
				delete(f.fnMod, fn)
			}
		}
		return 0
	}
	cuModuleGetFunction = func(fn *uintptr, mod uintptr, name *byte) cuResult {
		defer f.mu.Unlock()
		if r := f.enter("cuModuleGetFunction"); r != 0 {
			return r
		}
		if !f.inContext("cuModuleGetFunction") {
			return 201
		}
		if !f.live(mod, "module") {
			return 400
		}
		n := cStringAt(name)
		for _, m := range entryRE.FindAllStringSubmatch(f.images[mod], -1) {
			if m[1] == n {
				*fn = f.handle("function")
				f.funcs[*fn] = n
				f.fnMod[*fn] = mod
				return 0
			}
		}
		return 500 // CUDA_ERROR_NOT_FOUND
	}
	cuLaunchKernel = func(fn uintptr, gx, gy, gz, bx, by, bz, shared uint32, stream uintptr, params, extra unsafe.Pointer) cuResult {
		defer f.mu.Unlock()
		if r := f.enter("cuLaunchKernel"); r != 0 {
			return r
		}
		if !f.inContext("cuLaunchKernel") {
			return 201
		}
		if !f.live(fn, "function") || !f.stream(stream) {
			return 400
		}
		if extra != nil || gx*gy*gz == 0 || bx*by*bz == 0 || bx*by*bz > 1024 {
			return codeInvalidValue
		}
		threads := uint64(gx) * uint64(bx) // the kernels use x only
		switch f.funcs[fn] {
		case "add_u32":
			p := unsafe.Slice((*unsafe.Pointer)(params), 3)
			data, add, n := *(*uint64)(p[0]), *(*uint32)(p[1]), *(*uint32)(p[2])
			m := min(threads, uint64(n))
			if m == 0 {
				return 0
			}
			b := f.span(data, uintptr(4*m))
			if b == nil {
				return 700 // CUDA_ERROR_ILLEGAL_ADDRESS (reported at launch here)
			}
			for i := uint64(0); i < m; i++ {
				v := binary.LittleEndian.Uint32(b[4*i:])
				binary.LittleEndian.PutUint32(b[4*i:], v+add)
			}
		case "store_args":
			p := unsafe.Slice((*unsafe.Pointer)(params), 6)
			b := f.span(*(*uint64)(p[0]), 40)
			if b == nil {
				return 700
			}
			binary.LittleEndian.PutUint32(b[0:], *(*uint32)(p[1]))
			binary.LittleEndian.PutUint64(b[8:], *(*uint64)(p[2]))
			binary.LittleEndian.PutUint32(b[16:], math.Float32bits(*(*float32)(p[3])))
			binary.LittleEndian.PutUint64(b[24:], math.Float64bits(*(*float64)(p[4])))
			binary.LittleEndian.PutUint32(b[32:], uint32(*(*int32)(p[5])))
		default:
			if r := f.failK[f.funcs[fn]]; r != 0 {
				return r
			}
			k, ok := fakeKernels[f.funcs[fn]]
			if !ok {
				return 400
			}
			n := fakeKernelParams[f.funcs[fn]]
			if !k(&fakeLaunch{f: f, params: unsafe.Slice((*unsafe.Pointer)(params), n), block: bx}) {
				return 700 // CUDA_ERROR_ILLEGAL_ADDRESS (reported at launch here)
			}
		}
		return 0
	}
	cuStreamCreate = func(s *uintptr, flags uint32) cuResult {
		defer f.mu.Unlock()
		if r := f.enter("cuStreamCreate"); r != 0 {
			return r
		}
		if !f.inContext("cuStreamCreate") {
			return 201
		}
		*s = f.handle("stream")
		return 0
	}
	cuStreamDestroy = func(s uintptr) cuResult {
		defer f.mu.Unlock()
		if r := f.enter("cuStreamDestroy_v2"); r != 0 {
			return r
		}
		if !f.inContext("cuStreamDestroy_v2") {
			return 201
		}
		if !f.live(s, "stream") {
			return 400
		}
		delete(f.handles, s)
		return 0
	}
	cuStreamSynchronize = func(s uintptr) cuResult {
		defer f.mu.Unlock()
		if r := f.enter("cuStreamSynchronize"); r != 0 {
			return r
		}
		if !f.inContext("cuStreamSynchronize") {
			return 201
		}
		if !f.stream(s) {
			return 400
		}
		return 0
	}
	cuEventCreate = func(e *uintptr, flags uint32) cuResult {
		defer f.mu.Unlock()
		if r := f.enter("cuEventCreate"); r != 0 {
			return r
		}
		if !f.inContext("cuEventCreate") {
			return 201
		}
		*e = f.handle("event")
		return 0
	}
	cuEventDestroy = func(e uintptr) cuResult {
		defer f.mu.Unlock()
		if r := f.enter("cuEventDestroy_v2"); r != 0 {
			return r
		}
		if !f.inContext("cuEventDestroy_v2") {
			return 201
		}
		if !f.live(e, "event") {
			return 400
		}
		delete(f.handles, e)
		delete(f.events, e)
		return 0
	}
	cuEventRecord = func(e, s uintptr) cuResult {
		defer f.mu.Unlock()
		if r := f.enter("cuEventRecord"); r != 0 {
			return r
		}
		if !f.inContext("cuEventRecord") {
			return 201
		}
		if !f.live(e, "event") || !f.stream(s) {
			return 400
		}
		f.events[e] = time.Now()
		return 0
	}
	cuEventSynchronize = func(e uintptr) cuResult {
		defer f.mu.Unlock()
		if r := f.enter("cuEventSynchronize"); r != 0 {
			return r
		}
		if !f.inContext("cuEventSynchronize") {
			return 201
		}
		if !f.live(e, "event") {
			return 400
		}
		return 0
	}
	cuEventElapsedTime = func(ms *float32, start, end uintptr) cuResult {
		defer f.mu.Unlock()
		if r := f.enter("cuEventElapsedTime"); r != 0 {
			return r
		}
		if !f.inContext("cuEventElapsedTime") {
			return 201
		}
		t0, ok0 := f.events[start]
		t1, ok1 := f.events[end]
		if !f.live(start, "event") || !f.live(end, "event") || !ok0 || !ok1 {
			return 400
		}
		*ms = float32(t1.Sub(t0).Seconds() * 1000)
		return 0
	}
}

// free is the device memory not allocated. f.mu held.
func (f *fakeDriver) free() uint64 {
	used := uint64(0)
	if f.refs > 0 {
		used += fakeCtxBytes
	}
	for _, b := range f.mem {
		used += uint64(len(b))
	}
	return fakeTotal - used
}

// check reports the violations seen so far and, when every Device is
// closed, anything left allocated or current.
func (f *fakeDriver) check(t testing.TB, closed bool) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.bad {
		t.Error("fake driver:", s)
	}
	f.bad = nil
	if !closed {
		return
	}
	if f.refs != 0 {
		t.Errorf("fake driver: primary context retained %d times after Close", f.refs)
	}
	if len(f.mem) != 0 || len(f.host) != 0 || len(f.handles) != 0 {
		t.Errorf("fake driver: left after Close: %d device allocations, %d pinned buffers, %d handles", len(f.mem), len(f.host), len(f.handles))
	}
	for tid, ctx := range f.current {
		if ctx != 0 {
			t.Errorf("fake driver: a context is still current on thread %d after Close", tid)
		}
	}
}
