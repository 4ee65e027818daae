// Package cpufeature says which optional instruction sets the CPU and the
// operating system support, for the packages whose kernels use them
// (lossless's shuffle, lossy's fp16/bf16 and block quantizers). It is the
// one place that asks: golang.org/x/sys/cpu runs CPUID and XGETBV once at
// start-up, so no package carries detection code of its own.
//
// The values are fixed at program start and safe for concurrent reads. On
// other architectures they are all false, and the kernels' pure-Go twins
// do the work.
package cpufeature

import "golang.org/x/sys/cpu"

var (
	// AVX2 reports AVX2 with the OS saving the YMM state (x/sys/cpu checks
	// OSXSAVE and XCR0 before it sets HasAVX2).
	AVX2 = cpu.X86.HasAVX2

	// F16C reports F16C together with AVX2: the fp16 kernels convert with
	// F16C and fix up NaNs with AVX2 integer instructions.
	F16C = cpu.X86.HasAVX2 && cpu.X86.HasF16C
)
