// tessera against darknet itself: the same cfg and .weights run through
// darknet's own forward pass (libdarknet from the Debian darknet package,
// loaded with dlopen so nothing links against it) and through
// ImportDarknet + Executor. Skipped when libdarknet is not installed.
//
// The weights file is written here with seeded values in darknet's layout
// (biases, [BN scales, rolling mean, rolling variance], weights per layer) so
// batch norm is exercised with non-trivial statistics.
#include <catch2/catch.hpp>

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

// darknet's public header, for its network/layer structs only (nothing is
// linked: the functions come from dlopen).
#include <darknet.h>

#include "daemon/runtime/executor.h"
#include "daemon/runtime/kernels/darknet_registry.h"
#include "partition/import/model_import.h"

using namespace tessera;
namespace fs = std::filesystem;

namespace {

const char* const kCfgDir = "/usr/share/darknet/cfg/";
const char* const kLibDarknet = "/usr/lib/darknet/libdarknet.so";

// The four entry points we need; `network` stays opaque.
struct LibDarknet {
  void* handle = nullptr;
  void* (*load_network)(char* cfg, char* weights, int clear) = nullptr;
  void (*set_batch_network)(void* net, int batch) = nullptr;
  float* (*network_predict)(void* net, float* input) = nullptr;
  void (*free_network)(void* net) = nullptr;

  bool Open() {
    handle = dlopen(kLibDarknet, RTLD_NOW | RTLD_LOCAL);
    if (!handle) return false;
    load_network = reinterpret_cast<decltype(load_network)>(dlsym(handle, "load_network"));
    set_batch_network = reinterpret_cast<decltype(set_batch_network)>(dlsym(handle, "set_batch_network"));
    network_predict = reinterpret_cast<decltype(network_predict)>(dlsym(handle, "network_predict"));
    free_network = reinterpret_cast<decltype(free_network)>(dlsym(handle, "free_network"));
    return load_network && set_batch_network && network_predict && free_network;
  }
};

// darknet prints a table per network to stderr; keep the test log readable.
class StderrSilencer {
 public:
  StderrSilencer() {
    saved_ = dup(2);
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    close(null);
  }
  ~StderrSilencer() {
    dup2(saved_, 2);
    close(saved_);
  }

 private:
  int saved_;
};

// The cfg with [net] width/height (and any crop) replaced, so darknet's
// unoptimised CPU path stays quick.
std::string ResizedCfg(const std::string& text, int size, int crop) {
  std::istringstream in(text);
  std::ostringstream out;
  std::string line, section;
  while (std::getline(in, line)) {
    std::string s;
    for (char c : line)
      if (!std::isspace(static_cast<unsigned char>(c))) s.push_back(c);
    if (!s.empty() && s[0] == '[') section = s;
    if (section == "[net]" && (s.rfind("width=", 0) == 0 || s.rfind("height=", 0) == 0)) {
      out << s.substr(0, s.find('=')) << "=" << size << "\n";
    } else if (section == "[crop]" && (s.rfind("crop_width=", 0) == 0 || s.rfind("crop_height=", 0) == 0)) {
      out << s.substr(0, s.find('=')) << "=" << crop << "\n";
    } else {
      out << line << "\n";
    }
  }
  return out.str();
}

// batch_normalize flag of every [convolutional]/[connected] section, in order.
std::vector<bool> WeightedSectionsBatchNorm(const std::string& text) {
  std::vector<bool> bn;
  std::istringstream in(text);
  std::string line;
  bool weighted = false;
  while (std::getline(in, line)) {
    std::string s;
    for (char c : line)
      if (!std::isspace(static_cast<unsigned char>(c))) s.push_back(c);
    if (s.empty() || s[0] == '#' || s[0] == ';') continue;
    if (s[0] == '[') {
      weighted = s == "[convolutional]" || s == "[conv]" || s == "[connected]" || s == "[conn]";
      if (weighted) bn.push_back(false);
    } else if (weighted && s == "batch_normalize=1") {
      bn.back() = true;
    }
  }
  return bn;
}

// Writes a version 0.2 .weights file for `graph` (imported from the same cfg).
void WriteSeededWeights(const Graph& graph, const std::vector<bool>& bn, const std::string& path) {
  std::ofstream f(path, std::ios::binary);
  const int32_t header[3] = {0, 2, 0};
  const uint64_t seen = 0;
  f.write(reinterpret_cast<const char*>(header), sizeof(header));
  f.write(reinterpret_cast<const char*>(&seen), sizeof(seen));
  std::mt19937 rng(2024);
  auto put = [&](size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(n * sizeof(float)));
  };
  size_t layer = 0;
  for (const Node& node : graph.nodes) {
    if (node.op != "Conv" && node.op != "Gemm") continue;
    REQUIRE(layer < bn.size());
    const Shape& w = graph.values[node.inputs[1]].shape;
    const size_t n = static_cast<size_t>(w[0]);
    const size_t count = static_cast<size_t>(NumElements(w));
    const float a = std::sqrt(6.f / static_cast<float>(count / n));
    auto put_bn = [&] {
      put(n, 0.8f, 1.2f);     // scales
      put(n, -0.05f, 0.05f);  // rolling mean
      put(n, 0.5f, 1.5f);     // rolling variance
    };
    put(n, -0.1f, 0.1f);  // biases
    if (node.op == "Conv" && bn[layer]) put_bn();
    put(count, -a, a);
    if (node.op == "Gemm" && bn[layer]) put_bn();
    ++layer;
  }
  REQUIRE(layer == bn.size());
}

