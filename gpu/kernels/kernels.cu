// CUDA kernels of package gpu. Each one is specified by the Go reference
// loop it computes, named in its comment; integer arithmetic and IEEE
// float32 operations (no contraction: -ffp-contract=off) make the results
// bit-identical to it. Compiled to PTX by `go generate ./gpu`; also
// compiled for the host with emulate.h by the emulation test.
#include "prelude.h"

// ---- fp16 and bf16 (internal/float16.F16FromF32, BF16FromF32) ----

static __device__ inline u32 round_shift(u32 m, u32 s) {
  u32 q = m >> s, rem = m & ((1u << s) - 1), half = 1u << (s - 1);
  if (rem > half || (rem == half && (q & 1))) q++;
  return q;
}

static __device__ inline u16 f16_from_f32(u32 b) {
  u16 sign = (u16)(b >> 16) & 0x8000;
  u32 a = b & 0x7fffffff;
  if (a - 0x38800000u < 0x477ff000u - 0x38800000u) {
    a -= (127u - 15u) << 23;
    a += 0xfff + ((a >> 13) & 1);
    return sign | (u16)(a >> 13);
  }
  if (a > 0x7f800000u) return sign | 0x7e00; // NaN: the payload dropped
  if (a >= 0x477ff000u) return sign | 0x7c00;
  if (a <= 0x33000000u) return sign;
  u32 e = a >> 23, m = (a & 0x7fffff) | 0x800000;
  return sign | (u16)round_shift(m, 126 - e);
}

static __device__ inline u16 bf16_from_f32(u32 b) {
  if ((b & 0x7fffffff) > 0x7f800000u) return 0xffff;
  return (u16)((b + 0x7fff + ((b >> 16) & 1)) >> 16);
}

// Two halves as one 32-bit word, the first in the low bits (little-endian
// memory order).
static __device__ inline u32 pack_halves(u16 lo, u16 hi) { return (u32)lo | (u32)hi << 16; }

// y[i] = cv(x[i]) for i < n: eight at a time where x and y are 16-byte
// aligned (cudaMalloc'd buffers are: two 16-byte loads, one 16-byte
// store), else four at a time where x is 16-byte and y 8-byte aligned,
// then the rest one by one.
template <u16 (*cv)(u32)> static __device__ inline void halves(const u32 *x, u16 *y, u64 n) {
  u64 done = 0;
  if ((((u64)x & 15) | ((u64)y & 15)) == 0) {
    u64 n8 = n / 8;
    const u32x4 *x4 = (const u32x4 *)x;
    u32x4 *y4 = (u32x4 *)y;
    for (u64 i = gid(); i < n8; i += gstride()) {
      u32x4 v = x4[2 * i], w = x4[2 * i + 1];
      y4[i] = u32x4{pack_halves(cv(v.a), cv(v.b)), pack_halves(cv(v.c), cv(v.d)), pack_halves(cv(w.a), cv(w.b)),
                    pack_halves(cv(w.c), cv(w.d))};
    }
    done = 8 * n8;
  } else if ((((u64)x & 15) | ((u64)y & 7)) == 0) {
    u64 n4 = n / 4;
    const u32x4 *x4 = (const u32x4 *)x;
    u16x4 *y4 = (u16x4 *)y;
    for (u64 i = gid(); i < n4; i += gstride()) {
      u32x4 v = x4[i];
      y4[i] = u16x4{cv(v.a), cv(v.b), cv(v.c), cv(v.d)};
    }
    done = 4 * n4;
  }
  for (u64 i = done + gid(); i < n; i += gstride()) y[i] = cv(x[i]);
}

// y[i] = F16FromF32(x[i]) for i < n.
KERNEL void tp_f32_to_f16(const u32 *x, u16 *y, u64 n) { halves<f16_from_f32>(x, y, n); }

