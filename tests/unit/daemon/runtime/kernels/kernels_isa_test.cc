// The per-ISA microkernels (daemon/runtime/kernels/microkernels.h) against plain
// reference loops, for every level this CPU supports, over the shapes that
// exercise their edges: partial panels (1..8 rows), column tails of every
// length up to three full tiles, short and long depths, clamp on and off.
// Tolerance: 1e-5 relative to the largest |value| of the row (the levels
// differ only in fma vs mul+add rounding and summation is in the same order).
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "daemon/runtime/executor.h"
#include "daemon/runtime/kernels/isa.h"
#include "daemon/runtime/kernels/microkernels.h"
#include "daemon/runtime/kernels/packed_gemm.h"
#include "tests/unit/daemon/runtime/kernels/kernels_testing.h"

namespace tessera {
namespace {

std::vector<float> Random(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

void CheckClose(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  float scale = 1e-6f;
  for (float w : want) scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("index " << i << " got " << got[i] << " want " << want[i]);
    REQUIRE(std::fabs(got[i] - want[i]) <= 1e-5f * scale);
  }
}

// Every epilogue kind (microkernels.h), each with the parameters a model uses.
std::vector<Epilogue> AllEpilogues() {
  std::vector<Epilogue> all(7);
  all[1].kind = Epilogue::kClamp, all[1].lo = -0.5f, all[1].hi = 0.75f;
  all[2].kind = Epilogue::kSigmoid;
  all[3].kind = Epilogue::kSilu;
  all[4].kind = Epilogue::kHardSigmoid, all[4].alpha = 0.2f, all[4].beta = 0.5f;
  all[5].kind = Epilogue::kHardSwish, all[5].alpha = 1.f / 6.f, all[5].beta = 0.5f;
  all[6].kind = Epilogue::kLeaky, all[6].alpha = 0.1f;  // darknet's leaky
  return all;
}

double ApplyEpilogue(double x, const Epilogue& e) {
  switch (e.kind) {
    case Epilogue::kNone:
      return x;
    case Epilogue::kClamp:
      return std::min<double>(std::max<double>(x, e.lo), e.hi);
    case Epilogue::kLeaky:
      return x < 0 ? e.alpha * x : x;
    case Epilogue::kSigmoid:
      return 1.0 / (1.0 + std::exp(-x));
    case Epilogue::kSilu:
      return x / (1.0 + std::exp(-x));
    case Epilogue::kHardSigmoid:
      return std::clamp(e.alpha * x + e.beta, 0.0, 1.0);
    case Epilogue::kHardSwish:
      return x * std::clamp(e.alpha * x + e.beta, 0.0, 1.0);
  }
  return x;
}

// want[r·ldc + j] = epilogue(bias[r] + Σ_i a[r·k + i] · b[i·ldb + j]), in double.
void ReferenceProduct(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& bias,
                      int64_t rows, int64_t k, int64_t n, int64_t ldb, int64_t ldc, const Epilogue& epilogue,
                      std::vector<float>* want) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) {
      double acc = bias[r];
      for (int64_t i = 0; i < k; ++i) acc += double(a[r * k + i]) * b[i * ldb + j];
      (*want)[r * ldc + j] = static_cast<float>(ApplyEpilogue(acc, epilogue));
    }
}

// C = A·B + bias over all of `packed`'s rows (its first panel onward).
GemmPanelArgs PanelArgs(const PackedMatrix& packed, const std::vector<float>& b, int64_t ldb, int64_t n,
                        std::vector<float>& c, int64_t ldc, int64_t rows, const std::vector<float>& bias,
                        const Epilogue& epilogue) {
  GemmPanelArgs g;
  g.a = packed.Panel(0);
  g.b = b.data();
  g.ldb = ldb;
  g.k = packed.depth();
  g.n = n;
  g.c = c.data();
  g.ldc = ldc;
  g.rows = static_cast<int>(rows);
  g.bias = bias.data();
  g.epilogue = epilogue;
  return g;
}