// Runs cfg `text` (saved as cfg_name) through both. `files` are written
// beside it first; "@DIR@" in the text and in them names that folder.
void CompareCfgWithDarknet(LibDarknet& lib, const std::string& cfg_name, std::string cfg_text, int size, int crop,
                           const std::map<std::string, std::string>& files) {
  INFO(cfg_name << " at " << size << "x" << size);
  const fs::path dir = fs::temp_directory_path() / ("tessera_darknet_oracle_" + std::to_string(getpid()));
  fs::create_directories(dir);
  auto expand = [&](std::string t) {
    for (size_t at = t.find("@DIR@"); at != std::string::npos; at = t.find("@DIR@", at)) t.replace(at, 5, dir.string());
    return t;
  };
  for (const auto& [name, content] : files) std::ofstream(dir / name) << expand(content);
  cfg_text = expand(cfg_text);
  const std::string cfg = (dir / cfg_name).string();
  const std::string weights = (dir / "seeded.weights").string();
  std::ofstream(cfg) << ResizedCfg(cfg_text, size, crop);
  std::stringstream text(cfg_text);

  auto seeded = ImportDarknet(cfg, ImportOptions{});
  INFO(seeded.status().ToString());
  REQUIRE(seeded.ok());
  WriteSeededWeights(*seeded, WeightedSectionsBatchNorm(text.str()), weights);

  ImportOptions o;
  o.weights_path = weights;
  auto graph = ImportDarknet(cfg, o);
  INFO(graph.status().ToString());
  REQUIRE(graph.ok());
  auto ex = Executor::Create(*graph, ExecutorOptions{});
  INFO(ex.status().ToString());
  REQUIRE(ex.ok());
  const Shape in_shape = graph->values[graph->inputs[0]].shape;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(0.f, 1.f);
  TensorData input{in_shape, std::vector<float>(static_cast<size_t>(NumElements(in_shape)))};
  for (float& v : input.values) v = d(rng);
  std::vector<TensorData> outputs;
  const Status st = (*ex)->Run({input}, &outputs);
  INFO(st.ToString());
  REQUIRE(st.ok());
  // darknet returns its last (non-cost) layer's output: our last graph output.
  const std::vector<float>& ours = outputs.back().values;

  std::vector<float> theirs;
  {
    StderrSilencer quiet;
    void* net = lib.load_network(const_cast<char*>(cfg.c_str()), const_cast<char*>(weights.c_str()), 0);
    lib.set_batch_network(net, 1);
    // This darknet never sets a [region] layer's softmax temperature (it
    // stays 0), so its tree softmax divides by zero and returns NaN for
    // every class score; tessera uses temperature 1, the intended math.
    // Give darknet's layers the same 1 through its public struct (darknet.h).
    network* dn = static_cast<network*>(net);
    for (int i = 0; i < dn->n; ++i)
      if (dn->layers[i].softmax_tree != nullptr && dn->layers[i].temperature == 0.f) dn->layers[i].temperature = 1.f;
    std::vector<float> x = input.values;
    const float* y = lib.network_predict(net, x.data());
    theirs.assign(y, y + ours.size());
    lib.free_network(net);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);

  // A value finite on one side only is a mismatch (NaN compares false below).
  size_t non_finite = 0;
  for (size_t i = 0; i < ours.size(); ++i) non_finite += std::isfinite(ours[i]) != std::isfinite(theirs[i]);
  INFO(non_finite << " values finite in one output but not the other");
  CHECK(non_finite == 0);
  double max_ref = 0, max_diff = 0;
  size_t worst = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    max_ref = std::max(max_ref, std::fabs(double(theirs[i])));
    const double diff = std::fabs(double(theirs[i]) - ours[i]);
    if (diff > max_diff) {
      max_diff = diff;
      worst = i;
    }
  }
  INFO("max |darknet| " << max_ref << ", max |diff| " << max_diff << " at " << worst << " (darknet " << theirs[worst]
                        << ", tessera " << ours[worst] << ")");
  CHECK(max_diff <= 1e-4 * std::max(max_ref, 1e-3));
}

void CompareWithDarknet(LibDarknet& lib, const std::string& cfg_name, int size, int crop = 0) {
  std::ifstream in(std::string(kCfgDir) + cfg_name);
  std::stringstream text;
  text << in.rdbuf();
  CompareCfgWithDarknet(lib, cfg_name, text.str(), size, crop, {});
}

