// Resize (ONNX opset 11+; also the opset-10 form), modes "nearest" and
// "linear". The graph's output shape is authoritative; per-dimension scales
// come from attr "scales", else a constant scales input, else output/input.
// Every coordinate_transformation_mode except tf_crop_and_resize is
// supported. The coordinate maths (which input indices an output index
// reads) is partition/graph/resize_map.h, shared with the FFMT halo code;
// Prepare tabulates it per dimension.
//  * nearest: evaluated as an IndexGather.
//  * linear: 2-D (bi)linear over the last two dims (every other dim must keep
//    its size, as in NCHW images): y = (1 − t)·x[lo] + t·x[hi] per dim.
//  * An FFMT tile (METHODS §2) carries the tile_* attributes of
//    resize_map.h: its output index j is the whole map's index
//    tile_output_origin + j, transformed with the whole map's sizes and
//    scales, and its input holds the whole input from tile_input_origin on.
//    So a tile computes bit for bit what the untiled run computes there.
#include <algorithm>
#include <cmath>

#include "daemon/runtime/kernels/index_gather.h"
#include "daemon/runtime/kernels/kernel_factories.h"
#include "daemon/runtime/kernels/node_checks.h"
#include "daemon/runtime/kernels/parallel_for.h"
#include "partition/graph/resize_map.h"

namespace tessera {
namespace {

// Where the kernel's input and output sit in the whole map, per dimension
// (identity unless the node is an FFMT tile).
struct TilePlacement {
  std::vector<int64_t> out_origin, in_origin, full_in, full_out;
};

class ResizeKernel final : public Kernel {
 public:
  Status Prepare(const KernelContext& ctx) override {
    TS_RETURN_IF_ERROR(CheckArity(ctx, 1, 4));
    const Shape& in = ctx.input_shapes[0];
    const Shape& out = ctx.output_shapes[0];
    const auto& a = ctx.node.attrs;
    const std::string mode = a.String("mode", "nearest");
    const std::string transform = a.String("coordinate_transformation_mode", "half_pixel");
    const std::string rounding = a.String("nearest_mode", "round_prefer_floor");
    if (Status s = CheckResizeModes(mode, transform, rounding); !s.ok()) return NodeNotSupported(ctx, s.message());
    if (mode == "linear" && a.Int("antialias", 0) != 0)
      return NodeNotSupported(ctx, "antialias=1 (linear without antialiasing only)");
    if (out.size() != in.size())
      return NodeInvalid(ctx, "output shape " + ShapeToString(out) + " has a different rank than input " +
                                  ShapeToString(in));
    std::vector<double> scales = a.Floats("scales");
    // Opset 11+: inputs (X, roi, scales, sizes); opset 10: (X, scales).
    const size_t scales_input = ctx.node.inputs.size() == 2 ? 1 : 2;
    if (scales.empty() && HasInput(ctx, scales_input)) {
      const TensorData* s = ConstantOrNull(ctx, scales_input);
      if (s != nullptr && !s->values.empty()) scales.assign(s->values.begin(), s->values.end());
    }
    if (!scales.empty() && scales.size() != in.size())
      return NodeInvalid(ctx, "scales has " + std::to_string(scales.size()) + " values for rank " +
                                  std::to_string(in.size()));
    TS_ASSIGN_OR_RETURN(const TilePlacement place, Placement(ctx));
    linear_ = mode == "linear";
    std::vector<ResizeAxis> axes(in.size());
    for (size_t d = 0; d < in.size(); ++d) {
      auto axis = MakeResizeAxis(linear_, transform, rounding, scales, d, place.full_in[d], place.full_out[d]);
      if (!axis.ok()) return NodeInvalid(ctx, axis.status().message());
      axes[d] = *std::move(axis);
    }
    if (linear_) return PrepareLinear(ctx, axes, place);
    std::vector<std::vector<int64_t>> maps(in.size());
    for (size_t d = 0; d < in.size(); ++d) {
      maps[d].resize(out[d]);
      for (int64_t o = 0; o < out[d]; ++o) {
        const int64_t i = NearestSource(axes[d], place.out_origin[d] + o) - place.in_origin[d];
        if (i < 0 || i >= in[d]) return OutsideTile(ctx, d);
        maps[d][o] = i;
      }
    }
    gather_.Init(in, std::move(maps), 0.f);
    return Status::OK();
  }

  void Eval(const EvalContext& ctx) const override {
    if (linear_) {
      EvalLinear(ctx);
      return;
    }
    gather_.Run(ctx.inputs[0], ctx.outputs[0], ctx.threads);
  }

 private:
  // One dimension's linear taps in the kernel's own input: output o reads
  // lo[o] and hi[o] with weight t[o] on hi.
  struct LinearTaps {
    std::vector<int64_t> lo, hi;
    std::vector<float> t;
  };

  static Status OutsideTile(const KernelContext& ctx, size_t d) {
    return NodeInvalid(ctx, "the tile's input does not hold every index its outputs read along dim " +
                                std::to_string(d) + " (tile_input_origin / tile sizes are wrong)");
  }

