#include "partition/graph/arena_layout.h"

#include <algorithm>
#include <map>
#include <numeric>

namespace tessera {

namespace {
size_t AlignUp(size_t n, size_t a) { return a <= 1 ? n : (n + a - 1) / a * a; }
}  // namespace

ArenaPlan GreedyBySizeLayout::Plan(const std::vector<BufferRequest>& buffers) const {
  ArenaPlan plan = GreedyLayout(GreedyLayout::Order::kSize, alignment_).Plan(buffers);
  plan.strategy = name();
  return plan;
}

std::string GreedyLayout::name() const {
  switch (order_) {
    case Order::kSize:
      return "greedy-by-size";
    case Order::kConflict:
      return "greedy-by-conflict";
    case Order::kLifetime:
      return "greedy-by-lifetime";
    case Order::kFirstUse:
      return "greedy-by-first-use";
  }
  return "greedy";
}

ArenaPlan GreedyLayout::Plan(const std::vector<BufferRequest>& buffers) const {
  const size_t n = buffers.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::vector<size_t> weight(n, 0);
  if (order_ == Order::kConflict)
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j)
        if (LifetimesOverlap(buffers[i], buffers[j])) weight[i] += buffers[j].size;  // includes itself
  auto key = [&](size_t i) -> size_t {
    switch (order_) {
      case Order::kSize:
        return buffers[i].size;
      case Order::kConflict:
        return weight[i];
      case Order::kLifetime:
        return static_cast<size_t>(buffers[i].last - buffers[i].first);
      case Order::kFirstUse:
        return 0;
    }
    return 0;
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (order_ == Order::kFirstUse && buffers[a].first != buffers[b].first) return buffers[a].first < buffers[b].first;
    if (key(a) != key(b)) return key(a) > key(b);
    if (buffers[a].size != buffers[b].size) return buffers[a].size > buffers[b].size;
    return buffers[a].first < buffers[b].first;
  });
  ArenaPlan plan = PlanInOrder(buffers, order);
  plan.strategy = name();
  return plan;
}

ArenaPlan GreedyLayout::PlanInOrder(const std::vector<BufferRequest>& buffers, const std::vector<size_t>& order) const {
  const size_t n = buffers.size();
  ArenaPlan plan;
  plan.offsets.assign(n, 0);
  std::vector<size_t> placed;
  for (size_t i : order) {
    const BufferRequest& b = buffers[i];
    const size_t need = AlignUp(b.size, alignment_);
    std::vector<size_t> clash;
    for (size_t j : placed)
      if (buffers[j].size > 0 && LifetimesOverlap(b, buffers[j])) clash.push_back(j);
    std::sort(clash.begin(), clash.end(), [&](size_t x, size_t y) { return plan.offsets[x] < plan.offsets[y]; });
    size_t candidate = 0;
    for (size_t j : clash) {
      const size_t start = plan.offsets[j];
      if (start >= candidate + need) break;  // fits in the gap below j
      candidate = std::max(candidate, AlignUp(start + buffers[j].size, alignment_));
    }
    plan.offsets[i] = candidate;
    plan.size = std::max(plan.size, candidate + b.size);
    placed.push_back(i);
  }
  return plan;
}

ArenaPlan BestOfGreedyLayout::Plan(const std::vector<BufferRequest>& buffers) const {
  ArenaPlan best;
  bool have = false;
  for (auto order : {GreedyLayout::Order::kSize, GreedyLayout::Order::kConflict, GreedyLayout::Order::kLifetime,
                     GreedyLayout::Order::kFirstUse}) {
    ArenaPlan plan = GreedyLayout(order, alignment_).Plan(buffers);
    if (!have || plan.size < best.size) {
      best = std::move(plan);
      have = true;
    }
  }
  best.lower_bound = LiveBytesLowerBound(buffers);
  best.optimal = best.size <= best.lower_bound;
  return best;
}