// The same product as `g`, one 8-row panel of `packed` per call, into `one`
// (laid out like g.c): what a blocked or multi-panel call must equal.
void PanelByPanel(const Microkernels& mk, const GemmPanelArgs& g, const PackedMatrix& packed, const float* bias,
                  int64_t rows, std::vector<float>* one) {
  const int64_t panels = (rows + kPanelRows - 1) / kPanelRows;
  for (int64_t p = 0; p < panels; ++p) {
    GemmPanelArgs gp = g;
    gp.a = packed.Panel(p);
    gp.c = one->data() + p * kPanelRows * g.ldc;
    gp.bias = bias + p * kPanelRows;
    gp.rows = static_cast<int>(std::min<int64_t>(kPanelRows, rows - p * kPanelRows));
    mk.gemm_panel(gp);
  }
}

TEST_CASE("isa names parse back and the detected level is supported", "[kernels][isa]") {
  for (Isa isa : {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512}) {
    auto parsed = ParseIsa(IsaName(isa));
    REQUIRE(parsed.ok());
    CHECK(*parsed == isa);
  }
  CHECK_FALSE(ParseIsa("avx9000").ok());
  const std::vector<Isa> supported = SupportedIsas();
  REQUIRE(!supported.empty());
  CHECK(supported.front() == Isa::kBaseline);
  CHECK(supported.back() == DetectedIsa());
  if (DetectedIsa() != Isa::kAvx512) CHECK_FALSE(SetActiveIsa(Isa::kAvx512).ok());  // refused, not granted
}

TEST_CASE("every ISA's GEMM panel equals the reference product", "[kernels][isa]") {
  std::mt19937 rng(11);
  for (Isa isa : SupportedIsas()) {
    const Microkernels& mk = MicrokernelsFor(isa);
    CHECK(mk.isa == isa);
    for (int64_t rows : {1, 3, 4, 5, 8})
      for (int64_t k : {1, 7, 64})
        for (int64_t n : {1, 7, 8, 12, 15, 16, 23, 24, 31, 47, 48, 49, 63, 75})
          for (const Epilogue& epilogue : AllEpilogues()) {
            INFO("ISA " << IsaName(isa) << " rows " << rows << " k " << k << " n " << n << " epilogue "
                        << static_cast<int>(epilogue.kind));
            const int64_t ldb = n + 3, ldc = n + 5;
            std::vector<float> a = Random(static_cast<size_t>(rows * k), rng);
            std::vector<float> b = Random(static_cast<size_t>(k * ldb), rng);
            std::vector<float> bias = Random(static_cast<size_t>(rows), rng);
            PackedMatrix packed;
            packed.Pack(a.data(), rows, k, k);
            // Sentinels around C catch stores outside the rows × n block.
            std::vector<float> c(static_cast<size_t>(kPanelRows * ldc), 7.f), want = c;
            const GemmPanelArgs g = PanelArgs(packed, b, ldb, n, c, ldc, rows, bias, epilogue);
            mk.gemm_panel(g);
            ReferenceProduct(a, b, bias, rows, k, n, ldb, ldc, epilogue, &want);
            CheckClose(c, want);
          }
  }
}

