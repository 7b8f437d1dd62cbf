// Per-op-kind MAC rates (issue 12 item 5): the device file's
// macs_per_s_by_kind is parsed and checked, and the planner's predicted
// latency divides each layer's MACs by the rate of its kind.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "partition/graph/metrics.h"
#include "partition/import/model_import.h"
#include "planner/cluster.h"
#include "planner/layer_profile.h"
#include "planner/plan.h"

using namespace tessera;

namespace {

Cluster OneDevice(const std::string& speed) {
  auto c = ParseCluster("devices:\n  - { name: a, ram: 1GiB, flash: 1GiB, " + speed + " }\n", "one.yaml", {});
  REQUIRE(c.ok());
  return *c;
}

std::string ErrorOf(const std::string& speed) {
  auto c = ParseCluster("devices:\n  - { name: a, ram: 1GiB, flash: 1GiB, " + speed + " }\n", "bad.yaml", {});
  REQUIRE_FALSE(c.ok());
  return c.status().message();
}

struct Model {
  Graph graph;
  std::vector<LayerFigures> layers;
};

// darknet's "tiny" reference network: 3x3 and 1x1 convs, max and average
// pooling, a softmax. Imported once.
const Model& Tiny() {
  static const Model model = [] {
    auto g = ImportDarknet("/usr/share/darknet/cfg/tiny.cfg", ImportOptions{});
    REQUIRE(g.ok());
    Model m{std::move(g).value(), {}};
    m.layers = ComputeLayerFigures(m.graph);
    return m;
  }();
  return model;
}

double MacsOfKind(const std::vector<LayerFigures>& layers, OpKind kind) {
  double macs = 0;
  for (const auto& f : layers)
    if (f.kind == kind) macs += static_cast<double>(f.R);
  return macs;
}

}  // namespace

TEST_CASE("op kinds: tiny.cfg has 3x3 convs, 1x1 convs and pooling", "[planner][op_kind]") {
  const Model& m = Tiny();
  CHECK(MacsOfKind(m.layers, OpKind::kConv) > 0);
  CHECK(MacsOfKind(m.layers, OpKind::kConv1x1) > 0);
  CHECK(MacsOfKind(m.layers, OpKind::kPool) > 0);
  OpKind k;
  CHECK(ParseOpKind("depthwise", &k));
  CHECK(k == OpKind::kDepthwise);
  CHECK_FALSE(ParseOpKind("other", &k));
  CHECK_FALSE(ParseOpKind("conv3", &k));
}

TEST_CASE("device file: macs_per_s_by_kind overrides macs_per_s per kind", "[planner][op_kind]") {
  const Cluster c = OneDevice("macs_per_s: 2e9, macs_per_s_by_kind: { conv: 8e9, depthwise: 5e8 }");
  const Device& d = c.devices[0];
  CHECK(d.MacsPerSecond(OpKind::kConv) == Approx(8e9));
  CHECK(d.MacsPerSecond(OpKind::kDepthwise) == Approx(5e8));
  CHECK(d.MacsPerSecond(OpKind::kDense) == Approx(2e9));  // not listed: the single figure
  CHECK(d.ComputeSeconds(8000000000, OpKind::kConv) == Approx(1.0));

  CHECK(ErrorOf("macs_per_s: 2e9, macs_per_s_by_kind: { conv: -1 }")
            .find("macs_per_s_by_kind.conv '-1' is not a positive number") != std::string::npos);
  CHECK(ErrorOf("macs_per_s: 2e9, macs_per_s_by_kind: { conv: inf }").find("not a positive number") !=
        std::string::npos);
  CHECK(ErrorOf("macs_per_s: 2e9, macs_per_s_by_kind: { conv3x3: 1e9 }").find("unknown op kind 'conv3x3'") !=
        std::string::npos);
  CHECK(ErrorOf("macs_per_s: 2e9, macs_per_s_by_kind: 5e9").find("must be a map") != std::string::npos);
  CHECK(ErrorOf("macs_per_s_by_kind: { conv: 1e9 }").find("add macs_per_s") != std::string::npos);
}