// y[i] = BF16FromF32(x[i]) for i < n.
KERNEL void tp_f32_to_bf16(const u32 *x, u16 *y, u64 n) { halves<bf16_from_f32>(x, y, n); }

// ---- blockwise int8 (lossy.int8Quantize) ----

#define TP_BLOCK_THREADS 256

// roundClamp127: clamp(roundHalfEven(y), -127, 127) for |y| < 2^22.
static __device__ inline i32 round_clamp127(float y) {
  i32 r = (i32)f32_bits(y + 12582912.0f) - 0x4b400000;
  return r < -127 ? -127 : (r > 127 ? 127 : r);
}

// block_absmax returns, to every thread of the block, the largest
// magnitude bits of x[lo:hi] (lossy.absmaxBits), reduced in red.
static __device__ inline u32 block_absmax(const float *x, u64 lo, u64 hi, u32 *red) {
  u32 m = 0;
  for (u64 i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    u32 k = f32_bits(x[i]) & 0x7fffffff;
    m = k > m ? k : m;
  }
  red[threadIdx.x] = m;
  sync_block();
  for (u32 s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s && red[threadIdx.x + s] > red[threadIdx.x]) red[threadIdx.x] = red[threadIdx.x + s];
    sync_block();
  }
  m = red[0];
  sync_block(); // red is reused by the next block
  return m;
}

// block_scale sets *m to the absmax bits of x[lo:hi] and *scale to its
// float (the block's scale), and reports true; for a block holding a NaN
// or an infinity it sets bad[0] and *scale to 0 and reports false (the
// CPU refuses the block: errBlockNonFinite). Every thread must call it.
static __device__ inline bool block_scale(const float *x, u64 lo, u64 hi, u32 *red, float *scale, u32 *bad, u32 *m) {
  *m = block_absmax(x, lo, hi, red);
  bool ok = *m < 0x7f800000u;
  if (threadIdx.x == 0) {
    if (!ok) atomic_or_u32(bad, 1);
    *scale = ok ? f32_from(*m) : 0;
  }
  return ok;
}

// Block j (one CUDA block each, blockDim TP_BLOCK_THREADS) of bsize
// elements of x (the last may be shorter): scale[j] is its absmax and
// q its codes, as int8Quantize gives them. A block holding a NaN or Inf
// sets bad[0] to 1 (the CPU refuses it: errBlockNonFinite).
KERNEL void tp_int8_blocks(const float *x, u8 *q, float *scale, u64 n, u32 bsize, u32 *bad) {
  __shared__ u32 red[TP_BLOCK_THREADS];
  u64 nblocks = (n + bsize - 1) / bsize;
  for (u64 j = blockIdx.x; j < nblocks; j += gridDim.x) {
    u64 lo = j * bsize, hi = lo + bsize < n ? lo + bsize : n;
    u32 m;
    if (!block_scale(x, lo, hi, red, &scale[j], bad, &m)) continue;
    float a = f32_from(m);
    if (m == 0) {
      for (u64 i = lo + threadIdx.x; i < hi; i += blockDim.x) q[i] = 0;
    } else if (m < (127u - 100u) << 23) { // tiny: scaled by 2^100 first
      float inv = 127.0f / (a * 0x1p100f);
      for (u64 i = lo + threadIdx.x; i < hi; i += blockDim.x) q[i] = (u8)round_clamp127((x[i] * 0x1p100f) * inv);
    } else {
      float inv = 127.0f / a;
      for (u64 i = lo + threadIdx.x; i < hi; i += blockDim.x) q[i] = (u8)round_clamp127(x[i] * inv);
    }
  }
}

