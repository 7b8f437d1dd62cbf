// ImportDarknet (partition/import/darknet_import.cc): layer numbering and shapes of
// the darknet cfgs shipped in /usr/share/darknet/cfg, darknet's maxpool
// padding, the .weights format (round trip, both header versions, truncation)
// and the errors for malformed cfgs.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "partition/graph/graph.h"
#include "partition/import/model_import.h"

using namespace tessera;
namespace fs = std::filesystem;

namespace {

const char* const kCfgDir = "/usr/share/darknet/cfg/";

bool HaveDarknetCfgs() { return fs::exists(std::string(kCfgDir) + "yolov2-tiny.cfg"); }

// A scratch directory per test case, removed at the end.
struct ScratchDir {
  fs::path path;
  ScratchDir() {
    path =
        fs::temp_directory_path() / ("tessera_darknet_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string Write(const std::string& name, const std::string& text) const {
    const std::string p = (path / name).string();
    std::ofstream(p) << text;
    return p;
  }
  static inline int counter = 0;
};

const Node* FindNode(const Graph& g, const std::string& name) {
  for (const Node& n : g.nodes)
    if (n.name == name) return &n;
  return nullptr;
}

Shape OutputShape(const Graph& g, const Node& n) { return g.values[n.outputs[0]].shape; }

Result<Graph> ImportText(const ScratchDir& dir, const std::string& cfg, const ImportOptions& options = {}) {
  return ImportDarknet(dir.Write("model.cfg", cfg), options);
}

const char* const kNet = "[net]\nwidth=8\nheight=8\nchannels=3\n";

}  // namespace

TEST_CASE("darknet cfgs import with darknet's layer count and output shapes") {
  if (!HaveDarknetCfgs()) {
    FAIL("darknet cfgs are missing; deploy/install-deps.sh installs Debian's darknet");
  }
  struct Expect {
    const char* cfg;
    size_t layers;
    std::vector<Shape> outputs;
  };
  const std::vector<Expect> models = {
      {"yolov2-tiny.cfg", 16, {{1, 425, 13, 13}}},
      {"yolov2-tiny-voc.cfg", 16, {{1, 125, 13, 13}}},
      {"yolov2.cfg", 32, {{1, 425, 19, 19}}},
      {"yolov2-voc.cfg", 32, {{1, 125, 13, 13}}},
      {"alexnet.cfg", 14, {{1, 1000}}},
      {"vgg-16.cfg", 25, {{1, 1000}}},
      {"extraction.cfg", 27, {{1, 1000, 1, 1}}},
      {"darknet.cfg", 16, {{1, 1000, 1, 1}}},
      {"darknet19.cfg", 26, {{1, 1000, 1, 1}}},
      {"tiny.cfg", 22, {{1, 1000, 1, 1}}},
      {"darknet53.cfg", 78, {{1, 1000, 1, 1}}},
      {"resnet18.cfg", 29, {{1, 1000, 1, 1}}},
      {"resnet50.cfg", 69, {{1, 1000, 1, 1}}},
      {"resnet152.cfg", 205, {{1, 1000, 1, 1}}},
      {"resnext50.cfg", 69, {{1, 1000, 1, 1}}},
      {"densenet201.cfg", 305, {{1, 1000, 1, 1}}},
      {"yolov3-tiny.cfg", 24, {{1, 255, 13, 13}, {1, 255, 26, 26}}},
      {"yolov3.cfg", 107, {{1, 255, 19, 19}, {1, 255, 38, 38}, {1, 255, 76, 76}}},
      {"yolov3-spp.cfg", 114, {{1, 255, 19, 19}, {1, 255, 38, 38}, {1, 255, 76, 76}}},
  };
  for (const Expect& m : models) {
    INFO(m.cfg);
    auto g = ImportDarknet(std::string(kCfgDir) + m.cfg, ImportOptions{});
    REQUIRE(g.ok());
    CHECK(g->nodes.size() == m.layers);
    REQUIRE(g->outputs.size() == m.outputs.size());
    for (size_t i = 0; i < m.outputs.size(); ++i) CHECK(g->values[g->outputs[i]].shape == m.outputs[i]);
    CHECK(g->nodes.front().name.rfind("1 ", 0) == 0);
    CHECK(g->nodes.back().name.rfind(std::to_string(m.layers) + " ", 0) == 0);
    for (const Value& v : g->values) CHECK(!v.shape.empty());
    CHECK(g->Validate().ok());
  }
}

TEST_CASE("darknet yolov2 keeps darknet's numbering through reorg and route") {
  if (!HaveDarknetCfgs()) return;
  auto g = ImportDarknet(std::string(kCfgDir) + "yolov2.cfg", ImportOptions{});
  REQUIRE(g.ok());
  // darknet prints these 0-based as 25 route (16), 27 reorg, 28 route (27, 24).
  const Node* route = FindNode(*g, "26 route");
  REQUIRE(route);
  CHECK(route->op == "Identity");
  CHECK(OutputShape(*g, *route) == Shape{1, 512, 38, 38});
  CHECK(route->inputs[0] == FindNode(*g, "17 convolutional")->outputs[0]);
  const Node* reorg = FindNode(*g, "28 reorg");
  REQUIRE(reorg);
  CHECK(reorg->op == "Reorg");
  CHECK(reorg->attrs.Int("stride") == 2);
  CHECK(OutputShape(*g, *reorg) == Shape{1, 256, 19, 19});
  const Node* concat = FindNode(*g, "29 route");
  REQUIRE(concat);
  CHECK(concat->op == "Concat");
  CHECK(OutputShape(*g, *concat) == Shape{1, 1280, 19, 19});
  // The first input is layer -1 (the reorg), the second layer -4.
  CHECK(concat->inputs[0] == reorg->outputs[0]);
  CHECK(concat->inputs[1] == FindNode(*g, "25 convolutional")->outputs[0]);
  const Node* region = FindNode(*g, "32 region");
  REQUIRE(region);
  CHECK(region->op == "Region");
  CHECK(region->attrs.Int("num") == 5);
  CHECK(region->attrs.Int("classes") == 80);
  CHECK(region->attrs.Int("coords") == 4);
  CHECK(region->attrs.Int("softmax") == 1);
}

TEST_CASE("darknet maxpool size=2 stride=1 keeps 13x13 with padding after the map") {
  if (!HaveDarknetCfgs()) return;
  auto g = ImportDarknet(std::string(kCfgDir) + "yolov2-tiny.cfg", ImportOptions{});
  REQUIRE(g.ok());
  const Node* pool = FindNode(*g, "12 maxpool");
  REQUIRE(pool);
  CHECK(pool->op == "MaxPool");
  CHECK(pool->attrs.Ints("kernel_shape") == std::vector<int64_t>{2, 2});
  CHECK(pool->attrs.Ints("strides") == std::vector<int64_t>{1, 1});
  CHECK(pool->attrs.Ints("pads") == std::vector<int64_t>{0, 0, 1, 1});
  CHECK(OutputShape(*g, *pool) == Shape{1, 512, 13, 13});
  const Node* pool2 = FindNode(*g, "2 maxpool");
  REQUIRE(pool2);
  CHECK(OutputShape(*g, *pool2) == Shape{1, 16, 208, 208});
}

TEST_CASE("darknet maxpool output follows (w + padding - size)/stride + 1") {
  ScratchDir dir;
  // 9x9: size 3 stride 2 default padding 2 -> (9+2-3)/2+1 = 5, pads 1/1;
  // size 2 stride 2 on 5 -> (5+1-2)/2+1 = 3, pads 0/1; explicit padding=0.
  auto g = ImportText(dir,
                      "[net]\nwidth=9\nheight=9\nchannels=2\n"
                      "[maxpool]\nsize=3\nstride=2\n"
                      "[maxpool]\nsize=2\nstride=2\n"
                      "[maxpool]\nsize=3\nstride=1\npadding=0\n");
  REQUIRE(g.ok());
  CHECK(OutputShape(*g, g->nodes[0]) == Shape{1, 2, 5, 5});
  CHECK(g->nodes[0].attrs.Ints("pads") == std::vector<int64_t>{1, 1, 1, 1});
  CHECK(OutputShape(*g, g->nodes[1]) == Shape{1, 2, 3, 3});
  CHECK(g->nodes[1].attrs.Ints("pads") == std::vector<int64_t>{0, 0, 1, 1});
  CHECK(OutputShape(*g, g->nodes[2]) == Shape{1, 2, 1, 1});
  CHECK(g->nodes[2].attrs.Ints("pads") == std::vector<int64_t>{0, 0, 0, 0});
}

TEST_CASE("darknet input shape can be overridden, channels must match") {
  if (!HaveDarknetCfgs()) return;
  ImportOptions o;
  o.input_shapes[""] = {2, 3, 608, 608};
  auto g = ImportDarknet(std::string(kCfgDir) + "yolov2-tiny-voc.cfg", o);
  REQUIRE(g.ok());
  CHECK(g->values[g->inputs[0]].shape == Shape{2, 3, 608, 608});
  CHECK(g->values[g->outputs[0]].shape == Shape{2, 125, 19, 19});
  o.input_shapes[""] = {1, 4, 608, 608};
  auto bad = ImportDarknet(std::string(kCfgDir) + "yolov2-tiny-voc.cfg", o);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("channels") != std::string::npos);
}