// One conv per activation darknet defines (darknet.h ACTIVATION), each
// reading the one before, plus [connected] and [shortcut] carrying some.
std::string ActivationsCfg() {
  std::string cfg = "[net]\nwidth=24\nheight=24\nchannels=3\n";
  const char* const kActivations[] = {"logistic", "relu", "relie", "linear", "ramp",    "tanh",  "plse",
                                      "leaky",    "elu",  "loggy", "stair",  "hardtan", "lhtan", "selu"};
  int i = 0;
  for (const char* act : kActivations) {
    // Alternate batch norm so pre-activations have different scales; a 3x3
    // conv of 8 channels reaches the outer pieces of plse, lhtan and stair.
    cfg += std::string("[convolutional]\nfilters=8\nsize=3\nstride=1\npad=1\nbatch_normalize=") +
           (i++ % 2 ? "1" : "0") + "\nactivation=" + act + "\n";
  }
  cfg += "[shortcut]\nfrom=-3\nactivation=ramp\n";
  cfg += "[connected]\noutput=10\nactivation=selu\n";
  cfg += "[connected]\noutput=6\nactivation=loggy\n";
  return cfg;
}

// A small YOLO9000-style head: [region] with a softmax tree of 7 classes in
// groups of 2, 3, 2 (the tree file darknet reads: "<name> <parent>").
std::string TreeRegionCfg() {
  return "[net]\nwidth=32\nheight=32\nchannels=3\n"
         "[convolutional]\nfilters=16\nsize=3\nstride=2\npad=1\nbatch_normalize=1\nactivation=leaky\n"
         "[maxpool]\nsize=2\nstride=2\n"
         "[convolutional]\nfilters=36\nsize=1\nstride=1\npad=1\nactivation=linear\n"
         "[region]\nanchors=1,1, 2,2, 3,3\nbias_match=1\nclasses=7\ncoords=4\nnum=3\nsoftmax=1\n"
         "tree=@DIR@/small.tree\n";
}

}  // namespace

TEST_CASE("tessera matches darknet's own forward pass on darknet cfgs") {
  LibDarknet lib;
  if (!fs::exists(std::string(kCfgDir) + "yolov2.cfg") || !lib.Open()) {
    FAIL("libdarknet or the darknet cfgs are missing; deploy/install-deps.sh installs Debian's darknet");
  }
  REQUIRE(FindDarknetKernel("Reorg") != nullptr);
  SECTION("yolov2-tiny-voc (maxpool size=2 stride=1, region)") { CompareWithDarknet(lib, "yolov2-tiny-voc.cfg", 224); }
  SECTION("yolov2 (reorg, route, region softmax)") { CompareWithDarknet(lib, "yolov2.cfg", 160); }
  SECTION("yolov3-tiny (upsample, yolo)") { CompareWithDarknet(lib, "yolov3-tiny.cfg", 160); }
  SECTION("extraction") { CompareWithDarknet(lib, "extraction.cfg", 96); }
  SECTION("darknet53 (linear shortcuts)") { CompareWithDarknet(lib, "darknet53.cfg", 64); }
  SECTION("densenet201 (many-input routes)") { CompareWithDarknet(lib, "densenet201.cfg", 64); }
  SECTION("resnet18 (leaky shortcuts, projection shortcuts)") { CompareWithDarknet(lib, "resnet18.cfg", 64); }
  SECTION("resnext50 (grouped convolutions)") { CompareWithDarknet(lib, "resnext50.cfg", 64); }
  SECTION("alexnet (connected on a feature map, dropout)") { CompareWithDarknet(lib, "alexnet.cfg", 227); }
  SECTION("vgg-16 (crop, connected)") { CompareWithDarknet(lib, "vgg-16.cfg", 80, 64); }
  SECTION("yolov1-tiny (detection after connected)") { CompareWithDarknet(lib, "yolov1-tiny.cfg", 192); }
  SECTION("every darknet activation (logistic .. selu) on conv, shortcut and connected") {
    CompareCfgWithDarknet(lib, "activations.cfg", ActivationsCfg(), 24, 0, {});
  }
  SECTION("region with a softmax tree (tree=, groups 2, 3, 2)") {
    CompareCfgWithDarknet(lib, "tree_region.cfg", TreeRegionCfg(), 32, 0,
                          {{"small.tree", "root_a -1\nroot_b -1\na1 0\na2 0\na3 0\nb1 1\nb2 1\n"}});
  }
}

TEST_CASE("tessera matches darknet's own forward pass on yolo9000 (region tree= with Debian's 9k.tree)") {
  LibDarknet lib;
  if (!fs::exists(std::string(kCfgDir) + "yolo9000.cfg") || !lib.Open())
    FAIL("libdarknet or the darknet cfgs are missing; deploy/install-deps.sh installs Debian's darknet");
  CompareWithDarknet(lib, "yolo9000.cfg", 64);
}