TEST_CASE("plan: predicted latency uses the rate of each layer's kind", "[planner][op_kind]") {
  const Model& m = Tiny();
  const double total = MacsOfKind(m.layers, OpKind::kOther) + MacsOfKind(m.layers, OpKind::kConv) +
                       MacsOfKind(m.layers, OpKind::kConv1x1) + MacsOfKind(m.layers, OpKind::kPool) +
                       MacsOfKind(m.layers, OpKind::kElementwise);
  const double conv = MacsOfKind(m.layers, OpKind::kConv);
  const double pool = MacsOfKind(m.layers, OpKind::kPool);
  for (Objective objective : {Objective::kMemory, Objective::kLatency, Objective::kThroughput}) {
    INFO(ObjectiveName(objective));
    PlanOptions options;
    options.objective = objective;
    auto single = BuildPlan(m.graph, m.layers, OneDevice("macs_per_s: 1e9"), options);
    REQUIRE(single.ok());
    CHECK(single->latency_s == Approx(total / 1e9).epsilon(1e-9));
    // 3x3 convs 4x faster, pooling 2x slower than the single figure.
    auto by_kind = BuildPlan(m.graph, m.layers,
                             OneDevice("macs_per_s: 1e9, macs_per_s_by_kind: { conv: 4e9, pool: 5e8 }"), options);
    REQUIRE(by_kind.ok());
    CHECK(by_kind->latency_s == Approx((total - conv - pool) / 1e9 + conv / 4e9 + pool / 5e8).epsilon(1e-9));
    CHECK(by_kind->latency_s < 0.5 * single->latency_s);
    if (objective == Objective::kThroughput)  // one device: the period is the whole compute
      CHECK(by_kind->throughput_per_s == Approx(1.0 / by_kind->latency_s).epsilon(1e-9));
    // `tessera plan --json` shows the rates the compute times used.
    const auto json = PlanToJson(*by_kind)["device_summary"][0];
    CHECK(json["macs_per_s_by_kind"]["conv"].get<double>() == Approx(4e9));
    CHECK(json["macs_per_s_by_kind"].size() == 2);
    CHECK_FALSE(PlanToJson(*single)["device_summary"][0].contains("macs_per_s_by_kind"));
  }
}

TEST_CASE("placement: a device fast at convs gets the conv layers", "[planner][op_kind]") {
  const Model& m = Tiny();
  // a: 1 GMAC/s except 3x3 convs at 16 GMAC/s; b: 4 GMAC/s for everything.
  // Links are fast, so latency is lowest with each layer where its kind is faster.
  auto c = ParseCluster(
      "devices:\n"
      "  - { name: a, ram: 1GiB, flash: 1GiB, macs_per_s: 1e9, macs_per_s_by_kind: { conv: 16e9 } }\n"
      "  - { name: b, ram: 1GiB, flash: 1GiB, macs_per_s: 4e9 }\n"
      "links:\n  default: { bandwidth: 100Gbit/s }\n",
      "two.yaml", {});
  REQUIRE(c.ok());
  PlanOptions options;
  options.objective = Objective::kLatency;
  auto plan = BuildPlan(m.graph, m.layers, *c, options);
  REQUIRE(plan.ok());
  int big_convs_on_a = 0, big_convs = 0;
  for (size_t l = 0; l < m.layers.size(); ++l) {
    if (m.layers[l].kind != OpKind::kConv || m.layers[l].R < 10'000'000) continue;
    ++big_convs;
    big_convs_on_a += plan->layers[l].devices == std::vector<int>{0};
  }
  CHECK(big_convs > 0);
  CHECK(big_convs_on_a == big_convs);
  CHECK(plan->loads[0].compute_share > 0.5);  // the 3x3 convs are most of tiny's MACs

  // Throughput (the pipeline search): a's fast convs raise the best rate
  // over the same cluster without them.
  auto plain = ParseCluster(
      "devices:\n"
      "  - { name: a, ram: 1GiB, flash: 1GiB, macs_per_s: 1e9 }\n"
      "  - { name: b, ram: 1GiB, flash: 1GiB, macs_per_s: 4e9 }\n"
      "links:\n  default: { bandwidth: 100Gbit/s }\n",
      "plain.yaml", {});
  REQUIRE(plain.ok());
  options.objective = Objective::kThroughput;
  auto fast = BuildPlan(m.graph, m.layers, *c, options);
  auto slow = BuildPlan(m.graph, m.layers, *plain, options);
  REQUIRE(fast.ok());
  REQUIRE(slow.ok());
  CHECK(fast->throughput_per_s > 1.5 * slow->throughput_per_s);
}

namespace {
// A layer profile file (the `tessera run --profile --json` form) giving
// layer j the time ms[j]; with_index: entries carry "index".
std::string WriteProfile(const std::vector<LayerFigures>& layers, const std::vector<double>& ms, bool with_index,
                         const std::string& name) {
  nlohmann::json prof = nlohmann::json::array();
  for (size_t j = 0; j < layers.size(); ++j) {
    nlohmann::json e = {{"node", layers[j].name}, {"op", layers[j].op}, {"ms", ms[j]}};
    if (with_index) e["index"] = j + 1;
    prof.push_back(e);
  }
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path) << nlohmann::json{{"model", "tiny"}, {"profile", prof}}.dump();
  return path;
}

