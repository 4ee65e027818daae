// Host emulation of the CUDA features the kernels use, to run them on a
// machine without a GPU: every block in turn, its threads as OS threads
// meeting at a barrier for sync_block. Slow, for checking the kernels'
// logic against the Go reference on small inputs; it says nothing about
// the PTX or the driver.
#ifndef TP_EMULATE_H
#define TP_EMULATE_H
#include <atomic>
#include <barrier>
#include <functional>
#include <thread>
#include <vector>

struct tp_dim3 {
  unsigned x = 1, y = 1, z = 1;
};
extern thread_local tp_dim3 threadIdx;
extern tp_dim3 blockIdx, blockDim, gridDim;
extern std::barrier<> *tp_barrier;

#define __global__
#define __device__
#define __shared__ static // blocks run one at a time: one copy serves them all
#define KERNEL extern "C"

static inline void sync_block() { tp_barrier->arrive_and_wait(); }
static inline unsigned atomic_add_u32(unsigned *p, unsigned v) { return std::atomic_ref<unsigned>(*p).fetch_add(v); }
static inline unsigned atomic_or_u32(unsigned *p, unsigned v) { return std::atomic_ref<unsigned>(*p).fetch_or(v); }

// tp_launch runs k(args...) on grid x block threads (one dimension).
template <class... A> void tp_launch(void (*k)(A...), unsigned grid, unsigned block, A... args) {
  gridDim.x = grid;
  blockDim.x = block;
  for (unsigned b = 0; b < grid; b++) {
    blockIdx.x = b;
    std::barrier<> bar(block);
    tp_barrier = &bar;
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < block; t++)
      ts.emplace_back([=] {
        threadIdx.x = t;
        k(args...);
      });
    for (auto &t : ts) t.join();
  }
}
#endif
