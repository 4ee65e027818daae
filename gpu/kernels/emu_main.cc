// emu runs the kernels of kernels.cu on the host (emulate.h) for the
// emulation test: it reads a request on stdin and writes the results on
// stdout, all little-endian.
//
//	"f16 " n xoff yoff, then n u32 -> n u16
//	"bf16" n xoff yoff, then n u32 -> n u16
//	"int8" n bsize, then n f32    -> n u8 codes, ceil(n/bsize) f32 scales, u32 bad
//	"topk" n k, then n u32        -> k u32 indices, k u32 elements (five passes), then the
//	                                  3 u32 of state after the first pass
//	"topc" n k, then n u32        -> k u32 indices, k u32 elements (among the first pass's candidates)
//	"cnta" n t xoff, then n u32   -> u32 count at or above t, then as many u32 indices and u32 elements
//	"efad" n, then 2n f32 (g, r)  -> n f32
//	"dgcc" n nesterov hasres, f32 m, f32 scale, then 3n f32 (g, u, res) -> n f32 u, n f32 c
//	"sums" n bsize, then n f32    -> ceil(n/bsize) f64
//	"q4  " n bsize fp4, then n f32 -> ceil(n/2) u8 codes, ceil(n/bsize) f32 scales, u32 bad
//	"pack" k, then k u32 (increasing) -> u32 total, then total bytes (delta, bitpack)
//	"gath" n start stride num, then n u32 -> num u32
//	"stag" n k, then n u32 x, k u32 idx -> k u32 taken, n u32 x after put(idx, taken+1), n u32 x with NaNs zeroed
//
// Launch shapes are small (blockDim 64, a few blocks) so that the grid-
// stride loops, the tiles and the cross-block carries are all exercised.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "prelude.h"

thread_local tp_dim3 threadIdx;
tp_dim3 blockIdx, blockDim, gridDim;
std::barrier<> *tp_barrier;

KERNEL void tp_f32_to_f16(const u32 *x, u16 *y, u64 n);
KERNEL void tp_f32_to_bf16(const u32 *x, u16 *y, u64 n);
KERNEL void tp_int8_blocks(const float *x, u8 *q, float *scale, u64 n, u32 bsize, u32 *bad);
KERNEL void tp_zero(u32 *p, u64 n);
KERNEL void tp_topk_hist(const u32 *x, u64 n, u32 *hist, u32 nbins, u32 shift, u32 pshift, const u32 *st);
KERNEL void tp_topk_find(u32 *hist, u32 nbins, u32 bits, u32 *st);
KERNEL void tp_topk_count(const u32 *x, u64 n, const u32 *st, u32 *cnt);
KERNEL void tp_topk_offsets(const u32 *cnt, u64 ntiles, const u32 *st, u32 *off);
KERNEL void tp_topk_compact(const u32 *x, u64 n, const u32 *st, const u32 *off, u32 *idx, u32 *val);
KERNEL void tp_add_f32(const float *g, const float *res, float *c, u64 n);
KERNEL void tp_dgc_compensate(const float *g, float *u, const float *res, float *c, u64 n, float m, u32 nesterov, float scale);
KERNEL void tp_sumsq_blocks(const float *g, u64 n, u32 bsize, double *part);
KERNEL void tp_gather(const u32 *x, u64 start, u64 stride, u64 num, u32 *smp);
KERNEL void tp_topk_state(u32 *st, u32 need, u32 prefix);
KERNEL void tp_take(const u32 *src, const u32 *idx, u64 k, u32 *dst);
KERNEL void tp_put(u32 *dst, const u32 *idx, u64 k, const u32 *src);
KERNEL void tp_nonfinite_zero(u32 *c, u64 n);
KERNEL void tp_pack_sizes(const u32 *idx, u64 k, u32 *size);
KERNEL void tp_scan(const u32 *in, u64 n, u32 *off);
KERNEL void tp_pack(const u32 *idx, u64 k, const u32 *off, u8 *out);
KERNEL void tp_q4_blocks(const float *x, u8 *q, float *scale, u64 n, u32 bsize, u32 fp4, u32 *bad);

template <class T> static std::vector<T> readv(size_t n) {
  std::vector<T> v(n);
  if (n && fread(v.data(), sizeof(T), n, stdin) != n) {
    fprintf(stderr, "emu: short input\n");
    exit(1);
  }
  return v;
}
template <class T> static void writev(const std::vector<T> &v) { fwrite(v.data(), sizeof(T), v.size(), stdout); }