// The K-blocked levels (panels_per_call 0, microkernels_gemm_blocked.inc)
// take a run of panels in one call and pack B in blocks of 256 rows (AVX-512:
// 128): depths on both sides of one and two block boundaries, runs ending in
// a partial panel, column tails of 9-15 (AVX-512's zero-padded vector), an A
// past AVX-512's 48 Ki floats (Microkernels::blocked_max_a: run panel by
// panel) and depths within one block (AVX-512: B read in place), and sums
// that must be bit-identical to one panel per call and to the same B read
// through row offsets (the indirect im2col; always K-blocked): each output
// is summed over k in the same order every way. Narrow tails of 1-5 columns
// run several panels at a time (up to 8 independent accumulator chains);
// 49 = 48 + 1 columns with a large A take the last column inside the last
// tile's k loop (AVX-512's GemmTile<3, true>). Tag [sweep]: 840 shapes per
// level, left out on emulated CPUs (tests/CMakeLists.txt cpu_*;
// cpu_Haswell.kernels_isa_test took 256 s with it, 74 s without), where
// the panel cases above and the large-A case below run the same
// microkernels on fewer shapes; the host runs it for every level.
TEST_CASE("every K-blocked ISA's GEMM over a run of panels equals the reference product", "[kernels][isa][sweep]") {
  std::mt19937 rng(13);
  int levels = 0;
  for (Isa isa : SupportedIsas()) {
    const Microkernels& mk = MicrokernelsFor(isa);
    if (mk.panels_per_call != 0) continue;
    ++levels;
    for (int64_t rows : {9, 16, 21, 40, 96})
      for (int64_t k : {100, 128, 129, 255, 256, 257, 600})
        for (int64_t n : {1, 2, 3, 5, 7, 24, 40, 49, 50, 53, 61, 63})
          for (const Epilogue& epilogue : {AllEpilogues()[0], AllEpilogues()[3]}) {
            INFO("ISA " << IsaName(isa) << " rows " << rows << " k " << k << " n " << n << " epilogue "
                        << static_cast<int>(epilogue.kind));
            const int64_t ldb = n + 3, ldc = n + 5, panels = (rows + kPanelRows - 1) / kPanelRows;
            std::vector<float> a = Random(static_cast<size_t>(rows * k), rng);
            std::vector<float> b = Random(static_cast<size_t>(k * ldb), rng);
            std::vector<float> bias = Random(static_cast<size_t>(rows), rng);
            PackedMatrix packed;
            packed.Pack(a.data(), rows, k, k);
            std::vector<float> c(static_cast<size_t>((panels * kPanelRows + 1) * ldc), 7.f), want = c, one = c;
            const GemmPanelArgs g = PanelArgs(packed, b, ldb, n, c, ldc, rows, bias, epilogue);
            mk.gemm_panel(g);
            PanelByPanel(mk, g, packed, bias.data(), rows, &one);
            std::vector<int64_t> b_rows(static_cast<size_t>(k));
            for (int64_t i = 0; i < k; ++i) b_rows[i] = i * ldb;
            std::vector<float> indirect(c.size(), 7.f);
            GemmPanelArgs gi = g;
            gi.c = indirect.data();
            gi.b_rows = b_rows.data();
            gi.ldb = 0;
            mk.gemm_panel(gi);
            ReferenceProduct(a, b, bias, rows, k, n, ldb, ldc, epilogue, &want);
            CheckClose(c, want);  // the 7s past the last row and column are still there
            REQUIRE(c == one);
            REQUIRE(c == indirect);
          }
  }
  CHECK(levels >= 1);  // baseline is K-blocked on every CPU
}

TEST_CASE("every ISA's depthwise taps equal the reference loop", "[kernels][isa]") {
  std::mt19937 rng(12);
  for (Isa isa : SupportedIsas()) {
    const Microkernels& mk = MicrokernelsFor(isa);
    for (int taps : {1, 4, 9, 25})
      for (int64_t count : {1, 5, 8, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 100, 130})
        for (const Epilogue& epilogue : AllEpilogues()) {
          INFO("ISA " << IsaName(isa) << " taps " << taps << " count " << count << " epilogue "
                      << static_cast<int>(epilogue.kind));
          std::vector<int64_t> offsets(static_cast<size_t>(taps));
          for (int t = 0; t < taps; ++t) offsets[t] = (t % 5) + 11 * (t / 5);
          const int64_t span = count + offsets.back() + 1;
          std::vector<float> poly = Random(static_cast<size_t>(span), rng);
          std::vector<float> kernel = Random(static_cast<size_t>(taps), rng);
          std::vector<float> out(static_cast<size_t>(count + 16), 7.f), want = out;
          DepthwiseTapArgs d;
          d.poly = poly.data();
          d.offsets = offsets.data();
          d.kernel = kernel.data();
          d.taps = taps;
          d.bias = 0.25f;
          d.epilogue = epilogue;
          d.count = count;
          d.out = out.data();
          mk.depthwise_taps(d);
          for (int64_t q = 0; q < count; ++q) {
            double acc = d.bias;
            for (int t = 0; t < taps; ++t) acc += double(kernel[t]) * poly[q + offsets[t]];
            want[q] = static_cast<float>(ApplyEpilogue(acc, epilogue));
          }
          CheckClose(out, want);
        }
  }
}

