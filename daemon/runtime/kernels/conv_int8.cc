// Integer convolution (conv_int8.h).
#include "daemon/runtime/kernels/conv_int8.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>

#include <omp.h>

#include "daemon/runtime/kernels/isa.h"
#include "daemon/runtime/kernels/parallel_for.h"
#include "daemon/runtime/kernels/weight_forms.h"
#include "partition/graph/int8_weights.h"

namespace tessera {
namespace {

int64_t RoundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

uint32_t PackPair(int8_t lo, int8_t hi) {
  return static_cast<uint32_t>(static_cast<uint16_t>(int16_t{lo})) |
         (static_cast<uint32_t>(static_cast<uint16_t>(int16_t{hi})) << 16);
}

// Bytes of a pair block a thread builds: about 64 KiB, within L2 beside the
// weights of four rows.
constexpr int64_t kPairBlockBytes = 64 << 10;

}  // namespace

Result<bool> Int8Conv::Prepare(const KernelContext& ctx, const ConvGeometry& geometry, const QuantGrid& input_grid,
                               const FusedActivation& activation) {
  g_ = geometry;
  act_ = activation;
  k_ = g_.cg * g_.kh * g_.kw;
  kp_ = (k_ + 1) / 2;
  row_blocks_ = (g_.og + kInt16PairRows - 1) / kInt16PairRows;
  inv_scale_ = 1.0f / input_grid.scale;
  lo_ = static_cast<float>(input_grid.qmin - input_grid.zero_point);
  hi_ = static_cast<float>(input_grid.qmax - input_grid.zero_point);
  prepared_threads_ = std::max(1, ctx.threads);
  has_bias_ = ctx.node.inputs.size() > 2 && ctx.node.inputs[2] >= 0;
  microkernels_ = &MicrokernelsFor(ActiveIsa());
  raw_ = ctx.node.attrs.Int("integer_partial", 0) != 0;
  const std::vector<double> row_scales = ctx.node.attrs.Floats("int8_row_scales");
  if (raw_ && !ctx.shapes_only && static_cast<int64_t>(row_scales.size()) != g_.o)
    return Status::InvalidArgument("node '" + ctx.node.name + "': an integer partial sum needs " +
                                   std::to_string(g_.o) + " int8_row_scales, has " + std::to_string(row_scales.size()));
  if (raw_ && (has_bias_ || act_.kind != FusedActivation::kNone))
    return Status::InvalidArgument("node '" + ctx.node.name +
                                   "': an integer partial sum takes no bias and no activation");
  block_cols_ = std::clamp<int64_t>(RoundUp(kPairBlockBytes / (4 * kp_), kInt16PairCols), kInt16PairCols, 512);
  block_cols_ = std::min(block_cols_, RoundUp(g_.oh * g_.ow, kInt16PairCols));
  // Depthwise (grouped, one input channel per group): the direct path. A
  // one-channel input with one group (DS-CNN's first conv, 40 taps) runs
  // faster as pairs.
  direct_ = g_.cg == 1 && g_.group > 1 && g_.oh * g_.ow > 1;
  dense_ = !direct_ && g_.h == 1 && g_.w == 1 && g_.kh == 1 && g_.kw == 1 && g_.oh == 1 && g_.ow == 1;
  // The padded plane the taps read, in sh × sw polyphase planes.
  const int64_t pad_h = (g_.oh - 1) * g_.sh + (g_.kh - 1) * g_.dh + 1;
  const int64_t pad_w = (g_.ow - 1) * g_.sw + (g_.kw - 1) * g_.dw + 1;
  phase_h_ = (pad_h + g_.sh - 1) / g_.sh;
  phase_w_ = (pad_w + g_.sw - 1) / g_.sw;

  const int64_t block_rows = std::min(ConstantBlockRows(k_), g_.o);
  const bool streamed = ctx.streamed_inputs.size() > 1 && ctx.streamed_inputs[1];
  // While reading: a streamed block's floats, and its codes and scales.
  transient_bytes_ = static_cast<size_t>((streamed ? 4 * block_rows * k_ : 0) + block_rows * (k_ + 4));
  // The form depends on the weights and on the input's scale (mult).
  uint32_t scale_bits = 0;
  std::memcpy(&scale_bits, &input_grid.scale, sizeof scale_bits);
  const std::string key = "conv-int8|g" + std::to_string(g_.group) + "|m" + std::to_string(g_.og) + "|k" +
                          std::to_string(k_) + "|s" + std::to_string(scale_bits) + (raw_ ? "|rows" : "") +
                          (direct_ ? "|direct" : "");
  Status read;
  bool made = false;
  const float in_scale = input_grid.scale;
  form_ = WeightForms::Share<Form>(
      ctx, 1, key,
      [&] {
        auto f = std::make_shared<Form>();
        if (direct_) {
          f->taps.assign(static_cast<size_t>(g_.o * k_), 0);
        } else {
          f->pairs.assign(static_cast<size_t>(g_.group * row_blocks_ * kp_ * kInt16PairRows), 0);
        }
        f->mult.assign(static_cast<size_t>(g_.o), 0.0f);
        std::vector<float> staging;
        for (int64_t o0 = 0; o0 < g_.o && f->exact; o0 += block_rows) {
          const int64_t rows = std::min(block_rows, g_.o - o0);
          auto w = ConstantRows(ctx, 1, o0, rows, k_, &staging);
          if (!w.ok()) {
            read = w.status();
            f->exact = false;
            break;
          }
          // Each row on its own (RecoverInt8Rows is per row): the same
          // scales whatever the block, and those the MCU builder stores;
          // a partial sum's codes in its full row's scale.
          std::optional<Int8Rows> q;
          if (raw_) {
            q = Int8Rows{};
            q->codes.resize(static_cast<size_t>(rows * k_));
            for (int64_t r = 0; r < rows; ++r) {
              const float s = static_cast<float>(row_scales[static_cast<size_t>(o0 + r)]);
              q->scales.push_back(s);
              for (int64_t i = 0; i < k_; ++i) {
                const float v = (*w)[r * k_ + i], code = std::nearbyint(v / s);
                const bool fits = code >= -128.0f && code <= 127.0f;
                const float back = static_cast<float>(static_cast<int8_t>(fits ? code : 0.0f)) * s;
                if (!fits || std::memcmp(&back, &v, sizeof v) != 0) q.reset();
                if (!q) break;
                q->codes[static_cast<size_t>(r * k_ + i)] = static_cast<int8_t>(code);
              }
              if (!q) break;
            }
          } else {
            q = RecoverInt8Rows(*w, rows, k_);
          }
          if (!q) {
            f->exact = false;
            break;
          }
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t o = o0 + r, grp = o / g_.og, in_group = o % g_.og;
            const int64_t rb = in_group / kInt16PairRows, lane = in_group % kInt16PairRows;
            // The same product the firmware forms (mcu_kernels.h IntegerOut's mult).
            f->mult[static_cast<size_t>(o)] = in_scale * q->scales[static_cast<size_t>(r)];
            const int8_t* codes = q->codes.data() + r * k_;
            if (direct_) {
              for (int64_t i = 0; i < k_; ++i) f->taps[static_cast<size_t>(o * k_ + i)] = codes[i];
              continue;
            }
            int32_t* dst = f->pairs.data() + ((grp * row_blocks_ + rb) * kp_) * kInt16PairRows + lane;
            for (int64_t j = 0; j < kp_; ++j) {
              const int8_t lo = codes[2 * j], hi = 2 * j + 1 < k_ ? codes[2 * j + 1] : int8_t{0};
              dst[j * kInt16PairRows] = static_cast<int32_t>(PackPair(lo, hi));
            }
          }
        }
        return f;
      },
      &made);
  TS_RETURN_IF_ERROR(read);
  const int64_t weight_words = direct_ ? g_.o * k_ : g_.group * row_blocks_ * kp_ * kInt16PairRows;
  owned_bytes_ =
      made ? static_cast<size_t>(weight_words) * sizeof(int32_t) + static_cast<size_t>(g_.o) * sizeof(float) : 0;
  if (!made) transient_bytes_ = 0;
  if (ctx.shapes_only) return true;
  const bool exact = form_ != nullptr && form_->exact;
  if (raw_ && !exact)
    return Status::InvalidArgument("node '" + ctx.node.name +
                                   "': weights without an int8 form in their rows' scales cannot be an integer "
                                   "partial sum");
  return exact;
}

