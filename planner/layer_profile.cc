#include "planner/layer_profile.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

namespace tessera {

namespace {
struct Entry {
  int index = 0;  // 1-based node position; 0: not given
  std::string name, op;
  double ms = 0;
};

Result<std::vector<Entry>> ReadEntries(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::IOError("cannot read layer profile " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Status::InvalidArgument(path +
                                   " is not JSON; write a layer profile with `tessera run MODEL "
                                   "--profile --json > profile.json`");
  if (!j.contains("profile") || !j["profile"].is_array())
    return Status::InvalidArgument(path + " has no \"profile\" array; run `tessera run` with --profile --json");
  std::vector<Entry> out;
  for (const auto& e : j["profile"]) {
    Entry x;
    if (!e.is_object() || !e.contains("ms") || !e["ms"].is_number() || !e.contains("node") || !e["node"].is_string() ||
        !e.contains("op") || !e["op"].is_string())
      return Status::InvalidArgument(path + ": profile entry " + std::to_string(out.size()) +
                                     " needs \"node\" (string), \"op\" (string) and \"ms\" (number)");
    x.name = e["node"].get<std::string>();
    x.op = e["op"].get<std::string>();
    x.ms = e["ms"].get<double>();
    if (!std::isfinite(x.ms) || x.ms < 0)
      return Status::InvalidArgument(path + ": node '" + x.name + "' has time " + e["ms"].dump() +
                                     " ms; times are finite and not negative");
    if (e.contains("index")) {
      if (!e["index"].is_number_integer() || e["index"].get<int64_t>() < 1 || e["index"].get<int64_t>() > (1 << 30))
        return Status::InvalidArgument(path + ": node '" + x.name + "' has an invalid index " + e["index"].dump());
      x.index = e["index"].get<int>();
    }
    out.push_back(std::move(x));
  }
  return out;
}
}  // namespace

Result<LayerProfileSummary> ApplyLayerProfile(const std::string& path, std::vector<LayerFigures>* layers) {
  TS_ASSIGN_OR_RETURN(std::vector<Entry> entries, ReadEntries(path));
  const std::string fix =
      "; was it measured on this model at this input shape? (tessera run MODEL --input-shape "
      "... --profile --json)";
  if (entries.size() != layers->size())
    return Status::InvalidArgument(path + " profiles " + std::to_string(entries.size()) + " nodes but the model has " +
                                   std::to_string(layers->size()) + " layers" + fix);
  // Matched by index when the profile gives one, else by (unique) name.
  std::map<std::string, int> by_name;
  for (size_t j = 0; j < layers->size(); ++j)
    if (!by_name.emplace((*layers)[j].name, static_cast<int>(j)).second) by_name[(*layers)[j].name] = -1;
  std::vector<double> ms(layers->size(), -1);
  for (const Entry& e : entries) {
    int j = -1;
    if (e.index > 0) {
      j = e.index - 1;
      if (j >= static_cast<int>(layers->size()))
        return Status::InvalidArgument(path + ": node index " + std::to_string(e.index) + " is beyond the model's " +
                                       std::to_string(layers->size()) + " layers" + fix);
    } else {
      auto it = by_name.find(e.name);
      if (it == by_name.end()) return Status::InvalidArgument(path + ": the model has no layer '" + e.name + "'" + fix);
      if (it->second < 0)
        return Status::InvalidArgument(path + ": the model has several layers named '" + e.name +
                                       "'; a profile without \"index\" cannot tell them apart (write it again with "
                                       "this version of tessera run)");
      j = it->second;
    }
    const LayerFigures& f = (*layers)[j];
    if (f.name != e.name || f.op != e.op)
      return Status::InvalidArgument(path + ": node " + std::to_string(j + 1) + " is '" + e.name + "' (" + e.op +
                                     ") in the profile but '" + f.name + "' (" + f.op + ") in the model" + fix);
    if (ms[j] >= 0) return Status::InvalidArgument(path + ": layer '" + f.name + "' is profiled twice");
    ms[j] = e.ms;
  }
  double total_ms = 0, total_macs = 0;
  for (size_t j = 0; j < layers->size(); ++j) {
    total_ms += ms[j];
    total_macs += static_cast<double>((*layers)[j].R);
  }
  if (!(total_ms > 0) || !(total_macs > 0))
    return Status::InvalidArgument(path + " gives the model " + std::to_string(total_ms) + " ms for " +
                                   std::to_string(total_macs) + " MACs; a profile needs time and MACs to apportion");
  LayerProfileSummary summary;
  summary.layers = static_cast<int>(layers->size());
  summary.profiled_ms = total_ms;
  summary.largest_change = 0;
  for (size_t j = 0; j < layers->size(); ++j) {
    LayerFigures& f = (*layers)[j];
    f.time_macs = ms[j] / total_ms * total_macs;
    // Among layers with at least 1 % of the MACs (a layer of almost none
    // has any ratio at all).
    if (static_cast<double>(f.R) >= 0.01 * total_macs &&
        f.time_macs / static_cast<double>(f.R) > summary.largest_change) {
      summary.largest_change = f.time_macs / static_cast<double>(f.R);
      summary.largest_layer = f.name;
    }
  }
  return summary;
}

std::string DescribeLayerProfile(const std::string& path, const LayerProfileSummary& summary) {
  char buf[160];
  std::snprintf(buf, sizeof buf, " (%d layers, %.3f ms measured; largest correction: ", summary.layers,
                summary.profiled_ms);
  std::string out = "layer profile " + path + buf;
  std::snprintf(buf, sizeof buf, "' at %.2fx its MAC share)", summary.largest_change);
  return out + "layer '" + summary.largest_layer + buf;
}

}  // namespace tessera