// ---- exact top-k by magnitude (internal/topk.Exact) ----
//
// The magnitude of x[i] is its bits with the sign cleared. A radix
// selection finds the k-th largest magnitude t in three histogram passes
// (bits 30..20, 19..9, 8..0), each over the elements whose higher bits
// match the prefix found so far; st (on the device) carries the state:
// st[0] the elements still to take at the cut, st[1] the prefix, st[2]
// after a pass the elements (matching the prefix before it) at or above
// the bin it found. Then the selected indices (magnitude > t, or == t
// among the first st[0] such by index) are compacted in ascending order,
// tile by tile. Where the first pass leaves few elements at or above its
// bin, the host compacts those instead and selects among them (gpu.Exact).

#define TP_HIST_MAX 2048

// tp_topk_state sets st[0] = need and st[1] = prefix (no copy from the
// host, no wait for one).
KERNEL void tp_topk_state(u32 *st, u32 need, u32 prefix) {
  if (gid() == 0) {
    st[0] = need;
    st[1] = prefix;
  }
}

// tp_zero sets p[0:n] to 0.
KERNEL void tp_zero(u32 *p, u64 n) {
  for (u64 i = gid(); i < n; i += gstride()) p[i] = 0;
}

// hist[b] += the elements of x whose magnitude k has k >> pshift ==
// st[1] and (k >> shift) & (nbins-1) == b. nbins is a power of two, at
// most TP_HIST_MAX; pshift 31 matches every element.
KERNEL void tp_topk_hist(const u32 *x, u64 n, u32 *hist, u32 nbins, u32 shift, u32 pshift, const u32 *st) {
  __shared__ u32 h[TP_HIST_MAX];
  for (u32 i = threadIdx.x; i < nbins; i += blockDim.x) h[i] = 0;
  sync_block();
  u32 prefix = st[1];
  for (u64 i = gid(); i < n; i += gstride()) {
    u32 k = x[i] & 0x7fffffff;
    if ((k >> pshift) == prefix) atomic_add_u32(&h[(k >> shift) & (nbins - 1)], 1);
  }
  sync_block();
  for (u32 i = threadIdx.x; i < nbins; i += blockDim.x)
    if (h[i]) atomic_add_u32(&hist[i], h[i]);
}

#define TP_TILE_ROUNDS 16 // a tile is TP_TILE_ROUNDS x blockDim consecutive elements

// Inclusive scan of v over the block in s (blockDim entries); returns the
// inclusive prefix of this thread. Every thread must call it.
static __device__ inline u32 block_scan(u32 *s, u32 v) {
  s[threadIdx.x] = v;
  sync_block();
  for (u32 d = 1; d < blockDim.x; d <<= 1) {
    u32 add = threadIdx.x >= d ? s[threadIdx.x - d] : 0;
    sync_block();
    s[threadIdx.x] += add;
    sync_block();
  }
  u32 r = s[threadIdx.x];
  sync_block();
  return r;
}

// tp_topk_find (one block) finds the bin holding the st[0]-th largest
// element counted in hist: st[1] = st[1] << bits | bin, st[0] = the
// elements still to take from that bin, st[2] = the elements counted in
// that bin and above. Each thread sums a run of bins
// from the top, a scan places the runs, and the thread whose run holds
// the element walks it (a single thread walking 2048 bins of global
// memory took most of a selection's time). Then it clears hist[0:nbins]
// for the next pass.
KERNEL void tp_topk_find(u32 *hist, u32 nbins, u32 bits, u32 *st) {
  __shared__ u32 s[TP_BLOCK_THREADS];
  u32 need0 = st[0], need = need0, prefix = st[1];
  u32 per = (nbins + blockDim.x - 1) / blockDim.x;
  u32 top = threadIdx.x * per; // this thread's run: bins [lo, hi), the top-th and below from the top
  u32 hi = top < nbins ? nbins - top : 0, lo = hi > per ? hi - per : 0;
  u32 sum = 0;
  for (u32 b = lo; b < hi; b++) sum += hist[b];
  u32 incl = block_scan(s, sum), excl = incl - sum;
  // The serial walk's result also where need is more than all the bins
  // hold (it cannot be: need counts matching elements): bin 0.
  if (hi > lo && excl < need && (need <= incl || lo == 0)) {
    need -= excl;
    u32 b = hi;
    while (b > lo) {
      b--;
      u32 c = hist[b];
      if (c >= need) break;
      need -= c;
    }
    st[0] = need;
    st[1] = prefix << bits | b;
    st[2] = need0 - need + hist[b];
  }
  sync_block();
  for (u32 b = lo; b < hi; b++) hist[b] = 0;
}

