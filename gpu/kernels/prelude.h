// Definitions the kernels need, for the device (clang's CUDA mode, no CUDA
// headers) or for the host emulation (emulate.h).
#ifndef TP_PRELUDE_H
#define TP_PRELUDE_H

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef int i32;
typedef unsigned long long u64;

#ifdef TP_EMULATE
#include "emulate.h"
#else
#include <__clang_cuda_builtin_vars.h>
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define KERNEL extern "C" __global__
static __device__ inline void sync_block() { __syncthreads(); }
static __device__ inline u32 atomic_add_u32(u32 *p, u32 v) { return (u32)__nvvm_atom_add_gen_i((int *)p, (int)v); }
static __device__ inline u32 atomic_or_u32(u32 *p, u32 v) { return (u32)__nvvm_atom_or_gen_i((int *)p, (int)v); }
#endif

// Four elements moved as one access (ld/st.global.v4.u32, .v4.u16) where
// the addresses allow: 16 bytes of float32, 8 of 16-bit halves.
struct alignas(16) u32x4 {
  u32 a, b, c, d;
};
struct alignas(8) u16x4 {
  u16 a, b, c, d;
};
struct alignas(16) f32x4 {
  float a, b, c, d;
};

// aligned16: p may be read or written 16 bytes at a time (a null p too:
// the kernels test it before use).
static __device__ inline bool aligned16(const void *p) { return ((u64)p & 15) == 0; }

static __device__ inline u32 f32_bits(float f) { return __builtin_bit_cast(u32, f); }
static __device__ inline float f32_from(u32 b) { return __builtin_bit_cast(float, b); }

// The elements a thread handles in a grid-stride loop start at gid and step
// by gstride.
static __device__ inline u64 gid() { return (u64)blockIdx.x * blockDim.x + threadIdx.x; }
static __device__ inline u64 gstride() { return (u64)gridDim.x * blockDim.x; }

#endif
