// Arena layout (METHODS §6 "Arena layout"): given every buffer's size and
// lifetime, give it a byte offset so that buffers alive at the same time
// never overlap, keeping the arena small. Sees only sizes and lifetimes.
//
// Lifetimes are closed step intervals [first, last] over the execution
// order: a buffer produced by step 3 and last read by step 7 is {3, 7}.
//
//   arena:  0 ────────────────────────────────────────────── size
//           [ buffers placed by the layout; a step's scratch is
//             just one more buffer alive during that step only ]
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "util/status.h"

namespace tessera {

struct BufferRequest {
  size_t size = 0;  // bytes
  int first = 0;    // first step that touches it
  int last = 0;     // last step that touches it (inclusive)
};

struct ArenaPlan {
  std::vector<size_t> offsets;  // one per request
  size_t size = 0;              // bytes of the arena (max offset + size)
  std::string strategy;         // the layout that produced it ("greedy-by-conflict", "milp", ...)
  size_t lower_bound = 0;       // LiveBytesLowerBound of the requests (0: not computed)
  bool optimal = false;         // proven smallest (meets the lower bound, or the MILP proved it)
};

class ArenaLayout {
 public:
  virtual ~ArenaLayout() = default;
  virtual std::string name() const = 0;
  virtual ArenaPlan Plan(const std::vector<BufferRequest>& buffers) const = 0;
};

// Greedy by size, the common microcontroller-runtime strategy:
//  1. sort buffers by size, largest first (ties: earlier first use first);
//  2. for each, collect the already-placed buffers whose lifetimes overlap
//     it, sorted by offset;
//  3. put it in the lowest gap between them that is large enough, else
//     above the highest of them.
// Fast, not optimal (METHODS §6: chain 5, 3, 2, 4 needs 10 where 8 suffice).
class GreedyBySizeLayout final : public ArenaLayout {
 public:
  explicit GreedyBySizeLayout(size_t alignment = 64) : alignment_(alignment) {}
  std::string name() const override { return "greedy-by-size"; }
  ArenaPlan Plan(const std::vector<BufferRequest>& buffers) const override;

 private:
  const size_t alignment_;
};

// First fit in a given order: each buffer goes to the lowest aligned gap
// among the already-placed buffers it is alive with. Orders:
//   kSize      largest first (= GreedyBySizeLayout);
//   kConflict  largest "conflict weight" first: its size plus the sizes of
//              every buffer alive with it at some step (crowded steps first);
//   kLifetime  longest-lived first (ties: larger first);
//   kFirstUse  in order of first use (ties: larger first), how a bump
//              allocator with frees would lay them out.
// First fit over *some* order reaches the optimum (place the buffers of an
// optimal layout in increasing offset: none lands higher), so trying several
// orders narrows the gap cheaply.
class GreedyLayout final : public ArenaLayout {
 public:
  enum class Order { kSize, kConflict, kLifetime, kFirstUse };
  explicit GreedyLayout(Order order, size_t alignment = 64) : order_(order), alignment_(alignment) {}
  std::string name() const override;
  ArenaPlan Plan(const std::vector<BufferRequest>& buffers) const override;
  // First fit in exactly this order of request indices.
  ArenaPlan PlanInOrder(const std::vector<BufferRequest>& buffers, const std::vector<size_t>& order) const;

 private:
  const Order order_;
  const size_t alignment_;
};

// The default of the executor, device programs and the planner's promise:
// every GreedyLayout order, the smallest arena wins (ties: the first order
// listed above). Reports the lower bound; optimal when it meets it.
class BestOfGreedyLayout final : public ArenaLayout {
 public:
  explicit BestOfGreedyLayout(size_t alignment = 64) : alignment_(alignment) {}
  std::string name() const override { return "best-of-greedy"; }
  ArenaPlan Plan(const std::vector<BufferRequest>& buffers) const override;

 private:
  const size_t alignment_;
};

// Segments (METHODS §6 "Segments"): a step that can write its output over
// an input nothing reads after it may keep both in one buffer, of the larger
// size, alive from the input's first step to the output's last; the step
// then needs `in_place_scratch` bytes of scratch instead of its usual.
// Merges chain (a relu after a pointwise conv after a depthwise one share
// one buffer). A merge is not free: an expanding 1x1 conv makes its input's
// buffer as large as its output for the input's whole life.
struct SegmentCandidate {
  size_t in = 0, out = 0;       // request indices: the step's input and output
  size_t scratch = 0;           // request index of the step's scratch (size 0 if it has none)
  size_t in_place_scratch = 0;  // bytes of that scratch when the step is merged
};

struct SegmentPlan {
  // Over the caller's requests: a merged output's size is 0 and its offset
  // its input's; the input's buffer has the merged size and lifetime; a
  // merged step's scratch has its in-place size.
  std::vector<BufferRequest> requests;
  ArenaPlan plan;
  std::vector<bool> merged;  // per candidate
  int merges = 0;
};

// Chooses the merges that shrink `layout`'s arena: all equal-sized ones, all,
// then passes over single candidates: on if the arena shrinks; on together
// with the candidates whose outputs feed it (a chain pays only whole) unless
// the arena grows; off unless it grows. None when none pays. Candidates must
// come in step order; `requests` hold every scratch request they name.
SegmentPlan PlanWithSegments(const ArenaLayout& layout, const std::vector<BufferRequest>& requests,
                             const std::vector<SegmentCandidate>& candidates);

// True when a and b are alive at a common step.
inline bool LifetimesOverlap(const BufferRequest& a, const BufferRequest& b) {
  return a.first <= b.last && b.first <= a.last;
}

// OK when no two buffers alive at the same step overlap in [offset, offset+size)
// and every buffer ends within the arena; otherwise names the first clash.
Status CheckNoOverlap(const std::vector<BufferRequest>& buffers, const ArenaPlan& plan);

// Lower bound on any layout: the largest sum of sizes alive at one step.
size_t LiveBytesLowerBound(const std::vector<BufferRequest>& buffers);

}  // namespace tessera
