// Prepare-time checks shared by the kernels. Every error names the node and
// its op ("node 'conv1' (Conv): ..."), since the user fixes the model, not us.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/runtime/kernels/kernel.h"
#include "partition/graph/graph.h"
#include "util/status.h"

namespace tessera {

inline std::string NodeLabel(const KernelContext& ctx) {
  return "node '" + ctx.node.name + "' (" + ctx.node.op + ")";
}

inline Status NodeInvalid(const KernelContext& ctx, const std::string& what) {
  return Status::InvalidArgument(NodeLabel(ctx) + ": " + what);
}

inline Status NodeNotSupported(const KernelContext& ctx, const std::string& what) {
  return Status::NotSupported(NodeLabel(ctx) + ": " + what);
}

// True when input `i` exists and is not an omitted optional input (id -1).
inline bool HasInput(const KernelContext& ctx, size_t i) {
  return i < ctx.node.inputs.size() && ctx.node.inputs[i] >= 0;
}

// Input/output counts, and that the context carries one shape per value.
inline Status CheckArity(const KernelContext& ctx, size_t min_inputs, size_t max_inputs, size_t outputs = 1) {
  const size_t n_in = ctx.node.inputs.size();
  if (n_in < min_inputs || n_in > max_inputs) {
    std::string want = min_inputs == max_inputs ? std::to_string(min_inputs)
                                                : std::to_string(min_inputs) + ".." + std::to_string(max_inputs);
    return NodeInvalid(ctx, "expects " + want + " inputs, has " + std::to_string(n_in));
  }
  for (size_t i = 0; i < min_inputs; ++i)
    if (ctx.node.inputs[i] < 0) return NodeInvalid(ctx, "required input " + std::to_string(i) + " is missing");
  if (ctx.node.outputs.size() != outputs)
    return NodeInvalid(ctx, "expects " + std::to_string(outputs) + " outputs, has " +
                                std::to_string(ctx.node.outputs.size()));
  if (ctx.input_shapes.size() != n_in || ctx.output_shapes.size() != ctx.node.outputs.size())
    return Status::Internal(NodeLabel(ctx) + ": kernel context shape lists do not match the node");
  return Status::OK();
}

inline Status CheckRank(const KernelContext& ctx, size_t input, size_t rank) {
  if (ctx.input_shapes[input].size() != rank)
    return NodeInvalid(ctx, "input " + std::to_string(input) + " must have rank " + std::to_string(rank) +
                                ", has shape " + ShapeToString(ctx.input_shapes[input]));
  return Status::OK();
}

// The graph's output shape must be what the op computes.
inline Status CheckOutputShape(const KernelContext& ctx, size_t output, const Shape& expected) {
  if (ctx.output_shapes[output] != expected)
    return NodeInvalid(ctx, "output shape " + ShapeToString(ctx.output_shapes[output]) + " does not match the " +
                                ShapeToString(expected) + " computed from the inputs");
  return Status::OK();
}

// Input `i` must be a constant (weights); returns its data.
inline Result<const TensorData*> RequireConstant(const KernelContext& ctx, size_t i, const char* what) {
  if (i >= ctx.constant_inputs.size() || ctx.constant_inputs[i] == nullptr)
    return NodeNotSupported(ctx, std::string(what) + " (input " + std::to_string(i) + ") must be a constant");
  return ctx.constant_inputs[i];
}

inline const TensorData* ConstantOrNull(const KernelContext& ctx, size_t i) {
  return i < ctx.constant_inputs.size() ? ctx.constant_inputs[i] : nullptr;
}

// Resolves a possibly negative axis against `rank`; -1 when out of range.
inline int64_t NormalizeAxis(int64_t axis, size_t rank) {
  const int64_t r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r) return -1;
  return axis < 0 ? axis + r : axis;
}

// Row-major strides of a shape.
inline std::vector<int64_t> RowMajorStrides(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * shape[i + 1];
  return s;
}

}  // namespace tessera
