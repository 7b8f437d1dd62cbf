// darknet .cfg/.weights importer (model_import.h: ImportDarknet).
//
// One Graph node per section after [net], in file order, named
// "<1-based layer index> <section>" ("3 convolutional"), so that node i+1 is
// darknet's layer i+1 and METHODS §1's layer count is the section count.
// Sections that darknet runs as no-ops at inference ([dropout], [cost], a
// one-input [route]) stay as Identity nodes for that reason.
//
// Semantics follow darknet's own forward pass at test time:
//  * [convolutional]  Conv; pad=1 means padding=size/2; BN folded as darknet
//    normalises: y = scale·(x − mean)/(sqrt(var) + 1e-6) + bias.
//  * [maxpool]        MaxPool; default padding = size−1, output
//    (w + padding − size)/stride + 1, windows start at −padding/2, so the
//    canonical pads are top/left = padding/2, bottom/right = padding − padding/2.
//  * [avgpool]        GlobalAveragePool (darknet's avgpool is global).
//  * [connected]      Gemm with a 2-D output [N, out]; a 4-D input is
//    flattened in NCHW order (attr flatten_input=1 on the node).
//  * [softmax]        Softmax axis=1 over a [N,C] or [N,C,1,1] input.
//  * [route]          Identity (one input) or Concat axis=1.
//  * [shortcut]       Add (+ fused activation, attr "activation"); between
//    different shapes DarknetShortcut (daemon/runtime/kernels/darknet_shortcut.cc).
//  * [reorg]          Reorg (daemon/runtime/kernels/reorg.cc has the index mapping).
//  * [region]/[yolo]  Region (daemon/runtime/kernels/region.cc has the entry layout);
//    [yolo] is Region with coords=4, softmax=0, num = number of mask entries;
//    [region] tree= (YOLO9000) reads the tree file into attr tree_groups.
//  * [detection]      Detection (YOLOv1; region.cc).
//  * activations      every one darknet defines (linear, logistic, relu, relie,
//    ramp, tanh, plse, leaky, elu, loggy, stair, hardtan, lhtan, selu) and
//    relu6, as a fused activation of the layer (graph.h).
//  * [upsample]       Resize nearest, scales [1,1,s,s].
//  * [crop]           DarknetCrop: centre crop, then x·2 − 1 unless noadjust.
//
// Weights: the .weights file when given (header, then per layer in file order:
// conv = biases, [BN scales, rolling mean, rolling variance], weights;
// connected = biases, weights, [BN ...]). Otherwise seeded random weights
// from a splitmix64 stream per layer (identical on every machine), He-scaled
// so activations stay O(1) through deep nets.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "partition/graph/graph.h"
#include "partition/import/model_import.h"
#include "util/limits.h"
#include "util/status.h"

namespace tessera {
namespace {

// ---------------------------------------------------------------- cfg text

struct CfgOption {
  std::string key;
  std::string value;
  int line = 0;
};

struct CfgSection {
  std::string type;  // as written, without brackets
  int line = 0;
  std::vector<CfgOption> options;
};

// darknet's reader (read_cfg): whitespace anywhere in a line is dropped,
// '#' and ';' start comment lines, "[x]" opens a section, "k=v" is an option.
// `path` names the text in errors.
Result<std::vector<CfgSection>> ParseCfgText(std::istream& in, const std::string& path) {
  std::vector<CfgSection> sections;
  std::string raw;
  int line_no = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    std::string line;
    for (char ch : raw)
      if (!std::isspace(static_cast<unsigned char>(ch))) line.push_back(ch);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line[0] == '[') {
      if (line.back() != ']' || line.size() < 3)
        return Status::InvalidArgument(path + ":" + std::to_string(line_no) + ": malformed section header '" + raw +
                                       "'");
      CfgSection s;
      s.type = line.substr(1, line.size() - 2);
      s.line = line_no;
      sections.push_back(std::move(s));
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string::npos || eq == 0)
      return Status::InvalidArgument(path + ":" + std::to_string(line_no) + ": expected 'key=value', found '" + raw +
                                     "'");
    if (sections.empty())
      return Status::InvalidArgument(path + ":" + std::to_string(line_no) + ": option '" + raw +
                                     "' appears before the first [section]");
    sections.back().options.push_back({line.substr(0, eq), line.substr(eq + 1), line_no});
  }
  if (in.bad()) return Status::IOError(path + ": read error");
  return sections;
}

Result<std::vector<CfgSection>> ReadCfgFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(path + ": cannot open darknet cfg file");
  return ParseCfgText(in, path);
}

// Typed, strict access to one section's options. Errors name file, line,
// section and darknet layer. darknet takes the first of repeated keys.
class SectionOptions {
 public:
  SectionOptions(const std::string& path, const CfgSection& section, int layer)
      : path_(path), section_(section), layer_(layer) {}

  bool Has(const std::string& key) const { return Find(key) != nullptr; }

  Result<int64_t> Int(const std::string& key, int64_t def) const {
    const CfgOption* o = Find(key);
    if (!o) return def;
    return ParseInt(*o, o->value);
  }
  Result<double> Float(const std::string& key, double def) const {
    const CfgOption* o = Find(key);
    if (!o) return def;
    return ParseFloat(*o, o->value);
  }
  std::string String(const std::string& key, const std::string& def) const {
    const CfgOption* o = Find(key);
    return o ? o->value : def;
  }
  // Comma-separated lists ("layers=-1,-4"); empty when absent.
  Result<std::vector<int64_t>> Ints(const std::string& key) const {
    std::vector<int64_t> out;
    const CfgOption* o = Find(key);
    if (!o) return out;
    for (const std::string& item : Split(o->value)) {
      TS_ASSIGN_OR_RETURN(int64_t v, ParseInt(*o, item));
      out.push_back(v);
    }
    return out;
  }
  Result<std::vector<double>> Floats(const std::string& key) const {
    std::vector<double> out;
    const CfgOption* o = Find(key);
    if (!o) return out;
    for (const std::string& item : Split(o->value)) {
      TS_ASSIGN_OR_RETURN(double v, ParseFloat(*o, item));
      out.push_back(v);
    }
    return out;
  }

  // "yolov2.cfg:27: [convolutional] (layer 1): "
  std::string Where(int line = 0) const {
    const std::string layer = layer_ > 0 ? " (layer " + std::to_string(layer_) + ")" : "";
    return path_ + ":" + std::to_string(line ? line : section_.line) + ": [" + section_.type + "]" + layer + ": ";
  }
  Status Invalid(const std::string& what) const { return Status::InvalidArgument(Where() + what); }
  Status Unsupported(const std::string& what) const { return Status::NotSupported(Where() + what); }

