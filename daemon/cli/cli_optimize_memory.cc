// `tessera optimize-memory MODEL [--max-mac-overhead 10%] [--out plan.pb]
// [--json]`: the smallest device arena for one device (issue 17 item 3,
// METHODS §6 "Critical buffers" / "Path discovery"; daemon/runtime/memory_flow.h).
// Prints the arena and the weights as stored before and after (it minimises
// their sum: every tile keeps its own copy of its stack's weights), the
// recomputed MACs, and the paths cut
// into tiles; --out writes them as a one-device plan, which
// `tessera run MODEL --plan plan.pb` executes in exactly the printed arena.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "daemon/cli/cli.h"
#include "daemon/cli/cli_model_options.h"
#include "daemon/runtime/memory_flow.h"
#include "proto/tessera.pb.h"
#include "util/quantity.h"

namespace tessera {

namespace {

struct OptimizeMemoryOptions {
  ModelOptions model;
  std::string max_mac_overhead = "10%";
  std::string out;
  int threads = 1;
  bool json = false;
  bool quiet = false;
};

// The plan file `tessera run --plan` reads (planner/plan_file.h): one device.
Status WriteOneDevicePlan(const Graph& graph, const MemoryFlowResult& r, const std::string& path) {
  proto::Plan p;
  char id[32];
  std::snprintf(id, sizeof id, "optmem-%016zx", std::hash<std::string>()(graph.name + "|" + PathsKey(r.paths)));
  p.set_id(id);
  p.set_model_name(graph.name);
  p.set_model_layers(static_cast<int64_t>(graph.nodes.size()));
  p.set_model_macs(r.model_macs);
  proto::PlanDevice* d = p.add_devices();
  d->set_name("device");
  d->set_kind("linux");
  d->set_peak_buffer_bytes(r.arena_after_bytes);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const LayerAssignment& a = r.plan.layers[i];
    proto::LayerPlan* l = p.add_layers();
    l->set_index(static_cast<int32_t>(i + 1));
    l->set_name(graph.nodes[i].name);
    l->set_op(graph.nodes[i].op);
    l->set_scheme(a.scheme == LayerScheme::kFfmt ? proto::FFMT : proto::WHOLE);
    l->add_devices(0);
    if (a.scheme == LayerScheme::kFfmt) {
      l->add_grid(a.grid_rows);
      l->add_grid(a.grid_cols);
      l->set_split_axis(a.parts ? "parts" : "rows");
    }
  }
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f || !p.SerializeToOstream(&f)) return Status::FromErrno(errno, "--out " + path);
  return Status::OK();
}