SegmentPlan PlanWithSegments(const ArenaLayout& layout, const std::vector<BufferRequest>& requests,
                             const std::vector<SegmentCandidate>& candidates) {
  const size_t n = requests.size(), m = candidates.size();
  // Lays out with the candidates `on` merged.
  auto lay_out = [&](const std::vector<bool>& on) {
    SegmentPlan sp;
    sp.requests = requests;
    sp.merged = on;
    std::vector<size_t> root(n);
    std::iota(root.begin(), root.end(), 0);
    for (size_t c = 0; c < m; ++c) {
      if (!on[c]) continue;
      const SegmentCandidate& k = candidates[c];
      const size_t r = root[k.in];  // candidates in step order: the input's own merges are done
      BufferRequest& into = sp.requests[r];
      into.size = std::max(into.size, requests[k.out].size);
      into.first = std::min(into.first, requests[k.out].first);
      into.last = std::max(into.last, requests[k.out].last);
      root[k.out] = r;
      sp.requests[k.out].size = 0;
      sp.requests[k.scratch].size = k.in_place_scratch;
      ++sp.merges;
    }
    sp.plan = layout.Plan(sp.requests);
    for (size_t i = 0; i < n; ++i)
      if (root[i] != i) sp.plan.offsets[i] = sp.plan.offsets[root[i]];
    return sp;
  };
  SegmentPlan best = lay_out(std::vector<bool>(m, false));
  if (m == 0) return best;
  const size_t without = best.plan.size;
  const SegmentPlan plain = best;
  std::vector<bool> all(m, true), equal(m, false);
  for (size_t c = 0; c < m; ++c) equal[c] = requests[candidates[c].in].size == requests[candidates[c].out].size;
  for (const auto* on : {&equal, &all}) {
    SegmentPlan sp = lay_out(*on);
    if (sp.merges > best.merges && sp.plan.size < best.plan.size) best = std::move(sp);
  }
  // The candidate whose output is candidate c's input (chains), or m.
  std::vector<size_t> feeder(m, m);
  for (size_t c = 0; c < m; ++c)
    for (size_t f = 0; f < c; ++f)
      if (candidates[f].out == candidates[c].in) feeder[c] = f;
  constexpr size_t kFlipsPerPass = 64;  // bounds the layouts tried on a large graph
  struct Pass {
    bool on, chains, keep_equal;
  };
  std::vector<bool> chosen = best.merged;
  for (const Pass pass : {Pass{true, false, false}, Pass{true, true, true}, Pass{false, false, true}}) {
    size_t flips_tried = 0;
    for (size_t c = 0; c < m && flips_tried < kFlipsPerPass; ++c) {
      if (chosen[c] == pass.on) continue;
      ++flips_tried;
      std::vector<size_t> flips = {c};
      for (size_t f = feeder[c]; pass.chains && f < m && !chosen[f]; f = feeder[f]) flips.push_back(f);
      for (size_t f : flips) chosen[f] = pass.on;
      SegmentPlan sp = lay_out(chosen);
      if (sp.plan.size < best.plan.size || (pass.keep_equal && sp.plan.size == best.plan.size)) {
        best = std::move(sp);
      } else {
        for (size_t f : flips) chosen[f] = !pass.on;
      }
    }
  }
  if (best.plan.size >= without) return plain;  // no merge pays: the plain kernels run
  return best;
}

Status CheckNoOverlap(const std::vector<BufferRequest>& buffers, const ArenaPlan& plan) {
  if (plan.offsets.size() != buffers.size()) return Status::Internal("arena plan has the wrong number of offsets");
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (plan.offsets[i] + buffers[i].size > plan.size)
      return Status::Internal("buffer " + std::to_string(i) + " ends past the arena");
    for (size_t j = i + 1; j < buffers.size(); ++j) {
      if (buffers[i].size == 0 || buffers[j].size == 0 || !LifetimesOverlap(buffers[i], buffers[j])) continue;
      const size_t a0 = plan.offsets[i], a1 = a0 + buffers[i].size;
      const size_t b0 = plan.offsets[j], b1 = b0 + buffers[j].size;
      if (a0 < b1 && b0 < a1)
        return Status::Internal("buffers " + std::to_string(i) + " and " + std::to_string(j) +
                                " are alive together and overlap in the arena");
    }
  }
  return Status::OK();
}

size_t LiveBytesLowerBound(const std::vector<BufferRequest>& buffers) {
  std::map<int, long long> delta;  // sweep over step boundaries
  for (const auto& b : buffers) {
    delta[b.first] += static_cast<long long>(b.size);
    delta[b.last + 1] -= static_cast<long long>(b.size);
  }
  long long live = 0, best = 0;
  for (const auto& [step, d] : delta) {
    live += d;
    best = std::max(best, live);
  }
  return static_cast<size_t>(best);
}

}  // namespace tessera
