// `tessera optimize-memory MODEL [--max-mac-overhead 10%] [--out plan.pb]
// [--json]`: the smallest device arena for one device (issue 17 item 3,
// METHODS §6 "Critical buffers" / "Path discovery"; daemon/runtime/memory_flow.h).
// Prints the arena and the weights as stored before and after (it minimises
// their sum: every tile keeps its own copy of its stack's weights), the
// recomputed MACs, and the paths cut
// into tiles; --out writes them as a one-device plan, which
// `tessera run MODEL --plan plan.pb` executes in exactly the printed arena.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "daemon/cli/cli.h"
#include "daemon/cli/cli_model_options.h"
#include "daemon/runtime/memory_flow.h"
#include "daemon/runtime/parts_search.h"
#include "partition/graph/metrics.h"
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
  // --parts-search genetic (issue 18 item 4): which layers process in parts.
  std::string parts_search = "greedy";
  // Which kinds of path the greedy flow tries (memory_flow.h).
  std::vector<std::string> paths = {"tiles", "parts", "channels"};
  std::string ram;
  double min_fps = 0;
  PartsSearchOptions parts;
};

// The plan file `tessera run --plan` reads (planner/plan_file.h): one device.
Status WriteOneDevicePlan(const Graph& graph, const PartitionPlan& plan, const std::vector<MemoryPath>& paths,
                          int64_t model_macs, int64_t arena_bytes, const std::string& path) {
  proto::Plan p;
  char id[32];
  std::snprintf(id, sizeof id, "optmem-%016zx", std::hash<std::string>()(graph.name + "|" + PathsKey(paths)));
  p.set_id(id);
  p.set_model_name(graph.name);
  p.set_model_layers(static_cast<int64_t>(graph.nodes.size()));
  p.set_model_macs(model_macs);
  proto::PlanDevice* d = p.add_devices();
  d->set_name("device");
  d->set_kind("linux");
  d->set_peak_buffer_bytes(arena_bytes);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const LayerAssignment& a = plan.layers[i];
    proto::LayerPlan* l = p.add_layers();
    l->set_index(static_cast<int32_t>(i + 1));
    l->set_name(graph.nodes[i].name);
    l->set_op(graph.nodes[i].op);
    switch (a.scheme) {
      case LayerScheme::kFfmt:
        l->set_scheme(proto::FFMT);
        break;
      case LayerScheme::kFdt1:
        l->set_scheme(proto::FDT1);
        break;  // a channel path's slices (memory_flow.h)
      case LayerScheme::kFdt2:
        l->set_scheme(proto::FDT2);
        break;
      case LayerScheme::kPart:
        l->set_scheme(proto::PART);
        break;
      default:
        l->set_scheme(proto::WHOLE);
        break;
    }
    if (a.scheme == LayerScheme::kFfmt || a.scheme == LayerScheme::kWhole) {
      l->add_devices(0);
    } else {  // one device named once per channel slice
      for (size_t k = 0; k < a.devices.size(); ++k) l->add_devices(0);
      l->set_split_axis(a.scheme == LayerScheme::kFdt2 ? "in_channels" : "out_channels");
    }
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

Status WriteOneDevicePlan(const Graph& graph, const MemoryFlowResult& r, const std::string& path) {
  return WriteOneDevicePlan(graph, r.plan, r.paths, r.model_macs, r.arena_after_bytes, path);
}

std::string FormatG(double x) {
  char s[32];
  std::snprintf(s, sizeof s, "%g", x);
  return s;
}

// --parts-search genetic: which layers process in parts, within --ram and
// at least --min-fps (daemon/runtime/parts_search.h).
int RunPartsSearch(const OptimizeMemoryOptions& o) {
  const char* who = "optimize-memory --parts-search genetic";
  PartsSearchOptions po = o.parts;
  po.memory.threads = o.threads;
  po.min_fps = o.min_fps;
  if (!o.ram.empty()) {
    auto ram = ParseByteSize(o.ram);
    if (!ram.ok()) return ReportError(who, Status::InvalidArgument("--ram: " + ram.status().message()));
    po.ram_bytes = *ram;
  }
  if (!o.quiet) po.progress = [](const std::string& line) { std::fprintf(stderr, "parts search: %s\n", line.c_str()); };
  // Weights with values: the calibration and the chosen points run.
  auto graph = LoadModel(o.model);
  if (!graph.ok()) return ReportError(who, graph.status());
  auto r = SearchParts(*graph, SingleDevicePlan(graph->nodes.size()), 0, po);
  if (!r.ok()) return ReportError(who, r.status());
  const ModelTotals totals = ComputeTotals(ComputeLayerFigures(*graph));
  auto describe = [&](const PartsPoint& p) {
    std::string text;
    for (const MemoryPath& q : p.paths) text += (text.empty() ? "" : "; ") + DescribeMemoryPath(*graph, q);
    return text.empty() ? std::string("no layer in parts") : text;
  };
  const PartsPoint* chosen = r->chosen >= 0 ? &r->front[r->chosen] : nullptr;
  if (chosen && !o.out.empty())
    if (Status st = WriteOneDevicePlan(*graph, PlanOf(SingleDevicePlan(graph->nodes.size()), 0, chosen->paths),
                                       chosen->paths, totals.macs, chosen->size.arena_bytes, o.out);
        !st.ok())
      return ReportError(who, st);
  const double ref = r->unsplit.measured_seconds;
  if (o.json) {
    nlohmann::json j;
    j["model"] = o.model.model_path;
    j["threads"] = o.threads;
    j["ram_bytes"] = po.ram_bytes >= 0 ? nlohmann::json(po.ram_bytes) : nlohmann::json(nullptr);
    j["min_fps"] = po.min_fps;
    j["eligible_layers"] = r->eligible.size();
    j["population"] = po.population;
    j["generations"] = r->generations;
    j["evaluated"] = r->evaluated;
    j["sized"] = r->sized;
    j["search_seconds"] = r->search_seconds;
    j["measure_seconds"] = r->measure_seconds;
    j["time_model"] = {{"unsplit_seconds", r->time.unsplit_seconds},
                       {"bands", r->time.bands},
                       {"alpha", r->time.slowdown},
                       {"all_parts_seconds", r->time.all_parts_seconds}};
    auto point = [&](const PartsPoint& p) {
      nlohmann::json x;
      x["bands"] = p.bands;
      x["layers_in_parts"] = p.layers_in_parts();
      x["arena_bytes"] = p.size.arena_bytes;
      x["weight_bytes"] = p.size.weight_bytes;
      x["need_bytes"] = p.size.need();
      x["predicted_seconds"] = p.predicted_seconds;
      x["measured_seconds"] = p.measured_seconds >= 0 ? nlohmann::json(p.measured_seconds) : nlohmann::json(nullptr);
      x["max_rel_diff"] = p.max_rel_diff >= 0 ? nlohmann::json(p.max_rel_diff) : nlohmann::json(nullptr);
      x["paths"] = nlohmann::json::array();
      for (const MemoryPath& q : p.paths)
        x["paths"].push_back({{"first_layer", q.first + 1}, {"last_layer", q.last + 1}, {"bands", q.grid_rows}});
      return x;
    };
    j["unsplit"] = point(r->unsplit);
    j["front"] = nlohmann::json::array();
    for (const PartsPoint& p : r->front) j["front"].push_back(point(p));
    j["chosen"] = r->chosen >= 0 ? nlohmann::json(r->chosen) : nlohmann::json(nullptr);
    if (r->chosen < 0) j["why_none"] = r->why_none;
    if (chosen && !o.out.empty()) j["out"] = o.out;
    std::printf("%s\n", j.dump(1).c_str());
    return chosen ? 0 : 1;
  }
  std::printf("%s on one device (%d thread%s): which layers process in parts, genetic search over %zu layer(s)\n",
              o.model.model_path.c_str(), o.threads, o.threads == 1 ? "" : "s", r->eligible.size());
  std::printf("  population %d, %d generations, %lld genomes, %lld programs sized, %.1f s; measuring %.1f s\n",
              po.population, r->generations, static_cast<long long>(r->evaluated), static_cast<long long>(r->sized),
              r->search_seconds, r->measure_seconds);
  std::printf("  time model: unsplit %.2f ms measured;", r->time.unsplit_seconds * 1e3);
  for (size_t b = 0; b < r->time.bands.size(); ++b)
    std::printf(" %lld bands: alpha %.3f", static_cast<long long>(r->time.bands[b]), r->time.slowdown[b]);
  std::printf("\n  limit: %s, target: %s\n",
              po.ram_bytes >= 0 ? FormatBytes(static_cast<double>(po.ram_bytes)).c_str() : "none",
              po.min_fps > 0 ? (FormatG(po.min_fps) + " fps (measured)").c_str() : "none");
  std::printf("  %-4s %6s %7s %12s %10s %10s %9s %8s %9s\n", "", "bands", "layers", "arena+wts", "x unsplit", "pred ms",
              "meas ms", "fps x", "rel diff");
  auto row = [&](const char* mark, const PartsPoint& p) {
    char meas[32] = "-", fps[32] = "-", diff[32] = "-";
    if (p.measured_seconds >= 0) {
      std::snprintf(meas, sizeof meas, "%.2f", p.measured_seconds * 1e3);
      std::snprintf(fps, sizeof fps, "%.2fx", ref / p.measured_seconds);
      std::snprintf(diff, sizeof diff, "%.2g", p.max_rel_diff);
    }
    std::printf("  %-4s %6lld %7d %12s %9.3fx %10.2f %9s %8s %9s\n", mark, static_cast<long long>(p.bands),
                p.layers_in_parts(), FormatBytes(static_cast<double>(p.size.need())).c_str(),
                static_cast<double>(p.size.need()) / r->unsplit.size.need(), p.predicted_seconds * 1e3, meas, fps,
                diff);
  };
  row("none", r->unsplit);
  for (size_t i = 0; i < r->front.size(); ++i) row(static_cast<int>(i) == r->chosen ? "=>" : "", r->front[i]);
  if (!chosen) {
    std::fprintf(stderr, "tessera optimize-memory: %s\n", r->why_none.c_str());
    return 1;
  }
  std::printf("chosen: %s\n", describe(*chosen).c_str());
  std::printf("  arena + weights %s (%.3fx unsplit), measured %.2f fps (%.2fx unsplit)\n",
              FormatBytes(static_cast<double>(chosen->size.need())).c_str(),
              static_cast<double>(chosen->size.need()) / r->unsplit.size.need(), 1.0 / chosen->measured_seconds,
              ref / chosen->measured_seconds);
  if (!o.out.empty())
    std::printf("wrote %s: `tessera run %s --plan %s` runs it in this arena\n", o.out.c_str(),
                o.model.model_path.c_str(), o.out.c_str());
  return 0;
}

int RunOptimizeMemory(const OptimizeMemoryOptions& o) {
  if (o.parts_search == "genetic") return RunPartsSearch(o);
  auto overhead = ParseMacOverhead(o.max_mac_overhead);
  if (!overhead.ok()) return ReportError("optimize-memory", overhead.status());
  // Shapes only: every candidate is sized, none is run (device_memory.h).
  auto graph = LoadModel(o.model, /*shapes_only=*/true);
  if (!graph.ok()) return ReportError("optimize-memory", graph.status());
  MemoryFlowOptions fo;
  fo.max_mac_overhead = *overhead;
  fo.memory.threads = o.threads;
  auto wanted = [&](const char* kind) { return std::find(o.paths.begin(), o.paths.end(), kind) != o.paths.end(); };
  fo.tiles = wanted("tiles");
  fo.parts = wanted("parts");
  fo.channels = wanted("channels");
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
                            {"channel_slices", q.channel_slices > 1 ? q.channel_slices : 0},
                            {"description", DescribeMemoryPath(*graph, q)},
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
  cmd->add_option("--paths", o->paths,
                  "Kinds of path to try: tiles (FFMT grids, halo MACs), parts (row bands, no MAC added), channels "
                  "(channel slices SPLIT|FDTO -> PART -> FDTI|CONCAT, no MAC added)")
      ->delimiter(',')
      ->check(CLI::IsMember({"tiles", "parts", "channels"}))
      ->capture_default_str();
  cmd->add_option("--out", o->out, "Write the result as a one-device plan (run it: tessera run MODEL --plan FILE)");
  cmd->add_option("--threads", o->threads, "Intra-op threads of the run (sizes per-thread scratch)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--parts-search", o->parts_search,
                  "greedy: tiles and parts by the greedy memory flow; genetic: choose the layers processed in parts "
                  "(row bands, nothing recomputed) by a genetic search for memory and measured speed")
      ->capture_default_str()
      ->check(CLI::IsMember({"greedy", "genetic"}));
  cmd->add_option("--ram", o->ram, "With --parts-search genetic: the arena + weights must fit this (e.g. 24MiB)");
  cmd->add_option("--min-fps", o->min_fps,
                  "With --parts-search genetic: the frames per second the choice must still reach (measured)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--population", o->parts.population, "Genetic search: population")
      ->capture_default_str()
      ->check(CLI::Range(4, 10000));
  cmd->add_option("--generations", o->parts.generations, "Genetic search: generations")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--search-seed", o->parts.seed, "Genetic search: its random seed")->capture_default_str();
  cmd->add_option("--bands", o->parts.bands, "Genetic search: the band counts a choice may use")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{2}, int64_t{4096}));
  cmd->add_option("--repeat", o->parts.repeat, "Genetic search: timed runs per measured program (median)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->add_flag("--quiet", o->quiet, "No progress lines on stderr");
  cmd->callback([o] {
    if (int rc = RunOptimizeMemory(*o)) throw CLI::RuntimeError(rc);
  });
}

}  // namespace tessera
