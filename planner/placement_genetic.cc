// Issue 18 item 6: a genetic search over whole-layer assignments, beside the
// exact solvers (placement.h, PlaceGenetic). See the header for the method.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "planner/placement.h"

namespace tessera {

namespace {

struct Individual {
  std::vector<int> genes;  // device per layer
  double fitness = std::numeric_limits<double>::infinity();
};

}  // namespace

std::string DescribeGeneticOptions(const GeneticOptions& o) {
  char text[256];
  std::snprintf(text, sizeof text,
                "population %d, at most %d epochs (stop after %d without improvement), crossover %.2f (two-point), "
                "mutation %.2f boundary shift + 1/layers per gene, tournament %d, elite %d, seed %llu",
                o.population, o.epochs, o.patience, o.crossover, o.mutation, o.tournament, o.elite,
                static_cast<unsigned long long>(o.seed));
  return text;
}

Result<PlacementResult> PlaceGenetic(const PlacementProblem& p, PlacementObjective objective,
                                     const GeneticOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  TS_RETURN_IF_ERROR(CheckPlacementFeasible(p));
  const int n = p.layers(), d = p.cluster->size();
  if (n == 0) return Status::InvalidArgument("the model has no layers to place");
  if (options.population < 4 || options.epochs < 1 || options.tournament < 1 || options.elite < 0 ||
      options.elite >= options.population || options.crossover < 0 || options.crossover > 1 || options.mutation < 0 ||
      options.mutation > 1)
    return Status::InvalidArgument("genetic search: " + DescribeGeneticOptions(options) + " is not a valid setting");
  std::mt19937_64 rng(options.seed);
  auto uniform = [&](int k) { return static_cast<int>(rng() % static_cast<uint64_t>(k)); };
  auto chance = [&](double q) { return std::uniform_real_distribution<double>(0, 1)(rng) < q; };
  int64_t evaluations = 0;
  // Fitness: the objective (period or latency); an assignment over a
  // device's flash or RAM ranks after every feasible one.
  constexpr double kInfeasible = 1e12;
  auto evaluate = [&](Individual* x) {
    ++evaluations;
    const PlacementCost cost = EvaluatePlacement(p, x->genes);
    const double v = PlacementObjectiveValue(cost, objective);
    x->fitness = cost.feasible ? v : kInfeasible + v;
  };
  // A contiguous pipeline: random cut points over a random order of devices.
  auto random_pipeline = [&] {
    std::vector<int> order(d);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    const int stages = 1 + uniform(std::min(n, d));
    std::vector<int> cuts;
    for (int k = 1; k < stages; ++k) cuts.push_back(1 + uniform(std::max(1, n - 1)));
    std::sort(cuts.begin(), cuts.end());
    std::vector<int> genes(n);
    for (int j = 0, s = 0; j < n; ++j) {
      while (s < static_cast<int>(cuts.size()) && j >= cuts[s]) ++s;
      genes[j] = order[s];
    }
    return genes;
  };

  std::vector<Individual> pop(options.population);
  int seeded = 0;
  if (auto heuristic = PlaceBisection(p, objective); heuristic.ok()) pop[seeded++].genes = heuristic->device_of_layer;
  for (int k = seeded; k < options.population; ++k) {
    pop[k].genes = random_pipeline();
    if (k % 4 == 3)  // a quarter not contiguous at all
      for (int& g : pop[k].genes)
        if (chance(0.2)) g = uniform(d);
  }
  for (auto& x : pop) evaluate(&x);
  auto by_fitness = [](const Individual& a, const Individual& b) { return a.fitness < b.fitness; };
  std::sort(pop.begin(), pop.end(), by_fitness);
  auto pick = [&]() -> const Individual& {
    const Individual* best = &pop[uniform(options.population)];
    for (int t = 1; t < options.tournament; ++t) {
      const Individual& other = pop[uniform(options.population)];
      if (other.fitness < best->fitness) best = &other;
    }
    return *best;
  };
  int epoch = 0, since_better = 0;
  double best = pop[0].fitness;
  for (; epoch < options.epochs && since_better < options.patience; ++epoch) {
    std::vector<Individual> next(pop.begin(), pop.begin() + options.elite);
    while (static_cast<int>(next.size()) < options.population) {
      Individual child;
      child.genes = pick().genes;
      if (chance(options.crossover)) {  // two-point: a stretch of layers from the other parent
        const std::vector<int>& other = pick().genes;
        int a = uniform(n), b = uniform(n);
        if (a > b) std::swap(a, b);
        std::copy(other.begin() + a, other.begin() + b + 1, child.genes.begin() + a);
      }
      if (chance(options.mutation) && n > 1) {  // shift a stage boundary by one layer
        const int j = 1 + uniform(n - 1);
        if (chance(0.5))
          child.genes[j] = child.genes[j - 1];
        else
          child.genes[j - 1] = child.genes[j];
      }
      for (int& g : child.genes)
        if (chance(1.0 / n)) g = uniform(d);
      evaluate(&child);
      next.push_back(std::move(child));
    }
    pop = std::move(next);
    std::sort(pop.begin(), pop.end(), by_fitness);
    if (pop[0].fitness < best * (1 - 1e-12)) {
      best = pop[0].fitness;
      since_better = 0;
    } else {
      ++since_better;
    }
  }
  PlacementResult r;
  r.device_of_layer = pop[0].genes;
  r.cost = EvaluatePlacement(p, r.device_of_layer);
  if (!r.cost.feasible)
    return Status::ResourceExhausted("genetic search found no assignment within every device's flash and RAM after " +
                                     std::to_string(epoch) + " epochs (" + r.cost.infeasible_reason +
                                     "); use --solver exact");
  r.solver = SolverReport("genetic", false,
                          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), evaluations);
  r.solver.settings = "heuristic, ran " + std::to_string(epoch) + " epochs: " + DescribeGeneticOptions(options);
  return r;
}

}  // namespace tessera