static const unsigned B = 64; // threads per block
static const unsigned G = 3;  // blocks for grid-stride kernels

// The radix passes of gpu.Selector.
struct pass {
  u32 nbins, shift, pshift, bits;
};
static const pass passes[3] = {{2048, 20, 31, 11}, {2048, 9, 20, 11}, {512, 0, 9, 9}};

// Selector is gpu.Selector's sequences of launches over n elements.
struct Selector {
  u64 ntiles;
  std::vector<u32> st, hist, cnt, off;
  explicit Selector(u64 n) : ntiles((n + 16 * B - 1) / (16 * B)), st(3), hist(2048), cnt(2 * ntiles), off(2 * ntiles) {}
  void state(u32 need, u32 prefix) { tp_launch(tp_topk_state, 1u, B, st.data(), need, prefix); }
  void radix(const u32 *x, u64 n, pass p) { // hist starts cleared, and each find clears it
    tp_launch(tp_topk_hist, G, B, x, n, hist.data(), p.nbins, p.shift, p.pshift, (const u32 *)st.data());
    tp_launch(tp_topk_find, 1u, B, hist.data(), p.nbins, p.bits, st.data());
  }
  void count(const u32 *x, u64 n) {
    tp_launch(tp_topk_count, G, B, x, n, (const u32 *)st.data(), cnt.data());
    tp_launch(tp_topk_offsets, 1u, B, (const u32 *)cnt.data(), ntiles, (const u32 *)st.data(), off.data());
  }
  void compact(const u32 *x, u64 n, u32 *idx, u32 *val) {
    tp_launch(tp_topk_compact, G, B, x, n, (const u32 *)st.data(), (const u32 *)off.data(), idx, val);
  }
  // exact runs the five passes; it returns the state after the first.
  std::vector<u32> exact(const u32 *x, u64 n, u64 k, u32 *idx, u32 *val) {
    state((u32)k, 0);
    std::vector<u32> first;
    for (auto p : passes) {
      radix(x, n, p);
      if (first.empty()) first = st;
    }
    count(x, n);
    compact(x, n, idx, val);
    return first;
  }
};