std::string ProfileError(const std::string& text, std::vector<LayerFigures> layers) {
  const std::string path = (std::filesystem::temp_directory_path() / "tessera_bad_profile.json").string();
  std::ofstream(path) << text;
  auto r = ApplyLayerProfile(path, &layers);
  REQUIRE_FALSE(r.ok());
  return r.status().message();
}
}  // namespace

TEST_CASE("layer profile: each layer's time follows its measured share", "[planner][op_kind][layer_profile]") {
  const Model& m = Tiny();
  const size_t n = m.layers.size();
  // The first layer takes 90 % of the measured time, the rest share 10 %.
  std::vector<double> ms(n, 0.1 / static_cast<double>(n - 1));
  ms[0] = 0.9;
  double total_macs = 0;
  for (const auto& f : m.layers) total_macs += static_cast<double>(f.R);
  for (bool with_index : {true, false}) {
    INFO("with index: " << with_index);
    std::vector<LayerFigures> layers = m.layers;
    auto summary = ApplyLayerProfile(WriteProfile(layers, ms, with_index, "tessera_profile.json"), &layers);
    REQUIRE(summary.ok());
    CHECK(summary->layers == static_cast<int>(n));
    CHECK(summary->profiled_ms == Approx(1.0));
    CHECK(summary->largest_change >= layers[0].time_macs / static_cast<double>(layers[0].R));
    double sum = 0;
    for (size_t j = 0; j < n; ++j) {
      CHECK(layers[j].time_macs == Approx(ms[j] * total_macs));
      CHECK(layers[j].RateKind() == OpKind::kOther);
      sum += layers[j].TimeMacs();
    }
    CHECK(sum == Approx(total_macs));  // the model's MAC-equivalents are unchanged

    // One device: the same latency as from MACs (one rate, same total).
    PlanOptions options;
    options.objective = Objective::kThroughput;
    auto one = BuildPlan(m.graph, layers, OneDevice("macs_per_s: 1e9"), options);
    REQUIRE(one.ok());
    CHECK(one->latency_s == Approx(total_macs / 1e9).epsilon(1e-6));
    // Two devices with fast links, pipelines only (--solver pipeline):
    // without the profile a pipeline about halves the period; with it the
    // first layer alone is 90 % of the time and no pipeline beats that.
    options.solver = "pipeline";
    auto two = ParseCluster(
        "devices:\n"
        "  - { name: a, ram: 1GiB, flash: 1GiB, macs_per_s: 1e9 }\n"
        "  - { name: b, ram: 1GiB, flash: 1GiB, macs_per_s: 1e9 }\n"
        "links:\n  default: { bandwidth: 1000Gbit/s }\n",
        "two.yaml", {});
    REQUIRE(two.ok());
    auto by_macs = BuildPlan(m.graph, m.layers, *two, options);
    auto by_time = BuildPlan(m.graph, layers, *two, options);
    REQUIRE(by_macs.ok());
    REQUIRE(by_time.ok());
    CHECK(by_macs->period_s < 0.7 * total_macs / 1e9);
    CHECK(by_time->period_s == Approx(0.9 * total_macs / 1e9).epsilon(1e-3));
    CHECK(by_time->loads[by_time->bottleneck_device].compute_s == Approx(0.9 * total_macs / 1e9).epsilon(1e-3));
  }
}

TEST_CASE("layer profile: a profile of another model or a broken file is refused by name",
          "[planner][op_kind][layer_profile]") {
  const Model& m = Tiny();
  std::vector<double> ms(m.layers.size(), 1.0);
  std::vector<LayerFigures> fewer(m.layers.begin(), m.layers.end() - 1);
  const std::string other = WriteProfile(fewer, std::vector<double>(fewer.size(), 1.0), true, "tessera_other.json");
  std::vector<LayerFigures> layers = m.layers;
  auto r = ApplyLayerProfile(other, &layers);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("profiles " + std::to_string(fewer.size()) + " nodes but the model has " +
                                  std::to_string(m.layers.size()) + " layers") != std::string::npos);
  CHECK(r.status().message().find("--profile --json") != std::string::npos);

  std::vector<LayerFigures> renamed = m.layers;
  renamed[2].op = "Softmax";
  auto bad_op = ApplyLayerProfile(WriteProfile(renamed, ms, true, "tessera_renamed.json"), &layers);
  REQUIRE_FALSE(bad_op.ok());
  CHECK(bad_op.status().message().find("node 3 is '" + m.layers[2].name + "' (Softmax) in the profile but") !=
        std::string::npos);

  CHECK(ProfileError("{not json", m.layers).find("is not JSON") != std::string::npos);
  CHECK(ProfileError("{\"median_ms\": 3}", m.layers).find("has no \"profile\" array") != std::string::npos);
  CHECK(ProfileError("{\"profile\": [{\"node\": \"x\"}]}", m.layers).find("needs \"node\"") != std::string::npos);
  std::vector<double> negative = ms;
  negative[1] = -1;
  auto neg = ApplyLayerProfile(WriteProfile(m.layers, negative, true, "tessera_negative.json"), &layers);
  REQUIRE_FALSE(neg.ok());
  CHECK(neg.status().message().find("finite and not negative") != std::string::npos);
  auto zero = ApplyLayerProfile(WriteProfile(m.layers, std::vector<double>(ms.size(), 0.0), true, "tessera_zero.json"),
                                &layers);
  REQUIRE_FALSE(zero.ok());
  CHECK(zero.status().message().find("needs time and MACs") != std::string::npos);
  auto missing = ApplyLayerProfile("/nonexistent/profile.json", &layers);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message().find("cannot read layer profile /nonexistent/profile.json") != std::string::npos);
}