// The row-blocked depthwise plane over a random polyphase plane: every
// kernel size and stride it takes, rows around its block of 4, widths
// around every level's vector (overlapped and lane-by-lane tails), the
// epilogues in turn (each case one, to stay short in the emulated-CPU
// runs). The 7s around the output must stay.
TEST_CASE("every ISA's depthwise rows equal the reference tap sum", "[kernels][isa]") {
  std::mt19937 rng(19);
  const std::vector<Epilogue> epilogues = AllEpilogues();
  for (Isa isa : SupportedIsas()) {
    const Microkernels& mk = MicrokernelsFor(isa);
    REQUIRE(mk.depthwise_rows != nullptr);
    size_t turn = 0;
    for (int size : {3, 5})
      for (int stride : {1, 2})
        for (int64_t rows : {1, 2, 3, 5, 9})
          for (int64_t width : {1, 4, 7, 8, 9, 15, 16, 17, 33}) {
            const Epilogue& epilogue = epilogues[turn++ % epilogues.size()];
            INFO("ISA " << IsaName(isa) << " size " << size << " stride " << stride << " rows " << rows << " width "
                        << width << " epilogue " << static_cast<int>(epilogue.kind));
            const int64_t ws = width + (size - 1) / stride + 1;  // one spare column
            const int64_t sub_h = rows + (size - 1) / stride;
            const int64_t sub_size = (sub_h + 1) * ws + 16;  // a spare row, and 16 for the lanes past a narrow row
            std::vector<float> poly = Random(static_cast<size_t>(stride * stride * sub_size), rng);
            std::vector<float> kernel = Random(static_cast<size_t>(size * size), rng);
            std::vector<float> out(static_cast<size_t>(rows * width + 16), 7.f), want = out;
            DepthwiseRowsArgs d;
            d.poly = poly.data();
            d.sub_size = sub_size;
            d.ws = ws;
            d.kernel = kernel.data();
            d.size = size;
            d.stride = stride;
            d.bias = -0.125f;
            d.epilogue = epilogue;
            d.rows = rows;
            d.width = width;
            d.out = out.data();
            mk.depthwise_rows(d);
            for (int64_t r = 0; r < rows; ++r)
              for (int64_t c = 0; c < width; ++c) {
                double acc = d.bias;
                for (int i = 0; i < size; ++i)
                  for (int j = 0; j < size; ++j)
                    acc +=
                        double(kernel[i * size + j]) *
                        poly[((i % stride) * stride + j % stride) * sub_size + (r + i / stride) * ws + c + j / stride];
                want[r * width + c] = static_cast<float>(ApplyEpilogue(acc, epilogue));
              }
            CheckClose(out, want);
          }
  }
}