// One more value than the input: a dense layer's last pair may read it (its
// weight is 0, the value is set to 0).
int64_t Int8Conv::CodeScratchValues() const { return RoundUp(g_.c * g_.h * g_.w + 1, 32); }
int64_t Int8Conv::PairScratchValues() const { return RoundUp(kp_ * block_cols_ * 2, 32); }
// The polyphase planes, and the flat sums of the whole output plane (rows
// phase_w apart; the columns past ow are junk).
int64_t Int8Conv::DirectScratchValues() const {
  // Phase planes, 16 values of slack (int16_tap_pairs reads up to 15 past a
  // plane's end), the row of int32 sums.
  return RoundUp(g_.sh * g_.sw * phase_h_ * phase_w_ + 16, 32) + RoundUp(2 * g_.oh * phase_w_, 32);
}

size_t Int8Conv::ScratchBytes() const {
  const int64_t per_thread = direct_ ? DirectScratchValues() : (dense_ ? 0 : PairScratchValues());
  return static_cast<size_t>(CodeScratchValues() + prepared_threads_ * per_thread) * sizeof(int16_t);
}

// Pair rows j = 0 … kp−1 of output columns [p0, p0 + cols): the im2col
// values at k = 2j and 2j + 1 side by side, 0 outside the input (a padded
// tap's q − z is 0), columns past `cols` up to a multiple of 16 zero.
void Int8Conv::BuildPairs(const int16_t* codes, int64_t p0, int64_t cols, int16_t* xp) const {
  const int64_t padded = RoundUp(cols, kInt16PairCols), taps = g_.kh * g_.kw;
  for (int64_t j = 0; j < kp_; ++j) {
    int16_t* row = xp + j * block_cols_ * 2;
    for (int t = 0; t < 2; ++t) {
      const int64_t k = 2 * j + t;
      if (k >= k_) {
        for (int64_t c = 0; c < padded; ++c) row[2 * c + t] = 0;
        continue;
      }
      const int64_t ic = k / taps, ky = (k % taps) / g_.kw, kx = k % g_.kw;
      const int16_t* plane = codes + ic * g_.h * g_.w;
      // Output columns ox whose input column ox·sw + off lies in [0, w).
      const int64_t off = kx * g_.dw - g_.pl;
      const int64_t ox_lo = off >= 0 ? 0 : (-off + g_.sw - 1) / g_.sw;
      const int64_t ox_hi = g_.w - off <= 0 ? 0 : std::min(g_.ow, (g_.w - off + g_.sw - 1) / g_.sw);
      int64_t oy = p0 / g_.ow, ox0 = p0 % g_.ow;
      for (int64_t c = 0; c < cols; ++oy, ox0 = 0) {  // a run of one output row at a time
        const int64_t run = std::min(g_.ow - ox0, cols - c);
        const int64_t iy = oy * g_.sh - g_.pt + ky * g_.dh;
        int16_t* dst = row + 2 * c + t;
        if (iy < 0 || iy >= g_.h) {
          for (int64_t i = 0; i < run; ++i) dst[2 * i] = 0;
        } else {
          const int16_t* src = plane + iy * g_.w + off;
          const int64_t lo = std::clamp(ox_lo - ox0, int64_t{0}, run), hi = std::clamp(ox_hi - ox0, lo, run);
          for (int64_t i = 0; i < lo; ++i) dst[2 * i] = 0;
          for (int64_t i = lo; i < hi; ++i) dst[2 * i] = src[(ox0 + i) * g_.sw];
          for (int64_t i = hi; i < run; ++i) dst[2 * i] = 0;
        }
        c += run;
      }
      for (int64_t c = cols; c < padded; ++c) row[2 * c + t] = 0;
    }
  }
}