// tally counts v's magnitude in gt (above t) or eq (equal to it).
static __device__ inline void tally(u32 v, u32 t, u32 &gt, u32 &eq) {
  u32 k = v & 0x7fffffff;
  gt += k > t;
  eq += k == t;
}

// cnt[2*tile] and cnt[2*tile+1]: the magnitudes above t = st[1] and equal
// to it in each tile (one CUDA block a tile).
KERNEL void tp_topk_count(const u32 *x, u64 n, const u32 *st, u32 *cnt) {
  __shared__ u32 s[TP_BLOCK_THREADS];
  u32 t = st[1];
  u64 tile = (u64)TP_TILE_ROUNDS * blockDim.x;
  u64 ntiles = (n + tile - 1) / tile;
  bool vec = ((u64)x & 15) == 0;
  for (u64 j = blockIdx.x; j < ntiles; j += gridDim.x) {
    u32 gt = 0, eq = 0;
    if (vec && (j + 1) * tile <= n) {
      // A whole tile, 16 bytes a thread a round (the order of the
      // elements does not matter to a count).
      const u32x4 *x4 = (const u32x4 *)(x + j * tile);
#pragma unroll
      for (u32 r = 0; r < TP_TILE_ROUNDS / 4; r++) {
        u32x4 q = x4[r * blockDim.x + threadIdx.x];
        tally(q.a, t, gt, eq);
        tally(q.b, t, gt, eq);
        tally(q.c, t, gt, eq);
        tally(q.d, t, gt, eq);
      }
    } else {
      for (u32 r = 0; r < TP_TILE_ROUNDS; r++) {
        u64 i = j * tile + (u64)r * blockDim.x + threadIdx.x;
        if (i < n) tally(x[i], t, gt, eq);
      }
    }
    // Counts below 2^16 a thread: packed, one scan.
    u32 tot = block_scan(s, gt | eq << 16);
    if (threadIdx.x == blockDim.x - 1) {
      cnt[2 * j] = tot & 0xffff;
      cnt[2 * j + 1] = tot >> 16;
    }
  }
}

// tp_topk_offsets (one CUDA block) turns cnt into exclusive prefixes over
// the tiles: off[2*j] the elements selected before tile j, off[2*j+1] the
// ties before it. st[0] is the ties to take. Each thread sums a run of
// consecutive tiles, one scan places the runs, and each thread writes its
// run's prefixes (a scan of the block per 256 tiles took a tenth of a
// selection's time).
KERNEL void tp_topk_offsets(const u32 *__restrict__ cnt, u64 ntiles, const u32 *__restrict__ st, u32 *__restrict__ off) {
  __shared__ u32 s[TP_BLOCK_THREADS];
  u32 r = st[0];
  u64 per = (ntiles + blockDim.x - 1) / blockDim.x;
  u64 lo = threadIdx.x * per, hi = lo + per < ntiles ? lo + per : ntiles;
  u32 gt = 0, eq = 0;
  // Unrolled, so that a thread has several loads in flight: one block
  // reads every tile's counts, and one load at a time waited out the
  // latency of each (tens of microseconds over 24k tiles).
#pragma unroll 8
  for (u64 j = lo; j < hi; j++) {
    gt += cnt[2 * j];
    eq += cnt[2 * j + 1];
  }
  // Two scans: sums can exceed 2^16.
  u32 gtBefore = block_scan(s, gt) - gt;
  u32 eqBefore = block_scan(s, eq) - eq;
  u64 j = lo;
  for (; j + 8 <= hi; j += 8) { // eight tiles' counts loaded, then their offsets written
    u32 c[16];
#pragma unroll
    for (u32 q = 0; q < 16; q++) c[q] = cnt[2 * j + q];
#pragma unroll
    for (u32 q = 0; q < 8; q++) {
      off[2 * (j + q)] = gtBefore + (eqBefore < r ? eqBefore : r); // ties taken before the tile
      off[2 * (j + q) + 1] = eqBefore;
      gtBefore += c[2 * q];
      eqBefore += c[2 * q + 1];
    }
  }
  for (; j < hi; j++) {
    off[2 * j] = gtBefore + (eqBefore < r ? eqBefore : r);
    off[2 * j + 1] = eqBefore;
    gtBefore += cnt[2 * j];
    eqBefore += cnt[2 * j + 1];
  }
}

