// Pointwise unary ops, broadcasting binary/variadic ops and FusedActivation
// against scalar reference formulas.
#include <functional>
#include <limits>

#include "tests/unit/daemon/runtime/kernels/kernels_testing.h"

namespace tessera {
namespace {

using testing::Activation;
using testing::ExpectClose;
using testing::RandomValues;
using testing::RunNode;
using testing::Weights;

struct UnaryCase {
  const char* op;
  std::function<double(double)> ref;
  Attributes attrs;
  float lo = -4.f, hi = 4.f;
};

Attributes With(std::initializer_list<std::pair<const char*, AttrValue>> kv) {
  Attributes a;
  for (const auto& [k, v] : kv) a.Set(k, v);
  return a;
}

TEST_CASE("unary ops match their scalar definitions", "[kernels][unary]") {
  std::mt19937 rng(41);
  const std::vector<UnaryCase> cases = {
      {"Relu", [](double v) { return std::max(v, 0.0); }, {}},
      {"LeakyRelu", [](double v) { return v < 0 ? 0.01 * v : v; }, {}},
      {"LeakyRelu", [](double v) { return v < 0 ? 0.2 * v : v; }, With({{"alpha", 0.2}})},
      {"Clip", [](double v) { return std::min(std::max(v, 0.0), 6.0); }, With({{"min", 0.0}, {"max", 6.0}})},
      {"Clip", [](double v) { return std::max(v, -1.0); }, With({{"min", -1.0}})},
      {"Sigmoid", [](double v) { return 1 / (1 + std::exp(-v)); }, {}},
      {"HardSigmoid", [](double v) { return std::clamp(0.2 * v + 0.5, 0.0, 1.0); }, {}},
      {"HardSwish", [](double v) { return v * std::clamp(v / 6 + 0.5, 0.0, 1.0); }, {}},
      {"Tanh", [](double v) { return std::tanh(v); }, {}},
      {"Elu", [](double v) { return v < 0 ? std::exp(v) - 1 : v; }, {}},
      {"Softplus", [](double v) { return std::log1p(std::exp(v)); }, {}},
      {"Exp", [](double v) { return std::exp(v); }, {}},
      {"Neg", [](double v) { return -v; }, {}},
      {"Abs", [](double v) { return std::fabs(v); }, {}},
      {"Floor", [](double v) { return std::floor(v); }, {}},
      {"Ceil", [](double v) { return std::ceil(v); }, {}},
      {"Sqrt", [](double v) { return std::sqrt(v); }, {}, 0.f, 9.f},
      {"Log", [](double v) { return std::log(v); }, {}, 0.1f, 9.f},
      {"Reciprocal", [](double v) { return 1 / v; }, {}, 0.5f, 9.f},
  };
  for (const UnaryCase& c : cases) {
    INFO(c.op);
    // Long enough to span several parallel chunks.
    auto x = RandomValues(40000, rng, c.lo, c.hi);
    std::vector<double> ref;
    for (float v : x) ref.push_back(c.ref(v));
    for (int threads : {1, 2}) {
      auto run = RunNode(c.op, c.attrs, {Activation({4, 100, 100}, x)}, {{4, 100, 100}}, threads);
      REQUIRE(run.status.ok());
      ExpectClose(run.outputs[0], ref, 2e-6, 2e-6);
    }
  }
}

TEST_CASE("clip reads min and max from constant inputs (opset 11)", "[kernels][unary]") {
  auto run = RunNode("Clip", {}, {Activation({4}, {-3, -0.5f, 0.5f, 3}), Weights({}, {-1}), Weights({}, {1})}, {{4}});
  REQUIRE(run.status.ok());
  ExpectClose(run.outputs[0], {-1, -0.5, 0.5, 1});
  auto upper_only = RunNode("Clip", {}, {Activation({2}, {-3, 3}), testing::Omitted(), Weights({}, {1})}, {{2}});
  REQUIRE(upper_only.status.ok());
  ExpectClose(upper_only.outputs[0], {-3, 1});
}

TEST_CASE("unary ops reject an output shape differing from the input", "[kernels][unary][errors]") {
  auto run = RunNode("Relu", {}, {Activation({2, 3}, std::vector<float>(6))}, {{3, 2}}, 1, "relu_7");
  REQUIRE(run.status.IsInvalidArgument());
  CHECK_THAT(run.status.message(), Catch::Contains("relu_7") && Catch::Contains("Relu"));
}

// Numpy broadcasting reference for two operands.
std::vector<double> ReferenceBroadcast(const Shape& a, const std::vector<float>& av, const Shape& b,
                                       const std::vector<float>& bv, const Shape& out,
                                       const std::function<double(double, double)>& f) {
  auto index_of = [&](const Shape& s, const std::vector<int64_t>& idx) {
    int64_t flat = 0;
    for (size_t k = 0; k < s.size(); ++k) {
      const int64_t dim = s[k];
      const int64_t i = idx[out.size() - s.size() + k];
      flat = flat * dim + (dim == 1 ? 0 : i);
    }
    return flat;
  };
  std::vector<double> y(NumElements(out));
  std::vector<int64_t> idx(out.size(), 0);
  for (size_t flat = 0; flat < y.size(); ++flat) {
    int64_t rest = static_cast<int64_t>(flat);
    for (int64_t d = static_cast<int64_t>(out.size()) - 1; d >= 0; --d) {
      idx[d] = rest % out[d];
      rest /= out[d];
    }
    y[flat] = f(av[index_of(a, idx)], bv[index_of(b, idx)]);
  }
  return y;
}

Shape BroadcastShape(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()));
  for (size_t k = 0; k < out.size(); ++k) {
    const int64_t x = k < a.size() ? a[a.size() - 1 - k] : 1, y = k < b.size() ? b[b.size() - 1 - k] : 1;
    out[out.size() - 1 - k] = x == 1 ? y : x;
  }
  return out;
}