// The channels-in-lanes depthwise block straight from NCHW planes: every
// size and stride it takes, 1 .. lanes channels, planes narrower and wider
// than a vector, one band and several (a scratch reused for a second block,
// as a worker does, so stale rows must not leak), the epilogues in turn.
// The 7s between and after the output planes must stay.
TEST_CASE("every ISA's depthwise channel blocks equal the reference tap sum", "[kernels][isa]") {
  std::mt19937 rng(21);
  const std::vector<Epilogue> epilogues = AllEpilogues();
  struct Plane {
    int64_t h, w, pt, pl, pb, pr;
  };
  const std::vector<Plane> planes = {{1, 1, 1, 1, 1, 1},   {7, 7, 1, 1, 1, 1},  {5, 9, 0, 2, 2, 0},
                                     {14, 14, 2, 2, 2, 2}, {17, 3, 1, 0, 2, 1}, {120, 40, 1, 2, 2, 1}};
  for (Isa isa : SupportedIsas()) {
    const Microkernels& mk = MicrokernelsFor(isa);
    REQUIRE(mk.depthwise_channels != nullptr);
    const int lanes = mk.depthwise_channel_lanes;
    size_t turn = 0;
    for (int size : {3, 5})
      for (int stride : {1, 2})
        for (const Plane& pl : planes) {
          const int64_t hp = pl.h + pl.pt + pl.pb, wp = pl.w + pl.pl + pl.pr;
          if (hp < size || wp < size) continue;
          const int64_t oh = (hp - size) / stride + 1, ow = (wp - size) / stride + 1;
          // Bands as large as a conv gives, or of one row (a tight budget).
          const int64_t band =
              DepthwiseChannelsBandRows(turn % 2 == 0 ? kDepthwiseBandBytes : 0, pl.w, pl.pl, oh, ow, size, stride);
          const DepthwiseChannelsShape shape = DepthwiseChannelsShapeFor(lanes, pl.w, pl.pl, ow, size, stride, band);
          std::vector<float> scratch(static_cast<size_t>(shape.total_floats), 3.f);
          bool clear = true;
          for (int channels : {lanes, 1, lanes - 1}) {
            if (channels < 1) continue;
            const Epilogue& epilogue = epilogues[turn++ % epilogues.size()];
            INFO("ISA " << IsaName(isa) << " size " << size << " stride " << stride << " plane " << pl.h << "x" << pl.w
                        << " pads " << pl.pt << "," << pl.pl << "," << pl.pb << "," << pl.pr << " channels " << channels
                        << " bands of " << shape.band_rows << " epilogue " << static_cast<int>(epilogue.kind));
            const int64_t in_plane = pl.h * pl.w + 3, out_plane = oh * ow + 5;  // gaps between planes
            std::vector<float> x = Random(static_cast<size_t>(channels * in_plane), rng);
            std::vector<float> kernel = Random(static_cast<size_t>(channels * size * size), rng);
            std::vector<float> bias = Random(static_cast<size_t>(channels), rng);
            std::vector<float> out(static_cast<size_t>(channels * out_plane + 16), 7.f), want = out;
            DepthwiseChannelsArgs d;
            d.x = x.data();
            d.in_plane = in_plane;
            d.h = pl.h;
            d.w = pl.w;
            d.channels = channels;
            d.kernel = kernel.data();
            d.bias = channels == 1 ? nullptr : bias.data();
            d.size = size;
            d.stride = stride;
            d.pad_top = pl.pt;
            d.pad_left = pl.pl;
            d.oh = oh;
            d.ow = ow;
            d.epilogue = epilogue;
            d.scratch = scratch.data();
            d.clear = clear;
            d.out = out.data();
            d.out_plane = out_plane;
            d.band_rows = band;
            mk.depthwise_channels(d);
            clear = false;
            for (int c = 0; c < channels; ++c)
              for (int64_t r = 0; r < oh; ++r)
                for (int64_t q = 0; q < ow; ++q) {
                  double acc = d.bias ? bias[c] : 0.0;
                  for (int i = 0; i < size; ++i)
                    for (int j = 0; j < size; ++j) {
                      const int64_t ih = r * stride + i - pl.pt, iw = q * stride + j - pl.pl;
                      if (ih < 0 || ih >= pl.h || iw < 0 || iw >= pl.w) continue;
                      acc += double(kernel[(c * size + i) * size + j]) * x[c * in_plane + ih * pl.w + iw];
                    }
                  want[c * out_plane + r * ow + q] = static_cast<float>(ApplyEpilogue(acc, epilogue));
                }
            CheckClose(out, want);
          }
        }
  }
}

TEST_CASE("every ISA's dot rows equal the reference matrix-vector product", "[kernels][isa]") {
  std::mt19937 rng(13);
  for (Isa isa : SupportedIsas()) {
    const Microkernels& mk = MicrokernelsFor(isa);
    for (int64_t m : {1, 3, 4, 5, 9})
      for (int64_t k : {1, 7, 8, 15, 16, 17, 33, 100}) {
        INFO("ISA " << IsaName(isa) << " m " << m << " k " << k);
        const int64_t lda = k + 3;
        std::vector<float> a = Random(static_cast<size_t>(m * lda), rng);
        std::vector<float> x = Random(static_cast<size_t>(k), rng);
        std::vector<float> y(static_cast<size_t>(m + 2), 7.f), want = y;
        DotRowsArgs d;
        d.a = a.data();
        d.lda = lda;
        d.x = x.data();
        d.k = k;
        d.m = m;
        d.y = y.data();
        mk.dot_rows(d);
        for (int64_t r = 0; r < m; ++r) {
          double acc = 0;
          for (int64_t i = 0; i < k; ++i) acc += double(a[r * lda + i]) * x[i];
          want[r] = static_cast<float>(acc);
        }
        CheckClose(y, want);
      }
  }
}