// tp_topk_compact writes the selected indices (ascending) to idx and
// their elements to val. Each thread of a tile's block takes
// TP_TILE_ROUNDS consecutive elements: one scan a tile places them.
KERNEL void tp_topk_compact(const u32 *x, u64 n, const u32 *st, const u32 *off, u32 *idx, u32 *val) {
  __shared__ u32 s[TP_BLOCK_THREADS];
  u32 t = st[1], r = st[0];
  u64 tile = (u64)TP_TILE_ROUNDS * blockDim.x;
  u64 ntiles = (n + tile - 1) / tile;
  for (u64 j = blockIdx.x; j < ntiles; j += gridDim.x) {
    u64 lo = j * tile + (u64)threadIdx.x * TP_TILE_ROUNDS, hi = lo + TP_TILE_ROUNDS < n ? lo + TP_TILE_ROUNDS : n;
    u32 m = hi > lo ? (u32)(hi - lo) : 0;
    // The thread's run in registers: four 16-byte loads where it is
    // whole and x is 16-byte aligned, else one by one.
    u32 v[TP_TILE_ROUNDS];
    if (m == TP_TILE_ROUNDS && ((u64)x & 15) == 0) {
      const u32x4 *p = (const u32x4 *)(x + lo);
#pragma unroll
      for (u32 q = 0; q < TP_TILE_ROUNDS / 4; q++) {
        u32x4 w = p[q];
        v[4 * q] = w.a;
        v[4 * q + 1] = w.b;
        v[4 * q + 2] = w.c;
        v[4 * q + 3] = w.d;
      }
    } else {
#pragma unroll
      for (u32 q = 0; q < TP_TILE_ROUNDS; q++) v[q] = q < m ? x[lo + q] : 0;
    }
    u32 gt = 0, eq = 0;
#pragma unroll
    for (u32 q = 0; q < TP_TILE_ROUNDS; q++)
      if (q < m) tally(v[q], t, gt, eq);
    u32 in = block_scan(s, gt | eq << 16); // at most 2^12 of each a tile
    u32 gtEx = (in & 0xffff) - gt, eqEx = (in >> 16) - eq;
    u32 sel = off[2 * j], eqBase = off[2 * j + 1];
    u32 quota = r > eqBase ? r - eqBase : 0; // ties this tile may still take
    u32 pos = sel + gtEx + (eqEx < quota ? eqEx : quota);
#pragma unroll
    for (u32 q = 0; q < TP_TILE_ROUNDS; q++) {
      u32 k = v[q] & 0x7fffffff;
      if (q >= m || k < t) continue;
      if (k == t && eqEx++ >= quota) continue;
      idx[pos] = (u32)(lo + q);
      val[pos] = v[q];
      pos++;
    }
  }
}

// ---- error feedback ----