TEST_CASE("binary ops broadcast random shapes like numpy", "[kernels][binary]") {
  std::mt19937 rng(42);
  const std::vector<std::pair<const char*, std::function<double(double, double)>>> ops = {
      {"Add", [](double a, double b) { return a + b; }},
      {"Sub", [](double a, double b) { return a - b; }},
      {"Mul", [](double a, double b) { return a * b; }},
      {"Div", [](double a, double b) { return a / b; }},
      {"Max", [](double a, double b) { return std::max(a, b); }},
      {"Min", [](double a, double b) { return std::min(a, b); }},
      {"Sum", [](double a, double b) { return a + b; }},
      {"Mean", [](double a, double b) { return (a + b) / 2; }},
      {"Pow", [](double a, double b) { return std::pow(a, b); }},
  };
  for (int trial = 0; trial < 60; ++trial) {
    // Random output shape of rank 1..5, each operand dropping leading dims or setting dims to 1.
    const int rank = 1 + static_cast<int>(rng() % 5);
    Shape full(rank);
    for (auto& d : full) d = 1 + rng() % 5;
    auto operand = [&]() {
      Shape s = full;
      s.erase(s.begin(), s.begin() + rng() % (rank + 1) * (rng() % 3 == 0));
      for (auto& d : s)
        if (rng() % 3 == 0) d = 1;
      return s;
    };
    Shape sa = operand(), sb = operand();
    Shape out = BroadcastShape(sa, sb);
    const auto& [name, f] = ops[trial % ops.size()];
    INFO(name << " " << ShapeToString(sa) << " with " << ShapeToString(sb));
    const bool positive = std::string(name) == "Pow" || std::string(name) == "Div";
    auto av = RandomValues(NumElements(sa), rng, positive ? 0.5f : -2.f, 2.f);
    auto bv = RandomValues(NumElements(sb), rng, positive ? 0.5f : -2.f, 2.f);
    auto run = RunNode(name, {}, {Activation(sa, av), Activation(sb, bv)}, {out}, trial % 2 + 1);
    REQUIRE(run.status.ok());
    ExpectClose(run.outputs[0], ReferenceBroadcast(sa, av, sb, bv, out, f), 1e-6, 1e-6);
  }
}