// Issue 15 item 3: a device's network stack spends CPU on every byte it sends
// or receives (net_macs_per_byte, in MACs of the device). The planner adds
// bytes x cost / macs_per_s to that device's time, so a plan that moves bytes
// predicts a longer latency and period by exactly that much.
TEST_CASE("plan: net_macs_per_byte prices each device's sent and received bytes", "[planner][op_kind]") {
  CHECK(OneDevice("macs_per_s: 2e9").devices[0].net_macs_per_byte == 0);
  CHECK(OneDevice("macs_per_s: 2e9, net_macs_per_byte: 0").devices[0].NetworkCpuSeconds(1e6) == 0);
  CHECK(OneDevice("macs_per_s: 2e9, net_macs_per_byte: 50").devices[0].NetworkCpuSeconds(4e6) == Approx(0.1));
  CHECK(ErrorOf("macs_per_s: 2e9, net_macs_per_byte: -1").find("net_macs_per_byte '-1' is not a number >= 0") !=
        std::string::npos);
  CHECK(ErrorOf("macs_per_s: 2e9, net_macs_per_byte: lots").find("net_macs_per_byte 'lots'") != std::string::npos);
  // request_macs: the source's CPU per request served, beside the bytes' cost.
  CHECK(OneDevice("macs_per_s: 2e9").devices[0].RequestCpuSeconds(1e6) == 0);
  CHECK(OneDevice("macs_per_s: 2e9, net_macs_per_byte: 50, request_macs: 1e8").devices[0].RequestCpuSeconds(4e6) ==
        Approx(0.1 + 0.05));
  CHECK(ErrorOf("macs_per_s: 2e9, request_macs: -5").find("request_macs '-5' is not a number >= 0") !=
        std::string::npos);

  const Model& m = Tiny();
  auto two = [](const std::string& extra) {
    auto c = ParseCluster(
        "devices:\n"
        "  - { name: a, ram: 1GiB, flash: 1GiB, macs_per_s: 1e9" +
            extra +
            " }\n"
            "  - { name: b, ram: 1GiB, flash: 1GiB, macs_per_s: 1e9" +
            extra +
            " }\n"
            "links:\n  default: { bandwidth: 100Mbit/s }\n",
        "two.yaml", {});
    REQUIRE(c.ok());
    return *c;
  };
  for (Objective objective : {Objective::kMemory, Objective::kThroughput}) {
    INFO(ObjectiveName(objective));
    PlanOptions options;
    options.objective = objective;
    auto free = BuildPlan(m.graph, m.layers, two(""), options);
    auto priced = BuildPlan(m.graph, m.layers, two(", net_macs_per_byte: 100"), options);
    REQUIRE(free.ok());
    REQUIRE(priced.ok());
    REQUIRE(free->layers.size() == priced->layers.size());
    for (size_t l = 0; l < free->layers.size(); ++l) REQUIRE(free->layers[l].devices == priced->layers[l].devices);
    double moved = 0;
    for (int i = 0; i < 2; ++i) {
      const DeviceLoad& a = free->loads[i];
      const DeviceLoad& b = priced->loads[i];
      const double bytes = static_cast<double>(b.sent_bytes + b.received_bytes);
      moved += bytes;
      CHECK(b.compute_s == Approx(a.compute_s + bytes * 100 / 1e9).epsilon(1e-9));
      CHECK(PlanToJson(*priced)["device_summary"][i]["network_cpu_s"].get<double>() ==
            Approx(bytes * 100 / 1e9).epsilon(1e-9));
    }
    REQUIRE(moved > 0);  // the plan splits the model: bytes cross the cable
    CHECK(priced->latency_s > free->latency_s);
    CHECK(priced->throughput_per_s < free->throughput_per_s);
    CHECK_FALSE(PlanToJson(*free)["device_summary"][0].contains("network_cpu_s"));
    CHECK(FormatPlanTable(*priced).find("network stack's CPU") != std::string::npos);
  }
}