TEST_CASE("darknet sections map to their canonical ops") {
  if (!HaveDarknetCfgs()) return;
  auto alex = ImportDarknet(std::string(kCfgDir) + "alexnet.cfg", ImportOptions{});
  REQUIRE(alex.ok());
  const Node* fc = FindNode(*alex, "9 connected");
  REQUIRE(fc);
  CHECK(fc->op == "Gemm");
  CHECK(fc->attrs.Int("flatten_input") == 1);
  CHECK(alex->values[fc->inputs[0]].shape == Shape{1, 256, 6, 6});
  CHECK(alex->values[fc->inputs[1]].shape == Shape{4096, 256 * 6 * 6});
  CHECK(OutputShape(*alex, *fc) == Shape{1, 4096});
  CHECK(fc->attrs.String("activation") == "relu");
  CHECK(FindNode(*alex, "10 dropout")->op == "Identity");
  const Node* fc2 = FindNode(*alex, "11 connected");
  CHECK_FALSE(fc2->attrs.Has("flatten_input"));  // its input is already [N, 4096]
  CHECK(FindNode(*alex, "14 softmax")->op == "Softmax");

  auto vgg = ImportDarknet(std::string(kCfgDir) + "vgg-16.cfg", ImportOptions{});
  REQUIRE(vgg.ok());
  const Node* crop = FindNode(*vgg, "1 crop");
  REQUIRE(crop);
  CHECK(crop->op == "DarknetCrop");
  CHECK(crop->attrs.Int("offset_h") == 16);
  CHECK(crop->attrs.Int("offset_w") == 16);
  CHECK(crop->attrs.Float("scale") == 2.0);
  CHECK(crop->attrs.Float("shift") == -1.0);
  CHECK(OutputShape(*vgg, *crop) == Shape{1, 3, 224, 224});

  auto tiny3 = ImportDarknet(std::string(kCfgDir) + "yolov3-tiny.cfg", ImportOptions{});
  REQUIRE(tiny3.ok());
  const Node* up = FindNode(*tiny3, "20 upsample");
  REQUIRE(up);
  CHECK(up->op == "Resize");
  CHECK(up->attrs.Floats("scales") == std::vector<double>{1, 1, 2, 2});
  const Node* yolo = FindNode(*tiny3, "17 yolo");
  REQUIRE(yolo);
  CHECK(yolo->op == "Region");
  CHECK(yolo->attrs.Int("num") == 3);
  CHECK(yolo->attrs.Int("softmax") == 0);
  const Node* leaky = FindNode(*tiny3, "1 convolutional");
  CHECK(leaky->attrs.String("activation") == "leaky_relu");
  CHECK(leaky->attrs.Float("act_alpha") == Approx(0.1));

  auto res = ImportDarknet(std::string(kCfgDir) + "resnet18.cfg", ImportOptions{});
  REQUIRE(res.ok());
  const Node* add = FindNode(*res, "5 shortcut");
  REQUIRE(add);
  CHECK(add->op == "Add");
  CHECK(add->attrs.String("activation") == "leaky_relu");
  const Node* projection = FindNode(*res, "11 shortcut");  // 32x32x128 + 64x64x64
  REQUIRE(projection);
  CHECK(projection->op == "DarknetShortcut");
  CHECK(OutputShape(*res, *projection) == Shape{1, 128, 32, 32});
}

