// Package gpu drives an NVIDIA GPU through the CUDA driver API, loaded at
// run time: device memory, pinned host memory, copies, streams, events,
// modules and kernel launches. It is a thin binding, without cgo: the
// driver library (libcuda.so.1) is opened with dlopen through
// github.com/ebitengine/purego and its functions are bound by their
// symbol names. So one binary, built with CGO_ENABLED=0 and without CUDA
// headers or the CUDA toolkit, uses a GPU where the NVIDIA driver is
// installed and gets a clear error elsewhere; at run time it needs the
// driver only (and the C library). The binding exists for linux/amd64
// and linux/arm64; elsewhere the package builds and reports no device.
//
// # Kernels and the Sender
//
// The kernels (kernels/kernels.cu, compiled to PTX by clang-14 with go
// generate and embedded) compute what the CPU code computes, bit for bit:
// fp16 and bf16 conversion (F16, BF16: internal/float16), blockwise int8,
// nf4 and fp4 (Int8Blocks, Q4Blocks: the lossy stages' codes and scales),
// exact top-k by magnitude with ties to the lower index (Selector.Exact:
// topk.Exact; a histogram of the magnitudes' top 11 bits, then, where the
// bin of the cut and those above it hold few elements, those compacted in
// order and the selection made among them: three passes over the input;
// otherwise two more histogram passes and an ordered compaction), DGC's
// sampled threshold and its adaptations (Selector.Sampled: topk.Sampled;
// the count at a threshold places the elements for the compaction that
// follows it: two passes over the input where no adaptation is needed),
// error-feedback compensation and DGC's momentum
// correction (AddF32, DGCCompensate). Integer work is the CPU's integer
// work, and float32 products and sums are rounded one by one (no FMA), as
// the Go code rounds them; NaN results may differ in their payload (a GPU
// gives the canonical NaN), so the float kernels agree bit for bit on
// finite data.
//
// Sender is gradient.Sender's TopK and DGC on the device: compensation,
// selection and the staged residual stay there across steps, only the
// selected values and their positions come back (the positions already
// delta-coded and bit-packed on the device where the tail starts with
// idx:delta,bitpack, as the default tail does), and the frame built from them
// is byte for byte what gradient.Sender writes for the same gradients,
// commits and aborts; receivers need no GPU. It takes host gradients
// (from pinned memory without a staging copy) or device pointers the
// caller owns (AppendDevice). What it does not take (DGC with clipping, a
// lossy tail, other compressors) NewSender refuses with
// codec.ErrUnsupported, for the CPU's Sender. Device.AppendTensor does the
// same for the lossy stages: a tensor on the device coded by a recipe that
// starts with fp16, bf16, int8(B), nf4(B) or fp4(B) is converted there,
// and only the
// converted bytes cross to the host for the rest of the recipe; the frame
// is byte for byte the codec's. gradient.Outbox.SetDevice puts updates on a
// Device; importing the package registers it as gradient's device backend
// "cuda", so that gradient.UseDevice (a profile's device: auto or cuda)
// puts an Outbox's updates on device 0, opened for the first Outbox that
// uses it and closed with the last (Outbox.Close).
//
// # Finding a device
//
// Available loads the library and calls cuInit once per process (later
// calls are free) and says whether a device can be opened. Its error, and
// Open's when there is no usable device, wraps ErrNoDevice and gives the
// reason:
//
//	gpu: no CUDA device: libcuda.so.1: cannot open shared object file: No such file or directory
//	gpu: no CUDA device: gpu: cuInit: CUDA_ERROR_NO_DEVICE (100)
//	gpu: no CUDA device: ordinal 1 out of range (1 devices)
//
// A missing driver function (a driver too old) is such an error too,
// never a panic. Callers with a CPU path test errors.Is(err, ErrNoDevice)
// and take it; the package's own tests skip with that message.
//
// # Threading model
//
// A CUDA context is current per OS thread. Each Device has one worker
// goroutine, locked to its OS thread (runtime.LockOSThread), which
// retains the device's primary context once and makes it current; every
// driver call of the Device, its streams, events and modules runs there,
// in the order the calls arrive. A Device is therefore safe for
// concurrent use, and its calls are serialised: concurrency on the device
// comes from streams, not from goroutines. Each call is a trip to the
// worker's thread and back, some microseconds (BenchmarkFakeTrip: 18 µs
// on a two-core machine), longer than a small kernel runs: the
// selections put their launches, copies and waits into one trip for each
// result the host needs (3 for an Exact or a Sampled selection, where
// one trip a call made 17-28, counted on the fake driver). Two Devices
// of one ordinal share the primary context (it is reference-counted) but
// not their resources.
//
// # Memory discipline
//
// Everything allocated through a Device (device memory, pinned host
// buffers, streams, events, modules) is tracked by it until freed, and
// Device.Close frees whatever is left, releases the primary context and
// ends the worker: device memory returns to where it was before (TestGPU
// checks it with cuMemGetInfo after 10,000 allocations and after a
// Device that freed nothing is closed). A
// Device must be closed (there are no finalizers); after Close its calls
// return ErrClosed. Free and FreeHost refuse addresses the Device does not
// hold, so a double free cannot free someone else's allocation.
//
// Host memory passed to a synchronous copy is used only during the call.
// Asynchronous copies take host memory from AllocHost only (C memory that
// the collector does not manage), which must stay untouched until the
// stream is synchronised. Kernel parameters are copied by the driver at
// launch; they live in one pinned Go allocation until cuLaunchKernel
// returns.
//
// # Errors
//
// Every driver call's result is checked. A failing one is an *Error
// naming the call and the code (gpu: cuMemAlloc_v2:
// CUDA_ERROR_OUT_OF_MEMORY (2)); errors.Is(err, ErrOutOfMemory) finds an
// allocation that did not fit. Kernels run asynchronously: their faults
// surface at the next synchronisation (or any later call). A fault such
// as CUDA_ERROR_ILLEGAL_ADDRESS is sticky: the driver documents that the
// process cannot use CUDA again until it is restarted. So the operations
// refuse an address off their elements' alignment (an offset into an
// Alloc'd buffer must keep it) before any launch: on an H200, a
// misaligned write faulted with CUDA_ERROR_MISALIGNED_ADDRESS and every
// later call of the process failed with it. Zero-length copies, sets and
// allocations are no-ops, never driver calls.
//
// # Testing
//
// Three layers check the kernels without a GPU. The emulation tests
// compile kernels.cu for the host (clang++-14, emulate.h: each block's
// threads as OS threads meeting at a barrier) and compare every kernel
// with the Go code on fresh random inputs. TestPTXUpToDate checks the
// embedded PTX against the source. The fake driver runs each kernel's
// contract in Go, so that the Go side (launch arguments, scratch, the
// selection's passes and adaptations, the Sender's state across commits
// and aborts) is tested end to end: TestFakeOps, TestFakeSender.
//
// TestGPU runs the device tests on device 0; without one it skips with
// Available's message ("gpu: no CUDA device: ..."). The same tests run on
// every machine against a fake driver written in Go (TestFakeDriver:
// the worker thread, tracking, Close, kernel parameters) and, where gcc
// is installed, against a C stand-in for libcuda.so.1 loaded through
// purego in a child process (TestStubDriver: the calls' C argument
// passing). None replaces a GPU: on a GPU host, build the test binary
// with CGO_ENABLED=0 go test -c ./gpu and run it with -test.run GPU, or
// run gpu/bench/run.sh, which runs the device tests, then the benchmarks
// (CUDA-event medians on 100M float32) beside torch's in the same run.
// They first ran on an H200 on 2026-11-27 (docs/BENCHMARKS.md, "On a
// device"): every device test passes.
package gpu
