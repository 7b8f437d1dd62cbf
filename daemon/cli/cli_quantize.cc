// `tessera quantize MODEL.onnx --random N | --calibration DIR --out OUT.onnx`
// (issue 16 item 1): post-training static quantization into a QDQ model
// (partition/import/onnx_quantize.h says what is quantized and how).
//
//  1. imports the float model and runs it on the calibration inputs with
//     every tensor to quantize kept as an output, recording each one's
//     [min, max];
//  2. writes the QDQ model (int8 activations per tensor, int8 weights per
//     channel, int32 biases);
//  3. imports the written model and runs both on the same inputs: prints how
//     far the quantized outputs are from the float ones, in steps of each
//     output's grid, so the cost of quantizing is measured, not guessed.
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "daemon/cli/cli.h"
#include "daemon/cli/cli_model_options.h"
#include "daemon/runtime/executor.h"
#include "daemon/runtime/npy.h"
#include "daemon/runtime/seeded_input.h"
#include "partition/import/onnx_quantize.h"

namespace tessera {
namespace {

struct QuantizeArgs {
  ModelOptions model;
  std::string out;
  std::string calibration_dir;
  int random = 0;
  int threads = 1;
  int weight_bits = 8;
  bool json = false;
};

// One tensor per graph input per sample.
Result<std::vector<std::vector<TensorData>>> CalibrationInputs(const QuantizeArgs& a, const Graph& g) {
  std::vector<std::vector<TensorData>> samples;
  if (!a.calibration_dir.empty()) {
    if (g.inputs.size() != 1)
      return Status::NotSupported("--calibration DIR holds one .npy per sample, for a model with one input; '" +
                                  g.name + "' has " + std::to_string(g.inputs.size()) + " (use --random N)");
    std::vector<std::string> files;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(a.calibration_dir, ec))
      if (e.path().extension() == ".npy") files.push_back(e.path().string());
    if (ec) return Status::NotFound("--calibration " + a.calibration_dir + ": " + ec.message());
    if (files.empty()) return Status::InvalidArgument("--calibration " + a.calibration_dir + ": no .npy files in it");
    std::sort(files.begin(), files.end());
    const Shape& want = g.values[g.inputs[0]].shape;
    for (const auto& f : files) {
      TS_ASSIGN_OR_RETURN(TensorData t, ReadNpy(f));
      if (NumElements(t.shape) != NumElements(want))
        return Status::InvalidArgument(f + ": shape " + ShapeToString(t.shape) + ", the model's input '" +
                                       g.values[g.inputs[0]].name + "' is " + ShapeToString(want));
      t.shape = want;
      samples.push_back({std::move(t)});
    }
    return samples;
  }
  for (int s = 0; s < a.random; ++s) {
    std::vector<TensorData> in;
    for (size_t i = 0; i < g.inputs.size(); ++i)
      in.push_back(SeededInput(g.values[g.inputs[i]].shape, a.model.seed + 1000003ull * s + i));
    samples.push_back(std::move(in));
  }
  return samples;
}

int RunQuantize(const QuantizeArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  if ((a.random > 0) == !a.calibration_dir.empty())
    return ReportError("quantize",
                       Status::InvalidArgument("give exactly one of --random N (N >= 1) and --calibration DIR"));
  auto names = QuantizableActivations(a.model.model_path);
  if (!names.ok()) return ReportError("quantize", names.status());
  auto pad_sources = ZeroPadSources(a.model.model_path);
  if (!pad_sources.ok()) return ReportError("quantize", pad_sources.status());
  auto graph = LoadModel(a.model);
  if (!graph.ok()) return ReportError("quantize", graph.status());
  auto samples = CalibrationInputs(a, *graph);
  if (!samples.ok()) return ReportError("quantize", samples.status());

  // 1. Calibrate: every tensor to quantize becomes an extra output.
  Graph calib = *graph;
  std::map<std::string, int> value_of;
  for (size_t v = 0; v < calib.values.size(); ++v)
    if (!calib.values[v].constant) value_of[calib.values[v].name] = static_cast<int>(v);
  std::vector<std::string> measured, folded;
  std::vector<int> slots;  // output slot of each measured tensor
  for (const auto& n : *names) {
    auto it = value_of.find(n);
    if (it == value_of.end())  // a zero Pad's output, folded into its reader: measured as the Pad's input
      if (auto src = pad_sources->find(n); src != pad_sources->end()) it = value_of.find(src->second);
    if (it == value_of.end()) {
      folded.push_back(n);  // folded into its producer at import (e.g. a conv's output before its BN)
      continue;
    }
    auto pos = std::find(calib.outputs.begin(), calib.outputs.end(), it->second);
    if (pos == calib.outputs.end()) {
      slots.push_back(static_cast<int>(calib.outputs.size()));
      calib.outputs.push_back(it->second);
    } else {
      slots.push_back(static_cast<int>(pos - calib.outputs.begin()));
    }
    measured.push_back(n);
  }
  ExecutorOptions eo;
  eo.threads = a.threads;
  auto exec = Executor::Create(calib, eo);
  if (!exec.ok()) return ReportError("quantize", exec.status());
  std::map<std::string, ActivationRange> ranges;
  std::vector<std::vector<TensorData>> float_outputs;
  const bool progress = isatty(STDERR_FILENO) && samples->size() > 1;  // long calibrations show where they are
  for (size_t s = 0; s < samples->size(); ++s) {
    std::vector<TensorData> outs;
    if (Status st = (*exec)->Run((*samples)[s], &outs); !st.ok()) return ReportError("quantize", st);
    for (size_t k = 0; k < measured.size(); ++k) {
      const auto& vals = outs[slots[k]].values;
      auto [lo, hi] = std::minmax_element(vals.begin(), vals.end());
      ActivationRange& r = ranges[measured[k]];
      if (s == 0) r = {*lo, *hi};
      r.min = std::min(r.min, *lo);
      r.max = std::max(r.max, *hi);
    }
    outs.resize(graph->outputs.size());
    float_outputs.push_back(std::move(outs));
    if (progress) std::fprintf(stderr, "\rcalibrating: %zu/%zu inputs", s + 1, samples->size());
  }
  if (progress) std::fprintf(stderr, "\n");

  // 2. Write the QDQ model.
  QuantizeReport report;
  if (Status st = QuantizeOnnxModel(a.model.model_path, ranges, a.out, &report, a.weight_bits); !st.ok())
    return ReportError("quantize", st);

  // 3. Measure what quantizing cost on the calibration inputs.
  ModelOptions qm = a.model;
  qm.model_path = a.out;
  auto qgraph = LoadModel(qm);
  if (!qgraph.ok()) return ReportError("quantize", qgraph.status().WithContext("re-importing the quantized model: "));
  auto qexec = Executor::Create(*qgraph, eo);
  if (!qexec.ok()) return ReportError("quantize", qexec.status());
  std::vector<double> max_abs(graph->outputs.size(), 0.0), max_ref(graph->outputs.size(), 0.0);
  for (size_t s = 0; s < samples->size(); ++s) {
    std::vector<TensorData> outs;
    if (Status st = (*qexec)->Run((*samples)[s], &outs); !st.ok()) return ReportError("quantize", st);
    for (size_t o = 0; o < outs.size() && o < max_abs.size(); ++o)
      for (size_t i = 0; i < outs[o].values.size(); ++i) {
        const double f = float_outputs[s][o].values[i];
        max_abs[o] = std::max(max_abs[o], std::fabs(outs[o].values[i] - f));
        max_ref[o] = std::max(max_ref[o], std::fabs(f));
      }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  nlohmann::json j;
  j["model"] = a.model.model_path;
  j["out"] = a.out;
  j["samples"] = samples->size();
  j["calibration"] = a.calibration_dir.empty() ? "random" : a.calibration_dir;
  j["activations_quantized"] = report.activations;
  j["activations_folded"] = folded;
  j["weights_quantized"] = report.weights;
  j["weight_bits"] = a.weight_bits;
  j["batch_norms_folded"] = report.batch_norms_folded;
  j["grids_shared"] = report.grids_shared;
  j["biases_quantized"] = report.biases;
  j["float_weight_bytes"] = report.float_weight_bytes;
  j["quantized_weight_bytes"] = report.quantized_weight_bytes;
  j["unquantized_weights"] = report.unquantized_weights;
  j["outputs"] = nlohmann::json::array();
  for (size_t o = 0; o < max_abs.size(); ++o) {
    const std::string& name = graph->values[graph->outputs[o]].name;
    const auto r = ranges.find(name);
    const double step = r != ranges.end() ? (std::max(r->second.max, 0.f) - std::min(r->second.min, 0.f)) / 255.0 : 0;
    j["outputs"].push_back({{"name", name},
                            {"max_abs_diff_vs_float", max_abs[o]},
                            {"max_abs_float", max_ref[o]},
                            {"rel_diff_vs_float", max_ref[o] > 0 ? max_abs[o] / max_ref[o] : 0.0},
                            {"grid_step", step},
                            {"diff_in_steps", step > 0 ? max_abs[o] / step : 0.0}});
  }
  j["seconds"] = secs;
  if (a.json) {
    std::printf("%s\n", j.dump(1).c_str());
    return 0;
  }
  std::printf(
      "%s -> %s: %d activations int8 (per tensor), %d weights int8 (per channel, %d bits), %d biases int32, "
      "%d BatchNormalization folded first\n",
      a.model.model_path.c_str(), a.out.c_str(), report.activations, report.weights, a.weight_bits, report.biases,
      report.batch_norms_folded);
  std::printf("  weights %.1f KiB float32 -> %.1f KiB (scales included)\n", report.float_weight_bytes / 1024.0,
              report.quantized_weight_bytes / 1024.0);
  if (report.grids_shared > 0)
    std::printf("  %d outputs of MaxPool/Reshape/Flatten/Transpose/zero Pad keep their input's grid\n",
                report.grids_shared);
  if (!folded.empty())
    std::printf("  %zu tensors fold into their producer at import and need no grid (e.g. '%s')\n", folded.size(),
                folded[0].c_str());
  for (const auto& w : report.unquantized_weights) std::printf("  left float: %s\n", w.c_str());
  std::printf("  calibration: %zu %s input(s), ranges min/max\n", samples->size(),
              a.calibration_dir.empty() ? "seeded random" : "given");
  for (const auto& o : j["outputs"])
    std::printf(
        "  output '%s': quantized vs float on those inputs: max |diff| %.4g (%.2f grid steps of %.4g), "
        "max |float| %.4g\n",
        o["name"].get<std::string>().c_str(), o["max_abs_diff_vs_float"].get<double>(),
        o["diff_in_steps"].get<double>(), o["grid_step"].get<double>(), o["max_abs_float"].get<double>());
  std::printf("  %.2f s\n", secs);
  return 0;
}

}  // namespace

void RegisterQuantizeCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "quantize", "Post-training static quantization of an ONNX model into a QDQ model (int8 per-channel weights)");
  auto a = std::make_shared<QuantizeArgs>();
  a->model.AddTo(*cmd);
  cmd->add_option("--out", a->out, "Write the quantized ONNX model here")->required();
  cmd->add_option("--random", a->random, "Calibrate on N seeded random inputs (uniform in [-1, 1), --seed)");
  cmd->add_option("--calibration", a->calibration_dir,
                  "Calibrate on the .npy files in DIR (one input tensor each, sorted by name)");
  cmd->add_option("--threads", a->threads, "Threads for the calibration runs")->capture_default_str();
  cmd->add_option("--weight-bits", a->weight_bits,
                  "8: weights in ±127; 7: ±63, for onnxruntime's int8 kernels on x86 without VNNI, whose 16-bit "
                  "pair sums overflow on 8-bit weights")
      ->capture_default_str()
      ->check(CLI::Range(2, 8));
  cmd->add_flag("--json", a->json, "Print a JSON summary");
  cmd->callback([a] {
    if (int rc = RunQuantize(*a)) throw CLI::RuntimeError(rc);
  });
}

}  // namespace tessera