TEST_CASE("darknet seeded weights are deterministic per seed") {
  if (!HaveDarknetCfgs()) return;
  ImportOptions a, b;
  a.seed = b.seed = 42;
  auto g1 = ImportDarknet(std::string(kCfgDir) + "yolov2-tiny-voc.cfg", a);
  auto g2 = ImportDarknet(std::string(kCfgDir) + "yolov2-tiny-voc.cfg", b);
  b.seed = 43;
  auto g3 = ImportDarknet(std::string(kCfgDir) + "yolov2-tiny-voc.cfg", b);
  REQUIRE((g1.ok() && g2.ok() && g3.ok()));
  const int w = g1->nodes[0].inputs[1];
  const auto& v1 = g1->ConstantData(w)->values;
  CHECK(v1 == g2->ConstantData(w)->values);
  CHECK(v1 != g3->ConstantData(w)->values);
  // He scaling: 3x3x3 fan-in, leaky -> std about sqrt(2/27) (times the BN fold ~1).
  double s = 0;
  for (float x : v1) s += double(x) * x;
  const double rms = std::sqrt(s / v1.size());
  CHECK(rms > 0.15);
  CHECK(rms < 0.45);
}

namespace {

// Writes a darknet .weights file: header, then the given floats.
void WriteWeights(const std::string& path, int32_t major, int32_t minor, const std::vector<float>& floats,
                  size_t truncate_floats = 0) {
  std::ofstream f(path, std::ios::binary);
  const int32_t header[3] = {major, minor, 0};
  f.write(reinterpret_cast<const char*>(header), sizeof(header));
  if (major * 10 + minor >= 2 && major < 1000 && minor < 1000) {
    const uint64_t seen = 12345;
    f.write(reinterpret_cast<const char*>(&seen), sizeof(seen));
  } else {
    const int32_t seen = 12345;
    f.write(reinterpret_cast<const char*>(&seen), sizeof(seen));
  }
  f.write(reinterpret_cast<const char*>(floats.data()),
          static_cast<std::streamsize>((floats.size() - truncate_floats) * sizeof(float)));
}

// conv 3->2 3x3 with BN, conv 2->2 1x1 without, connected 2·4·4 -> 3 (4-D input).
const char* const kWeightsCfg =
    "[net]\nwidth=4\nheight=4\nchannels=3\n"
    "[convolutional]\nbatch_normalize=1\nfilters=2\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[convolutional]\nfilters=2\nsize=1\nstride=1\npad=1\nactivation=linear\n"
    "[connected]\noutput=3\nactivation=linear\n";

struct WeightsFixture {
  std::vector<float> conv1_bias{0.5f, -0.25f}, conv1_scales{2.f, 0.5f}, conv1_mean{0.1f, -0.2f}, conv1_var{4.f, 0.25f},
      conv1_w, conv2_bias{1.f, 2.f}, conv2_w{1.f, 2.f, 3.f, 4.f}, fc_bias{0.1f, 0.2f, 0.3f}, fc_w;
  WeightsFixture() {
    for (int i = 0; i < 2 * 3 * 3 * 3; ++i) conv1_w.push_back(0.01f * static_cast<float>(i));
    for (int i = 0; i < 3 * 32; ++i) fc_w.push_back(static_cast<float>(i) - 40.f);
  }
  // darknet's file order.
  std::vector<float> Floats(bool transposed_fc = false) const {
    std::vector<float> f;
    auto add = [&f](const std::vector<float>& v) { f.insert(f.end(), v.begin(), v.end()); };
    add(conv1_bias);
    add(conv1_scales);
    add(conv1_mean);
    add(conv1_var);
    add(conv1_w);
    add(conv2_bias);
    add(conv2_w);
    add(fc_bias);
    if (transposed_fc) {
      for (int i = 0; i < 32; ++i)
        for (int o = 0; o < 3; ++o) f.push_back(fc_w[o * 32 + i]);
    } else {
      add(fc_w);
    }
    return f;
  }
};

}  // namespace

