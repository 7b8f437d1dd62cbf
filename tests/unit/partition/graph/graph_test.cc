#include <catch2/catch.hpp>

#include "partition/graph/graph.h"
#include "partition/graph/metrics.h"

using namespace tessera;

namespace {
// x[1,3,8,8] -> conv 3->4 k3 pad1 (+bias) -> relu -> out
Graph SmallConvGraph() {
  Graph g;
  int x = g.AddValue("x", {1, 3, 8, 8});
  int w = g.AddConstant("w", {{4, 3, 3, 3}, std::vector<float>(4 * 3 * 3 * 3, 0.1f)});
  int b = g.AddConstant("b", {{4}, std::vector<float>(4, 0.f)});
  int y = g.AddValue("y", {1, 4, 8, 8});
  int z = g.AddValue("z", {1, 4, 8, 8});
  Node conv{"conv", "Conv", {x, w, b}, {y}, {}};
  conv.attrs.Set("kernel_shape", std::vector<int64_t>{3, 3});
  conv.attrs.Set("pads", std::vector<int64_t>{1, 1, 1, 1});
  g.AddNode(conv);
  g.AddNode(Node{"relu", "Relu", {y}, {z}, {}});
  g.inputs = {x};
  g.outputs = {z};
  return g;
}
}  // namespace

TEST_CASE("a well-formed graph validates and its figures follow METHODS §1") {
  Graph g = SmallConvGraph();
  REQUIRE(g.Validate().ok());
  auto f = ComputeLayerFigures(g);
  REQUIRE(f.size() == 2);
  // conv: M = 8·8·3 = 192, K = 8·8·4 = 256, Q = 3·3·3·4 + 4 = 112,
  // R = X'·Y'·U·V·C·O = 8·8·3·3·3·4 = 6912
  CHECK(f[0].M == 192);
  CHECK(f[0].K == 256);
  CHECK(f[0].Q == 112);
  CHECK(f[0].R == 6912);
  CHECK(f[1].Q == 0);
  CHECK(f[1].M == 256);
  auto t = ComputeTotals(f);
  CHECK(t.weights == 112);
  CHECK(t.max_io == 512);
  CHECK(g.WeightCount() == 112);
}

TEST_CASE("ShapesOnly keeps every value, node and constant shape and drops the values") {
  const Graph g = SmallConvGraph();
  const Graph s = g.ShapesOnly();
  REQUIRE(s.Validate().ok());
  CHECK(s.name == g.name);
  REQUIRE(s.nodes.size() == g.nodes.size());
  REQUIRE(s.values.size() == g.values.size());
  CHECK(s.inputs == g.inputs);
  CHECK(s.outputs == g.outputs);
  REQUIRE(s.constants.size() == 2);
  for (const auto& [id, data] : g.constants) {
    REQUIRE(s.constants.count(id) == 1);
    CHECK(s.constants.at(id).shape == data.shape);
    CHECK(s.constants.at(id).values.empty());
    CHECK_FALSE(data.values.empty());  // the original keeps its values
    CHECK(ConstantIdentity(s, id, false) == ConstantIdentity(g, id, false));
  }
  CHECK(s.WeightCount() == g.WeightCount());
}

TEST_CASE("an out-of-order graph is rejected, then sorted topologically") {
  Graph g = SmallConvGraph();
  std::swap(g.nodes[0], g.nodes[1]);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int v : g.nodes[i].outputs) g.values[v].producer = static_cast<int>(i);
  Status st = g.Validate();
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("relu") != std::string::npos);
  REQUIRE(g.SortTopologically().ok());
  CHECK(g.nodes[0].name == "conv");
  CHECK(g.Validate().ok());
}

TEST_CASE("a cycle is reported with a node on it") {
  Graph g;
  int a = g.AddValue("a", {1});
  int b = g.AddValue("b", {1});
  g.AddNode(Node{"n1", "Relu", {b}, {a}, {}});
  g.AddNode(Node{"n2", "Relu", {a}, {b}, {}});
  g.outputs = {b};
  Status st = g.SortTopologically();
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("cycle") != std::string::npos);
}

TEST_CASE("dead nodes and their weights are removed") {
  Graph g = SmallConvGraph();
  g.outputs = {g.nodes[0].outputs[0]};  // only the conv output is wanted
  g.RemoveDeadNodes();
  CHECK(g.nodes.size() == 1);
  CHECK(g.Validate().ok());
}