// c[i] = g[i] + res[i] (the compensated gradient).
KERNEL void tp_add_f32(const float *g, const float *res, float *c, u64 n) {
  u64 done = 0;
  if (aligned16(g) && aligned16(res) && aligned16(c)) {
    u64 n4 = n / 4;
    for (u64 i = gid(); i < n4; i += gstride()) {
      f32x4 a = ((const f32x4 *)g)[i], b = ((const f32x4 *)res)[i];
      ((f32x4 *)c)[i] = f32x4{a.a + b.a, a.b + b.b, a.c + b.c, a.d + b.d};
    }
    done = 4 * n4;
  }
  for (u64 i = done + gid(); i < n; i += gstride()) c[i] = g[i] + res[i];
}

// res[idx[j]] = 0 for j < k (the elements sent).
KERNEL void tp_scatter_zero(float *res, const u32 *idx, u64 k) {
  for (u64 j = gid(); j < k; j += gstride()) res[idx[j]] = 0;
}

// ---- DGC (gradient.DGC.Compensate, internal/topk.Sampled) ----

// Momentum correction, fused with error-feedback compensation
// (DGC.Compensate): with gi = scale*g[i] (scale < 1 where the gradient is
// clipped),
//
//	u[i] = m*u[i] + gi;       v = u[i]          (nesterov 0)
//	u[i] = m*(u[i] + gi);     v = u[i] + gi     (nesterov 1)
//	c[i] = v + res[i]                           (res may be 0: none)
//
// each product and sum rounded to float32 on its own.
static __device__ inline float dgc_one(float g, float &u, float m, u32 nesterov, float scale) {
  float gi = scale * g;
  if (nesterov) {
    u = m * (u + gi);
    return u + gi;
  }
  float ui = m * u;
  u = ui + gi;
  return u;
}

KERNEL void tp_dgc_compensate(const float *g, float *u, const float *res, float *c, u64 n, float m, u32 nesterov, float scale) {
  u64 done = 0;
  if (aligned16(g) && aligned16(u) && aligned16(res) && aligned16(c)) { // four at a time
    u64 n4 = n / 4;
    for (u64 i = gid(); i < n4; i += gstride()) {
      f32x4 gv = ((const f32x4 *)g)[i], uv = ((f32x4 *)u)[i];
      f32x4 v = {dgc_one(gv.a, uv.a, m, nesterov, scale), dgc_one(gv.b, uv.b, m, nesterov, scale),
                 dgc_one(gv.c, uv.c, m, nesterov, scale), dgc_one(gv.d, uv.d, m, nesterov, scale)};
      ((f32x4 *)u)[i] = uv;
      if (res) {
        f32x4 r = ((const f32x4 *)res)[i];
        v = f32x4{v.a + r.a, v.b + r.b, v.c + r.c, v.d + r.d};
      }
      ((f32x4 *)c)[i] = v;
    }
    done = 4 * n4;
  }
  for (u64 i = done + gid(); i < n; i += gstride()) {
    float v = dgc_one(g[i], u[i], m, nesterov, scale);
    if (res) v = v + res[i];
    c[i] = v;
  }
}

// part[j] = the sum, in element order and in float64, of the squares of
// block j of bsize elements of g (gradient.SumSquares's blocks; the host
// adds the blocks' sums in order).
KERNEL void tp_sumsq_blocks(const float *g, u64 n, u32 bsize, double *part) {
  u64 nb = (n + bsize - 1) / bsize;
  for (u64 j = gid(); j < nb; j += gstride()) {
    u64 lo = j * bsize, hi = lo + bsize < n ? lo + bsize : n;
    double b = 0;
    for (u64 i = lo; i < hi; i++) {
      double x = (double)g[i];
      double sq = x * x;
      b = b + sq;
    }
    part[j] = b;
  }
}

// smp[j] = magnitude of x[start + j*stride] for j < num (topk.gather).
KERNEL void tp_gather(const u32 *x, u64 start, u64 stride, u64 num, u32 *smp) {
  for (u64 j = gid(); j < num; j += gstride()) smp[j] = x[start + j * stride] & 0x7fffffff;
}

