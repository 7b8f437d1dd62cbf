// The op-traits table (partition/graph/op_traits.h): the node-level rules
// and the agreement of the table with the kernels that run fused activations.
#include <catch2/catch.hpp>

#include "daemon/runtime/kernels/kernel.h"
#include "partition/graph/op_traits.h"

using namespace tessera;

namespace {

struct Builder {
  Graph g;
  int Input(Shape s) {
    int v = g.AddValue("in" + std::to_string(g.values.size()), s);
    g.inputs.push_back(v);
    return v;
  }
  int Const(Shape s) {
    return g.AddConstant("c" + std::to_string(g.values.size()), TensorData{s, std::vector<float>(NumElements(s), 1.f)});
  }
  int Node1(const std::string& op, std::vector<int> ins, Shape out, Attributes a = {}) {
    int y = g.AddValue("v" + std::to_string(g.values.size()), out);
    g.AddNode(Node{op + std::to_string(g.nodes.size()), op, std::move(ins), {y}, std::move(a)});
    return y;
  }
  int Conv(int x, int64_t out, int64_t group, int64_t k = 3) {
    const Shape s = g.values[x].shape;
    Attributes a;
    a.Set("kernel_shape", std::vector<int64_t>{k, k});
    a.Set("pads", std::vector<int64_t>{k / 2, k / 2, k / 2, k / 2});
    a.Set("group", group);
    return Node1("Conv", {x, Const({out, s[1] / group, k, k})}, {s[0], out, s[2], s[3]}, a);
  }
};

}  // namespace

TEST_CASE("op traits: an unknown op runs whole") {
  const OpTraits& t = TraitsOf("SomethingNew");
  CHECK(t.spatial == SpatialRule::kNone);
  CHECK(t.channels == ChannelRule::kMixed);
  CHECK(t.fused_name == nullptr);
}

TEST_CASE("op traits: tile rules for windows, point-wise ops, broadcast gates and concats") {
  Builder b;
  int x = b.Input({1, 8, 12, 12});
  int conv = b.Conv(x, 8, 1);
  int gate = b.Input({1, 8, 1, 1});
  int mul = b.Node1("Mul", {conv, gate}, {1, 8, 12, 12});
  Attributes axis2;
  axis2.Set("axis", int64_t{2});
  b.Node1("Concat", {mul, conv}, {1, 8, 24, 12}, axis2);
  Attributes axis1;
  axis1.Set("axis", int64_t{1});
  b.Node1("Concat", {mul, conv}, {1, 16, 12, 12}, axis1);
  b.Node1("Reorg", {conv}, {1, 32, 6, 6});
  const Graph& g = b.g;
  auto c = TileRuleOf(g, 0);
  REQUIRE(c.ok());
  CHECK(c->window);
  CHECK(c->w.kernel[0] == 3);
  auto m = TileRuleOf(g, 1);
  REQUIRE(m.ok());
  CHECK_FALSE(m->window);
  CHECK(m->whole_input == std::vector<bool>{false, true});
  CHECK(CheckTileable(g, 2).message().find("axis 2") != std::string::npos);
  CHECK(CheckTileable(g, 3).ok());
  CHECK(CheckTileable(g, 4).message().find("layer 5") != std::string::npos);
}

