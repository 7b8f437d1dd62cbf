// Gemm (canonical y = x·Wᵀ + b with fused activation) and MatMul (numpy
// batched semantics) against naive triple loops.
#include "tests/unit/daemon/runtime/kernels/kernels_testing.h"

namespace tessera {
namespace {

using testing::Activation;
using testing::ExpectClose;
using testing::RandomValues;
using testing::RunNode;
using testing::Weights;

// y[r][o] = b[o] + sum_k x[r][k] * w[o][k] in double, then relu if asked: the dense layer's reference.
std::vector<double> ReferenceDense(const std::vector<float>& x, const std::vector<float>& w,
                                   const std::vector<float>& b, int64_t n, int64_t in, int64_t out, bool relu) {
  std::vector<double> ref(n * out);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = b[o];
      for (int64_t k = 0; k < in; ++k) s += double(x[r * in + k]) * w[o * in + k];
      ref[r * out + o] = relu ? std::max(s, 0.0) : s;
    }
  return ref;
}

TEST_CASE("gemm computes x times W transposed plus bias", "[kernels][gemm]") {
  std::mt19937 rng(21);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t n = 1 + rng() % 4, in = 1 + rng() % 70, out = 1 + rng() % 50;
    auto x = RandomValues(n * in, rng), w = RandomValues(out * in, rng), b = RandomValues(out, rng);
    const bool relu = trial % 2 == 1;
    Attributes a;
    if (relu) a.Set("activation", std::string("relu"));
    auto run = RunNode("Gemm", a, {Activation({n, in}, x), Weights({out, in}, w), Weights({out}, b)}, {{n, out}});
    REQUIRE(run.status.ok());
    ExpectClose(run.outputs[0], ReferenceDense(x, w, b, n, in, out, relu), 1e-5, 2e-5);
  }
}

// A classifier head on a batch of one or two: the dot-rows microkernel over
// chunks of output rows, split over threads when there are enough.
TEST_CASE("gemm with many outputs and few input rows matches the reference, serial and threaded", "[kernels][gemm]") {
  std::mt19937 rng(23);
  for (int threads : {1, 2})
    for (int64_t n : {1, 2}) {
      const int64_t in = 257, out = 301;
      auto x = RandomValues(n * in, rng), w = RandomValues(out * in, rng), b = RandomValues(out, rng);
      Attributes a;
      a.Set("activation", std::string("relu"));
      auto run =
          RunNode("Gemm", a, {Activation({n, in}, x), Weights({out, in}, w), Weights({out}, b)}, {{n, out}}, threads);
      REQUIRE(run.status.ok());
      ExpectClose(run.outputs[0], ReferenceDense(x, w, b, n, in, out, /*relu=*/true), 1e-5, 2e-5);
    }
}

TEST_CASE("gemm honours explicit ONNX transB=0, alpha and beta", "[kernels][gemm]") {
  std::mt19937 rng(22);
  const int64_t n = 3, in = 5, out = 4;
  auto x = RandomValues(n * in, rng), w = RandomValues(in * out, rng), b = RandomValues(n * out, rng);
  Attributes a;
  a.Set("transB", int64_t{0});
  a.Set("alpha", 0.5);
  a.Set("beta", 2.0);
  auto run = RunNode("Gemm", a, {Activation({n, in}, x), Weights({in, out}, w), Weights({n, out}, b)}, {{n, out}});
  REQUIRE(run.status.ok());
  std::vector<double> ref(n * out);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = 0;
      for (int64_t k = 0; k < in; ++k) s += double(x[r * in + k]) * w[k * out + o];
      ref[r * out + o] = 0.5 * s + 2.0 * b[r * out + o];
    }
  ExpectClose(run.outputs[0], ref);
}

TEST_CASE("gemm without bias applies a fused leaky relu", "[kernels][gemm]") {
  auto run = RunNode("Gemm",
                     [] {
                       Attributes a;
                       a.Set("activation", std::string("leaky_relu"));
                       a.Set("act_alpha", 0.1);
                       return a;
                     }(),
                     {Activation({1, 2}, {1.f, 2.f}), Weights({2, 2}, {1.f, 1.f, -1.f, -1.f})}, {{1, 2}});
  REQUIRE(run.status.ok());
  ExpectClose(run.outputs[0], {3.0, -0.3});
}

TEST_CASE("gemm rejects mismatched weights naming the node", "[kernels][gemm][errors]") {
  auto run = RunNode("Gemm", {}, {Activation({1, 8}, std::vector<float>(8)), Weights({4, 7}, std::vector<float>(28))},
                     {{1, 4}}, 1, "fc1000");
  REQUIRE(run.status.IsInvalidArgument());
  CHECK_THAT(run.status.message(), Catch::Contains("fc1000") && Catch::Contains("Gemm"));
  auto bad_out = RunNode("Gemm", {}, {Activation({1, 8}, std::vector<float>(8)), Weights({4, 8}, std::vector<float>(32))},
                         {{1, 5}}, 1, "fc_out");
  REQUIRE(bad_out.status.IsInvalidArgument());
  auto bad_bias = RunNode("Gemm", {},
                          {Activation({1, 8}, std::vector<float>(8)), Weights({4, 8}, std::vector<float>(32)),
                           Weights({3}, std::vector<float>(3))},
                          {{1, 4}}, 1, "fc_bias");
  REQUIRE(bad_bias.status.IsInvalidArgument());
  CHECK_THAT(bad_bias.status.message(), Catch::Contains("bias"));
}

