#include "planner/layer_profile.h"

#include <algorithm>
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

// Each layer's time in the profile at `path`, in the model's layer order.
Result<std::vector<double>> LayerTimes(const std::string& path, const std::vector<LayerFigures>* layers) {
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
  return ms;
}
}  // namespace

Result<LayerProfileSummary> ApplyLayerProfile(const std::string& path, std::vector<LayerFigures>* layers) {
  TS_ASSIGN_OR_RETURN(std::vector<double> ms, LayerTimes(path, layers));
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
    f.profile_ms = ms[j];
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

Result<TileProfileSummary> ApplyTileProfile(const std::string& path, std::vector<LayerFigures>* layers) {
  std::ifstream in(path);
  if (!in) return Status::IOError("cannot read tile profile " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  const std::string how = "write one with `tessera run MODEL --plan PLAN --profile --json > FILE`";
  if (j.is_discarded() || !j.is_object()) return Status::InvalidArgument(path + " is not JSON; " + how);
  if (!j.contains("tile_profile") || !j["tile_profile"].is_array())
    return Status::InvalidArgument(path + " has no \"tile_profile\" array; " + how);
  // Per layer and tile height, the factors measured (one per device that
  // computed such a tile): their median is kept.
  std::map<int, std::map<int64_t, std::vector<double>>> seen;
  // The same for FDT channel slices, output channels [0] and input channels [1].
  std::map<int, std::map<int64_t, std::vector<double>>> slices[2];
  const nlohmann::json& entries = j["tile_profile"];
  for (size_t k = 0; k < entries.size(); ++k) {
    const nlohmann::json& e = entries[k];
    const std::string at = path + ": tile_profile entry " + std::to_string(k);
    auto number = [&](const char* key) { return e.is_object() && e.contains(key) && e[key].is_number(); };
    if (e.is_object() && e.contains("axis")) {
      const bool out_axis = e["axis"] == "out_channels";
      if (!out_axis && e["axis"] != "in_channels")
        return Status::InvalidArgument(at + ": axis " + e["axis"].dump() + " is not out_channels or in_channels");
      if (!number("index") || !number("channels") || !number("layer_channels") || !number("ms") ||
          !number("layer_ms") || !e.contains("node") || !e["node"].is_string())
        return Status::InvalidArgument(at +
                                       " (a channel slice) needs \"index\", \"node\", \"channels\", "
                                       "\"layer_channels\", \"ms\" and \"layer_ms\"");
      const int64_t index = e["index"].get<int64_t>(), channels = e["channels"].get<int64_t>(),
                    layer_channels = e["layer_channels"].get<int64_t>();
      const double ms = e["ms"].get<double>(), layer_ms = e["layer_ms"].get<double>();
      if (index < 1 || index > static_cast<int64_t>(layers->size()))
        return Status::InvalidArgument(at + ": layer index " + std::to_string(index) + " is not one of the model's " +
                                       std::to_string(layers->size()) + " layers");
      const LayerFigures& f = (*layers)[index - 1];
      const Shape* shape = out_axis ? &f.output_shape : (f.input_shapes.empty() ? nullptr : &f.input_shapes[0]);
      const int64_t model_channels = shape != nullptr && shape->size() == 4 ? (*shape)[1] : 0;
      if (f.name != e["node"].get<std::string>() || model_channels != layer_channels)
        return Status::InvalidArgument(at + ": layer " + std::to_string(index) + " is '" +
                                       e["node"].get<std::string>() + "' with " + std::to_string(layer_channels) + " " +
                                       e["axis"].get<std::string>() + " in the profile, '" + f.name + "' with " +
                                       std::to_string(model_channels) +
                                       " in the model; was it measured on this model at this input shape?");
      if (channels < 1 || channels > layer_channels || !std::isfinite(ms) || ms < 0 || !std::isfinite(layer_ms) ||
          layer_ms < 0)
        return Status::InvalidArgument(at + ": " + std::to_string(channels) + " of " + std::to_string(layer_channels) +
                                       " channels in " + e["ms"].dump() + " ms (layer " + e["layer_ms"].dump() +
                                       " ms): channels within the layer, times finite and not negative");
      if (channels == layer_channels || layer_ms < 0.1) continue;
      slices[out_axis ? 0 : 1][static_cast<int>(index)][channels].push_back(
          ms / (layer_ms * static_cast<double>(channels) / static_cast<double>(layer_channels)));
      continue;
    }
    if (!number("index") || !number("rows") || !number("layer_rows") || !number("ms") || !number("layer_ms") ||
        !e.contains("node") || !e["node"].is_string())
      return Status::InvalidArgument(at +
                                     " needs \"index\", \"node\", \"rows\", \"layer_rows\", \"ms\" and "
                                     "\"layer_ms\"");
    const int64_t index = e["index"].get<int64_t>(), rows = e["rows"].get<int64_t>(),
                  layer_rows = e["layer_rows"].get<int64_t>();
    const double ms = e["ms"].get<double>(), layer_ms = e["layer_ms"].get<double>();
    if (index < 1 || index > static_cast<int64_t>(layers->size()))
      return Status::InvalidArgument(at + ": layer index " + std::to_string(index) + " is not one of the model's " +
                                     std::to_string(layers->size()) + " layers");
    const LayerFigures& f = (*layers)[index - 1];
    if (f.name != e["node"].get<std::string>() || f.output_shape.size() != 4 || f.output_shape[2] != layer_rows)
      return Status::InvalidArgument(at + ": layer " + std::to_string(index) + " is '" + e["node"].get<std::string>() +
                                     "' with " + std::to_string(layer_rows) + " output rows in the profile, '" +
                                     f.name + "' with " +
                                     std::to_string(f.output_shape.size() == 4 ? f.output_shape[2] : int64_t{0}) +
                                     " in the model; was it measured on this model at this input shape?");
    if (rows < 1 || rows > layer_rows || !std::isfinite(ms) || ms < 0 || !std::isfinite(layer_ms) || layer_ms < 0)
      return Status::InvalidArgument(at + ": " + std::to_string(rows) + " of " + std::to_string(layer_rows) +
                                     " rows in " + e["ms"].dump() + " ms (layer " + e["layer_ms"].dump() +
                                     " ms): rows within the layer, times finite and not negative");
    // A layer too fast to time well (under 0.1 ms whole: a few clock reads
    // and cache misses are a large part of its tiles) says nothing about tiles.
    if (rows == layer_rows || layer_ms < 0.1) continue;
    seen[static_cast<int>(index)][rows].push_back(ms / (layer_ms * static_cast<double>(rows) / layer_rows));
  }
  TileProfileSummary summary;
  for (auto& [index, by_rows] : seen) {
    LayerFigures& f = (*layers)[index - 1];
    f.tile_time_factor.clear();
    for (auto& [rows, factors] : by_rows) {
      std::sort(factors.begin(), factors.end());
      const double median = factors[factors.size() / 2];
      f.tile_time_factor.push_back({rows, median});
      ++summary.tiles;
      if (median > summary.largest_factor) {
        summary.largest_factor = median;
        summary.largest_layer = f.name;
        summary.largest_rows = rows;
      }
    }
    ++summary.layers;
  }
  for (int axis = 0; axis < 2; ++axis)
    for (auto& [index, by_channels] : slices[axis]) {
      LayerFigures& f = (*layers)[index - 1];
      auto& table = axis == 0 ? f.out_slice_time_factor : f.in_slice_time_factor;
      table.clear();
      for (auto& [channels, factors] : by_channels) {
        std::sort(factors.begin(), factors.end());
        table.push_back({channels, factors[factors.size() / 2]});
        ++summary.slices;
        if (factors[factors.size() / 2] > summary.largest_slice_factor) {
          summary.largest_slice_factor = factors[factors.size() / 2];
          summary.largest_slice_layer = f.name;
        }
      }
    }
  return summary;
}

std::string DescribeTileProfile(const std::string& path, const TileProfileSummary& s) {
  char buf[200];
  std::snprintf(buf, sizeof buf, " (%d tile heights of %d layers; largest: %lld rows of '", s.tiles, s.layers,
                static_cast<long long>(s.largest_rows));
  std::string out = "tile profile " + path + buf + s.largest_layer;
  std::snprintf(buf, sizeof buf, "' at %.2fx their share of the layer", s.largest_factor);
  out += buf;
  if (s.slices > 0) {
    std::snprintf(buf, sizeof buf, "; %d FDT channel slices, largest '", s.slices);
    out += buf + s.largest_slice_layer;
    std::snprintf(buf, sizeof buf, "' at %.2fx", s.largest_slice_factor);
    out += buf;
  }
  return out + ")";
}

Result<CompactProfileSummary> ApplyCompactProfile(const std::string& path, std::vector<LayerFigures>* layers) {
  for (const LayerFigures& f : *layers)
    if (f.profile_ms < 0)
      return Status::InvalidArgument("a compact profile (" + path +
                                     ") is priced against the layer profile of the same machine: give "
                                     "--layer-profile too (tessera run MODEL --profile --json)");
  TS_ASSIGN_OR_RETURN(std::vector<double> ms, LayerTimes(path, layers));
  CompactProfileSummary summary;
  for (size_t j = 0; j < layers->size(); ++j) {
    LayerFigures& f = (*layers)[j];
    // Only convs store their weights differently; a layer the layer profile
    // timed at 0 ms has no ratio.
    if (f.op != "Conv" || !(f.profile_ms > 0)) continue;
    f.compact_time_factor = ms[j] / f.profile_ms;
    ++summary.convs;
    if (f.compact_time_factor > summary.largest_factor) {
      summary.largest_factor = f.compact_time_factor;
      summary.largest_layer = f.name;
    }
  }
  return summary;
}

std::string DescribeCompactProfile(const std::string& path, const CompactProfileSummary& s) {
  char buf[160];
  std::snprintf(buf, sizeof buf, " (%d convs; largest: '", s.convs);
  std::string out = "compact profile " + path + buf + s.largest_layer;
  std::snprintf(buf, sizeof buf, "' at %.2fx without Winograd)", s.largest_factor);
  return out + buf;
}

Result<std::string> ApplyProfiles(const std::string& layer_profile, const std::string& tile_profile,
                                  std::vector<LayerFigures>* layers, const std::string& compact_profile) {
  std::string time_model;
  if (!layer_profile.empty()) {
    TS_ASSIGN_OR_RETURN(LayerProfileSummary profiled, ApplyLayerProfile(layer_profile, layers));
    time_model = DescribeLayerProfile(layer_profile, profiled);
  }
  if (!tile_profile.empty()) {
    TS_ASSIGN_OR_RETURN(TileProfileSummary tiles, ApplyTileProfile(tile_profile, layers));
    time_model += (time_model.empty() ? "" : "; ") + DescribeTileProfile(tile_profile, tiles);
  }
  if (!compact_profile.empty()) {
    TS_ASSIGN_OR_RETURN(CompactProfileSummary compact, ApplyCompactProfile(compact_profile, layers));
    time_model += (time_model.empty() ? "" : "; ") + DescribeCompactProfile(compact_profile, compact);
  }
  return time_model;
}

}  // namespace tessera
