// ParallelFor, ParallelForBalanced: the kernels' ways to spread a loop over OpenMP threads.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace tessera {

namespace parallel_for_detail {
// One thread's share of the items: the owner takes chunks from `next`
// upward; a thread that has finished its own share takes chunks from the
// same counter (an atomic fetch-and-add hands every chunk out once; the
// parallel region's closing barrier orders the bodies' writes). On its own cache
// line: the owner's claims stay in its L1 until another thread steals.
// Plain fields claimed through GCC's __atomic builtins: the array below is
// not zeroed on every call (only `threads` entries are set).
struct alignas(64) Share {
  int64_t next;
  int64_t end;
};
constexpr int kMaxStealThreads = 64;
}  // namespace parallel_for_detail

// Runs body(i) for i in [0, n) on up to `threads` OpenMP threads (static
// schedule). One thread, or one item, runs inline without entering a
// parallel region: libgomp allocates a team for every region it enters, even
// a serialised `if (false)` one, and Eval must not allocate (kernel.h).
// Inside the body omp_get_thread_num() is the worker index (0 inline).
template <class Body>
inline void ParallelFor(int64_t n, int threads, Body&& body) {
  if (threads <= 1 || n <= 1) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) body(i);
}

// ParallelFor for loops of heavy items (a pooled plane, one of Winograd's
// 16 GEMMs, an output channel's transform): each thread owns a contiguous
// share of the items, as the static schedule gives it, and takes them in
// chunks of about an eighth of it; a thread that has finished its share
// then takes the remaining chunks of the others. A static split waits for
// the slower core (on a shared VM the second vCPU runs slower for seconds
// at a time, and a thread whose items' inputs sit in the other core's cache
// runs slower too); a dynamic schedule moves items between cores all the
// time (libgomp's guided: resnet18 at 2 threads 1.05x of static, dynamic,4
// 1.73x). Measured, 2 threads, static -> balanced for every ParallelFor:
// squeezenet1_0's 27² and 13² max pools 0.211 -> 0.112 and 0.156 -> 0.100
// ms, but mobilenet_v3_small's SE-block Muls and pools (7²-14² planes)
// 0.104 -> 0.127 ms: light items lose more to the moves than they gain,
// hence a separate entry for the heavy loops. With it in the pools and
// Winograd's stage-by-stage chunks only (6 interleaved rounds, 2 threads):
// squeezenet1_0 0.98x, mobilenet_v3_small 1.00x, resnet18 1.00x. omp_get_thread_num() is the
// index of the thread running the item; no item runs twice, and the
// bodies may see any order between items.
template <class Body>
inline void ParallelForBalanced(int64_t n, int threads, Body&& body) {
  if (threads <= 1 || n <= 1) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  if (n < 2 * static_cast<int64_t>(threads) || threads > parallel_for_detail::kMaxStealThreads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  parallel_for_detail::Share shares[parallel_for_detail::kMaxStealThreads];  // NOLINT: no zeroing
  for (int t = 0; t < threads; ++t) {
    shares[t].next = n * t / threads;
    shares[t].end = n * (t + 1) / threads;
  }
  const int64_t chunk = std::max<int64_t>(1, n / (8 * static_cast<int64_t>(threads)));
#pragma omp parallel num_threads(threads)
  {
    // Every share is drained by some thread even when the team is smaller
    // than asked for.
    const int me = omp_get_thread_num();
    for (int k = 0; k < threads; ++k) {
      parallel_for_detail::Share& s = shares[(me + k) % threads];
      for (;;) {
        const int64_t i0 = __atomic_fetch_add(&s.next, chunk, __ATOMIC_RELAXED);
        if (i0 >= s.end) break;
        const int64_t i1 = std::min(s.end, i0 + chunk);
        for (int64_t i = i0; i < i1; ++i) body(i);
      }
    }
  }
}

}  // namespace tessera
