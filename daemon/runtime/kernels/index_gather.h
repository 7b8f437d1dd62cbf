// IndexGather: output[o_0, ..., o_r] = input[map_0[o_0], ..., map_r[o_r]],
// or `fill` where any map entry is -1. Pad, Slice and Resize (nearest) are
// all this with different per-dimension maps, tabulated once in Prepare, so
// Eval does no index arithmetic beyond table lookups and never allocates.
#pragma once

#include <cstdint>
#include <vector>

#include "partition/graph/graph.h"

namespace tessera {

class IndexGather {
 public:
  // REQUIRES: maps[d].size() == out[d], entries in [-1, in[d]).
  void Init(const Shape& in, std::vector<std::vector<int64_t>> maps, float fill) {
    maps_ = std::move(maps);
    fill_ = fill;
    in_strides_.assign(in.size(), 1);
    for (int64_t i = static_cast<int64_t>(in.size()) - 2; i >= 0; --i) in_strides_[i] = in_strides_[i + 1] * in[i + 1];
    rows_ = 1;
    for (size_t d = 0; d + 1 < maps_.size(); ++d) rows_ *= static_cast<int64_t>(maps_[d].size());
    inner_ = maps_.empty() ? 1 : static_cast<int64_t>(maps_.back().size());
  }

  void Run(const float* x, float* y, int threads) const {
    const int64_t rank = static_cast<int64_t>(maps_.size());
    if (rank == 0) {
      y[0] = x[0];
      return;
    }
    const std::vector<int64_t>& last = maps_.back();
#pragma omp parallel for num_threads(threads) if (threads > 1 && rows_ * inner_ > 65536)
    for (int64_t r = 0; r < rows_; ++r) {
      int64_t offset = 0, rest = r;
      bool filled = false;
      for (int64_t d = rank - 2; d >= 0; --d) {
        const int64_t n = static_cast<int64_t>(maps_[d].size());
        const int64_t src = maps_[d][rest % n];
        rest /= n;
        if (src < 0) filled = true;
        offset += src * in_strides_[d];
      }
      float* dst = y + r * inner_;
      if (filled) {
        for (int64_t k = 0; k < inner_; ++k) dst[k] = fill_;
        continue;
      }
      const float* row = x + offset;
      const int64_t* map = last.data();
      const float fill = fill_;
#pragma omp simd
      for (int64_t k = 0; k < inner_; ++k) dst[k] = map[k] < 0 ? fill : row[map[k]];
    }
  }

 private:
  std::vector<std::vector<int64_t>> maps_;
  std::vector<int64_t> in_strides_;
  int64_t rows_ = 0, inner_ = 1;
  float fill_ = 0.f;
};

}  // namespace tessera
