#include "planner/arena_milp.h"

#include <algorithm>
#include <numeric>

#include "planner/milp.h"

namespace tessera {

ArenaPlan MilpArenaLayout::Plan(const std::vector<BufferRequest>& buffers) const {
  ArenaPlan greedy = BestOfGreedyLayout(alignment_).Plan(buffers);
  if (greedy.optimal) return greedy;
  const size_t align = std::max<size_t>(1, alignment_);
  const size_t n = buffers.size();
  std::vector<double> units(n);
  for (size_t i = 0; i < n; ++i) units[i] = static_cast<double>((buffers[i].size + align - 1) / align);
  const double upper = static_cast<double>((greedy.size + align - 1) / align);
  const double lower = static_cast<double>(greedy.lower_bound / align);

  MilpModel m;
  const int arena = m.AddContinuous(lower, upper, 1.0);
  std::vector<int> offset(n);
  for (size_t i = 0; i < n; ++i) {
    offset[i] = m.AddContinuous(0.0, std::max(0.0, upper - units[i]), 0.0);
    m.AddRow({{offset[i], 1.0}, {arena, -1.0}}, -MilpModel::kInfinity, -units[i]);
  }
  for (size_t i = 0; i < n; ++i) {
    if (units[i] == 0) continue;
    for (size_t j = i + 1; j < n; ++j) {
      if (units[j] == 0 || !LifetimesOverlap(buffers[i], buffers[j])) continue;
      const int z = m.AddBinary(0.0);
      m.AddRow({{offset[i], 1.0}, {offset[j], -1.0}, {z, upper}}, -MilpModel::kInfinity, upper - units[i]);
      m.AddRow({{offset[j], 1.0}, {offset[i], -1.0}, {z, -upper}}, -MilpModel::kInfinity, -units[j]);
    }
  }
  auto solved = m.Solve(time_limit_s_);
  if (!solved.ok()) return greedy;
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return solved->x[offset[a]] < solved->x[offset[b]]; });
  ArenaPlan plan = GreedyLayout(GreedyLayout::Order::kSize, alignment_).PlanInOrder(buffers, order);
  plan.lower_bound = greedy.lower_bound;
  if (plan.size >= greedy.size) {
    greedy.optimal = solved->optimal && greedy.size <= static_cast<size_t>(solved->objective + 0.5) * align;
    return greedy;
  }
  plan.strategy = name();
  plan.optimal = solved->optimal || plan.size <= plan.lower_bound;
  return plan;
}

}  // namespace tessera