// A weight matrix larger than AVX-512's in-place limit (GemmPanelsAny)
// against B several tiles wide: a strip of a wider matrix (ldb far beyond
// n: K-blocked on runs of panels, two runs here) and a whole one (in
// place, panel by panel, prefetching A). Every level: the reference
// product, and the same bits as one call per panel.
TEST_CASE("every K-blocked ISA's GEMM with a large A over wide B equals the reference product", "[kernels][isa]") {
  std::mt19937 rng(17);
  for (Isa isa : SupportedIsas()) {
    const Microkernels& mk = MicrokernelsFor(isa);
    if (mk.panels_per_call != 0) continue;
    const int64_t rows = 403, k = 300;
    std::vector<float> a = Random(static_cast<size_t>(rows * k), rng);
    std::vector<float> bias = Random(static_cast<size_t>(rows), rng);
    PackedMatrix packed;
    packed.Pack(a.data(), rows, k, k);
    const int64_t panels = (rows + kPanelRows - 1) / kPanelRows;
    for (int64_t n : {200, 251})
      for (int64_t ldb : {n + 3, int64_t{784}}) {
        INFO("ISA " << IsaName(isa) << " n " << n << " ldb " << ldb);
        const int64_t ldc = n + 5;
        Epilogue epilogue = AllEpilogues()[1];
        std::vector<float> b = Random(static_cast<size_t>(k * ldb), rng);
        std::vector<float> c(static_cast<size_t>((panels * kPanelRows + 1) * ldc), 7.f), want = c, one = c;
        const GemmPanelArgs g = PanelArgs(packed, b, ldb, n, c, ldc, rows, bias, epilogue);
        mk.gemm_panel(g);
        PanelByPanel(mk, g, packed, bias.data(), rows, &one);
        ReferenceProduct(a, b, bias, rows, k, n, ldb, ldc, epilogue, &want);
        CheckClose(c, want);
        REQUIRE(c == one);
      }
  }
}

TEST_CASE("every ISA's deinterleave splits even and odd positions and writes nothing past them", "[kernels][isa]") {
  std::mt19937 rng(14);
  for (Isa isa : SupportedIsas()) {
    const Microkernels& mk = MicrokernelsFor(isa);
    for (int64_t n = 0; n <= 70; ++n) {
      INFO("ISA " << IsaName(isa) << " n " << n);
      std::vector<float> src = Random(static_cast<size_t>(n), rng);
      std::vector<float> even(40, 7.f), odd(40, 7.f);
      mk.deinterleave(src.data(), n, even.data(), odd.data());
      for (int64_t i = 0; i < 40; ++i) {
        REQUIRE(even[i] == (2 * i < n ? src[2 * i] : 7.f));
        REQUIRE(odd[i] == (2 * i + 1 < n ? src[2 * i + 1] : 7.f));
      }
    }
  }
}

// max_of is std::max element by element, NaN included (a NaN second operand
// keeps the first, a NaN first stays), in place over either source, and
// writes nothing past n.
TEST_CASE("every ISA's max_of is std::max per element, NaN and aliasing included", "[kernels][isa]") {
  std::mt19937 rng(15);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (Isa isa : SupportedIsas()) {
    const Microkernels& mk = MicrokernelsFor(isa);
    REQUIRE(mk.max_of != nullptr);
    for (int64_t n = 0; n <= 50; ++n) {
      INFO("ISA " << IsaName(isa) << " n " << n);
      std::vector<float> a = Random(static_cast<size_t>(n), rng), b = Random(static_cast<size_t>(n), rng);
      for (int64_t i = 0; i < n; i += 7) (i % 2 ? a : b)[i] = nan;
      if (n > 3) a[3] = b[3] = -std::numeric_limits<float>::infinity();
      std::vector<float> want(static_cast<size_t>(n) + 4, 7.f), got = want;
      for (int64_t i = 0; i < n; ++i) want[i] = std::max(a[i], b[i]);
      mk.max_of(got.data(), a.data(), b.data(), n);
      for (size_t i = 0; i < want.size(); ++i) {
        INFO("i " << i);
        REQUIRE((std::isnan(got[i]) ? std::isnan(want[i]) : got[i] == want[i]));
      }
      std::vector<float> in_a = a, in_b = b;  // dst aliasing a, then b
      mk.max_of(in_a.data(), in_a.data(), b.data(), n);
      mk.max_of(in_b.data(), a.data(), in_b.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        REQUIRE((std::isnan(in_a[i]) ? std::isnan(want[i]) : in_a[i] == want[i]));
        REQUIRE((std::isnan(in_b[i]) ? std::isnan(want[i]) : in_b[i] == want[i]));
      }
    }
  }
}

