// QLinearConv and QLinearMatMul (ONNX's integer-operator form of a quantized
// model, issue 16 item 1) rewritten into the QDQ form the importer translates:
//   QLinearConv(x, xs, xz, w, ws, wz, ys, yz, B)
//     -> QuantizeLinear(Conv(DequantizeLinear(x, xs, xz),
//                            DequantizeLinear(w, ws, wz, axis 0),
//                            DequantizeLinear(B, Mul(xs, ws), axis 0)), ys, yz)
//   QLinearMatMul(a, as, az, b, bs, bz, ys, yz)
//     -> QuantizeLinear(MatMul(DequantizeLinear(a, as, az),
//                              DequantizeLinear(b, bs, bz, last axis)), ys, yz)
// The constant DequantizeLinear and Mul nodes fold at import
// (onnx_constant_eval.h); the rest translates as every QDQ model does
// (onnx_import.cc, quantization.h). Runs on the protobuf before shape
// inference; node names get "/…" suffixes and stay unique.
#pragma once

#include <string>

#include "onnx/onnx_pb.h"
#include "util/status.h"

namespace tessera::onnx_import {

// Rewrites every QLinearConv and QLinearMatMul of `model` in place. Returns
// how many were rewritten in `*count` (optional). InvalidArgument naming the
// node when it has fewer inputs than the op needs.
Status ExpandQLinearOps(onnx::ModelProto* model, const std::string& origin, int* count = nullptr);

}  // namespace tessera::onnx_import
