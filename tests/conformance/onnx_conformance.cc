// ONNX backend conformance for tessera: imports every test case of the ONNX
// test data (node/, pytorch-converted/, pytorch-operator/, simple/), runs it
// with tessera::Executor and compares each output with the reference at the
// ONNX backend-test tolerances (rtol 1e-3, atol 1e-7).
//
// A case is skipped (not failed) when tessera declines it: the importer or a
// kernel says NotSupported, an op has no kernel, or the case's inputs/outputs
// are not float32 tensors. Skips are counted per op type.
//
// Inputs that the test feeds at run time but that are parameters of their op
// (Conv W/B, Gemm B/C, BN statistics, Reshape shape, Clip min/max, Pad pads,
// Resize scales, ...) are baked into the model as initializers first:
// tessera takes weights and shape parameters as constants, and the values are
// the test's own.
//
// Usage: tessera_onnx_conformance [--root DIR] [--filter SUBSTR] [--verbose]
//                                 [--import-only] [--require LABEL,LABEL,...]
// --require runs only the listed cases ("node/test_erf", ...) and fails when
// any of them is missing, skipped or fails: for ops tessera must support.
// Exit: 0 when no supported case fails, 1 otherwise, 77 without test data.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/runtime/executor.h"
#include "daemon/runtime/kernels/kernel.h"
#include "onnx/onnx_pb.h"
#include "partition/import/model_import.h"

namespace fs = std::filesystem;
using tessera::Executor;
using tessera::Graph;
using tessera::Shape;
using tessera::ShapeToString;
using tessera::Status;
using tessera::TensorData;