namespace {
constexpr int64_t kMaxTapPairs = 32;  // kernels up to 8x8 sum every tap in registers (int16_tap_pairs)
}  // namespace

void Int8Conv::EvalDirect(const int16_t* codes, const float* bias, float* y, int threads, int16_t* scratch) const {
  const int64_t plane_out = g_.oh * g_.ow, taps = g_.kh * g_.kw;
  const int64_t phases = g_.sh * g_.sw, phase_size = phase_h_ * phase_w_;
  // Flat sums over the phase planes' grid: output (oy, ox) at oy·phase_w + ox.
  const int64_t n = (g_.oh - 1) * phase_w_ + g_.ow;
  ParallelFor(g_.o, threads, [&](int64_t o) {
    int16_t* phase = scratch + static_cast<int64_t>(omp_get_thread_num()) * DirectScratchValues();
    int32_t* acc = reinterpret_cast<int32_t*>(phase + RoundUp(phases * phase_size, 32));
    // The input plane (channel o / og: one per group), zero-padded and split
    // into its sh × sw polyphase planes: phase (py, px) holds padded
    // (py + sh·r, px + sw·c). Every tap then reads one phase plane with
    // stride 1, at an offset, the same for every output.
    const int16_t* plane = codes + (o / g_.og) * g_.h * g_.w;
    for (int64_t py = 0; py < g_.sh; ++py)
      for (int64_t px = 0; px < g_.sw; ++px) {
        int16_t* dst = phase + (py * g_.sw + px) * phase_size;
        for (int64_t r = 0; r < phase_h_; ++r) {
          const int64_t iy = py + g_.sh * r - g_.pt;
          int16_t* row = dst + r * phase_w_;
          if (iy < 0 || iy >= g_.h) {
            std::memset(row, 0, sizeof(int16_t) * static_cast<size_t>(phase_w_));
            continue;
          }
          const int16_t* src = plane + iy * g_.w;
          // Columns c with ix = px + sw·c − pl inside the row: [c0, c1).
          const int64_t c0 = std::min(phase_w_, std::max<int64_t>(0, (g_.pl - px + g_.sw - 1) / g_.sw));
          const int64_t last = g_.w - 1 + g_.pl - px;  // sw·c <= last (none when negative)
          const int64_t c1 = last < 0 ? c0 : std::max(c0, std::min(phase_w_, last / g_.sw + 1));
          std::memset(row, 0, sizeof(int16_t) * static_cast<size_t>(c0));
          if (g_.sw == 1) {
            std::memcpy(row + c0, src + (px + c0 - g_.pl), sizeof(int16_t) * static_cast<size_t>(c1 - c0));
          } else {
            for (int64_t c = c0; c < c1; ++c) row[c] = src[px + g_.sw * c - g_.pl];
          }
          std::memset(row + c1, 0, sizeof(int16_t) * static_cast<size_t>(phase_w_ - c1));
        }
      }
    const int32_t* k = form_->taps.data() + o * taps;
    auto tap_src = [&](int64_t t) {  // tap t's phase plane, at its offset
      const int64_t ry = (t / g_.kw) * g_.dh, rx = (t % g_.kw) * g_.dw;
      return phase + ((ry % g_.sh) * g_.sw + rx % g_.sw) * phase_size + (ry / g_.sh) * phase_w_ + rx / g_.sw;
    };
    if (taps <= kMaxTapPairs * 2) {
      // Every tap at once, two per vpmaddwd, summed in registers; an odd
      // tap count pairs the last with a weight of 0.
      const int16_t* src[kMaxTapPairs * 2];
      int32_t kpair[kMaxTapPairs];
      const int64_t pairs = (taps + 1) / 2;
      for (int64_t p = 0; p < pairs; ++p) {
        const int64_t t0 = 2 * p, t1 = std::min(2 * p + 1, taps - 1);
        const int32_t k1 = 2 * p + 1 < taps ? k[t1] : 0;
        src[2 * p] = tap_src(t0);
        src[2 * p + 1] = tap_src(t1);
        kpair[p] = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint16_t>(k[t0])) |
                                        static_cast<uint32_t>(static_cast<uint16_t>(k1)) << 16);
      }
      microkernels_->int16_tap_pairs(src, kpair, pairs, n, acc);
    } else {
      std::memset(acc, 0, sizeof(int32_t) * static_cast<size_t>(n));
      for (int64_t t = 0; t < taps; ++t)
        if (k[t] != 0) microkernels_->int16_axpy(tap_src(t), n, k[t], acc);
    }
    float* yo = y + o * plane_out;
    const float m = form_->mult[static_cast<size_t>(o)], b = bias ? bias[o] : 0.0f;
    for (int64_t oy = 0; oy < g_.oh; ++oy) {
      if (raw_) {
        std::memcpy(yo + oy * g_.ow, acc + oy * phase_w_, sizeof(int32_t) * static_cast<size_t>(g_.ow));
      } else {
        microkernels_->requant_row(acc + oy * phase_w_, g_.ow, m, b, yo + oy * g_.ow);
      }
    }
    if (!raw_) act_.Apply(yo, static_cast<size_t>(plane_out));
  });
}