TEST_CASE("op traits: a Resize of H and W tiles by its coordinate map, with its scales from an input") {
  Builder b;
  int x = b.Input({1, 4, 6, 6});
  Attributes linear;
  linear.Set("mode", std::string("linear"));
  linear.Set("coordinate_transformation_mode", std::string("align_corners"));
  b.Node1("Resize", {x}, {1, 4, 11, 9}, linear);  // sizes form
  // Opset-11 inputs (X, roi, scales): the scales come from the constant.
  const int roi = b.g.AddConstant("roi", TensorData{{0}, {}});
  const int scales = b.g.AddConstant("scales", TensorData{{4}, {1, 1, 2, 0.5}});
  b.Node1("Resize", {x, roi, scales}, {1, 4, 12, 3});
  b.Node1("Resize", {x}, {1, 8, 12, 12});  // resizes channels
  const Graph& g = b.g;
  CHECK(TraitsOf("Resize").spatial == SpatialRule::kWindow);
  auto r = TileRuleOf(g, 0);
  REQUIRE(r.ok());
  CHECK(r->window);
  CHECK(r->w.map == SpatialMap::kResize);
  CHECK(r->w.resize[0].linear);
  CHECK(r->w.resize[1].out_size == 9);
  CHECK(r->w.macs_per_output == 3 * 4);
  auto s = TileRuleOf(g, 1);
  REQUIRE(s.ok());
  CHECK(s->w.resize[0].scale == 2.0);
  CHECK(s->w.resize[1].scale == 0.5);
  CHECK(s->w.macs_per_output == 0);  // nearest copies
  CHECK(CheckTileable(g, 2).message().find("channel") != std::string::npos);
}

TEST_CASE("op traits: per-channel layers, depthwise and grouped convs, granules") {
  Builder b;
  int x = b.Input({1, 8, 6, 6});
  int dw = b.Conv(x, 8, 8);        // depthwise
  int grouped = b.Conv(dw, 12, 4);  // 4 groups: 2 in, 3 out per group
  int plain = b.Conv(grouped, 4, 1);
  Attributes ch_pad;
  ch_pad.Set("pads", std::vector<int64_t>{0, 1, 0, 0, 0, 0, 0, 0});
  b.Node1("Pad", {plain}, {1, 5, 6, 6}, ch_pad);
  Attributes hw_pad;
  hw_pad.Set("pads", std::vector<int64_t>{0, 0, 1, 1, 0, 0, 1, 1});
  b.Node1("Pad", {plain}, {1, 4, 8, 8}, hw_pad);
  int gap = b.Node1("GlobalAveragePool", {plain}, {1, 4, 1, 1});
  b.Node1("Reshape", {gap}, {1, 4});
  b.Node1("Softmax", {plain}, {1, 4, 6, 6});
  const Graph& g = b.g;
  CHECK(IsDepthwise(g, g.nodes[0]));
  CHECK_FALSE(IsWeightSplitLayer(g, g.nodes[0]));
  CHECK(CheckPerChannel(g, g.nodes[0]).ok());
  CHECK(IsWeightSplitLayer(g, g.nodes[1]));
  CHECK_FALSE(CheckPerChannel(g, g.nodes[1]).ok());
  CHECK(OutputSplitGranule(g, g.nodes[1]) == 3);
  CHECK(InputSplitGranule(g, g.nodes[1]) == 2);
  CHECK(OutputSplitGranule(g, g.nodes[2]) == 1);
  CHECK_FALSE(CheckPerChannel(g, g.nodes[3]).ok());  // pads channels
  CHECK(CheckPerChannel(g, g.nodes[4]).ok());
  CHECK(CheckPerChannel(g, g.nodes[5]).ok());  // global pool
  CHECK(CheckPerChannel(g, g.nodes[6]).ok());  // flatten of a 1x1 map
  CHECK(CheckPerChannel(g, g.nodes[7]).message().find("layer 8") != std::string::npos);
  CHECK(SplitChannels(12, 3, {1, 1, 1}) == std::vector<int64_t>{6, 3, 3});  // 4 groups over 3 devices
  CHECK(CheckChannelSplit(g, 1, {6, 6}, false).ok());
  CHECK(CheckChannelSplit(g, 1, {4, 8}, false).message().find("whole groups") != std::string::npos);
  CHECK(CheckChannelSplit(g, 1, {4, 4}, true).ok());
  CHECK_FALSE(CheckChannelSplit(g, 1, {3, 5}, true).ok());
}

