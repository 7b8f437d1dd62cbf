// ParallelFor: the kernels' one way to spread a loop over OpenMP threads.
#pragma once

#include <cstdint>

namespace tessera {

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

}  // namespace tessera