 private:
  const CfgOption* Find(const std::string& key) const {
    for (const CfgOption& o : section_.options)
      if (o.key == key) return &o;
    return nullptr;
  }
  static std::vector<std::string> Split(const std::string& s) {
    std::vector<std::string> items;
    std::string cur;
    for (char ch : s) {
      if (ch == ',') {
        items.push_back(cur);
        cur.clear();
      } else {
        cur.push_back(ch);
      }
    }
    if (!cur.empty() || items.empty()) items.push_back(cur);  // a trailing comma is tolerated
    return items;
  }
  Result<int64_t> ParseInt(const CfgOption& o, const std::string& text) const {
    int64_t v = 0;
    const char* b = text.data();
    const char* e = b + text.size();
    if (!text.empty() && *b == '+') ++b;
    auto [p, ec] = std::from_chars(b, e, v);
    if (ec != std::errc() || p != e || b == e)
      return Status::InvalidArgument(Where(o.line) + "option '" + o.key + "' = '" + o.value + "' is not an integer");
    // No darknet size, count or index comes near this; bounding every
    // integer here keeps the shape arithmetic after it from overflowing.
    if (v > kMaxTensorElements || v < -kMaxTensorElements)
      return Status::InvalidArgument(Where(o.line) + "option '" + o.key + "' = '" + o.value + "' is out of range (|" +
                                     o.key + "| <= " + std::to_string(kMaxTensorElements) + ", util/limits.h)");
    return v;
  }
  Result<double> ParseFloat(const CfgOption& o, const std::string& text) const {
    if (text.empty()) return Status::InvalidArgument(Where(o.line) + "option '" + o.key + "' has an empty value");
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (end != text.c_str() + text.size() || !std::isfinite(v))
      return Status::InvalidArgument(Where(o.line) + "option '" + o.key + "' = '" + o.value + "' is not a number");
    return v;
  }

  const std::string& path_;
  const CfgSection& section_;
  int layer_;
};

// darknet's section names (string_to_layer_type), aliases mapped to one name.
std::string CanonicalSectionType(const std::string& t) {
  if (t == "conv" || t == "convolutional") return "convolutional";
  if (t == "max" || t == "maxpool") return "maxpool";
  if (t == "avg" || t == "avgpool") return "avgpool";
  if (t == "conn" || t == "connected") return "connected";
  if (t == "soft" || t == "softmax") return "softmax";
  if (t == "net" || t == "network") return "net";
  if (t == "lrn" || t == "normalization") return "normalization";
  if (t == "deconv" || t == "deconvolutional") return "deconvolutional";
  return t;
}

bool IsKnownUnsupportedSection(const std::string& t) {
  static const char* const kKnown[] = {
      "normalization", "batchnorm",   "local",        "deconvolutional", "crnn",       "gru", "lstm",
      "rnn",           "iseg",        "l2norm",       "logistic",        "activation", "sam", "scale_channels",
      "gaussian_yolo", "contrastive", "implicit_add", "implicit_mul"};
  for (const char* k : kKnown)
    if (t == k) return true;
  return false;
}

// ---------------------------------------------------------------- weights

// splitmix64 (Steele, Lea, Flood 2014): tiny, fully specified, so generated
// weights are bit-identical everywhere.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t state) : state_(state) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1), from the top 24 bits (exact in float).
  float Symmetric() { return static_cast<float>(static_cast<int64_t>(Next() >> 40) - (1 << 23)) / float(1 << 23); }

 private:
  uint64_t state_;
};

// Raw parameters of a conv/connected layer in darknet's storage order.
struct LayerParameters {
  std::vector<float> biases;    // n (BN beta when batch-normalized)
  std::vector<float> scales;    // n, BN only
  std::vector<float> mean;      // n, BN only
  std::vector<float> variance;  // n, BN only
  std::vector<float> weights;   // conv: n × c/g × k × k; connected: out × in
};

// Source of layer parameters: a .weights file or the seeded generator.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // `fan_in` = inputs per output; `gain` = He gain of the layer's activation.
  virtual Status Conv(int layer, int64_t n, int64_t weights, bool bn, int64_t fan_in, float gain,
                      LayerParameters* p) = 0;
  virtual Status Connected(int layer, int64_t inputs, int64_t outputs, bool bn, float gain, LayerParameters* p) = 0;
  // A layer whose `floats` parameter values are not wanted
  // (ImportOptions::values_for_nodes): a file is read past them, a
  // generator makes none (its layers do not depend on each other).
  virtual Status Skip(int layer, int64_t floats) = 0;
  virtual bool generated() const = 0;
  virtual void Finish() {}
};

class DarknetWeightsFile final : public WeightSource {
 public:
  static Result<std::unique_ptr<DarknetWeightsFile>> Open(const std::string& path) {
    auto f = std::unique_ptr<DarknetWeightsFile>(new DarknetWeightsFile(path));
    f->in_.open(path, std::ios::binary);
    if (!f->in_) return Status::NotFound(path + ": cannot open darknet weights file");
    f->in_.seekg(0, std::ios::end);
    f->size_ = static_cast<int64_t>(f->in_.tellg());
    f->in_.seekg(0, std::ios::beg);
    int32_t header[3];
    TS_RETURN_IF_ERROR(f->ReadBytes(header, sizeof(header), "the header (major, minor, revision)"));
    const int32_t major = header[0], minor = header[1];
    // darknet (parser.c load_weights_upto): "seen" became a size_t in 0.2.
    if (major * 10 + minor >= 2 && major < 1000 && minor < 1000) {
      uint64_t seen = 0;
      TS_RETURN_IF_ERROR(f->ReadBytes(&seen, sizeof(seen), "the header ('seen', 64-bit)"));
    } else {
      int32_t seen = 0;
      TS_RETURN_IF_ERROR(f->ReadBytes(&seen, sizeof(seen), "the header ('seen', 32-bit)"));
    }
    // Files written by a transposed build store connected weights [in][out].
    f->transpose_ = major > 1000 || minor > 1000;
    spdlog::debug("{}: darknet weights version {}.{}.{}", path, major, minor, header[2]);
    return f;
  }

  Status Conv(int layer, int64_t n, int64_t weights, bool bn, int64_t, float, LayerParameters* p) override {
    const std::string who = "layer " + std::to_string(layer) + " (convolutional)";
    TS_RETURN_IF_ERROR(ReadFloats(&p->biases, n, who + " biases"));
    if (bn) TS_RETURN_IF_ERROR(ReadBatchNorm(n, who, p));
    return ReadFloats(&p->weights, weights, who + " weights");
  }

  Status Connected(int layer, int64_t inputs, int64_t outputs, bool bn, float, LayerParameters* p) override {
    const std::string who = "layer " + std::to_string(layer) + " (connected)";
    TS_RETURN_IF_ERROR(ReadFloats(&p->biases, outputs, who + " biases"));
    TS_RETURN_IF_ERROR(ReadFloats(&p->weights, inputs * outputs, who + " weights"));
    if (transpose_) {
      std::vector<float> t(p->weights.size());
      for (int64_t i = 0; i < inputs; ++i)
        for (int64_t o = 0; o < outputs; ++o) t[o * inputs + i] = p->weights[i * outputs + o];
      p->weights.swap(t);
    }
    if (bn) TS_RETURN_IF_ERROR(ReadBatchNorm(outputs, who, p));
    return Status::OK();
  }

