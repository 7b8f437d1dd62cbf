// `tessera quantize` (issue 16 item 1): post-training static quantization of
// a float ONNX model into the QDQ form (ONNX QuantizeLinear/DequantizeLinear
// pairs), which onnxruntime runs with its int8 kernels and tessera imports
// (onnx_import.cc, partition/graph/quantization.h).
//
// What is quantized:
//  * activations: every tensor a Conv, Gemm, MatMul, Add, MaxPool,
//    AveragePool, GlobalAveragePool or Concat reads, every graph output, and
//    every graph input read by one of those ops: int8, per tensor,
//    asymmetric, the grid spanning the calibrated [min, max] widened to
//    include 0 (so zero padding is exact): scale = (max − min) / 255,
//    zero point = round(−128 − min / scale); the output of an op that only
//    moves values (MaxPool, Reshape, Flatten, Squeeze, Unsqueeze, Transpose,
//    Identity, zero Pad) shares its input's grid. The caller measures the ranges
//    (daemon/cli/cli_quantize.cc runs the float model on calibration inputs);
//  * weights of Conv (per output channel, axis 0), Gemm (per output column:
//    axis 0 of B when transB = 1, else axis 1) and MatMul with a constant
//    right operand (axis 1): int8 symmetric, zero point 0, range ±127, scale
//    max|w| / 127 per channel;
//  * biases of those ops when their input is quantized: int32 with scale
//    input scale × weight scale (what int8 kernels add to their int32
//    accumulators), dequantized along axis 0.
// The quantized tensor keeps its name (a graph output stays an output of the
// same name and type); the float producer output is renamed "<name>/float".
// BatchNormalization after a Conv or Gemm is folded into its weights first
// (the weights that are quantized are the ones that run). Requires opset >= 13
// (per-axis DequantizeLinear).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "util/status.h"

namespace tessera {

// The activation tensors of the ONNX model at `path` that QuantizeOnnxModel
// quantizes when given their ranges, in graph order (inputs first).
Result<std::vector<std::string>> QuantizableActivations(const std::string& path);

// Outputs of the model's zero constant Pads, each with the tensor whose
// calibrated range stands for it: the Pad's input (through further zero
// Pads). The importer folds such a Pad into the window that reads it
// (FoldPadsIntoWindows), so its output is no tensor of the imported graph;
// the padded tensor's range is its input's with 0, which every grid holds.
Result<std::map<std::string, std::string>> ZeroPadSources(const std::string& path);

struct ActivationRange {
  float min = 0.f, max = 0.f;
};

struct QuantizeReport {
  int activations = 0;                 // tensors given a QuantizeLinear/DequantizeLinear pair
  int weights = 0;                     // weight tensors stored as int8
  int biases = 0;                      // bias tensors stored as int32
  int batch_norms_folded = 0;          // BatchNormalization folded into the Conv/Gemm before it
  int grids_shared = 0;                // outputs of MaxPool/Reshape/Flatten/Transpose/zero Pad on their input's grid
  int64_t float_weight_bytes = 0;      // those weights and biases as float32
  int64_t quantized_weight_bytes = 0;  // as int8/int32, scales and zero points included
  std::vector<std::string> unquantized_weights;  // constant operands left float, with why
};

// Reads the float model at `in_path`, quantizes the activations named in
// `ranges` (missing ones stay float) and the weights of their readers, and
// writes the QDQ model to `out_path` (checked by the ONNX checker first).
// Errors name the file and what is wrong (opset < 13, external data, a
// range that is not finite).
// weight_bits: 8 gives weights the range ±127; 7 gives ±63 ("reduce range":
// onnxruntime's int8 kernels on x86 CPUs without VNNI add pairs of
// products in 16 bits, which overflow for weights beyond 7 bits, so their
// answers differ from the model's by up to tens of steps; tessera's do not).
Status QuantizeOnnxModel(const std::string& in_path, const std::map<std::string, ActivationRange>& ranges,
                         const std::string& out_path, QuantizeReport* report, int weight_bits = 8);

}  // namespace tessera