int RunOptimizeMemory(const OptimizeMemoryOptions& o) {
  auto overhead = ParseMacOverhead(o.max_mac_overhead);
  if (!overhead.ok()) return ReportError("optimize-memory", overhead.status());
  // Shapes only: every candidate is sized, none is run (device_memory.h).
  auto graph = LoadModel(o.model, /*shapes_only=*/true);
  if (!graph.ok()) return ReportError("optimize-memory", graph.status());
  MemoryFlowOptions fo;
  fo.max_mac_overhead = *overhead;
  fo.memory.threads = o.threads;
  if (!o.quiet)
    fo.progress = [](const std::string& line) { std::fprintf(stderr, "optimize-memory: %s\n", line.c_str()); };
  auto r = OptimizeMemory(*graph, fo);
  if (!r.ok()) return ReportError("optimize-memory", r.status());
  if (!o.out.empty())
    if (Status st = WriteOneDevicePlan(*graph, *r, o.out); !st.ok()) return ReportError("optimize-memory", st);

  if (o.json) {
    nlohmann::json j;
    j["model"] = o.model.model_path;
    j["arena_before_bytes"] = r->arena_before_bytes;
    j["arena_after_bytes"] = r->arena_after_bytes;
    j["weight_before_bytes"] = r->weight_before_bytes;
    j["weight_after_bytes"] = r->weight_after_bytes;
    j["load_peak_before_bytes"] = r->load_peak_before_bytes;
    j["load_peak_after_bytes"] = r->load_peak_after_bytes;
    j["need_before_bytes"] = r->need_before();
    j["need_after_bytes"] = r->need_after();
    j["model_macs"] = r->model_macs;
    j["halo_macs"] = r->halo_macs;
    j["mac_overhead"] = r->mac_overhead();
    j["max_mac_overhead"] = *overhead < 0 ? nlohmann::json(nullptr) : nlohmann::json(*overhead);
    j["threads"] = o.threads;
    j["rounds"] = r->rounds;
    j["candidates"] = r->candidates;
    j["seconds"] = r->seconds;
    j["paths"] = nlohmann::json::array();
    for (const MemoryPath& q : r->paths)
      j["paths"].push_back({{"first_layer", q.first + 1},
                            {"last_layer", q.last + 1},
                            {"first_name", graph->nodes[q.first].name},
                            {"last_name", graph->nodes[q.last].name},
                            {"grid", {q.grid_rows, q.grid_cols}},
                            {"parts", q.parts},
                            {"critical_value", q.critical},
                            {"arena_bytes", q.arena_bytes}});
    if (!o.out.empty()) j["out"] = o.out;
    std::printf("%s\n", j.dump(1).c_str());
    return 0;
  }
  const double before = static_cast<double>(r->arena_before_bytes), after = static_cast<double>(r->arena_after_bytes);
  char budget[32] = "unlimited";
  if (*overhead >= 0) std::snprintf(budget, sizeof budget, "%g %%", 100.0 * *overhead);
  std::printf("%s on one device (%d thread%s), recomputed MACs at most %s:\n", o.model.model_path.c_str(), o.threads,
              o.threads == 1 ? "" : "s", budget);
  std::printf("  arena before: %lld bytes (%s)\n", static_cast<long long>(r->arena_before_bytes),
              FormatBytes(before).c_str());
  std::printf("  arena after:  %lld bytes (%s) = %.3fx\n", static_cast<long long>(r->arena_after_bytes),
              FormatBytes(after).c_str(), before > 0 ? after / before : 1.0);
  std::printf("  weights as the kernels store them: %s -> %s (each weight and packed form once for all tiles)\n",
              FormatBytes(static_cast<double>(r->weight_before_bytes)).c_str(),
              FormatBytes(static_cast<double>(r->weight_after_bytes)).c_str());
  std::printf("  arena + weights: %s -> %s = %.3fx (what is chosen for)\n",
              FormatBytes(static_cast<double>(r->need_before())).c_str(),
              FormatBytes(static_cast<double>(r->need_after())).c_str(),
              r->need_before() > 0 ? static_cast<double>(r->need_after()) / r->need_before() : 1.0);
  std::printf("  weights held while a worker loads the program (forms so far + a block): %s -> %s%s\n",
              FormatBytes(static_cast<double>(r->load_peak_before_bytes)).c_str(),
              FormatBytes(static_cast<double>(r->load_peak_after_bytes)).c_str(),
              r->load_peak_after_bytes > r->need_after() ? " (more than arena + weights: loading sets the peak)" : "");
  std::printf("  MAC overhead: %.2f %% (%lld halo MACs of %lld)\n", 100.0 * r->mac_overhead(),
              static_cast<long long>(r->halo_macs), static_cast<long long>(r->model_macs));
  if (r->paths.empty()) std::printf("  no tiled path shrinks the arena within the MAC budget\n");
  for (const MemoryPath& q : r->paths)
    std::printf("  path: %s, for critical value '%s'\n", DescribeMemoryPath(*graph, q).c_str(), q.critical.c_str());
  std::printf("  %d round%s, %lld programs sized, %.1f s\n", r->rounds, r->rounds == 1 ? "" : "s",
              static_cast<long long>(r->candidates), r->seconds);
  if (!o.out.empty())
    std::printf("wrote %s: `tessera run %s --plan %s` runs it in this arena\n", o.out.c_str(),
                o.model.model_path.c_str(), o.out.c_str());
  return 0;
}

}  // namespace

void RegisterOptimizeMemoryCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("optimize-memory",
                                 "Cut stretches of the model into tiles one device computes in turn, for the smallest "
                                 "arena within a MAC budget (METHODS §6)");
  auto o = std::make_shared<OptimizeMemoryOptions>();
  o->model.AddTo(*cmd);
  cmd->add_option("--max-mac-overhead", o->max_mac_overhead,
                  "Recomputed (halo) MACs allowed, share of the model's: 10%, 0.1, or none")
      ->capture_default_str();
  cmd->add_option("--out", o->out, "Write the result as a one-device plan (run it: tessera run MODEL --plan FILE)");
  cmd->add_option("--threads", o->threads, "Intra-op threads of the run (sizes per-thread scratch)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->add_flag("--quiet", o->quiet, "No progress lines on stderr");
  cmd->callback([o] {
    if (int rc = RunOptimizeMemory(*o)) throw CLI::RuntimeError(rc);
  });
}

}  // namespace tessera