namespace {

constexpr double kRtol = 1e-3;
constexpr double kAtol = 1e-7;
const char* const kSuites[] = {"node", "pytorch-converted", "pytorch-operator", "simple"};

// Input slots that hold parameters (weights, shapes, bounds) of their op.
const std::map<std::string, std::set<int>>& ParameterSlots() {
  static const std::map<std::string, std::set<int>> slots = {
      {"Conv", {1, 2}},
      {"ConvTranspose", {1, 2}},
      {"Gemm", {1, 2}},
      {"BatchNormalization", {1, 2, 3, 4}},
      {"InstanceNormalization", {1, 2}},
      {"LayerNormalization", {1, 2}},
      {"PRelu", {1}},
      {"Clip", {1, 2}},
      {"Reshape", {1}},
      {"Pad", {1, 2, 3}},
      {"Resize", {1, 2, 3}},
      {"Upsample", {1}},
      {"Squeeze", {1}},
      {"Unsqueeze", {1}},
      {"ReduceSum", {1}},
      {"ReduceMean", {1}},
      {"ReduceMax", {1}},
      {"ReduceMin", {1}},
      {"ReduceProd", {1}},
      {"ReduceL1", {1}},
      {"ReduceL2", {1}},
      {"ReduceLogSum", {1}},
      {"ReduceLogSumExp", {1}},
      {"ReduceSumSquare", {1}},
      {"Slice", {1, 2, 3, 4}},
      {"Tile", {1}},
      {"Expand", {1}},
      {"Dropout", {1, 2}},
      {"TopK", {1}},
      {"Split", {1}},
      {"Gather", {1}},
      {"OneHot", {1, 2}},
      {"ConstantOfShape", {0}},
      {"Range", {0, 1, 2}},
  };
  return slots;
}

struct Options {
  fs::path root = "/usr/share/libonnx-testdata/data";
  std::string filter;
  bool verbose = false;
  bool import_only = false;
  std::set<std::string> required;  // labels that must pass (not skip)
};

enum class Outcome { kPass, kFail, kSkip };

struct CaseResult {
  Outcome outcome = Outcome::kPass;
  std::string skip_key;  // op type (or reason) for skips
  std::string detail;    // why it failed or was skipped
};

bool ReadFile(const fs::path& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream buf;
  buf << in.rdbuf();
  *out = buf.str();
  return true;
}

// Float32 values of a reference tensor; false for other element types.
bool TensorToFloats(const onnx::TensorProto& t, TensorData* out) {
  if (t.data_type() != onnx::TensorProto::FLOAT) return false;
  out->shape.assign(t.dims().begin(), t.dims().end());
  const size_t n = static_cast<size_t>(tessera::NumElements(out->shape));
  out->values.resize(n);
  if (t.has_raw_data()) {
    if (t.raw_data().size() != n * sizeof(float)) return false;
    if (n) std::memcpy(out->values.data(), t.raw_data().data(), n * sizeof(float));
  } else {
    if (static_cast<size_t>(t.float_data_size()) != n) return false;
    std::copy(t.float_data().begin(), t.float_data().end(), out->values.begin());
  }
  return true;
}

// The op type an error message names: "... node 'x' (Conv): ..." -> "Conv".
std::string OpFromMessage(const std::string& message) {
  static const std::regex kNodeOp(R"(node '[^']*' \(([A-Za-z0-9_]+)\))");
  std::smatch m;
  if (std::regex_search(message, m, kNodeOp)) return m[1];
  static const std::regex kOpWord(R"(op ([A-Za-z0-9_]+) has no kernel)");
  if (std::regex_search(message, m, kOpWord)) return m[1];
  return "";
}

std::string FirstOpType(const onnx::ModelProto& model) {
  return model.graph().node_size() > 0 ? model.graph().node(0).op_type() : "(no nodes)";
}

std::string ElemName(int32_t t) {
  if (!onnx::TensorProto_DataType_IsValid(t)) return "type " + std::to_string(t);
  std::string s = onnx::TensorProto_DataType_Name(static_cast<onnx::TensorProto_DataType>(t));
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

CaseResult Skip(std::string key, std::string detail) {
  return CaseResult{Outcome::kSkip, std::move(key), std::move(detail)};
}
CaseResult Fail(std::string detail) { return CaseResult{Outcome::kFail, "", std::move(detail)}; }

// Compares one output; empty string when within tolerance.
std::string CompareOutput(const std::string& name, const TensorData& got, const TensorData& want, bool verbose) {
  if (got.shape != want.shape) {
    // A rank-0 reference and a [1] result, etc.: accept when only unit dims differ.
    if (got.values.size() != want.values.size())
      return "output '" + name + "' has shape " + ShapeToString(got.shape) + ", expected " + ShapeToString(want.shape);
  }
  size_t bad = 0, first_bad = 0;
  double worst = 0;
  for (size_t i = 0; i < want.values.size(); ++i) {
    const double a = got.values[i], b = want.values[i];
    if (std::isnan(b) && std::isnan(a)) continue;
    if (std::isinf(b) && a == b) continue;
    const double err = std::fabs(a - b);
    if (!(err <= kAtol + kRtol * std::fabs(b))) {
      if (bad == 0) first_bad = i;
      ++bad;
      worst = std::max(worst, std::isnan(err) ? INFINITY : err);
    }
  }
  if (bad == 0) return "";
  std::ostringstream os;
  os << "output '" << name << "': " << bad << " of " << want.values.size() << " values out of tolerance (max abs err "
     << worst << "; first at flat index " << first_bad << ": got " << got.values[first_bad] << ", expected "
     << want.values[first_bad] << ")";
  if (verbose) {
    os << "\n      got:     ";
    for (size_t i = 0; i < std::min<size_t>(8, got.values.size()); ++i) os << got.values[i] << ' ';
    os << "\n      expected: ";
    for (size_t i = 0; i < std::min<size_t>(8, want.values.size()); ++i) os << want.values[i] << ' ';
  }
  return os.str();
}

CaseResult RunCase(const fs::path& dir, const Options& opt) {
  std::string bytes;
  if (!ReadFile(dir / "model.onnx", &bytes)) return Fail("cannot read model.onnx");
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes)) return Fail("model.onnx does not parse");
  std::vector<fs::path> data_sets;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) data_sets.push_back(e.path());
  std::sort(data_sets.begin(), data_sets.end());
  if (data_sets.empty()) return Skip("(no test data)", "no test_data_set_* directory");

  auto* g = model.mutable_graph();
  std::set<std::string> initializers;
  for (const auto& t : g->initializer()) initializers.insert(t.name());
  // Which runtime inputs feed parameter slots (and so become initializers).
  std::set<std::string> parameter_inputs;
  for (const auto& n : g->node()) {
    auto it = ParameterSlots().find(n.op_type());
    if (it == ParameterSlots().end()) continue;
    for (int slot : it->second)
      if (slot < n.input_size() && !n.input(slot).empty()) parameter_inputs.insert(n.input(slot));
  }
  for (const auto& o : g->output()) {
    if (!o.type().has_tensor_type()) return Skip(FirstOpType(model) + " (non-tensor I/O)", "output is not a tensor");
    if (o.type().tensor_type().elem_type() != onnx::TensorProto::FLOAT)
      return Skip(FirstOpType(model) + " (non-float32 I/O)",
                  "output '" + o.name() + "' is " + ElemName(o.type().tensor_type().elem_type()));
  }
  std::vector<std::string> runtime_inputs;
  for (const auto& in : g->input())
    if (!initializers.count(in.name())) runtime_inputs.push_back(in.name());

  int passed_sets = 0;
  std::string failures;
  for (const fs::path& set_dir : data_sets) {
    // Reference inputs, in graph-input order.
    std::vector<onnx::TensorProto> inputs;
    for (size_t i = 0; i < runtime_inputs.size(); ++i) {
      std::string pb;
      if (!ReadFile(set_dir / ("input_" + std::to_string(i) + ".pb"), &pb))
        return Fail(set_dir.filename().string() + ": missing input_" + std::to_string(i) + ".pb");
      onnx::TensorProto t;
      if (!t.ParseFromString(pb)) return Skip(FirstOpType(model) + " (non-tensor I/O)", "input is not a TensorProto");
      inputs.push_back(std::move(t));
    }
    // Bake parameter inputs into the model; the rest are fed at run time.
    onnx::ModelProto frozen = model;
    auto* fg = frozen.mutable_graph();
    google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> kept_inputs;
    std::vector<TensorData> feeds;
    std::map<std::string, Shape> fed_shapes;  // fixes dims the model leaves dynamic
    for (const auto& in : fg->input()) {
      auto pos = std::find(runtime_inputs.begin(), runtime_inputs.end(), in.name());
      if (pos == runtime_inputs.end()) {
        *kept_inputs.Add() = in;
        continue;
      }
      const onnx::TensorProto& value = inputs[pos - runtime_inputs.begin()];
      const bool is_float =
          in.type().has_tensor_type() && in.type().tensor_type().elem_type() == onnx::TensorProto::FLOAT;
      if (!in.type().has_tensor_type())
        return Skip(FirstOpType(model) + " (non-tensor I/O)", "input '" + in.name() + "' is not a tensor");
      if (!is_float && !parameter_inputs.count(in.name()))
        return Skip(FirstOpType(model) + " (non-float32 I/O)",
                    "input '" + in.name() + "' is " + ElemName(in.type().tensor_type().elem_type()));
      if (parameter_inputs.count(in.name())) {
        onnx::TensorProto* init = fg->add_initializer();
        *init = value;
        init->set_name(in.name());
        if (frozen.ir_version() < 4) *kept_inputs.Add() = in;  // IR < 4 lists initializers as inputs too
        continue;
      }
      TensorData feed;
      if (!TensorToFloats(value, &feed))
        return Skip(FirstOpType(model) + " (non-float32 I/O)", "input '" + in.name() + "' data is not float32");
      *kept_inputs.Add() = in;
      bool declared_static = in.type().tensor_type().has_shape();
      for (const auto& d : in.type().tensor_type().shape().dim()) declared_static &= d.has_dim_value();
      if (!declared_static) fed_shapes[in.name()] = feed.shape;
      feeds.push_back(std::move(feed));
    }
    fg->mutable_input()->Swap(&kept_inputs);
    std::string frozen_bytes;
    frozen.SerializeToString(&frozen_bytes);

    tessera::ImportOptions import_options;
    import_options.input_shapes = fed_shapes;
    auto graph = tessera::ImportOnnxBytes(frozen_bytes, (dir / "model.onnx").string(), import_options);
    if (!graph.ok()) {
      const Status& st = graph.status();
      if (st.IsNotSupported()) {
        std::string op = OpFromMessage(st.message());
        if (op.empty())
          op = st.message().find("float32") != std::string::npos ? FirstOpType(model) + " (non-float32 I/O)"
                                                                 : FirstOpType(model) + " (other)";
        return Skip(op, st.message());
      }
      return Fail("import: " + st.ToString());
    }
    for (const auto& node : graph->nodes)
      if (tessera::FindKernel(node.op) == nullptr)
        return Skip(node.op + " (no kernel)", "op " + node.op + " has no kernel");
    if (opt.import_only) {
      ++passed_sets;
      continue;
    }
    auto executor = Executor::Create(*graph, tessera::ExecutorOptions{});
    if (!executor.ok()) {
      const Status& st = executor.status();
      if (st.IsNotSupported()) {
        std::string op = OpFromMessage(st.message());
        return Skip((op.empty() ? FirstOpType(model) : op) + " (kernel)", st.message());
      }
      return Fail("executor: " + st.ToString());
    }
    for (size_t i = 0; i < feeds.size() && i < graph->inputs.size(); ++i) {
      const Shape& want = graph->values[graph->inputs[i]].shape;
      if (feeds[i].shape != want) {
        if (tessera::NumElements(feeds[i].shape) != tessera::NumElements(want))
          return Fail("input " + std::to_string(i) + " data has shape " + ShapeToString(feeds[i].shape) +
                      ", the graph expects " + ShapeToString(want));
        feeds[i].shape = want;
      }
    }
    std::vector<TensorData> outputs;
    Status st = (*executor)->Run(feeds, &outputs);
    if (!st.ok()) return Fail("run: " + st.ToString());
    if (outputs.size() != static_cast<size_t>(g->output_size()))
      return Fail("executor returned " + std::to_string(outputs.size()) + " outputs, the model has " +
                  std::to_string(g->output_size()));
    std::string set_failures;
    for (int k = 0; k < g->output_size(); ++k) {
      std::string pb;
      if (!ReadFile(set_dir / ("output_" + std::to_string(k) + ".pb"), &pb))
        return Fail(set_dir.filename().string() + ": missing output_" + std::to_string(k) + ".pb");
      onnx::TensorProto t;
      TensorData want;
      if (!t.ParseFromString(pb) || !TensorToFloats(t, &want))
        return Skip(FirstOpType(model) + " (non-float32 I/O)", "reference output is not float32");
      std::string diff = CompareOutput(g->output(k).name(), outputs[k], want, opt.verbose);
      if (!diff.empty()) set_failures += (set_failures.empty() ? "" : "; ") + diff;
    }
    if (set_failures.empty())
      ++passed_sets;
    else
      failures += (failures.empty() ? "" : "; ") + set_dir.filename().string() + ": " + set_failures;
  }
  if (!failures.empty()) return Fail(failures);
  return CaseResult{Outcome::kPass, "", std::to_string(passed_sets) + " data set(s)"};
}

int Usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s [--root DIR] [--filter SUBSTR] [--verbose] [--import-only] [--require L1,L2,...]\n",
               argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--root" && i + 1 < argc)
      opt.root = argv[++i];
    else if (a == "--filter" && i + 1 < argc)
      opt.filter = argv[++i];
    else if (a == "--verbose" || a == "-v")
      opt.verbose = true;
    else if (a == "--import-only")
      opt.import_only = true;
    else if (a == "--require" && i + 1 < argc) {
      std::stringstream list(argv[++i]);
      for (std::string label; std::getline(list, label, ',');)
        if (!label.empty()) opt.required.insert(label);
    } else
      return Usage(argv[0]);
  }
  if (!fs::is_directory(opt.root / "node")) {
    std::printf("ONNX test data not found under %s (install libonnx-testdata); %s\n", opt.root.c_str(),
                opt.required.empty() ? "skipping" : "required cases cannot run");
    return opt.required.empty() ? 77 : 1;
  }
  std::printf("ONNX conformance: %s, tolerance |got - expected| <= atol + rtol * |expected| with rtol=%g, atol=%g%s\n",
              opt.root.c_str(), kRtol, kAtol, opt.import_only ? " (import only)" : "");
  int passed = 0, failed = 0, skipped = 0;
  std::map<std::string, int> skips;
  std::vector<std::string> failures;
  std::set<std::string> seen_required;
  const auto t0 = std::chrono::steady_clock::now();
  for (const char* suite : kSuites) {
    const fs::path suite_dir = opt.root / suite;
    if (!fs::is_directory(suite_dir)) continue;
    std::vector<fs::path> cases;
    for (const auto& e : fs::directory_iterator(suite_dir))
      if (e.is_directory() && fs::exists(e.path() / "model.onnx")) cases.push_back(e.path());
    std::sort(cases.begin(), cases.end());
    for (const fs::path& c : cases) {
      const std::string label = std::string(suite) + "/" + c.filename().string();
      if (!opt.filter.empty() && label.find(opt.filter) == std::string::npos) continue;
      if (!opt.required.empty() && !opt.required.count(label)) continue;
      CaseResult r = RunCase(c, opt);
      if (!opt.required.empty()) seen_required.insert(label);
      if (!opt.required.empty() && r.outcome == Outcome::kSkip)
        r = Fail("required case skipped [" + r.skip_key + "]: " + r.detail);
      switch (r.outcome) {
        case Outcome::kPass:
          ++passed;
          if (opt.verbose) std::printf("PASS %s (%s)\n", label.c_str(), r.detail.c_str());
          break;
        case Outcome::kFail:
          ++failed;
          failures.push_back(label);
          std::printf("FAIL %s: %s\n", label.c_str(), r.detail.c_str());
          break;
        case Outcome::kSkip:
          ++skipped;
          ++skips[r.skip_key];
          if (opt.verbose) std::printf("SKIP %s [%s]: %s\n", label.c_str(), r.skip_key.c_str(), r.detail.c_str());
          break;
      }
      std::fflush(stdout);
    }
  }
  for (const std::string& label : opt.required)
    if (!seen_required.count(label)) {
      ++failed;
      failures.push_back(label + " (required case not found under " + opt.root.string() + ")");
      std::printf("FAIL %s: required case not found\n", label.c_str());
    }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\nSkipped, by op type (%d cases):\n", skipped);
  for (const auto& [op, n] : skips) std::printf("  %-40s %d\n", op.c_str(), n);
  if (!failures.empty()) {
    std::printf("Failed cases:\n");
    for (const auto& f : failures) std::printf("  %s\n", f.c_str());
  }
  std::printf("rtol=%g atol=%g, %.1f s\n", kRtol, kAtol, secs);
  std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed == 0 ? 0 : 1;
}