TEST_CASE("darknet .weights round trip folds batch norm the way darknet normalises") {
  ScratchDir dir;
  WeightsFixture fx;
  const std::string cfg = dir.Write("w.cfg", kWeightsCfg);
  for (int version : {2, 1, 1001}) {
    INFO("header version " << version);
    const int32_t major = version == 1001 ? 1001 : 0;
    const int32_t minor = version == 1001 ? 0 : version;
    const std::string weights = (dir.path / ("w" + std::to_string(version) + ".weights")).string();
    WriteWeights(weights, major, minor, fx.Floats(/*transposed_fc=*/version == 1001));
    ImportOptions o;
    o.weights_path = weights;
    auto g = ImportDarknet(cfg, o);
    REQUIRE(g.ok());
    REQUIRE(g->nodes.size() == 3);
    const auto& w1 = g->ConstantData(g->nodes[0].inputs[1])->values;
    const auto& b1 = g->ConstantData(g->nodes[0].inputs[2])->values;
    for (int oc = 0; oc < 2; ++oc) {
      const float f = fx.conv1_scales[oc] / (std::sqrt(fx.conv1_var[oc]) + .000001f);
      CHECK(b1[oc] == Approx(fx.conv1_bias[oc] - fx.conv1_mean[oc] * f));
      for (int i = 0; i < 27; ++i) CHECK(w1[oc * 27 + i] == Approx(fx.conv1_w[oc * 27 + i] * f));
    }
    CHECK(g->ConstantData(g->nodes[1].inputs[1])->values == fx.conv2_w);
    CHECK(g->ConstantData(g->nodes[1].inputs[2])->values == fx.conv2_bias);
    CHECK(g->values[g->nodes[1].inputs[1]].shape == Shape{2, 2, 1, 1});
    CHECK(g->ConstantData(g->nodes[2].inputs[1])->values == fx.fc_w);
    CHECK(g->ConstantData(g->nodes[2].inputs[2])->values == fx.fc_bias);
    CHECK(g->values[g->nodes[2].inputs[1]].shape == Shape{3, 32});
  }
}