// ---- staged error-feedback state (gpu.Sender) ----

// dst[j] = src[idx[j]] for j < k.
KERNEL void tp_take(const u32 *src, const u32 *idx, u64 k, u32 *dst) {
  for (u64 j = gid(); j < k; j += gstride()) dst[j] = src[idx[j]];
}

// dst[idx[j]] = src[j] for j < k.
KERNEL void tp_put(u32 *dst, const u32 *idx, u64 k, const u32 *src) {
  for (u64 j = gid(); j < k; j += gstride()) dst[idx[j]] = src[j];
}

// c[i] = 0 where c[i] is a NaN or an infinity (gradient's dropNonFinite:
// no frame carries one, so they are elements left unsent).
KERNEL void tp_nonfinite_zero(u32 *c, u64 n) {
  for (u64 i = gid(); i < n; i += gstride())
    if ((c[i] & 0x7fffffff) >= 0x7f800000u) c[i] = 0;
}

// ---- index coding (sparse: delta, then bitpack) ----

#define TP_PACK_BLOCK 128

// The delta of idx at i: idx[0], then idx[i] - idx[i-1] (wrapping).
static __device__ inline u32 delta_at(const u32 *idx, u64 i) { return i == 0 ? idx[0] : idx[i] - idx[i - 1]; }

// size[j] = the bytes of pack block j of the deltas of idx (k values): a
// width byte, then its values at the bit length of their OR
// (sparse.AppendBitpack).
KERNEL void tp_pack_sizes(const u32 *idx, u64 k, u32 *size) {
  u64 nb = (k + TP_PACK_BLOCK - 1) / TP_PACK_BLOCK;
  for (u64 j = gid(); j < nb; j += gstride()) {
    u64 lo = j * TP_PACK_BLOCK, hi = lo + TP_PACK_BLOCK < k ? lo + TP_PACK_BLOCK : k;
    u32 o = 0;
    for (u64 i = lo; i < hi; i++) o |= delta_at(idx, i);
    u32 w = o ? 32 - __builtin_clz(o) : 0;
    size[j] = 1 + (u32)((w * (hi - lo) + 7) / 8);
  }
}

// tp_scan (one CUDA block): off[j] = in[0] + ... + in[j-1], and off[n] the
// total.
KERNEL void tp_scan(const u32 *in, u64 n, u32 *off) {
  __shared__ u32 s[TP_BLOCK_THREADS];
  __shared__ u32 carry;
  if (threadIdx.x == 0) carry = 0;
  sync_block();
  for (u64 base = 0; base < n; base += blockDim.x) {
    u64 j = base + threadIdx.x;
    u32 v = j < n ? in[j] : 0;
    u32 inc = block_scan(s, v);
    if (j < n) off[j] = carry + inc - v;
    sync_block();
    if (threadIdx.x == blockDim.x - 1) carry += inc;
    sync_block();
  }
  if (threadIdx.x == 0) off[n] = carry;
}

// tp_pack writes pack block j of the deltas of idx at out + off[j]:
// sparse.AppendBitpack's bytes.
KERNEL void tp_pack(const u32 *idx, u64 k, const u32 *off, u8 *out) {
  u64 nb = (k + TP_PACK_BLOCK - 1) / TP_PACK_BLOCK;
  for (u64 j = gid(); j < nb; j += gstride()) {
    u64 lo = j * TP_PACK_BLOCK, hi = lo + TP_PACK_BLOCK < k ? lo + TP_PACK_BLOCK : k;
    u32 o = 0;
    for (u64 i = lo; i < hi; i++) o |= delta_at(idx, i);
    u32 w = o ? 32 - __builtin_clz(o) : 0;
    u8 *p = out + off[j];
    *p++ = (u8)w;
    if (w == 0) continue;
    u64 acc = 0;
    u32 nbits = 0;
    for (u64 i = lo; i < hi; i++) {
      acc |= (u64)delta_at(idx, i) << nbits;
      nbits += w;
      while (nbits >= 8) {
        *p++ = (u8)acc;
        acc >>= 8;
        nbits -= 8;
      }
    }
    if (nbits > 0) *p = (u8)acc;
  }
}