  Status Skip(int layer, int64_t floats) override {
    const int64_t bytes = floats * static_cast<int64_t>(sizeof(float));
    TS_RETURN_IF_ERROR(CheckAvailable(bytes, "layer " + std::to_string(layer) + " parameters"));
    in_.seekg(bytes, std::ios::cur);
    if (!in_) return Status::IOError(path_ + ": seek error at offset " + std::to_string(offset_));
    offset_ += bytes;
    return Status::OK();
  }

  bool generated() const override { return false; }

  void Finish() override {
    const int64_t left = size_ - offset_;
    if (left > 0)
      spdlog::warn("{}: {} bytes after the last layer's weights were not used (does the cfg match?)", path_, left);
  }

 private:
  explicit DarknetWeightsFile(std::string path) : path_(std::move(path)) {}

  Status ReadBatchNorm(int64_t n, const std::string& who, LayerParameters* p) {
    TS_RETURN_IF_ERROR(ReadFloats(&p->scales, n, who + " batch-norm scales"));
    TS_RETURN_IF_ERROR(ReadFloats(&p->mean, n, who + " batch-norm rolling mean"));
    return ReadFloats(&p->variance, n, who + " batch-norm rolling variance");
  }
  Status ReadFloats(std::vector<float>* dst, int64_t n, const std::string& what) {
    dst->resize(static_cast<size_t>(n));
    return ReadBytes(dst->data(), static_cast<int64_t>(n * sizeof(float)), what);
  }
  Status CheckAvailable(int64_t bytes, const std::string& what) const {
    if (offset_ + bytes > size_)
      return Status::DataLoss(path_ + ": truncated darknet weights file: " + what + " need " + std::to_string(bytes) +
                              " bytes at offset " + std::to_string(offset_) + ", the file has " +
                              std::to_string(size_) + " (does the cfg match the weights?)");
    return Status::OK();
  }
  Status ReadBytes(void* dst, int64_t bytes, const std::string& what) {
    TS_RETURN_IF_ERROR(CheckAvailable(bytes, what));
    in_.read(static_cast<char*>(dst), bytes);
    if (!in_) return Status::IOError(path_ + ": read error at offset " + std::to_string(offset_));
    offset_ += bytes;
    return Status::OK();
  }

  std::string path_;
  std::ifstream in_;
  int64_t size_ = 0;
  int64_t offset_ = 0;
  bool transpose_ = false;
};

// Weights drawn from a per-layer splitmix64 stream keyed by (seed, layer), so
// one layer's weights do not depend on the others. Uniform weights with
// variance gain²/fan_in (He et al. 2015); BN statistics near identity.
class SeededWeights final : public WeightSource {
 public:
  explicit SeededWeights(uint64_t seed) : seed_(seed) {}

  Status Conv(int layer, int64_t n, int64_t weights, bool bn, int64_t fan_in, float gain, LayerParameters* p) override {
    Generate(layer, n, weights, bn, fan_in, gain, p);
    return Status::OK();
  }
  Status Connected(int layer, int64_t inputs, int64_t outputs, bool bn, float gain, LayerParameters* p) override {
    Generate(layer, outputs, inputs * outputs, bn, inputs, gain, p);
    return Status::OK();
  }
  Status Skip(int, int64_t) override { return Status::OK(); }
  bool generated() const override { return true; }

 private:
  void Generate(int layer, int64_t n, int64_t weights, bool bn, int64_t fan_in, float gain, LayerParameters* p) {
    SplitMix64 key(seed_);
    SplitMix64 rng(key.Next() ^ (0xD1B54A32D192ED03ull * static_cast<uint64_t>(layer)));
    // Uniform(-a, a) has variance a²/3.
    const float a = gain * std::sqrt(3.f / static_cast<float>(std::max<int64_t>(fan_in, 1)));
    p->weights.resize(static_cast<size_t>(weights));
    for (float& w : p->weights) w = a * rng.Symmetric();
    p->biases.resize(static_cast<size_t>(n));
    for (float& b : p->biases) b = 0.05f * rng.Symmetric();
    if (bn) {
      p->scales.resize(static_cast<size_t>(n));
      p->mean.resize(static_cast<size_t>(n));
      p->variance.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        p->scales[i] = 1.f + 0.1f * rng.Symmetric();
        p->mean[i] = 0.05f * rng.Symmetric();
        p->variance[i] = 1.f + 0.2f * rng.Symmetric();
      }
    }
  }
  uint64_t seed_;
};

// No values at all (ImportOptions::shapes_only): every parameter stays empty,
// so the graph has its weights' shapes and holds none of their bytes.
class ShapesOnlyWeights final : public WeightSource {
 public:
  Status Conv(int, int64_t, int64_t, bool, int64_t, float, LayerParameters*) override { return Status::OK(); }
  Status Connected(int, int64_t, int64_t, bool, float, LayerParameters*) override { return Status::OK(); }
  Status Skip(int, int64_t) override { return Status::OK(); }
  bool generated() const override { return true; }
};

// Folds darknet's inference BN into weights and bias (darknet normalize_cpu:
// (x − mean)/(sqrt(var) + .000001f), then scale, then bias).
void FoldBatchNorm(int64_t n, LayerParameters* p) {
  if (p->scales.empty()) return;
  const int64_t per_output = static_cast<int64_t>(p->weights.size()) / n;
  for (int64_t o = 0; o < n; ++o) {
    const float f = p->scales[o] / (std::sqrt(p->variance[o]) + .000001f);
    for (int64_t i = 0; i < per_output; ++i) p->weights[o * per_output + i] *= f;
    p->biases[o] -= p->mean[o] * f;
  }
}

// ---------------------------------------------------------------- graph building

// A darknet layer's output as the following sections see it.
struct LayerOutput {
  int value = -1;
  int64_t c = 0, h = 0, w = 0;
  bool flat = false;  // [N, c] (after [connected]) rather than [N, c, h, w]
};

struct Activation {
  std::string name;  // canonical fused name, "" = linear
  double alpha = 0, beta = 0;
  bool has_params = false;
  float he_gain = 1.f;
};

Result<Activation> ParseActivation(const SectionOptions& opts, const std::string& def) {
  const std::string a = opts.String("activation", def);
  Activation act;
  if (a == "linear") return act;
  if (a == "relu") {
    act.name = "relu";
    act.he_gain = std::sqrt(2.f);
  } else if (a == "leaky") {
    act.name = "leaky_relu";  // darknet leaky: x < 0 ? 0.1·x : x
    act.alpha = 0.1;
    act.has_params = true;
    act.he_gain = std::sqrt(2.f);
  } else if (a == "logistic") {
    act.name = "sigmoid";
  } else if (a == "tanh") {
    act.name = "tanh";
  } else if (a == "hardtan") {
    act.name = "clip";
    act.alpha = -1;
    act.beta = 1;
    act.has_params = true;
  } else if (a == "relu6") {
    act.name = "clip";
    act.alpha = 0;
    act.beta = 6;
    act.has_params = true;
    act.he_gain = std::sqrt(2.f);
  } else if (a == "relie") {
    act.name = "leaky_relu";  // darknet relie: x > 0 ? x : 0.01·x
    act.alpha = 0.01;
    act.has_params = true;
    act.he_gain = std::sqrt(2.f);
  } else if (a == "elu") {
    act.name = "elu";  // darknet elu: alpha 1
    act.alpha = 1;
    act.has_params = true;
  } else if (a == "selu") {
    act.name = "selu";  // darknet's rounded constants
    act.alpha = 1.6732;
    act.beta = 1.0507;
    act.has_params = true;
  } else if (a == "ramp" || a == "plse" || a == "loggy" || a == "stair" || a == "lhtan") {
    act.name = "darknet_" + a;  // formulas in daemon/runtime/kernels/fused_activation.cc
    if (a == "ramp") act.he_gain = std::sqrt(2.f);
  } else {
    return opts.Unsupported("activation '" + a +
                            "' is not supported (linear, logistic, relu, relie, ramp, tanh, plse, leaky, elu, loggy, "
                            "stair, hardtan, lhtan, selu, relu6)");
  }
  return act;
}