// Operands of the output's shape run in chunks, each chunk
// through the fused activation (binary.cc RunFlat): sizes around the chunk
// of 4096, one, two and three threads asked for, a residual Add with relu
// or clip; from 65536 values on, one range of whole chunks per thread
// (sizes whose chunks do not divide evenly, a last chunk cut short).
TEST_CASE("same-shape binary ops with a fused activation match the reference in chunks", "[kernels][binary]") {
  std::mt19937 rng(43);
  const std::vector<std::pair<const char*, std::function<double(double, double)>>> ops = {
      {"Add", [](double a, double b) { return a + b; }},
      {"Sub", [](double a, double b) { return a - b; }},
      {"Mul", [](double a, double b) { return a * b; }},
      {"Sum", [](double a, double b) { return a + b; }},
  };
  int trial = 0;
  for (int64_t size : {1, 7, 4095, 4096, 4097, 8192 + 3, 3 * 4096 + 5, 50000, 65535, 65536, 17 * 4096 + 5, 200003})
    for (const auto& [name, f] : ops)
      for (int threads : {1, 2, 3}) {
        const char* act = trial % 3 == 0 ? "" : trial % 3 == 1 ? "relu" : "clip";
        ++trial;
        INFO(name << " size " << size << " threads " << threads << " act '" << act << "'");
        const Shape shape = {1, size};
        auto av = RandomValues(size, rng, -2.f, 2.f), bv = RandomValues(size, rng, -2.f, 2.f);
        Attributes attrs;
        if (act[0] != '\0') attrs.Set("activation", std::string(act));
        if (std::string(act) == "clip") {
          attrs.Set("act_alpha", -0.5);
          attrs.Set("act_beta", 1.5);
        }
        auto run = RunNode(name, attrs, {Activation(shape, av), Activation(shape, bv)}, {shape}, threads);
        REQUIRE(run.status.ok());
        std::vector<double> want = ReferenceBroadcast(shape, av, shape, bv, shape, f);
        for (double& v : want) {
          if (std::string(act) == "relu") v = std::max(v, 0.0);
          if (std::string(act) == "clip") v = std::clamp(v, -0.5, 1.5);
        }
        ExpectClose(run.outputs[0], want, 1e-6, 1e-6);
      }
}

TEST_CASE("channel-wise and scalar broadcasts over NCHW activations", "[kernels][binary]") {
  std::mt19937 rng(43);
  const Shape x{2, 8, 6, 5};
  const std::vector<Shape> others = {{1, 8, 1, 1}, {8, 1, 1}, {1}, {}, {5}, {2, 1, 6, 1}, {2, 8, 6, 5}};
  for (const Shape& s : others) {
    INFO(ShapeToString(s));
    auto xv = RandomValues(NumElements(x), rng), sv = RandomValues(NumElements(s), rng);
    for (bool swap : {false, true}) {
      auto run = swap ? RunNode("Mul", {}, {Weights(s, sv), Activation(x, xv)}, {x})
                      : RunNode("Mul", {}, {Activation(x, xv), Weights(s, sv)}, {x});
      REQUIRE(run.status.ok());
      auto ref = swap ? ReferenceBroadcast(s, sv, x, xv, x, std::multiplies<double>())
                      : ReferenceBroadcast(x, xv, s, sv, x, std::multiplies<double>());
      ExpectClose(run.outputs[0], ref, 1e-6, 1e-6);
    }
  }
}

TEST_CASE("variadic max, min and sum fold over three broadcast inputs", "[kernels][binary]") {
  std::vector<float> a = {1, 5, -2, 0}, b = {3, -1}, c = {2};
  auto mx = RunNode("Max", {}, {Activation({2, 2}, a), Activation({2}, b), Activation({1}, c)}, {{2, 2}});
  auto mn = RunNode("Min", {}, {Activation({2, 2}, a), Activation({2}, b), Activation({1}, c)}, {{2, 2}});
  auto sm = RunNode("Sum", {}, {Activation({2, 2}, a), Activation({2}, b), Activation({1}, c)}, {{2, 2}});
  auto one = RunNode("Max", {}, {Activation({2, 2}, a)}, {{2, 2}});
  REQUIRE(mx.status.ok());
  REQUIRE(mn.status.ok());
  REQUIRE(sm.status.ok());
  REQUIRE(one.status.ok());
  ExpectClose(mx.outputs[0], {3, 5, 3, 2});
  ExpectClose(mn.outputs[0], {1, -1, -2, -1});
  ExpectClose(sm.outputs[0], {6, 6, 3, 1});
  ExpectClose(one.outputs[0], {1, 5, -2, 0});
}

