#include "util/limits.h"

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
  for (int64_t d : dims) {
    if (d == 0) return int64_t{0};
  }
  for (int64_t d : dims) {
    // n * d > limit, tested without computing the product.
    if (d > kMaxTensorElements / n)
      return Status::InvalidArgument(what + " has shape " + DimsToString(dims) + ": more than " +
                                     std::to_string(kMaxTensorElements) +
                                     " elements (tessera's limit per tensor, util/limits.h)");
    n *= d;
  }
  return n;
}

}  // namespace tessera