void SetActivation(const Activation& act, Attributes* attrs) {
  if (act.name.empty()) return;
  attrs->Set("activation", act.name);
  if (act.has_params) {
    attrs->Set("act_alpha", act.alpha);
    if (act.name == "clip" || act.name == "selu") attrs->Set("act_beta", act.beta);
  }
}

class DarknetGraphBuilder {
 public:
  DarknetGraphBuilder(const std::string& path, const ImportOptions& options, WeightSource* weights, Graph* graph)
      : path_(path), options_(options), weights_(weights), g_(*graph) {}

  Status Net(const CfgSection& net) {
    SectionOptions o(path_, net, 0);
    TS_ASSIGN_OR_RETURN(int64_t h, o.Int("height", 0));
    TS_ASSIGN_OR_RETURN(int64_t w, o.Int("width", 0));
    TS_ASSIGN_OR_RETURN(int64_t c, o.Int("channels", 0));
    int64_t n = options_.batch;
    auto it = options_.input_shapes.find("");
    if (it == options_.input_shapes.end()) it = options_.input_shapes.find("input");
    for (const auto& [name, shape] : options_.input_shapes)
      if (!name.empty() && name != "input")
        return Status::InvalidArgument(path_ + ": --input-shape names '" + name +
                                       "', but a darknet model has one input, 'input'");
    if (it != options_.input_shapes.end()) {
      const Shape& s = it->second;
      if (s.size() != 4 || std::any_of(s.begin(), s.end(), [](int64_t d) { return d <= 0; }))
        return Status::InvalidArgument(path_ + ": input shape " + ShapeToString(s) +
                                       " must be [batch, channels, height, width] with positive dims");
      if (c > 0 && s[1] != c)
        return Status::InvalidArgument(path_ + ": input shape " + ShapeToString(s) + " has " + std::to_string(s[1]) +
                                       " channels, the [net] section says " + std::to_string(c));
      n = s[0];
      c = s[1];
      h = s[2];
      w = s[3];
    }
    if (h <= 0 || w <= 0 || c <= 0)
      return o.Invalid("needs positive width, height and channels (tessera imports image models only)");
    if (n <= 0) return Status::InvalidArgument(path_ + ": batch must be positive");
    batch_ = n;
    LayerOutput in;
    TS_RETURN_IF_ERROR(CheckedElementCount({n, c, h, w}, path_ + ": the input").status());
    in.value = g_.AddValue("input", {n, c, h, w});
    in.c = c;
    in.h = h;
    in.w = w;
    g_.inputs.push_back(in.value);
    input_ = in;
    return Status::OK();
  }

  // Adds darknet layer `index` (1-based) for section `s`.
  Status Section(const CfgSection& s, int index) {
    const std::string type = CanonicalSectionType(s.type);
    SectionOptions o(path_, s, index);
    const LayerOutput& prev = layers_.empty() ? input_ : layers_.back();
    Node node;
    node.name = std::to_string(index) + " " + type;
    LayerOutput out;
    Status st;
    if (type == "convolutional") {
      st = Convolutional(o, prev, &node, &out);
    } else if (type == "maxpool") {
      st = MaxPool(o, prev, &node, &out);
    } else if (type == "avgpool") {
      st = AvgPool(o, prev, &node, &out);
    } else if (type == "connected") {
      st = Connected(o, prev, &node, &out);
    } else if (type == "dropout" || type == "cost") {
      // Inference no-ops in darknet (dropout scales only while training;
      // the network's output skips cost layers).
      node.op = "Identity";
      node.inputs = {prev.value};
      out = prev;
    } else if (type == "softmax") {
      st = Softmax(o, prev, &node, &out);
    } else if (type == "route") {
      st = Route(o, index, &node, &out);
    } else if (type == "shortcut") {
      st = Shortcut(o, index, prev, &node, &out);
    } else if (type == "reorg") {
      st = Reorg(o, prev, &node, &out);
    } else if (type == "region") {
      st = Region(o, prev, &node, &out);
    } else if (type == "yolo") {
      st = Yolo(o, prev, &node, &out);
    } else if (type == "detection") {
      st = Detection(o, prev, &node, &out);
    } else if (type == "upsample") {
      st = Upsample(o, prev, &node, &out);
    } else if (type == "crop") {
      st = Crop(o, prev, &node, &out);
    } else if (type == "net") {
      return o.Invalid("a second [net] section; [net] must be the first section and appear once");
    } else if (IsKnownUnsupportedSection(type)) {
      return o.Unsupported("darknet section [" + s.type +
                           "] is not supported (supported: convolutional, maxpool, avgpool, connected, dropout, "
                           "softmax, cost, route, shortcut, reorg, region, yolo, detection, upsample, crop)");
    } else {
      return o.Invalid("unknown section [" + s.type + "]");
    }
    TS_RETURN_IF_ERROR(st);
    const Shape shape = out.flat ? Shape{batch_, out.c} : Shape{batch_, out.c, out.h, out.w};
    TS_RETURN_IF_ERROR(CheckedElementCount(shape, o.Where() + "the output").status());
    out.value = g_.AddValue(node.name, shape);
    node.outputs = {out.value};
    g_.AddNode(std::move(node));
    layers_.push_back(out);
    return Status::OK();
  }

  // Graph outputs: every detection head (Region, Detection), and the last layer.
  void Finish() {
    for (const Node& n : g_.nodes)
      if (n.op == "Region" || n.op == "Detection") g_.outputs.push_back(n.outputs[0]);
    const int last = layers_.empty() ? input_.value : layers_.back().value;
    if (std::find(g_.outputs.begin(), g_.outputs.end(), last) == g_.outputs.end()) g_.outputs.push_back(last);
  }

 private:
  static Status Require4D(const SectionOptions& o, const LayerOutput& in) {
    if (in.flat)
      return o.Invalid("needs a [batch, channels, height, width] input, but its input is a flat [batch, " +
                       std::to_string(in.c) + "] vector (after [connected])");
    return Status::OK();
  }