// Naive numpy matmul for shapes already padded to the same rank >= 2.
std::vector<double> ReferenceMatMul(const Shape& a, const std::vector<float>& av, const Shape& b,
                                    const std::vector<float>& bv, Shape* out_shape) {
  const size_t rank = a.size();
  const int64_t m = a[rank - 2], k = a[rank - 1], n = b[rank - 1];
  Shape batch(rank - 2);
  for (size_t i = 0; i + 2 < rank; ++i) batch[i] = std::max(a[i], b[i]);
  *out_shape = batch;
  out_shape->push_back(m);
  out_shape->push_back(n);
  std::vector<double> y(NumElements(*out_shape));
  const int64_t count = NumElements(batch);
  for (int64_t flat = 0; flat < count; ++flat) {
    int64_t rest = flat, ao = 0, bo = 0, as = 1, bs = 1;
    for (int64_t i = static_cast<int64_t>(rank) - 3; i >= 0; --i) {
      const int64_t idx = rest % batch[i];
      rest /= batch[i];
      ao += (a[i] == 1 ? 0 : idx) * as;
      bo += (b[i] == 1 ? 0 : idx) * bs;
      as *= a[i];
      bs *= b[i];
    }
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < n; ++c) {
        double s = 0;
        for (int64_t t = 0; t < k; ++t) s += double(av[ao * m * k + r * k + t]) * bv[bo * k * n + t * n + c];
        y[flat * m * n + r * n + c] = s;
      }
  }
  return y;
}

TEST_CASE("matmul broadcasts batch dimensions like numpy", "[kernels][matmul]") {
  std::mt19937 rng(23);
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 4}, {4, 5}},          {{2, 3, 4}, {2, 4, 5}},    {{2, 3, 4}, {1, 4, 5}},
      {{1, 3, 4}, {3, 4, 2}},    {{2, 1, 3, 4}, {1, 5, 4, 2}}, {{1, 12, 16, 8}, {1, 12, 8, 16}},
  };
  for (const auto& [sa, sb] : cases) {
    INFO(ShapeToString(sa) << " x " << ShapeToString(sb));
    auto av = RandomValues(NumElements(sa), rng), bv = RandomValues(NumElements(sb), rng);
    Shape out;
    auto ref = ReferenceMatMul(sa, av, sb, bv, &out);
    auto run = RunNode("MatMul", {}, {Activation(sa, av), Activation(sb, bv)}, {out});
    REQUIRE(run.status.ok());
    ExpectClose(run.outputs[0], ref, 1e-5, 2e-5);
  }
}

TEST_CASE("matmul with a lower-rank constant right operand broadcasts it", "[kernels][matmul]") {
  std::mt19937 rng(24);
  auto av = RandomValues(2 * 3 * 4, rng), bv = RandomValues(4 * 6, rng);
  Shape out;
  auto ref = ReferenceMatMul({2, 3, 4}, av, {1, 4, 6}, bv, &out);
  auto run = RunNode("MatMul", {}, {Activation({2, 3, 4}, av), Weights({4, 6}, bv)}, {{2, 3, 6}});
  REQUIRE(run.status.ok());
  ExpectClose(run.outputs[0], ref, 1e-5, 2e-5);
}

TEST_CASE("matmul treats 1-D operands as row and column vectors", "[kernels][matmul]") {
  auto vm = RunNode("MatMul", {}, {Activation({2}, {1.f, 2.f}), Activation({2, 3}, {1, 2, 3, 4, 5, 6})}, {{3}});
  REQUIRE(vm.status.ok());
  ExpectClose(vm.outputs[0], {9, 12, 15});
  auto mv = RunNode("MatMul", {}, {Activation({2, 3}, {1, 2, 3, 4, 5, 6}), Activation({3}, {1.f, 0.f, -1.f})}, {{2}});
  REQUIRE(mv.status.ok());
  ExpectClose(mv.outputs[0], {-2, -2});
  auto vv = RunNode("MatMul", {}, {Activation({3}, {1, 2, 3}), Activation({3}, {4, 5, 6})}, {{}});
  REQUIRE(vv.status.ok());
  ExpectClose(vv.outputs[0], {32});
}

TEST_CASE("matmul rejects mismatched inner dimensions and bad batch broadcasts", "[kernels][matmul][errors]") {
  auto inner = RunNode("MatMul", {}, {Activation({2, 3}, std::vector<float>(6)), Activation({4, 2}, std::vector<float>(8))},
                       {{2, 2}}, 1, "attn_scores");
  REQUIRE(inner.status.IsInvalidArgument());
  CHECK_THAT(inner.status.message(), Catch::Contains("attn_scores") && Catch::Contains("MatMul"));
  auto batch = RunNode("MatMul", {},
                       {Activation({2, 2, 3}, std::vector<float>(12)), Activation({3, 3, 2}, std::vector<float>(18))},
                       {{3, 2, 2}}, 1, "bmm");
  REQUIRE(batch.status.IsInvalidArgument());
  auto out = RunNode("MatMul", {}, {Activation({2, 3}, std::vector<float>(6)), Activation({3, 2}, std::vector<float>(6))},
                     {{2, 3}}, 1, "mm_out");
  REQUIRE(out.status.IsInvalidArgument());
}

}  // namespace
}  // namespace tessera
