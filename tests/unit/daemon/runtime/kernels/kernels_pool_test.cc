// MaxPool / AveragePool against a direct window loop written from the ONNX
// definition, plus hand-computed ceil_mode and count_include_pad cases, and
// the global pools.
#include <omp.h>

#include <atomic>
#include <chrono>
#include <limits>
#include <thread>
#include <vector>

#include "daemon/runtime/kernels/isa.h"
#include "daemon/runtime/kernels/parallel_for.h"
#include "tests/unit/daemon/runtime/kernels/kernels_testing.h"

namespace tessera {
namespace {

using testing::Activation;
using testing::ExpectClose;
using testing::RandomValues;
using testing::RunNode;

struct PoolCase {
  int64_t n = 1, c = 2, h = 7, w = 7, kh = 3, kw = 3, sh = 1, sw = 1, dh = 1, dw = 1;
  int64_t pt = 0, pl = 0, pb = 0, pr = 0;
  bool ceil_mode = false, include_pad = false;
  int64_t Out(int64_t in, int64_t p0, int64_t p1, int64_t k, int64_t s, int64_t d) const {
    const int64_t span = in + p0 + p1 - ((k - 1) * d + 1);
    if (!ceil_mode) return span / s + 1;
    int64_t out = (span + s - 1) / s + 1;
    if ((out - 1) * s >= in + p0) --out;  // last window must start inside input or leading pad
    return out;
  }
  int64_t OutH() const { return Out(h, pt, pb, kh, sh, dh); }
  int64_t OutW() const { return Out(w, pl, pr, kw, sw, dw); }
  Attributes Attrs() const {
    Attributes a;
    a.Set("kernel_shape", std::vector<int64_t>{kh, kw});
    a.Set("strides", std::vector<int64_t>{sh, sw});
    a.Set("dilations", std::vector<int64_t>{dh, dw});
    a.Set("pads", std::vector<int64_t>{pt, pl, pb, pr});
    a.Set("ceil_mode", int64_t{ceil_mode});
    a.Set("count_include_pad", int64_t{include_pad});
    return a;
  }
};

std::vector<double> ReferencePool(const PoolCase& k, const std::vector<float>& x, bool is_max) {
  const int64_t oh_n = k.OutH(), ow_n = k.OutW();
  std::vector<double> y;
  for (int64_t p = 0; p < k.n * k.c; ++p)
    for (int64_t oh = 0; oh < oh_n; ++oh)
      for (int64_t ow = 0; ow < ow_n; ++ow) {
        double mx = -std::numeric_limits<double>::infinity(), sum = 0;
        int64_t valid = 0, padded = 0;
        for (int64_t i = 0; i < k.kh; ++i)
          for (int64_t j = 0; j < k.kw; ++j) {
            const int64_t ih = oh * k.sh - k.pt + i * k.dh, iw = ow * k.sw - k.pl + j * k.dw;
            if (ih >= -k.pt && ih < k.h + k.pb && iw >= -k.pl && iw < k.w + k.pr) ++padded;
            if (ih < 0 || ih >= k.h || iw < 0 || iw >= k.w) continue;
            const double v = x[(p * k.h + ih) * k.w + iw];
            mx = std::max(mx, v);
            sum += v;
            ++valid;
          }
        y.push_back(is_max ? mx : sum / (k.include_pad ? padded : valid));
      }
  return y;
}

PoolCase RandomPool(std::mt19937& rng, bool allow_dilation) {
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  PoolCase k;
  k.n = pick(1, 2);
  k.c = pick(1, 3);
  k.kh = pick(1, 4);
  k.kw = pick(1, 4);
  k.sh = pick(1, 3);
  k.sw = pick(1, 3);
  if (allow_dilation) {
    k.dh = pick(1, 2);
    k.dw = pick(1, 2);
  }
  // ONNX requires pads smaller than the kernel.
  k.pt = pick(0, k.kh - 1);
  k.pb = pick(0, k.kh - 1);
  k.pl = pick(0, k.kw - 1);
  k.pr = pick(0, k.kw - 1);
  k.h = pick(k.dh * (k.kh - 1) + 1, 13);
  k.w = pick(k.dw * (k.kw - 1) + 1, 13);
  k.ceil_mode = pick(0, 1) == 1;
  k.include_pad = pick(0, 1) == 1;
  return k;
}

TEST_CASE("max pooling matches the window reference incl. dilation and ceil mode", "[kernels][pool]") {
  std::mt19937 rng(31);
  for (int trial = 0; trial < 80; ++trial) {
    PoolCase k = RandomPool(rng, true);
    INFO("trial " << trial << " k" << k.kh << "x" << k.kw << " s" << k.sh << "," << k.sw << " ceil " << k.ceil_mode);
    auto x = RandomValues(k.n * k.c * k.h * k.w, rng);
    auto run = RunNode("MaxPool", k.Attrs(), {Activation({k.n, k.c, k.h, k.w}, x)}, {{k.n, k.c, k.OutH(), k.OutW()}},
                       trial % 3 == 0 ? 2 : 1);
    REQUIRE(run.status.ok());
    ExpectClose(run.outputs[0], ReferencePool(k, x, true), 0, 0);
  }
}

// The 3x3/2 max pool of squeezenet and googlenet (ceil mode, pads 0 or 1)
// runs its column pass through the level's max3_stride2 (microkernels.h):
// planes wide enough for several vector steps plus a tail, on every ISA.
TEST_CASE("3x3 stride-2 max pooling matches the window reference on every ISA", "[kernels][pool]") {
  std::mt19937 rng(35);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const Isa initial = ActiveIsa();
  for (Isa isa : SupportedIsas()) {
    REQUIRE(SetActiveIsa(isa).ok());
    for (int trial = 0; trial < 24; ++trial) {
      PoolCase k;
      k.n = 1, k.c = pick(1, 3), k.kh = k.kw = 3, k.sh = k.sw = 2;
      k.pt = k.pl = k.pb = k.pr = trial % 3 == 2 ? 1 : 0;
      k.ceil_mode = trial % 2 == 0;
      k.h = pick(3, 30);
      k.w = trial < 8 ? pick(3, 20) : pick(21, 111);
      INFO("ISA " << IsaName(isa) << " trial " << trial << " " << k.h << "x" << k.w << " pad " << k.pt << " ceil "
                  << k.ceil_mode);
      auto x = RandomValues(k.n * k.c * k.h * k.w, rng);
      auto run = RunNode("MaxPool", k.Attrs(), {Activation({k.n, k.c, k.h, k.w}, x)}, {{k.n, k.c, k.OutH(), k.OutW()}},
                         trial % 3 == 0 ? 2 : 1);
      REQUIRE(run.status.ok());
      ExpectClose(run.outputs[0], ReferencePool(k, x, true), 0, 0);
    }
  }
  REQUIRE(SetActiveIsa(initial).ok());
}

TEST_CASE("average pooling matches the window reference with and without pad counting", "[kernels][pool]") {
  std::mt19937 rng(32);
  for (int trial = 0; trial < 80; ++trial) {
    PoolCase k = RandomPool(rng, false);
    INFO("trial " << trial << " include_pad " << k.include_pad << " ceil " << k.ceil_mode);
    auto x = RandomValues(k.n * k.c * k.h * k.w, rng);
    auto run = RunNode("AveragePool", k.Attrs(), {Activation({k.n, k.c, k.h, k.w}, x)},
                       {{k.n, k.c, k.OutH(), k.OutW()}});
    REQUIRE(run.status.ok());
    ExpectClose(run.outputs[0], ReferencePool(k, x, false));
  }
}

// Pools spread their planes with ParallelForBalanced: enough planes for
// every thread to own several chunks, and a thread count that does not
// divide them.
TEST_CASE("pools over many planes on 2 and 3 threads match the window reference", "[kernels][pool]") {
  std::mt19937 rng(36);
  for (int threads : {2, 3})
    for (bool is_max : {true, false}) {
      PoolCase k;
      k.n = 2, k.c = 37, k.h = 13, k.w = 11, k.kh = k.kw = 3, k.sh = k.sw = 2, k.pt = k.pl = k.pb = k.pr = 1;
      INFO((is_max ? "max" : "average") << " on " << threads << " threads");
      auto x = RandomValues(k.n * k.c * k.h * k.w, rng);
      auto run = RunNode(is_max ? "MaxPool" : "AveragePool", k.Attrs(), {Activation({k.n, k.c, k.h, k.w}, x)},
                         {{k.n, k.c, k.OutH(), k.OutW()}}, threads);
      REQUIRE(run.status.ok());
      ExpectClose(run.outputs[0], ReferencePool(k, x, is_max), is_max ? 0 : 1e-6, is_max ? 0 : 1e-6);
    }
}

// ParallelForBalanced (parallel_for.h): every item runs exactly once, on a
// thread index within the team, for counts around the chunk and share
// boundaries; and a thread that finishes its share takes the chunks of a
// thread held up in its first item.
TEST_CASE("ParallelForBalanced runs every item once and moves a held-up thread's items", "[kernels][parallel]") {
  for (int threads : {1, 2, 3, 4, 8})
    for (int64_t n : {0, 1, 2, 3, 5, 7, 16, 17, 63, 100, 1001}) {
      INFO(n << " items on " << threads << " threads");
      std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
      std::atomic<int> bad_thread{0};
      ParallelForBalanced(n, threads, [&](int64_t i) {
        runs[static_cast<size_t>(i)].fetch_add(1);
        if (omp_get_thread_num() < 0 || omp_get_thread_num() >= threads) bad_thread.fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) REQUIRE(runs[static_cast<size_t>(i)].load() == 1);
      REQUIRE(bad_thread.load() == 0);
    }
  // Thread 1 sleeps in the first item it runs (one chunk of 4 held); thread
  // 0 runs its own share and then what is left of thread 1's. (Thread 1
  // may start late on a loaded machine: then thread 0 has taken more.)
  std::vector<int> by(64, -1);
  std::atomic<bool> slept{false};
  ParallelForBalanced(64, 2, [&](int64_t i) {
    if (omp_get_thread_num() == 1 && !slept.exchange(true)) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    by[static_cast<size_t>(i)] = omp_get_thread_num();
  });
  int64_t on_thread0 = 0;
  for (int t : by) on_thread0 += t == 0;
  REQUIRE(on_thread0 > 40);
}

TEST_CASE("ceil mode adds a partial last window whose divisor excludes the overhang", "[kernels][pool]") {
  // 1x1x3x3, k=2, s=2, ceil: windows start at 0 and 2 -> 2x2 output.
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  PoolCase k;
  k.n = 1, k.c = 1, k.h = 3, k.w = 3, k.kh = k.kw = 2, k.sh = k.sw = 2, k.ceil_mode = true, k.include_pad = true;
  auto avg = RunNode("AveragePool", k.Attrs(), {Activation({1, 1, 3, 3}, x)}, {{1, 1, 2, 2}});
  REQUIRE(avg.status.ok());
  ExpectClose(avg.outputs[0], {3.0, 4.5, 7.5, 9.0});
  auto mx = RunNode("MaxPool", k.Attrs(), {Activation({1, 1, 3, 3}, x)}, {{1, 1, 2, 2}});
  REQUIRE(mx.status.ok());
  ExpectClose(mx.outputs[0], {5, 6, 8, 9});
}

TEST_CASE("count_include_pad divides by the full window at padded borders", "[kernels][pool]") {
  std::vector<float> x = {1, 2, 3, 4};
  PoolCase k;
  k.n = 1, k.c = 1, k.h = 2, k.w = 2, k.kh = k.kw = 3, k.pt = k.pl = k.pb = k.pr = 1;
  k.include_pad = true;
  auto inc = RunNode("AveragePool", k.Attrs(), {Activation({1, 1, 2, 2}, x)}, {{1, 1, 2, 2}});
  REQUIRE(inc.status.ok());
  ExpectClose(inc.outputs[0], {10 / 9.0, 10 / 9.0, 10 / 9.0, 10 / 9.0});
  k.include_pad = false;
  auto exc = RunNode("AveragePool", k.Attrs(), {Activation({1, 1, 2, 2}, x)}, {{1, 1, 2, 2}});
  REQUIRE(exc.status.ok());
  ExpectClose(exc.outputs[0], {2.5, 2.5, 2.5, 2.5});
}

TEST_CASE("SAME_UPPER pooling keeps ceil(in / stride) outputs", "[kernels][pool]") {
  std::mt19937 rng(33);
  Attributes a;
  a.Set("kernel_shape", std::vector<int64_t>{3, 3});
  a.Set("strides", std::vector<int64_t>{2, 2});
  a.Set("auto_pad", std::string("SAME_UPPER"));
  auto x = RandomValues(5 * 5, rng);
  auto run = RunNode("MaxPool", a, {Activation({1, 1, 5, 5}, x)}, {{1, 1, 3, 3}});
  REQUIRE(run.status.ok());
  PoolCase k;
  k.c = 1, k.h = k.w = 5, k.sh = k.sw = 2, k.pt = k.pl = k.pb = k.pr = 1;
  ExpectClose(run.outputs[0], ReferencePool(k, x, true), 0, 0);
}

TEST_CASE("global pools reduce every spatial plane to one value", "[kernels][pool]") {
  std::mt19937 rng(34);
  auto x = RandomValues(2 * 3 * 5 * 4, rng);
  auto avg = RunNode("GlobalAveragePool", {}, {Activation({2, 3, 5, 4}, x)}, {{2, 3, 1, 1}}, 2);
  auto mx = RunNode("GlobalMaxPool", {}, {Activation({2, 3, 5, 4}, x)}, {{2, 3, 1, 1}});
  REQUIRE(avg.status.ok());
  REQUIRE(mx.status.ok());
  std::vector<double> ref_avg, ref_max;
  for (int p = 0; p < 6; ++p) {
    double s = 0, m = -1e30;
    for (int i = 0; i < 20; ++i) {
      s += x[p * 20 + i];
      m = std::max(m, double(x[p * 20 + i]));
    }
    ref_avg.push_back(s / 20);
    ref_max.push_back(m);
  }
  ExpectClose(avg.outputs[0], ref_avg);
  ExpectClose(mx.outputs[0], ref_max, 0, 0);
}

TEST_CASE("pooling rejects wrong output shapes and missing kernel_shape naming the node", "[kernels][pool][errors]") {
  PoolCase k;
  auto run = RunNode("MaxPool", k.Attrs(), {Activation({1, 2, 7, 7}, std::vector<float>(98))}, {{1, 2, 6, 6}}, 1,
                     "pool1");
  REQUIRE(run.status.IsInvalidArgument());
  CHECK_THAT(run.status.message(), Catch::Contains("pool1") && Catch::Contains("MaxPool"));
  auto no_kernel = RunNode("AveragePool", {}, {Activation({1, 2, 7, 7}, std::vector<float>(98))}, {{1, 2, 7, 7}}, 1,
                           "pool2");
  REQUIRE(no_kernel.status.IsInvalidArgument());
  CHECK_THAT(no_kernel.status.message(), Catch::Contains("kernel_shape"));
  auto global = RunNode("GlobalAveragePool", {}, {Activation({1, 2, 7, 7}, std::vector<float>(98))}, {{1, 2}}, 1,
                        "gap");
  REQUIRE(global.status.IsInvalidArgument());
  CHECK_THAT(global.status.message(), Catch::Contains("gap"));
}

}  // namespace
}  // namespace tessera