  Status Convolutional(const SectionOptions& o, const LayerOutput& in, Node* node, LayerOutput* out) {
    TS_RETURN_IF_ERROR(Require4D(o, in));
    TS_ASSIGN_OR_RETURN(int64_t n, o.Int("filters", 1));
    TS_ASSIGN_OR_RETURN(int64_t size, o.Int("size", 1));
    TS_ASSIGN_OR_RETURN(int64_t stride, o.Int("stride", 1));
    TS_ASSIGN_OR_RETURN(int64_t pad, o.Int("pad", 0));
    TS_ASSIGN_OR_RETURN(int64_t padding, o.Int("padding", 0));
    TS_ASSIGN_OR_RETURN(int64_t groups, o.Int("groups", 1));
    TS_ASSIGN_OR_RETURN(int64_t dilation, o.Int("dilation", 1));
    TS_ASSIGN_OR_RETURN(int64_t bn, o.Int("batch_normalize", 0));
    for (const char* k : {"binary", "xnor", "flipped", "antialiasing", "deform"}) {
      TS_ASSIGN_OR_RETURN(int64_t v, o.Int(k, 0));
      if (v != 0) return o.Unsupported("option '" + std::string(k) + "' is not supported");
    }
    for (const char* k : {"stride_x", "stride_y"}) {
      TS_ASSIGN_OR_RETURN(int64_t v, o.Int(k, stride));
      if (v != stride) return o.Unsupported("option '" + std::string(k) + "' different from stride is not supported");
    }
    if (o.Has("share_index")) return o.Unsupported("option 'share_index' is not supported");
    if (n <= 0 || size <= 0 || stride <= 0 || groups <= 0 || dilation <= 0 || padding < 0)
      return o.Invalid("filters, size, stride, groups and dilation must be positive, padding non-negative");
    if (pad) padding = size / 2;
    if (in.c % groups != 0 || n % groups != 0)
      return o.Invalid("groups=" + std::to_string(groups) + " does not divide the " + std::to_string(in.c) +
                       " input channels and " + std::to_string(n) + " filters");
    TS_ASSIGN_OR_RETURN(Activation act, ParseActivation(o, "logistic"));
    const int64_t extent = dilation * (size - 1) + 1;
    if (in.h + 2 * padding < extent || in.w + 2 * padding < extent)
      return o.Invalid("kernel " + std::to_string(size) + "x" + std::to_string(size) + " does not fit the " +
                       std::to_string(in.h) + "x" + std::to_string(in.w) + " input");
    out->c = n;
    out->h = (in.h + 2 * padding - extent) / stride + 1;
    out->w = (in.w + 2 * padding - extent) / stride + 1;

    const int64_t cg = in.c / groups;
    // Checked before any weight is read or generated.
    TS_RETURN_IF_ERROR(CheckedElementCount({n, cg, size, size}, o.Where() + "the weights").status());
    TS_RETURN_IF_ERROR(CheckedElementCount({batch_, n, out->h, out->w}, o.Where() + "the output").status());
    LayerParameters p;
    if (WantsValues(*node))
      TS_RETURN_IF_ERROR(
          weights_->Conv(CurrentLayer(), n, n * cg * size * size, bn != 0, cg * size * size, act.he_gain, &p));
    else
      TS_RETURN_IF_ERROR(weights_->Skip(CurrentLayer(), n * (bn ? 4 : 1) + n * cg * size * size));
    FoldBatchNorm(n, &p);
    const int w_id = g_.AddConstant(node->name + ".weight", TensorData{{n, cg, size, size}, std::move(p.weights)});
    const int b_id = g_.AddConstant(node->name + ".bias", TensorData{{n}, std::move(p.biases)});
    node->op = "Conv";
    node->inputs = {in.value, w_id, b_id};
    node->attrs.Set("kernel_shape", std::vector<int64_t>{size, size});
    node->attrs.Set("strides", std::vector<int64_t>{stride, stride});
    node->attrs.Set("pads", std::vector<int64_t>{padding, padding, padding, padding});
    node->attrs.Set("dilations", std::vector<int64_t>{dilation, dilation});
    node->attrs.Set("group", groups);
    SetActivation(act, &node->attrs);
    return Status::OK();
  }

  Status MaxPool(const SectionOptions& o, const LayerOutput& in, Node* node, LayerOutput* out) {
    TS_RETURN_IF_ERROR(Require4D(o, in));
    TS_ASSIGN_OR_RETURN(int64_t stride, o.Int("stride", 1));
    TS_ASSIGN_OR_RETURN(int64_t size, o.Int("size", stride));
    TS_ASSIGN_OR_RETURN(int64_t padding, o.Int("padding", size - 1));
    if (o.Has("stride_x") || o.Has("stride_y") || o.Has("maxpool_depth"))
      return o.Unsupported("stride_x/stride_y/maxpool_depth are not supported");
    if (size <= 0 || stride <= 0 || padding < 0)
      return o.Invalid("size and stride must be positive, padding non-negative");
    if (in.h + padding < size || in.w + padding < size)
      return o.Invalid("window " + std::to_string(size) + " does not fit the " + std::to_string(in.h) + "x" +
                       std::to_string(in.w) + " input");
    // darknet make_maxpool_layer / forward_maxpool_layer (see top of file).
    out->c = in.c;
    out->h = (in.h + padding - size) / stride + 1;
    out->w = (in.w + padding - size) / stride + 1;
    const int64_t before = padding / 2, after = padding - padding / 2;
    node->op = "MaxPool";
    node->inputs = {in.value};
    node->attrs.Set("kernel_shape", std::vector<int64_t>{size, size});
    node->attrs.Set("strides", std::vector<int64_t>{stride, stride});
    node->attrs.Set("pads", std::vector<int64_t>{before, before, after, after});
    return Status::OK();
  }

  Status AvgPool(const SectionOptions& o, const LayerOutput& in, Node* node, LayerOutput* out) {
    TS_RETURN_IF_ERROR(Require4D(o, in));
    out->c = in.c;
    out->h = out->w = 1;
    node->op = "GlobalAveragePool";
    node->inputs = {in.value};
    return Status::OK();
  }

  Status Connected(const SectionOptions& o, const LayerOutput& in, Node* node, LayerOutput* out) {
    TS_ASSIGN_OR_RETURN(int64_t outputs, o.Int("output", 1));
    TS_ASSIGN_OR_RETURN(int64_t bn, o.Int("batch_normalize", 0));
    if (outputs <= 0) return o.Invalid("output must be positive");
    TS_ASSIGN_OR_RETURN(Activation act, ParseActivation(o, "logistic"));
    const int64_t inputs = in.flat ? in.c : in.c * in.h * in.w;
    TS_RETURN_IF_ERROR(CheckedElementCount({outputs, inputs}, o.Where() + "the weights").status());
    LayerParameters p;
    if (WantsValues(*node))
      TS_RETURN_IF_ERROR(weights_->Connected(CurrentLayer(), inputs, outputs, bn != 0, act.he_gain, &p));
    else
      TS_RETURN_IF_ERROR(weights_->Skip(CurrentLayer(), outputs * (bn ? 4 : 1) + inputs * outputs));
    FoldBatchNorm(outputs, &p);
    const int w_id = g_.AddConstant(node->name + ".weight", TensorData{{outputs, inputs}, std::move(p.weights)});
    const int b_id = g_.AddConstant(node->name + ".bias", TensorData{{outputs}, std::move(p.biases)});
    node->op = "Gemm";
    node->inputs = {in.value, w_id, b_id};
    // darknet reads the NCHW map as one vector of c·h·w values per image.
    if (!in.flat) node->attrs.Set("flatten_input", int64_t{1});
    SetActivation(act, &node->attrs);
    out->c = outputs;
    out->h = out->w = 1;
    out->flat = true;
    return Status::OK();
  }