int main() {
  char op[4];
  if (fread(op, 1, 4, stdin) != 4) return 1;
  u64 n = readv<u64>(1)[0];
  if (!memcmp(op, "f16 ", 4) || !memcmp(op, "bf16", 4)) {
    // x and y at the given offsets (elements) from 16-byte aligned
    // buffers, for the kernels' eight-, four- and one-wide paths.
    auto off = readv<u64>(2);
    auto x = readv<u32>(n);
    std::vector<u32x4> xb((off[0] + n) / 4 + 1), yb((off[1] + n) / 8 + 1);
    memcpy((u32 *)xb.data() + off[0], x.data(), 4 * n);
    u16 *y = (u16 *)yb.data() + off[1];
    tp_launch(op[0] == 'f' ? tp_f32_to_f16 : tp_f32_to_bf16, G, B, (const u32 *)xb.data() + off[0], y, n);
    fwrite(y, 2, n, stdout);
  } else if (!memcmp(op, "int8", 4)) {
    u32 bsize = (u32)readv<u64>(1)[0];
    auto x = readv<float>(n);
    std::vector<u8> q(n);
    std::vector<float> scale((n + bsize - 1) / bsize);
    std::vector<u32> bad(1);
    tp_launch(tp_int8_blocks, G, B, (const float *)x.data(), q.data(), scale.data(), n, bsize, bad.data());
    writev(q);
    writev(scale);
    writev(bad);
  } else if (!memcmp(op, "topk", 4) || !memcmp(op, "topc", 4)) {
    // Selector.exact without (topk) and with (topc) the candidates.
    u64 k = readv<u64>(1)[0];
    auto x = readv<u32>(n);
    Selector s(n);
    std::vector<u32> idx(k), val(k);
    if (op[3] == 'k') {
      std::vector<u32> first = s.exact(x.data(), n, k, idx.data(), val.data());
      writev(idx);
      writev(val);
      writev(first);
    } else {
      s.state((u32)k, 0);
      s.radix(x.data(), n, passes[0]);
      u32 ge = s.st[2];
      s.state(~0u, s.st[1] << passes[0].shift);
      s.count(x.data(), n);
      std::vector<u32> cidx(ge), cval(ge);
      s.compact(x.data(), n, cidx.data(), cval.data());
      Selector among(ge);
      among.exact(cval.data(), ge, k, idx.data(), val.data());
      tp_launch(tp_take, G, B, (const u32 *)cidx.data(), (const u32 *)idx.data(), k, idx.data());
      writev(idx);
      writev(val);
    }
  } else if (!memcmp(op, "efad", 4)) {
    auto g = readv<float>(n), r = readv<float>(n);
    std::vector<float> c(n);
    tp_launch(tp_add_f32, G, B, (const float *)g.data(), (const float *)r.data(), c.data(), n);
    writev(c);
  } else if (!memcmp(op, "dgcc", 4)) {
    auto p = readv<u64>(2);
    u32 nesterov = (u32)p[0];
    auto ms = readv<float>(2);
    auto g = readv<float>(n), u = readv<float>(n), r = readv<float>(n);
    std::vector<float> c(n);
    const float *res = p[1] ? (const float *)r.data() : nullptr; // 0: no residual
    tp_launch(tp_dgc_compensate, G, B, (const float *)g.data(), u.data(), res, c.data(), n, ms[0], nesterov, ms[1]);
    writev(u);
    writev(c);
  } else if (!memcmp(op, "sums", 4)) {
    u32 bsize = (u32)readv<u64>(1)[0];
    auto g = readv<float>(n);
    std::vector<double> part((n + bsize - 1) / bsize);
    tp_launch(tp_sumsq_blocks, G, B, (const float *)g.data(), n, bsize, part.data());
    writev(part);
  } else if (!memcmp(op, "q4  ", 4)) {
    auto p = readv<u64>(2);
    u32 bsize = (u32)p[0], fp4 = (u32)p[1];
    auto x = readv<float>(n);
    std::vector<u8> q((n + 1) / 2);
    std::vector<float> scale((n + bsize - 1) / bsize);
    std::vector<u32> bad(1);
    tp_launch(tp_q4_blocks, G, B, (const float *)x.data(), q.data(), scale.data(), n, bsize, fp4, bad.data());
    writev(q);
    writev(scale);
    writev(bad);
  } else if (!memcmp(op, "pack", 4)) {
    auto idx = readv<u32>(n);
    u64 nb = (n + 127) / 128;
    std::vector<u32> size(nb), off(nb + 1);
    tp_launch(tp_pack_sizes, G, B, (const u32 *)idx.data(), n, size.data());
    tp_launch(tp_scan, 1u, B, (const u32 *)size.data(), nb, off.data());
    std::vector<u8> out(off[nb]);
    tp_launch(tp_pack, G, B, (const u32 *)idx.data(), n, (const u32 *)off.data(), out.data());
    writev(std::vector<u32>{off[nb]});
    writev(out);
  } else if (!memcmp(op, "gath", 4)) {
    auto p = readv<u64>(3);
    auto x = readv<u32>(n);
    std::vector<u32> smp(p[2]);
    tp_launch(tp_gather, G, B, (const u32 *)x.data(), p[0], p[1], p[2], smp.data());
    writev(smp);
  } else if (!memcmp(op, "cnta", 4)) {
    // Selector.countAtOrAbove, then compactCounted.
    // x at xoff elements from 16-byte alignment.
    auto p = readv<u64>(2);
    u32 t = (u32)p[0];
    auto x = readv<u32>(n);
    std::vector<u32> xb(n + p[1]);
    memcpy(xb.data() + p[1], x.data(), 4 * n);
    const u32 *xs = xb.data() + p[1];
    Selector s(n);
    s.state(~0u, t);
    s.count(xs, n);
    u64 last = 2 * (s.ntiles - 1);
    u32 c = s.off[last] + s.cnt[last] + s.cnt[last + 1];
    std::vector<u32> idx(c), val(c);
    s.compact(xs, n, idx.data(), val.data());
    writev(std::vector<u32>{c});
    writev(idx);
    writev(val);
  } else if (!memcmp(op, "stag", 4)) {
    u64 k = readv<u64>(1)[0];
    auto x = readv<u32>(n);
    auto idx = readv<u32>(k);
    std::vector<u32> taken(k), put(x), nz(x);
    tp_launch(tp_take, G, B, (const u32 *)x.data(), (const u32 *)idx.data(), k, taken.data());
    std::vector<u32> plus(k);
    for (u64 j = 0; j < k; j++) plus[j] = taken[j] + 1;
    tp_launch(tp_put, G, B, put.data(), (const u32 *)idx.data(), k, (const u32 *)plus.data());
    tp_launch(tp_nonfinite_zero, G, B, nz.data(), n);
    writev(taken);
    writev(put);
    writev(nz);
  } else {
    fprintf(stderr, "emu: unknown op %.4s\n", op);
    return 1;
  }
  return 0;
}
