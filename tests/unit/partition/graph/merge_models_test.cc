#include <catch2/catch.hpp>

#include "partition/graph/merge_models.h"

using namespace tessera;

namespace {

// x[1,3,8,8] -> conv 3->4 k3 pad1 (weights `w0`) -> relu [-> conv 4->2 k1 (`w1`)]
Graph Model(const std::string& name, float w0, bool second_conv, int64_t side = 8) {
  Graph g;
  g.name = name;
  const int x = g.AddValue("x", {1, 3, side, side});
  const int w = g.AddConstant("conv1.weight", {{4, 3, 3, 3}, std::vector<float>(4 * 3 * 3 * 3, w0)});
  const int b = g.AddConstant("conv1.bias", {{4}, std::vector<float>(4, 0.5f)});
  const int y = g.AddValue("y", {1, 4, side, side});
  const int z = g.AddValue("z", {1, 4, side, side});
  Node conv{"conv1", "Conv", {x, w, b}, {y}, {}};
  conv.attrs.Set("kernel_shape", std::vector<int64_t>{3, 3});
  conv.attrs.Set("pads", std::vector<int64_t>{1, 1, 1, 1});
  g.AddNode(conv);
  g.AddNode(Node{"relu1", "Relu", {y}, {z}, {}});
  g.inputs = {x};
  g.outputs = {z};
  if (second_conv) {
    const int w2 = g.AddConstant("head.weight", {{2, 4, 1, 1}, std::vector<float>(8, 0.25f)});
    const int out = g.AddValue("out", {1, 2, side, side});
    Node head{"head", "Conv", {z, w2}, {out}, {}};
    head.attrs.Set("kernel_shape", std::vector<int64_t>{1, 1});
    g.AddNode(head);
    g.outputs = {out};
  }
  REQUIRE(g.Validate().ok());
  return g;
}

}  // namespace

TEST_CASE("merged models share the layers whose op, attributes, inputs and weight values are equal") {
  MergeReport report;
  auto g = MergeModels({Model("a", 0.1f, false), Model("b", 0.1f, true)}, &report);
  REQUIRE(g.ok());
  // a: conv1, relu1; b: conv1 and relu1 shared, head its own.
  REQUIRE(g->nodes.size() == 3);
  CHECK(g->nodes[0].name == "a/conv1");
  CHECK(g->nodes[2].name == "b/head");
  CHECK(g->nodes[2].inputs[0] == g->nodes[1].outputs[0]);  // b's head reads a's relu
  REQUIRE(g->inputs.size() == 1);                          // one frame feeds both
  REQUIRE(g->outputs.size() == 2);
  CHECK(g->values[g->outputs[0]].name == "a/z");
  CHECK(g->values[g->outputs[1]].name == "b/out");
  REQUIRE(report.models.size() == 2);
  CHECK(report.models[0].shared_layers == 0);
  CHECK(report.models[1].shared_layers == 2);
  CHECK(report.models[1].outputs == std::vector<int>{g->outputs[1]});
  // 112 weights of conv1 + 8 of the head, from 112 + 120.
  CHECK(report.weight_values_before == 232);
  CHECK(report.weight_values_after == 120);
  CHECK(g->name == "a+b");
  CHECK(report.Describe().find("b: 3 layers, 2 shared") != std::string::npos);
}

TEST_CASE("merged models with other weight values share only the input") {
  MergeReport report;
  auto g = MergeModels({Model("a", 0.1f, false), Model("b", 0.2f, true)}, &report);
  REQUIRE(g.ok());
  CHECK(g->nodes.size() == 5);
  CHECK(g->inputs.size() == 1);
  CHECK(report.models[1].shared_layers == 0);
  // The bias (0.5 everywhere in both) is one constant all the same.
  CHECK(report.weight_values_after == report.weight_values_before - 4);
  CHECK(g->nodes[0].inputs[2] == g->nodes[2].inputs[2]);
}

TEST_CASE("merged models with other input shapes keep an input each") {
  auto g = MergeModels({Model("a", 0.1f, false), Model("b", 0.1f, false, 16)});
  REQUIRE(g.ok());
  CHECK(g->inputs.size() == 2);
  CHECK(g->nodes.size() == 4);
  CHECK(g->values[g->inputs[1]].name == "b/x");
}

TEST_CASE("the same model twice keeps an output of its own for each") {
  MergeReport report;
  auto g = MergeModels({Model("a", 0.1f, true), Model("a", 0.1f, true)}, &report);
  REQUIRE(g.ok());
  // Every layer shared; the second copy's output is an Identity of the first.
  REQUIRE(g->nodes.size() == 4);
  CHECK(g->nodes[3].op == "Identity");
  REQUIRE(g->outputs.size() == 2);
  CHECK(g->outputs[0] != g->outputs[1]);
  CHECK(report.models[1].name == "a#2");
  CHECK(report.models[1].shared_layers == 3);
  CHECK(g->name == "a+a#2");
}

TEST_CASE("merging refuses a model without weight values, naming it and the constant") {
  Graph shapes = Model("b", 0.1f, true).ShapesOnly();
  auto g = MergeModels({Model("a", 0.1f, false), shapes});
  REQUIRE_FALSE(g.ok());
  CHECK(g.status().message().find("'b' constant 'conv1.weight' has no values") != std::string::npos);
  CHECK_FALSE(MergeModels({}).ok());
}

TEST_CASE("one model merges to itself") {
  const Graph a = Model("a", 0.1f, true);
  MergeReport report;
  auto g = MergeModels({a}, &report);
  REQUIRE(g.ok());
  CHECK(g->nodes.size() == a.nodes.size());
  CHECK(g->nodes[0].name == "conv1");
  CHECK(report.weight_values_after == report.weight_values_before);
}