  Status Softmax(const SectionOptions& o, const LayerOutput& in, Node* node, LayerOutput* out) {
    TS_ASSIGN_OR_RETURN(int64_t groups, o.Int("groups", 1));
    TS_ASSIGN_OR_RETURN(double temperature, o.Float("temperature", 1));
    if (groups != 1) return o.Unsupported("groups=" + std::to_string(groups) + " is not supported (only 1)");
    if (temperature != 1) return o.Unsupported("temperature other than 1 is not supported");
    if (o.Has("tree")) return o.Unsupported("hierarchical softmax (tree=) is not supported");
    // darknet normalises over all c·h·w inputs; that is a channel softmax
    // only when the map is 1x1.
    if (!in.flat && (in.h != 1 || in.w != 1))
      return o.Unsupported("softmax over a " + std::to_string(in.h) + "x" + std::to_string(in.w) +
                           " map (darknet normalises across all c·h·w values) is not supported; only 1x1 maps "
                           "and [connected] outputs");
    node->op = "Softmax";
    node->inputs = {in.value};
    node->attrs.Set("axis", int64_t{1});
    *out = in;
    return Status::OK();
  }

  // darknet layer references: negative = relative to this layer, otherwise
  // the 0-based index darknet prints. Returns the 0-based index.
  Result<int> ResolveLayer(const SectionOptions& o, const std::string& key, int64_t ref, int index) const {
    const int64_t self0 = index - 1;
    const int64_t target = ref < 0 ? self0 + ref : ref;
    if (target < 0 || target >= self0)
      return o.Invalid(key + " refers to layer " + std::to_string(ref) + ", which resolves to " +
                       (target < 0 ? "before the first layer"
                                   : "0-based layer " + std::to_string(target) + ", not an earlier layer") +
                       " (this is 0-based layer " + std::to_string(self0) + ")");
    return static_cast<int>(target);
  }

  Status Route(const SectionOptions& o, int index, Node* node, LayerOutput* out) {
    if (!o.Has("layers")) return o.Invalid("[route] needs 'layers='");
    TS_ASSIGN_OR_RETURN(std::vector<int64_t> refs, o.Ints("layers"));
    TS_ASSIGN_OR_RETURN(int64_t groups, o.Int("groups", 1));
    if (groups != 1) return o.Unsupported("groups/group_id are not supported");
    std::vector<const LayerOutput*> ins;
    for (int64_t r : refs) {
      TS_ASSIGN_OR_RETURN(int t, ResolveLayer(o, "layers", r, index));
      ins.push_back(&layers_[t]);
    }
    const LayerOutput& first = *ins[0];
    *out = first;
    for (size_t i = 1; i < ins.size(); ++i) {
      const LayerOutput& next = *ins[i];
      if (next.flat != first.flat || (!first.flat && (next.h != first.h || next.w != first.w)))
        return o.Invalid("layers " + std::to_string(refs[0]) + " and " + std::to_string(refs[i]) +
                         " have different spatial sizes (" + std::to_string(first.h) + "x" + std::to_string(first.w) +
                         " vs " + std::to_string(next.h) + "x" + std::to_string(next.w) +
                         "); route concatenates channels");
      out->c += next.c;
    }
    for (const LayerOutput* l : ins) node->inputs.push_back(l->value);
    if (ins.size() == 1) {
      node->op = "Identity";
    } else {
      node->op = "Concat";
      node->attrs.Set("axis", int64_t{1});
    }
    return Status::OK();
  }

  Status Shortcut(const SectionOptions& o, int index, const LayerOutput& in, Node* node, LayerOutput* out) {
    if (!o.Has("from")) return o.Invalid("[shortcut] needs 'from='");
    TS_ASSIGN_OR_RETURN(std::vector<int64_t> refs, o.Ints("from"));
    if (refs.size() != 1) return o.Unsupported("a shortcut from several layers is not supported");
    TS_ASSIGN_OR_RETURN(int from, ResolveLayer(o, "from", refs[0], index));
    TS_ASSIGN_OR_RETURN(double alpha, o.Float("alpha", 1));
    TS_ASSIGN_OR_RETURN(double beta, o.Float("beta", 1));
    if (alpha != 1 || beta != 1) return o.Unsupported("alpha/beta other than 1 are not supported");
    if (o.Has("weights_type") && o.String("weights_type", "none") != "none")
      return o.Unsupported("weighted shortcuts are not supported");
    TS_ASSIGN_OR_RETURN(Activation act, ParseActivation(o, "linear"));
    const LayerOutput& other = layers_[from];
    if (in.flat || other.flat) return o.Invalid("shortcut needs [batch, channels, height, width] inputs");
    // Generated weights: damp the residual branch's last conv so the sum's
    // variance grows by (1 + 0.2²) per block rather than doubling.
    if (weights_->generated()) DampResidualBranch(in.value);
    node->inputs = {in.value, other.value};
    SetActivation(act, &node->attrs);
    *out = in;
    if (other.c == in.c && other.h == in.h && other.w == in.w) {
      node->op = "Add";
      return Status::OK();
    }
    // darknet shortcut_cpu between different shapes (ResNet projections):
    // the earlier layer is subsampled or spread by the integer ratio of the
    // widths and only the common channels are added; the output keeps the
    // shape of the previous layer. daemon/runtime/kernels/darknet_shortcut.cc.
    // darknet asserts these ratios agree between height and width.
    if (other.w / in.w != other.h / in.h || in.w / other.w != in.h / other.h)
      return o.Invalid("shortcut from layer " + std::to_string(refs[0]) + " (" + std::to_string(other.h) + "x" +
                       std::to_string(other.w) + ") to a " + std::to_string(in.h) + "x" + std::to_string(in.w) +
                       " map: height and width scale differently");
    node->op = "DarknetShortcut";
    return Status::OK();
  }

  bool WantsValues(const Node& node) const {
    return !options_.values_for_nodes || options_.values_for_nodes->count(node.name) != 0;
  }

  void DampResidualBranch(int value) {
    const int producer = g_.values[value].producer;
    if (producer < 0) return;
    Node& n = g_.nodes[producer];
    if (n.op != "Conv" && n.op != "Gemm") return;
    const std::string act = n.attrs.String("activation", "");
    if (!(act.empty() || act == "relu" || act == "leaky_relu")) return;  // positively homogeneous only
    for (size_t i = 1; i < n.inputs.size(); ++i) {
      auto it = g_.constants.find(n.inputs[i]);
      if (it == g_.constants.end()) continue;
      for (float& v : it->second.values) v *= 0.2f;
    }
  }

