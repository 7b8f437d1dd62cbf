#include "util/limits.h"

#include <algorithm>

namespace tessera {

namespace {
std::string DimsToString(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}
}  // namespace

Result<int64_t> CheckedElementCount(const std::vector<int64_t>& dims, const std::string& what) {
  if (dims.size() > static_cast<size_t>(kMaxTensorRank))
    return Status::InvalidArgument(what + " has " + std::to_string(dims.size()) + " dimensions; at most " +
                                   std::to_string(kMaxTensorRank) + " are supported");
  int64_t n = 1;
  for (int64_t d : dims)
    if (d < 0) return Status::InvalidArgument(what + " has shape " + DimsToString(dims) + " with a negative dimension");
  // The non-zero dimensions are bounded too: a tensor with a 0 dimension
  // holds nothing, but [0, 2^40, 2^40] would still overflow every product
  // and stride computed from its shape (NumElements of its slices).
  bool empty = false;
  for (int64_t d : dims) {
    if (d == 0) {
      empty = true;
      continue;
    }
    // n * d > limit, tested without computing the product.
    if (d > kMaxTensorElements / n)
      return Status::InvalidArgument(what + " has shape " + DimsToString(dims) + ": more than " +
                                     std::to_string(kMaxTensorElements) + " elements" +
                                     (std::count(dims.begin(), dims.end(), 0) ? " in its non-zero dimensions" : "") +
                                     " (tessera's limit per tensor, util/limits.h)");
    n *= d;
  }
  return empty ? int64_t{0} : n;
}

}  // namespace tessera