// max3_stride2 is the std::max chain over each 3-wide stride-2 window, NaN
// and -inf included, for every output count up to three AVX-512 steps plus
// tails; it reads v[0 .. 2n] only (NaN past them would show) and writes
// nothing past n.
TEST_CASE("every ISA's max3_stride2 is the std::max chain over 3-wide stride-2 windows", "[kernels][isa]") {
  std::mt19937 rng(16);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (Isa isa : SupportedIsas()) {
    const Microkernels& mk = MicrokernelsFor(isa);
    REQUIRE(mk.max3_stride2 != nullptr);
    for (int64_t n = 0; n <= 50; ++n) {
      INFO("ISA " << IsaName(isa) << " n " << n);
      std::vector<float> v = Random(static_cast<size_t>(2 * n + 1), rng);
      for (int64_t i = 5; i < 2 * n + 1; i += 11) v[i] = nan;
      for (int64_t i = 2; i < 2 * n + 1; i += 13) v[i] = -std::numeric_limits<float>::infinity();
      std::vector<float> padded = v;
      padded.resize(v.size() + 40, nan);  // past v[2n]: must not be read into any result
      std::vector<float> want(static_cast<size_t>(n) + 20, 7.f), got = want;
      for (int64_t o = 0; o < n; ++o) want[o] = std::max(std::max(v[2 * o], v[2 * o + 1]), v[2 * o + 2]);
      mk.max3_stride2(padded.data(), n, got.data());
      for (size_t i = 0; i < want.size(); ++i) {
        INFO("i " << i);
        REQUIRE((std::isnan(got[i]) ? std::isnan(want[i]) : got[i] == want[i]));
      }
    }
  }
}

// Sigmoid and SiLU (microkernels_logistic.inc) against double-precision
// formulas: relative error <= 1e-6 (Taylor exp to r^6 is < 2e-7), on every
// length up to three vectors of 16 (tails) and on extreme inputs.
TEST_CASE("every ISA's logistic equals 1/(1+e^-x) and x/(1+e^-x)", "[kernels][isa]") {
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> u(-20.f, 20.f);
  for (Isa isa : SupportedIsas()) {
    const Microkernels& mk = MicrokernelsFor(isa);
    for (bool silu : {false, true})
      for (int64_t n : {1, 3, 4, 7, 8, 15, 16, 17, 33, 48, 200}) {
        std::vector<float> x(static_cast<size_t>(n) + 4, 123.f);
        for (int64_t i = 0; i < n; ++i) x[i] = u(rng);
        if (n >= 8) {
          const float extremes[] = {-200.f, -87.5f, -30.f, 0.f, 1e-8f, 30.f, 88.5f, 200.f};
          for (int k = 0; k < 8; ++k) x[k] = extremes[k];
        }
        std::vector<float> y = x;
        mk.logistic(y.data(), n, silu);
        for (int64_t i = 0; i < n; ++i) {
          const double s = 1.0 / (1.0 + std::exp(-static_cast<double>(x[i])));
          const double want = silu ? x[i] * s : s;
          INFO("ISA " << IsaName(isa) << " silu " << silu << " n " << n << " x " << x[i] << " got " << y[i]);
          // Below 1e-30 (x < -69) the clamp at -87 keeps values tiny, not exact.
          REQUIRE(std::fabs(y[i] - want) <= 1e-6 * std::fabs(want) + 1e-30);
        }
        for (size_t i = static_cast<size_t>(n); i < x.size(); ++i) REQUIRE(y[i] == 123.f);  // nothing past n
      }
  }
}

}  // namespace
}  // namespace tessera