void Int8Conv::EvalDense(const int16_t* codes, const float* bias, float* y) const {
  for (int64_t grp = 0; grp < g_.group; ++grp) {
    const int16_t* x = codes + grp * g_.cg;
    for (int64_t rb = 0; rb < row_blocks_; ++rb) {
      const int32_t* w = form_->pairs.data() + (grp * row_blocks_ + rb) * kp_ * kInt16PairRows;
      int32_t acc[kInt16PairRows] = {};
      microkernels_->int16_pair_dot4(w, x, kp_, acc);  // past k_: a weight of 0
      const int64_t o0 = grp * g_.og + rb * kInt16PairRows;
      const int rows = static_cast<int>(std::min<int64_t>(kInt16PairRows, g_.og - rb * kInt16PairRows));
      if (raw_) {
        std::memcpy(y + o0, acc, sizeof(int32_t) * static_cast<size_t>(rows));
      } else {
        for (int r = 0; r < rows; ++r)
          microkernels_->requant_row(acc + r, 1, form_->mult[static_cast<size_t>(o0 + r)], bias ? bias[o0 + r] : 0.0f,
                                     y + o0 + r);
      }
    }
  }
  if (!raw_) act_.Apply(y, static_cast<size_t>(g_.o));
}

void Int8Conv::Eval(const EvalContext& ctx) const {
  const int threads = std::max(1, std::min(ctx.threads, prepared_threads_));
  const int64_t plane_in = g_.c * g_.h * g_.w, plane_out = g_.oh * g_.ow;
  const int64_t blocks = (plane_out + block_cols_ - 1) / block_cols_;
  int16_t* codes = reinterpret_cast<int16_t*>(ctx.scratch);
  int16_t* pair_scratch = codes + CodeScratchValues();
  const float* bias = has_bias_ ? ctx.inputs[2] : nullptr;
  static const float kZeros[kInt16PairRows] = {};
  for (int64_t img = 0; img < g_.n; ++img) {
    const float* x = ctx.inputs[0] + img * plane_in;
    float* y = ctx.outputs[0] + img * g_.o * plane_out;
    // Codes less the zero point: x · (1/scale) rounded (x is on the grid),
    // clamped to the grid's range so that no sum can overflow.
    constexpr int64_t kChunk = 4096;
    ParallelFor((plane_in + kChunk - 1) / kChunk, threads, [&](int64_t ch) {
      const int64_t end = std::min(plane_in, (ch + 1) * kChunk);
      microkernels_->codes_of(x + ch * kChunk, end - ch * kChunk, inv_scale_, lo_, hi_, codes + ch * kChunk);
    });
    codes[plane_in] = 0;  // read by a dense layer's last pair (weight 0)
    if (direct_) {
      EvalDirect(codes, bias, y, threads, pair_scratch);
      continue;
    }
    if (dense_) {
      EvalDense(codes, bias, y);
      continue;
    }
    ParallelFor(g_.group * blocks, threads, [&](int64_t task) {
      const int64_t grp = task / blocks, p0 = (task % blocks) * block_cols_;
      const int64_t cols = std::min(block_cols_, plane_out - p0);
      int16_t* xp = pair_scratch + static_cast<int64_t>(omp_get_thread_num()) * PairScratchValues();
      BuildPairs(codes + grp * g_.cg * g_.h * g_.w, p0, cols, xp);
      for (int64_t rb = 0; rb < row_blocks_; ++rb) {
        const int64_t o0 = grp * g_.og + rb * kInt16PairRows;
        const int rows = static_cast<int>(std::min<int64_t>(kInt16PairRows, g_.og - rb * kInt16PairRows));
        Int16PairGemmArgs a;
        a.w = form_->pairs.data() + (grp * row_blocks_ + rb) * kp_ * kInt16PairRows;
        a.kp = kp_;
        a.x_stride = block_cols_ * 2;
        a.mult = form_->mult.data() + o0;
        float b[kInt16PairRows] = {};
        std::memcpy(b, bias ? bias + o0 : kZeros, sizeof(float) * static_cast<size_t>(rows));
        a.bias = b;
        a.ldy = plane_out;
        a.rows = rows;
        a.raw = raw_;
        for (int64_t c0 = 0; c0 < cols; c0 += kInt16PairCols) {
          a.x = xp + c0 * 2;
          a.y = y + o0 * plane_out + p0 + c0;
          a.cols = static_cast<int>(std::min<int64_t>(kInt16PairCols, cols - c0));
          microkernels_->int16_pair_gemm(a);
        }
        if (act_.kind != FusedActivation::kNone)
          for (int r = 0; r < rows; ++r) act_.Apply(y + (o0 + r) * plane_out + p0, static_cast<size_t>(cols));
      }
    });
  }
}

}  // namespace tessera