TEST_CASE("a truncated darknet .weights file is DataLoss naming the layer") {
  ScratchDir dir;
  WeightsFixture fx;
  const std::string cfg = dir.Write("w.cfg", kWeightsCfg);
  const std::string weights = (dir.path / "short.weights").string();
  WriteWeights(weights, 0, 2, fx.Floats(), /*truncate_floats=*/5);
  ImportOptions o;
  o.weights_path = weights;
  auto g = ImportDarknet(cfg, o);
  REQUIRE_FALSE(g.ok());
  CHECK(g.status().code() == StatusCode::kDataLoss);
  CHECK(g.status().message().find("layer 3 (connected)") != std::string::npos);
  CHECK(g.status().message().find("short.weights") != std::string::npos);

  const std::string tiny = (dir.path / "header.weights").string();
  std::ofstream(tiny, std::ios::binary) << "abc";
  o.weights_path = tiny;
  auto h = ImportDarknet(cfg, o);
  REQUIRE_FALSE(h.ok());
  CHECK(h.status().code() == StatusCode::kDataLoss);

  o.weights_path = (dir.path / "missing.weights").string();
  auto m = ImportDarknet(cfg, o);
  REQUIRE_FALSE(m.ok());
  CHECK(m.status().IsNotFound());
}

TEST_CASE("malformed darknet cfgs give one error naming file, line and section") {
  ScratchDir dir;
  struct Bad {
    std::string text;
    StatusCode code;
    std::vector<std::string> mentions;
  };
  const std::vector<Bad> cases = {
      {std::string(kNet) + "[convolutional]\nfilters=4\n[frobnicate]\nx=1\n",
       StatusCode::kInvalidArgument,
       {"model.cfg:7:", "[frobnicate]", "layer 2", "unknown section"}},
      {std::string(kNet) + "[convolutional]\nfilters=four\n",
       StatusCode::kInvalidArgument,
       {"model.cfg:6:", "[convolutional]", "filters", "'four'"}},
      {std::string(kNet) + "[maxpool]\nsize=2\nstride=2.5\n", StatusCode::kInvalidArgument, {"model.cfg:7:", "stride"}},
      {std::string(kNet) + "[convolutional]\nfilters=4\n[route]\nlayers=-2\n",
       StatusCode::kInvalidArgument,
       {"model.cfg:7:", "[route]", "layer 2", "-2"}},
      {std::string(kNet) + "[convolutional]\nfilters=4\n[route]\nlayers=5\n",
       StatusCode::kInvalidArgument,
       {"[route]", "layers", "5"}},
      {std::string(kNet) + "[convolutional]\nfilters=4\n[route]\nlayers=1\n",
       StatusCode::kInvalidArgument,
       {"[route]", "not an earlier layer"}},
      {std::string(kNet) + "[route]\n", StatusCode::kInvalidArgument, {"[route]", "layers="}},
      {std::string(kNet) + "[shortcut]\nfrom=-3\n", StatusCode::kInvalidArgument, {"[shortcut]", "from"}},
      {"[convolutional]\nfilters=4\n", StatusCode::kInvalidArgument, {"model.cfg:1:", "[net]"}},
      {"width=3\n[net]\n", StatusCode::kInvalidArgument, {"model.cfg:1:", "before the first [section]"}},
      {std::string(kNet) + "[convolutional]\nfilters\n", StatusCode::kInvalidArgument, {"model.cfg:6:", "key=value"}},
      {std::string(kNet) + "[convolutional]\nfilters=4\nactivation=mish\n",
       StatusCode::kNotSupported,
       {"[convolutional]", "mish"}},
      {std::string(kNet) + "[local]\nfilters=4\n", StatusCode::kNotSupported, {"model.cfg:5:", "[local]"}},
      {std::string(kNet) + "[convolutional]\nfilters=10\nsize=1\n[region]\nnum=2\nclasses=1\ncoords=4\n",
       StatusCode::kInvalidArgument,
       {"[region]", "12"}},
      {std::string(kNet) + "[convolutional]\nfilters=6\nsize=1\n[reorg]\nstride=2\n",
       StatusCode::kInvalidArgument,
       {"[reorg]", "divisible"}},
      {"[net]\nwidth=8\nheight=8\n[convolutional]\n", StatusCode::kInvalidArgument, {"[net]", "channels"}},
      {std::string(kNet) + "[crop]\ncrop_height=9\ncrop_width=4\n", StatusCode::kInvalidArgument, {"[crop]"}},
  };
  for (const Bad& b : cases) {
    INFO(b.text);
    auto g = ImportText(dir, b.text);
    REQUIRE_FALSE(g.ok());
    CHECK(g.status().code() == b.code);
    for (const std::string& m : b.mentions) {
      INFO(g.status().message() << " should mention " << m);
      CHECK(g.status().message().find(m) != std::string::npos);
    }
  }
  auto missing = ImportDarknet((dir.path / "nope.cfg").string(), ImportOptions{});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().IsNotFound());
}

