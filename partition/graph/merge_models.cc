#include "partition/graph/merge_models.h"

#include <cstdio>
#include <map>
#include <set>
#include <unordered_map>

namespace tessera {

namespace {

std::string AttrText(const AttrValue& v) {
  char buf[40];
  std::string out;
  if (const auto* i = std::get_if<int64_t>(&v)) return "i" + std::to_string(*i);
  if (const auto* d = std::get_if<double>(&v)) return (std::snprintf(buf, sizeof buf, "d%.17g", *d), buf);
  if (const auto* s = std::get_if<std::string>(&v)) return "s" + std::to_string(s->size()) + ":" + *s;
  if (const auto* is = std::get_if<std::vector<int64_t>>(&v)) {
    out = "I";
    for (int64_t x : *is) out += std::to_string(x) + ",";
    return out;
  }
  out = "D";
  for (double x : std::get<std::vector<double>>(v)) out += (std::snprintf(buf, sizeof buf, "%.17g,", x), buf);
  return out;
}

// What makes two layers the same computation, given their inputs already
// mapped into the merged graph (constants included: equal values share one id).
std::string LayerKey(const Node& n, const std::vector<int>& inputs) {
  std::string key = n.op + "|";
  for (const auto& [name, v] : n.attrs.all()) key += name + "=" + AttrText(v) + ";";
  key += "|";
  for (int v : inputs) key += std::to_string(v) + ",";
  key += "|" + std::to_string(n.outputs.size());
  return key;
}

class Merger {
 public:
  explicit Merger(MergeReport* report) : report_(report) {}

  Status Add(const Graph& m, const std::string& name) {
    MergedModel part;
    part.name = name;
    part.layers = static_cast<int>(m.nodes.size());
    std::vector<int> map(m.values.size(), -1);
    const std::string prefix = name + "/";
    for (size_t i = 0; i < m.inputs.size(); ++i) {
      const Value& v = m.values[m.inputs[i]];
      int id = -1;
      if (!first_ && i < first_inputs_.size() && out_.values[first_inputs_[i]].shape == v.shape) id = first_inputs_[i];
      if (id < 0) {
        id = out_.AddValue(prefix + v.name, v.shape);
        out_.inputs.push_back(id);
      }
      if (first_) first_inputs_.push_back(id);
      map[m.inputs[i]] = id;
      part.inputs.push_back(id);
    }
    for (const Node& n : m.nodes) {
      std::vector<int> inputs;
      for (int v : n.inputs) {
        if (v < 0) {
          inputs.push_back(-1);
          continue;
        }
        if (map[v] < 0 && m.values[v].constant) {
          const TensorData* data = m.ConstantData(v);
          if (data == nullptr || (data->values.empty() && NumElements(data->shape) > 0))
            return Status::InvalidArgument("merging models: model '" + name + "' constant '" + m.values[v].name +
                                           "' has no values (import the models with their weights)");
          map[v] = Constant(prefix + m.values[v].name, *data);
        }
        if (map[v] < 0)
          return Status::InvalidArgument("merging models: model '" + name + "' layer '" + n.name + "' reads '" +
                                         m.values[v].name + "', which nothing before it produces");
        inputs.push_back(map[v]);
      }
      const std::string key = LayerKey(n, inputs);
      auto same = layers_.find(key);
      // (Equal op, attributes and inputs give equal output shapes.)
      if (same != layers_.end()) {
        const Node& had = out_.nodes[same->second];
        for (size_t o = 0; o < n.outputs.size(); ++o) map[n.outputs[o]] = had.outputs[o];
        ++part.shared_layers;
        continue;
      }
      Node copy{prefix + n.name, n.op, inputs, {}, n.attrs};
      for (int o : n.outputs) {
        const int id = out_.AddValue(prefix + m.values[o].name, m.values[o].shape);
        map[o] = id;
        copy.outputs.push_back(id);
      }
      layers_[key] = out_.AddNode(std::move(copy));
    }
    for (int o : m.outputs) {
      int id = map[o];
      if (outputs_.count(id)) {
        // The whole path to this output is an earlier model's: a copy of
        // its own, so that every model keeps an output of its own.
        const int copy = out_.AddValue(prefix + m.values[o].name, out_.values[id].shape);
        out_.AddNode(Node{prefix + m.values[o].name + " (copy)", "Identity", {id}, {copy}, {}});
        id = copy;
      }
      outputs_.insert(id);
      out_.outputs.push_back(id);
      part.outputs.push_back(id);
    }
    report_->weight_values_before += m.WeightCount();
    report_->models.push_back(std::move(part));
    first_ = false;
    return Status::OK();
  }

  Graph Finish(std::string name) {
    out_.name = std::move(name);
    report_->weight_values_after = out_.WeightCount();
    return std::move(out_);
  }

 private:
  // The merged graph's constant with these values (one is made if none).
  int Constant(const std::string& name, const TensorData& data) {
    const std::string key =
        ShapeToString(data.shape) + "|" + std::to_string(DigestValues(data.values.data(), data.values.size()));
    for (int id : constants_[key])
      if (out_.constants.at(id).values == data.values) return id;
    const int id = out_.AddConstant(name, data);
    constants_[key].push_back(id);
    return id;
  }

  MergeReport* report_;
  Graph out_;
  bool first_ = true;
  std::vector<int> first_inputs_;
  std::unordered_map<std::string, int> layers_;  // LayerKey -> merged node
  std::unordered_map<std::string, std::vector<int>> constants_;
  std::set<int> outputs_;
};

}  // namespace

std::string MergeReport::Describe() const {
  std::string text;
  for (const MergedModel& m : models)
    text += "  " + m.name + ": " + std::to_string(m.layers) + " layers, " + std::to_string(m.shared_layers) +
            " shared with an earlier model; " + std::to_string(m.inputs.size()) + " input(s), " +
            std::to_string(m.outputs.size()) + " output(s)\n";
  char line[160];
  std::snprintf(
      line, sizeof line, "  weights: %lld values in the models, %lld merged (%.1f %% held once)\n",
      static_cast<long long>(weight_values_before), static_cast<long long>(weight_values_after),
      weight_values_before > 0 ? 100.0 * (weight_values_before - weight_values_after) / weight_values_before : 0.0);
  return text + line;
}

Result<Graph> MergeModels(const std::vector<Graph>& models, MergeReport* report) {
  if (models.empty()) return Status::InvalidArgument("merging models: no models");
  MergeReport local;
  if (report == nullptr) report = &local;
  *report = MergeReport();
  if (models.size() == 1) {
    MergedModel only{models[0].name, models[0].inputs, models[0].outputs, static_cast<int>(models[0].nodes.size()), 0};
    report->models.push_back(only);
    report->weight_values_before = report->weight_values_after = models[0].WeightCount();
    return models[0];
  }
  // Prefixes: the model names, made unique ("a", "a#2").
  std::map<std::string, int> seen;
  Merger merger(report);
  std::string name;
  for (const Graph& m : models) {
    std::string prefix = m.name.empty() ? "model" : m.name;
    if (++seen[prefix] > 1) prefix += "#" + std::to_string(seen[prefix]);
    TS_RETURN_IF_ERROR(merger.Add(m, prefix));
    name += (name.empty() ? "" : "+") + prefix;
  }
  Graph g = merger.Finish(name);
  for (const MergedModel& m : report->models) g.models.push_back({m.name, m.inputs, m.outputs});
  if (Status st = g.Validate(); !st.ok()) return st.WithContext("merging models");
  return g;
}

}  // namespace tessera