  Status Reorg(const SectionOptions& o, const LayerOutput& in, Node* node, LayerOutput* out) {
    TS_RETURN_IF_ERROR(Require4D(o, in));
    TS_ASSIGN_OR_RETURN(int64_t stride, o.Int("stride", 1));
    TS_ASSIGN_OR_RETURN(int64_t reverse, o.Int("reverse", 0));
    TS_ASSIGN_OR_RETURN(int64_t flatten, o.Int("flatten", 0));
    TS_ASSIGN_OR_RETURN(int64_t extra, o.Int("extra", 0));
    if (flatten || extra) return o.Unsupported("reorg with flatten= or extra= is not supported");
    if (stride <= 0) return o.Invalid("stride must be positive");
    const int64_t s2 = stride * stride;
    if (reverse) {
      if (in.c % s2 != 0)
        return o.Invalid("reverse reorg needs channels (" + std::to_string(in.c) + ") divisible by stride²");
      out->c = in.c / s2;
      out->h = in.h * stride;
      out->w = in.w * stride;
    } else {
      // darknet's reorg_cpu reads the input as [c/stride², h·stride, w·stride]
      // and needs both divisions exact to stay inside the buffer.
      if (in.h % stride != 0 || in.w % stride != 0 || in.c % s2 != 0)
        return o.Invalid("reorg stride " + std::to_string(stride) +
                         " needs height and width divisible by it and "
                         "channels divisible by its square; input is " +
                         std::to_string(in.c) + "x" + std::to_string(in.h) + "x" + std::to_string(in.w));
      out->c = in.c * s2;
      out->h = in.h / stride;
      out->w = in.w / stride;
    }
    node->op = "Reorg";
    node->inputs = {in.value};
    node->attrs.Set("stride", stride);
    node->attrs.Set("reverse", reverse ? int64_t{1} : int64_t{0});
    return Status::OK();
  }

  Status Region(const SectionOptions& o, const LayerOutput& in, Node* node, LayerOutput* out) {
    TS_RETURN_IF_ERROR(Require4D(o, in));
    TS_ASSIGN_OR_RETURN(int64_t coords, o.Int("coords", 4));
    TS_ASSIGN_OR_RETURN(int64_t classes, o.Int("classes", 20));
    TS_ASSIGN_OR_RETURN(int64_t num, o.Int("num", 1));
    TS_ASSIGN_OR_RETURN(int64_t softmax, o.Int("softmax", 0));
    TS_ASSIGN_OR_RETURN(int64_t background, o.Int("background", 0));
    TS_ASSIGN_OR_RETURN(std::vector<double> anchors, o.Floats("anchors"));
    if (coords < 0 || classes < 0 || num <= 0) return o.Invalid("coords, classes must be >= 0 and num > 0");
    std::vector<int64_t> tree_groups;
    if (o.Has("tree")) {
      TS_ASSIGN_OR_RETURN(tree_groups, ReadTreeGroups(o, o.String("tree", "")));
      int64_t total = 0;
      for (int64_t n : tree_groups) total += n;
      if (total != classes)
        return o.Invalid("tree file lists " + std::to_string(total) +
                         " classes, the section says classes=" + std::to_string(classes));
    }
    if (in.c != num * (coords + classes + 1))
      return o.Invalid("input has " + std::to_string(in.c) + " channels, region needs num·(coords+classes+1) = " +
                       std::to_string(num * (coords + classes + 1)));
    node->op = "Region";
    node->inputs = {in.value};
    node->attrs.Set("num", num);
    node->attrs.Set("classes", classes);
    node->attrs.Set("coords", coords);
    node->attrs.Set("softmax", softmax ? int64_t{1} : int64_t{0});
    node->attrs.Set("background", background ? int64_t{1} : int64_t{0});
    if (!anchors.empty()) node->attrs.Set("anchors", anchors);
    if (!tree_groups.empty()) node->attrs.Set("tree_groups", tree_groups);
    *out = in;
    return Status::OK();
  }

  // darknet's tree file (tree=, e.g. 9k.tree): one class per line, "<name>
  // <parent index>" (−1 for a root). Consecutive lines with the same parent
  // form one softmax group, as darknet's read_tree groups them; returns the
  // group sizes in file order. A relative path is tried against the cfg's
  // folder, then the working directory (darknet's own).
  Result<std::vector<int64_t>> ReadTreeGroups(const SectionOptions& o, const std::string& name) const {
    namespace fs = std::filesystem;
    fs::path path = name;
    if (path.is_relative()) {
      const fs::path beside = fs::path(path_).parent_path() / path;
      if (fs::exists(beside)) path = beside;
    }
    std::ifstream in(path);
    if (!in) return o.Invalid("cannot open tree file '" + name + "' (tree=; looked at " + path.string() + ")");
    std::vector<int64_t> groups;
    std::string line;
    int64_t last_parent = -1;
    for (int line_no = 1; std::getline(in, line); ++line_no) {
      std::istringstream fields(line);
      std::string label;
      int64_t parent = 0;
      if (!(fields >> label)) continue;
      if (!(fields >> parent) || parent < -1)
        return o.Invalid("tree file " + path.string() + ":" + std::to_string(line_no) +
                         ": expected '<name> <parent index>' with parent -1 or a line index");
      if (groups.empty() || parent != last_parent) groups.push_back(0);
      ++groups.back();
      last_parent = parent;
    }
    if (groups.empty()) return o.Invalid("tree file " + path.string() + " lists no classes");
    return groups;
  }

  // darknet [detection] (YOLOv1): at inference its output is its input,
  // with a softmax over the class scores of each cell when softmax=1. The
  // input is read flat: side²·classes class scores (per cell), then
  // side²·num confidences, then side²·num·coords box values.
  Status Detection(const SectionOptions& o, const LayerOutput& in, Node* node, LayerOutput* out) {
    TS_ASSIGN_OR_RETURN(int64_t classes, o.Int("classes", 1));
    TS_ASSIGN_OR_RETURN(int64_t coords, o.Int("coords", 1));
    TS_ASSIGN_OR_RETURN(int64_t num, o.Int("num", 1));
    TS_ASSIGN_OR_RETURN(int64_t side, o.Int("side", 7));
    TS_ASSIGN_OR_RETURN(int64_t softmax, o.Int("softmax", 0));
    if (classes < 0 || coords < 0 || num <= 0 || side <= 0)
      return o.Invalid("classes and coords must be >= 0, num and side > 0");
    const int64_t inputs = in.c * (in.flat ? 1 : in.h * in.w);
    const int64_t want = side * side * ((1 + coords) * num + classes);
    if (inputs != want)
      return o.Invalid("input has " + std::to_string(inputs) + " values per image, detection needs side²·((1 + " +
                       "coords)·num + classes) = " + std::to_string(want));
    node->op = "Detection";
    node->inputs = {in.value};
    node->attrs.Set("classes", classes);
    node->attrs.Set("coords", coords);
    node->attrs.Set("num", num);
    node->attrs.Set("side", side);
    node->attrs.Set("softmax", softmax ? int64_t{1} : int64_t{0});
    *out = in;
    return Status::OK();
  }