TEST_CASE("PRelu scales negatives by a per-channel slope", "[kernels][binary]") {
  auto run = RunNode("PRelu", {}, {Activation({1, 2, 1, 2}, {-1, 2, -3, 4}), Weights({2, 1, 1}, {0.5f, 0.25f})},
                     {{1, 2, 1, 2}});
  REQUIRE(run.status.ok());
  ExpectClose(run.outputs[0], {-0.5, 2, -0.75, 4});
}

TEST_CASE("binary ops reject shapes that do not broadcast, naming the node", "[kernels][binary][errors]") {
  auto run = RunNode("Add", {}, {Activation({2, 3}, std::vector<float>(6)), Activation({4}, std::vector<float>(4))},
                     {{2, 3}}, 1, "residual_add");
  REQUIRE(run.status.IsInvalidArgument());
  CHECK_THAT(run.status.message(), Catch::Contains("residual_add") && Catch::Contains("[2,3]") &&
                                       Catch::Contains("[4]"));
  auto out = RunNode("Add", {}, {Activation({2, 3}, std::vector<float>(6)), Activation({3}, std::vector<float>(3))},
                     {{2, 4}}, 1, "add_out");
  REQUIRE(out.status.IsInvalidArgument());
  auto arity = RunNode("Sub", {}, {Activation({3}, std::vector<float>(3))}, {{3}}, 1, "sub1");
  REQUIRE(arity.status.IsInvalidArgument());
}

TEST_CASE("fused activations read their ONNX-style parameters", "[kernels][activation]") {
  auto apply = [](Attributes a, std::vector<float> v) {
    auto act = FusedActivation::FromAttributes(a);
    REQUIRE(act.ok());
    act->Apply(v.data(), v.size());
    return v;
  };
  const std::vector<float> x = {-8, -1, 0, 0.5f, 2, 8};
  ExpectClose(apply({}, x), testing::ToDouble(x));
  ExpectClose(apply(With({{"activation", std::string("relu")}}), x), {0, 0, 0, 0.5, 2, 8});
  ExpectClose(apply(With({{"activation", std::string("leaky_relu")}, {"act_alpha", 0.1}}), x),
              {-0.8, -0.1, 0, 0.5, 2, 8});
  ExpectClose(apply(With({{"activation", std::string("clip")}, {"act_alpha", 0.0}, {"act_beta", 6.0}}), x),
              {0, 0, 0, 0.5, 2, 6});
  ExpectClose(apply(With({{"activation", std::string("clip")}, {"act_beta", 1.0}}), x), {-8, -1, 0, 0.5, 1, 1});
  ExpectClose(apply(With({{"activation", std::string("hard_sigmoid")}}), x), {0, 0.3, 0.5, 0.6, 0.9, 1});
  ExpectClose(apply(With({{"activation", std::string("hard_sigmoid")}, {"act_alpha", 0.5}, {"act_beta", 0.0}}), x),
              {0, 0, 0, 0.25, 1, 1});
  std::vector<double> sig, th;
  for (float v : x) {
    sig.push_back(1 / (1 + std::exp(-double(v))));
    th.push_back(std::tanh(double(v)));
  }
  ExpectClose(apply(With({{"activation", std::string("sigmoid")}}), x), sig, 1e-6, 1e-6);
  ExpectClose(apply(With({{"activation", std::string("tanh")}}), x), th, 1e-6, 1e-6);
}

TEST_CASE("an unknown fused activation is not supported", "[kernels][activation][errors]") {
  auto act = FusedActivation::FromAttributes(With({{"activation", std::string("mish")}}));
  REQUIRE_FALSE(act.ok());
  CHECK(act.status().IsNotSupported());
  CHECK_THAT(act.status().message(), Catch::Contains("mish"));
}

}  // namespace
}  // namespace tessera