TEST_CASE("darknet cfg syntax: comments, spaces, aliases, relative and absolute routes") {
  ScratchDir dir;
  auto g = ImportText(dir,
                      "# a comment\n[net]\n width = 8 \nheight=8\nchannels=3\n; another\n"
                      "[conv]\nfilters=4\nsize=3\npad=1\nactivation=relu\n"
                      "[max]\nsize=2\nstride=2\n"
                      "[route]\nlayers=0\n"
                      "[route]\nlayers = -1, 0\n"
                      "[conn]\noutput=5\nactivation=linear\n"
                      "[soft]\n");
  REQUIRE(g.ok());
  REQUIRE(g->nodes.size() == 6);
  CHECK(g->nodes[0].name == "1 convolutional");
  CHECK(g->nodes[0].op == "Conv");
  CHECK(g->nodes[0].attrs.Ints("pads") == std::vector<int64_t>{1, 1, 1, 1});
  CHECK(OutputShape(*g, g->nodes[1]) == Shape{1, 4, 4, 4});
  CHECK(g->nodes[2].op == "Identity");
  CHECK(g->nodes[2].inputs[0] == g->nodes[0].outputs[0]);  // absolute 0 = darknet's first layer
  CHECK(OutputShape(*g, g->nodes[2]) == Shape{1, 4, 8, 8});
  CHECK(g->nodes[3].op == "Concat");
  CHECK(OutputShape(*g, g->nodes[3]) == Shape{1, 8, 8, 8});
  CHECK(g->values[g->nodes[4].inputs[1]].shape == Shape{5, 8 * 8 * 8});
  CHECK(OutputShape(*g, g->nodes[5]) == Shape{1, 5});
  // -1 is the 8x8 route, 1 the 4x4 maxpool: spatial sizes differ.
  auto bad = ImportText(dir,
                        "[net]\nwidth=8\nheight=8\nchannels=3\n"
                        "[conv]\nfilters=4\nsize=3\npad=1\n[max]\nsize=2\nstride=2\n[route]\nlayers=0\n"
                        "[route]\nlayers=-1,1\n");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("spatial") != std::string::npos);
}