  // The tile_* attributes (resize_map.h) as per-dimension vectors; the
  // identity placement when the node has none.
  static Result<TilePlacement> Placement(const KernelContext& ctx) {
    const Shape& in = ctx.input_shapes[0];
    const Shape& out = ctx.output_shapes[0];
    const size_t rank = in.size();
    TilePlacement p{std::vector<int64_t>(rank, 0), std::vector<int64_t>(rank, 0), in, out};
    const auto& a = ctx.node.attrs;
    const char* names[] = {kResizeTileOutputOrigin, kResizeTileInputOrigin, kResizeTileFullInput,
                           kResizeTileFullOutput};
    std::vector<int64_t>* fields[] = {&p.out_origin, &p.in_origin, &p.full_in, &p.full_out};
    int present = 0;
    for (const char* n : names) present += a.Has(n) ? 1 : 0;
    if (present == 0) return p;
    if (present != 4 || rank < 2)
      return NodeInvalid(ctx, "an FFMT tile needs all four tile_* attributes and rank >= 2");
    for (int f = 0; f < 4; ++f) {
      const auto v = a.Ints(names[f]);
      if (v.size() != 2) return NodeInvalid(ctx, std::string(names[f]) + " must have 2 values [rows, cols]");
      (*fields[f])[rank - 2] = v[0];
      (*fields[f])[rank - 1] = v[1];
    }
    for (size_t d = rank - 2; d < rank; ++d)
      if (p.out_origin[d] < 0 || p.out_origin[d] + out[d] > p.full_out[d] || p.in_origin[d] < 0 ||
          p.in_origin[d] + in[d] > p.full_in[d])
        return NodeInvalid(ctx, "tile along dim " + std::to_string(d) + " lies outside the whole map (" +
                                    std::to_string(p.full_in[d]) + " in, " + std::to_string(p.full_out[d]) + " out)");
    return p;
  }

  Status PrepareLinear(const KernelContext& ctx, const std::vector<ResizeAxis>& axes, const TilePlacement& place) {
    const Shape& in = ctx.input_shapes[0];
    const Shape& out = ctx.output_shapes[0];
    const size_t rank = in.size();
    if (rank < 2) return NodeNotSupported(ctx, "linear mode needs rank >= 2 (resizes the last two dims)");
    for (size_t d = 0; d + 2 < rank; ++d)
      if (in[d] != out[d] || axes[d].scale != 1.0)
        return NodeNotSupported(ctx, "linear mode resizes only the last two dims (dim " + std::to_string(d) +
                                         " changes); e.g. NCHW bilinear");
    for (size_t d = rank - 2; d < rank; ++d) {
      LinearTaps& taps = d == rank - 2 ? rows_ : cols_;
      taps.lo.resize(out[d]);
      taps.hi.resize(out[d]);
      taps.t.resize(out[d]);
      for (int64_t o = 0; o < out[d]; ++o) {
        const LinearTap tap = LinearSource(axes[d], place.out_origin[d] + o);
        taps.lo[o] = tap.lo - place.in_origin[d];
        taps.hi[o] = tap.hi - place.in_origin[d];
        taps.t[o] = tap.t;
        if (taps.lo[o] < 0 || taps.hi[o] >= in[d]) return OutsideTile(ctx, d);
      }
    }
    planes_ = 1;
    for (size_t d = 0; d + 2 < rank; ++d) planes_ *= in[d];
    in_h_ = in[rank - 2], in_w_ = in[rank - 1], out_h_ = out[rank - 2], out_w_ = out[rank - 1];
    return Status::OK();
  }

  void EvalLinear(const EvalContext& ctx) const {
    const int64_t work = planes_ * out_h_;
    const int threads = (ctx.threads > 1 && work * out_w_ > 65536) ? ctx.threads : 1;
    ParallelFor(work, threads, [&](int64_t r) {
      const int64_t p = r / out_h_, oy = r % out_h_;
      const float* plane = ctx.inputs[0] + p * in_h_ * in_w_;
      const float* row0 = plane + rows_.lo[oy] * in_w_;
      const float* row1 = plane + rows_.hi[oy] * in_w_;
      const float ty = rows_.t[oy];
      float* y = ctx.outputs[0] + r * out_w_;
      for (int64_t ox = 0; ox < out_w_; ++ox) {
        const int64_t x0 = cols_.lo[ox], x1 = cols_.hi[ox];
        const float tx = cols_.t[ox];
        const float top = row0[x0] + tx * (row0[x1] - row0[x0]);
        const float bottom = row1[x0] + tx * (row1[x1] - row1[x0]);
        y[ox] = top + ty * (bottom - top);
      }
    });
  }

  IndexGather gather_;
  bool linear_ = false;
  LinearTaps rows_, cols_;
  int64_t planes_ = 0, in_h_ = 0, in_w_ = 0, out_h_ = 0, out_w_ = 0;
};

}  // namespace

std::unique_ptr<Kernel> MakeResizeKernel() { return std::make_unique<ResizeKernel>(); }

}  // namespace tessera