  // darknet forward_yolo_layer: logistic on x, y, objectness and every class
  // score of each anchor = Region with coords=4 and no softmax.
  Status Yolo(const SectionOptions& o, const LayerOutput& in, Node* node, LayerOutput* out) {
    TS_RETURN_IF_ERROR(Require4D(o, in));
    TS_ASSIGN_OR_RETURN(int64_t classes, o.Int("classes", 20));
    TS_ASSIGN_OR_RETURN(int64_t total, o.Int("num", 1));
    TS_ASSIGN_OR_RETURN(std::vector<int64_t> mask, o.Ints("mask"));
    TS_ASSIGN_OR_RETURN(std::vector<double> anchors, o.Floats("anchors"));
    TS_ASSIGN_OR_RETURN(double scale_xy, o.Float("scale_x_y", 1));
    TS_ASSIGN_OR_RETURN(int64_t new_coords, o.Int("new_coords", 0));
    if (scale_xy != 1 || new_coords != 0) return o.Unsupported("scale_x_y and new_coords are not supported");
    const int64_t num = mask.empty() ? total : static_cast<int64_t>(mask.size());
    if (classes < 0 || num <= 0) return o.Invalid("classes must be >= 0 and num > 0");
    if (in.c != num * (classes + 5))
      return o.Invalid("input has " + std::to_string(in.c) +
                       " channels, yolo needs anchors·(classes+5) = " + std::to_string(num * (classes + 5)));
    node->op = "Region";
    node->inputs = {in.value};
    node->attrs.Set("num", num);
    node->attrs.Set("classes", classes);
    node->attrs.Set("coords", int64_t{4});
    node->attrs.Set("softmax", int64_t{0});
    node->attrs.Set("background", int64_t{0});
    node->attrs.Set("darknet_layer", std::string("yolo"));
    if (!mask.empty()) node->attrs.Set("mask", mask);
    if (!anchors.empty()) node->attrs.Set("anchors", anchors);
    *out = in;
    return Status::OK();
  }

  Status Upsample(const SectionOptions& o, const LayerOutput& in, Node* node, LayerOutput* out) {
    TS_RETURN_IF_ERROR(Require4D(o, in));
    TS_ASSIGN_OR_RETURN(int64_t stride, o.Int("stride", 2));
    TS_ASSIGN_OR_RETURN(double scale, o.Float("scale", 1));
    if (stride <= 0) return o.Unsupported("stride must be positive (downsampling upsample is not supported)");
    if (scale != 1) return o.Unsupported("scale other than 1 is not supported");
    out->c = in.c;
    out->h = in.h * stride;
    out->w = in.w * stride;
    // darknet upsample_cpu: out(y, x) = in(y / s, x / s).
    node->op = "Resize";
    node->inputs = {in.value};
    node->attrs.Set("mode", std::string("nearest"));
    node->attrs.Set("coordinate_transformation_mode", std::string("asymmetric"));
    node->attrs.Set("nearest_mode", std::string("floor"));
    const double s = static_cast<double>(stride);
    node->attrs.Set("scales", std::vector<double>{1.0, 1.0, s, s});
    return Status::OK();
  }

  Status Crop(const SectionOptions& o, const LayerOutput& in, Node* node, LayerOutput* out) {
    TS_RETURN_IF_ERROR(Require4D(o, in));
    TS_ASSIGN_OR_RETURN(int64_t ch, o.Int("crop_height", 1));
    TS_ASSIGN_OR_RETURN(int64_t cw, o.Int("crop_width", 1));
    TS_ASSIGN_OR_RETURN(int64_t noadjust, o.Int("noadjust", 0));
    if (ch <= 0 || cw <= 0 || ch > in.h || cw > in.w)
      return o.Invalid("crop " + std::to_string(ch) + "x" + std::to_string(cw) + " does not fit the " +
                       std::to_string(in.h) + "x" + std::to_string(in.w) + " input");
    // darknet forward_crop_layer at test time: centred window, no flip, and
    // the input mapped from [0,1] to [-1,1] unless noadjust.
    node->op = "DarknetCrop";
    node->inputs = {in.value};
    node->attrs.Set("crop_height", ch);
    node->attrs.Set("crop_width", cw);
    node->attrs.Set("offset_h", (in.h - ch) / 2);
    node->attrs.Set("offset_w", (in.w - cw) / 2);
    node->attrs.Set("scale", noadjust ? 1.0 : 2.0);
    node->attrs.Set("shift", noadjust ? 0.0 : -1.0);
    out->c = in.c;
    out->h = ch;
    out->w = cw;
    return Status::OK();
  }

  // The 1-based darknet layer index of the node being built.
  int CurrentLayer() const { return static_cast<int>(layers_.size()) + 1; }

  const std::string& path_;
  const ImportOptions& options_;
  WeightSource* weights_;
  Graph& g_;
  int64_t batch_ = 1;
  LayerOutput input_;
  std::vector<LayerOutput> layers_;  // 0-based darknet index
};

}  // namespace

namespace {

Result<Graph> ImportDarknetSections(std::vector<CfgSection> sections, const std::string& cfg_path,
                                    const ImportOptions& options) {
  if (sections.empty() || CanonicalSectionType(sections[0].type) != "net")
    return Status::InvalidArgument(cfg_path + ":" + std::to_string(sections.empty() ? 1 : sections[0].line) +
                                   ": the first section must be [net] or [network]");
  if (sections.size() == 1) return Status::InvalidArgument(cfg_path + ": no layers after [net]");

  std::unique_ptr<WeightSource> weights;
  if (options.shapes_only) {
    weights = std::make_unique<ShapesOnlyWeights>();
  } else if (!options.weights_path.empty()) {
    TS_ASSIGN_OR_RETURN(weights, DarknetWeightsFile::Open(options.weights_path));
  } else {
    weights = std::make_unique<SeededWeights>(options.seed);
  }

  Graph graph;
  graph.name = std::filesystem::path(cfg_path).stem().string();
  DarknetGraphBuilder builder(cfg_path, options, weights.get(), &graph);
  TS_RETURN_IF_ERROR(builder.Net(sections[0]));
  for (size_t i = 1; i < sections.size(); ++i) TS_RETURN_IF_ERROR(builder.Section(sections[i], static_cast<int>(i)));
  builder.Finish();
  weights->Finish();
  TS_RETURN_IF_ERROR(graph.Validate().WithContext(cfg_path + ": "));
  spdlog::debug("{}: {} darknet layers, {} weights ({})", cfg_path, graph.nodes.size(), graph.WeightCount(),
                weights->generated() ? "seeded" : options.weights_path);
  return graph;
}

}  // namespace

Result<Graph> ImportDarknet(const std::string& cfg_path, const ImportOptions& options) {
  TS_ASSIGN_OR_RETURN(std::vector<CfgSection> sections, ReadCfgFile(cfg_path));
  return ImportDarknetSections(std::move(sections), cfg_path, options);
}

Result<Graph> ImportDarknetText(const std::string& cfg_text, const std::string& origin, const ImportOptions& options) {
  std::istringstream in(cfg_text);
  TS_ASSIGN_OR_RETURN(std::vector<CfgSection> sections, ParseCfgText(in, origin));
  return ImportDarknetSections(std::move(sections), origin, options);
}

}  // namespace tessera