TEST_CASE("op traits: every fusable activation folds and runs in the kernels") {
  int fusable = 0;
  for (const char* op :
       {"Relu", "LeakyRelu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu", "Erf", "Mul"}) {
    Node act{"act", op, {0}, {1}, {}};
    act.attrs.Set("alpha", 0.3);
    act.attrs.Set("beta", 0.4);
    act.attrs.Set("min", -1.0);
    act.attrs.Set("max", 2.0);
    Node producer{"conv", "Conv", {}, {}, {}};
    const bool fused = FuseActivation(act, &producer.attrs);
    CHECK(fused == (TraitsOf(op).fused_name != nullptr));
    if (!fused) continue;
    ++fusable;
    // The kernels accept the name the table gives ...
    CHECK(FusedActivation::FromAttributes(producer.attrs).ok());
    // ... with the parameters of the op.
    for (const char* p : {"act_alpha", "act_beta"})
      if (producer.attrs.Has(p)) CHECK(producer.attrs.Float(p) != 0.0);
  }
  CHECK(fusable == 8);
}

TEST_CASE("op traits: a ConvTranspose tiles by its inverse window and keeps its channels whole") {
  Builder b;
  int x = b.Input({1, 4, 5, 5});
  Attributes a;
  a.Set("strides", std::vector<int64_t>{2, 3});
  a.Set("pads", std::vector<int64_t>{1, 0, 1, 0});
  a.Set("dilations", std::vector<int64_t>{1, 2});
  a.Set("group", int64_t{2});
  // (C, M/g, kH, kW) = (4, 3, 3, 2): output 2·4 + 3 − 2 = 9 rows, 3·4 + 2 + 1 = 15 cols.
  b.Node1("ConvTranspose", {x, b.Const({4, 3, 3, 2})}, {1, 6, 9, 15}, a);
  auto r = TileRuleOf(b.g, 0);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  CHECK(r->window);
  CHECK(r->w.map == SpatialMap::kTransposed);
  CHECK(r->w.kernel[1] == 2);
  CHECK(r->w.stride[1] == 3);
  CHECK(r->w.dilation[1] == 2);
  CHECK(r->w.pad_begin[0] == 1);
  CHECK(TraitsOf("ConvTranspose").channels == ChannelRule::kMixed);
  CHECK_FALSE(IsWeightSplitLayer(b.g, b.g.nodes[0]));
  CHECK_FALSE(CheckPerChannel(b.g, b.g.nodes[0]).ok());
}

TEST_CASE("op traits: a LayerNormalization tiles only over the channels at each position (span 1)") {
  // graph.h: LayerNormalization normalises dims [axis, rank). On an NCHW map
  // axis 1 means C·H·W together (each output reads the whole map), and
  // PyTorch's channel LayerNorm arrives as Transpose -> LN(axis 3 of NHWC)
  // -> Transpose, whose spatial dims are not 2 and 3: neither is a
  // point-wise layer of an FFMT stack.
  Builder b;
  int x = b.Input({1, 8, 6, 6});
  Attributes a;
  a.Set("axis", int64_t{1});
  b.Node1("LayerNormalization", {x, b.Const({8, 6, 6})}, {1, 8, 6, 6}, a);
  CHECK(TraitsOf("LayerNormalization").spatial == SpatialRule::kNone);
  CHECK_FALSE(CheckTileable(b.g, 0).ok());
  // graph.h's span 1 at axis 1: the channels at each position, point-wise.
  Attributes channel = a;
  channel.Set("span", int64_t{1});
  b.Node1("LayerNormalization", {x, b.Const({8})}, {1, 8, 6, 6}, channel);
  CHECK(IsChannelLayerNorm(b.g, b.g.nodes[1]));
  auto r = TileRuleOf(b.g, 1);
  REQUIRE(r.ok());
  CHECK_FALSE(r->window);
  CHECK(r->whole_input == std::vector<bool>{false});
  CHECK_FALSE(CheckPerChannel(b.g, b.g.nodes[1]).ok());  // mixes channels
}