// ---- blockwise 4-bit (lossy.nf4Quantize, fp4Quantize) ----

// The midpoints between consecutive codebook entries, float32(float32(c_i
// + c_i+1) * 0.5) as package lossy computes them: nf4's 15, fp4's 7
// (between its magnitudes).
static __device__ const float nf4_mid[15] = {
    -0x1.b239bp-01f, -0x1.38a4ep-01f, -0x1.d709p-02f, -0x1.5bd4ecp-02f, -0x1.e079d8p-03f,
    -0x1.1a7178p-03f, -0x1.74f0e2p-05f, 0x1.45f5fep-05f, 0x1.ec90c4p-04f, 0x1.a0cfcp-03f,
    0x1.2b05a8p-02f, 0x1.8ea7f2p-02f, 0x1.00da08p-01f, 0x1.491b5ep-01f, 0x1.b913b4p-01f};
static __device__ const float fp4_mid[7] = {0x1.555556p-09f, 0x1.6p-04f, 0x1.aaaaacp-03f, 0x1.2aaaacp-02f,
                                            0x1.aaaaacp-02f, 0x1.2aaaacp-01f, 0x1.aaaaacp-01f};

// The code of y: nf4, the midpoints below y; fp4, those below |y|, with
// the sign bit of y as bit 3.
static __device__ inline u32 code4(float y, u32 fp4) {
  u32 c = 0;
  if (fp4) {
    float a = f32_from(f32_bits(y) & 0x7fffffff);
    for (int i = 0; i < 7; i++) c += a > fp4_mid[i];
    return c | (f32_bits(y) >> 31) << 3;
  }
  for (int i = 0; i < 15; i++) c += y > nf4_mid[i];
  return c;
}

// Block j (one CUDA block each) of bsize elements of x (a multiple of 8;
// the last block may be shorter): scale[j] its absmax, q its codes two a
// byte (element 2i in the low nibble), as nf4Quantize (fp4 0) or
// fp4Quantize (fp4 1) make them. A block holding a NaN or Inf sets bad[0].
KERNEL void tp_q4_blocks(const float *x, u8 *q, float *scale, u64 n, u32 bsize, u32 fp4, u32 *bad) {
  __shared__ u32 red[TP_BLOCK_THREADS];
  u64 nblocks = (n + bsize - 1) / bsize;
  for (u64 j = blockIdx.x; j < nblocks; j += gridDim.x) {
    u64 lo = j * bsize, hi = lo + bsize < n ? lo + bsize : n;
    u32 m;
    if (!block_scale(x, lo, hi, red, &scale[j], bad, &m)) continue;
    float a = f32_from(m), inv = 0, pre = 1;
    if (m != 0) {
      if (m < (127u - 100u) << 23) {
        inv = 1.0f / (a * 0x1p100f);
        pre = 0x1p100f;
      } else {
        inv = 1.0f / a;
      }
    }
    u64 pairs = (hi - lo + 1) / 2;
    for (u64 p = threadIdx.x; p < pairs; p += blockDim.x) {
      u64 i = lo + 2 * p;
      u32 c;
      if (m == 0) {
        c = fp4 ? 0 : (i + 1 < hi ? 0x77 : 0x07);
      } else if (pre != 1) {
        c = code4((x[i] * pre) * inv, fp4);
        if (i + 1 < hi) c |= code4((x[i + 1] * pre) * inv, fp4) << 4;
      } else {
        c = code4(x[i] * inv, fp4);
        if (i + 1 < hi) c |= code4(x[i + 1] * inv, fp4) << 4;
      }
      q[i / 2] = (u8)c;
    }
  }
}
