// The MCU worker's program and kernels (transport/wire/mcu_program.h,
// firmware/mcu_kernels.h) on the host: parity with the host executor on the
// same inputs, an MCU bridged into a compiled pipeline plan, and fuzzed
// programs that must be rejected or stay inside their arena.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "daemon/runtime/executor.h"
#include "daemon/runtime/program_runner.h"
#include "firmware/mcu_kernels.h"
#include "partition/compile/forced_plan.h"
#include "partition/compile/mcu_program_builder.h"
#include "partition/compile/program_compiler.h"
#include "partition/graph/int8_weights.h"
#include "partition/graph/quantization.h"

namespace tessera {
namespace {

// The firmware's memory on the host: the program (its flash region), then
// the activations (its RAM arena of `ram_bytes`), then a guard band.
struct HostArena {
  static constexpr size_t kGuardFloats = 1024;
  std::vector<uint64_t> words;
  size_t program_aligned = 0, limit = 0;
  mcu::ProgramView view;

  uint32_t Load(const std::string& program, size_t ram_bytes) {
    program_aligned = (program.size() + 7) & ~size_t{7};
    limit = program_aligned + ram_bytes;
    words.assign(limit / 8 + kGuardFloats / 2 + 1, 0x7FC000007FC00000ull);  // NaN fill
    std::memcpy(words.data(), program.data(), program.size());
    return mcu::ValidateProgram(words.data(), static_cast<uint32_t>(program.size()), ram_bytes, &view);
  }
  float* act() { return reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(words.data()) + program_aligned); }
  // A tensor in, or out, in the form the program holds it (float32 or int8
  // codes, mcu_program.h version 5), as a Linux board's bridge converts it.
  void Put(const mcu::IoEntry& e, const float* values) {
    mcu::EncodeTensor(view.weights, e.grid, values, e.count, mcu::BytesAt(act(), e.offset));
  }
  std::vector<float> Get(const mcu::IoEntry& e) {
    std::vector<float> v(e.count);
    mcu::DecodeTensor(view.weights, e.grid, mcu::BytesAt(act(), e.offset), e.count, v.data());
    return v;
  }
  bool GuardIntact() const {
    const uint8_t* base = reinterpret_cast<const uint8_t*>(words.data());
    // Every 4-byte word from the arena's end (which need not be 8-aligned).
    for (size_t b = limit; b + 4 <= words.size() * 8; b += 4) {
      uint32_t word;
      std::memcpy(&word, base + b, 4);
      if (word != 0x7FC00000u) return false;
    }
    return true;
  }
};

std::vector<float> SeededInput(const Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(NumElements(shape));
  for (float& x : v) x = u(rng);
  return v;
}

double MaxRel(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;  // NaN would slip through std::max
    diff = std::max(diff, double(std::fabs(got[i] - want[i])));
    scale = std::max(scale, double(std::fabs(want[i])));
  }
  return diff / scale;
}

std::vector<float> Reference(const Graph& g, const std::vector<float>& input) {
  auto ex = Executor::Create(g, ExecutorOptions{});
  REQUIRE(ex.ok());
  std::vector<TensorData> out;
  REQUIRE((*ex)->Run({TensorData{g.values[g.inputs[0]].shape, input}}, &out).ok());
  return out[0].values;
}

// Builds `g`'s MCU program, runs it on `input` with the firmware's
// interpreter on a host arena and returns its first output; the arena's
// guard band must stay intact.
std::vector<float> RunOnHostArena(const Graph& g, const std::vector<float>& input,
                                  const McuProgramOptions& options = {}) {
  auto image = BuildMcuProgram(g, options);
  REQUIRE(image.ok());
  HostArena arena;
  REQUIRE(arena.Load(image->bytes, image->ram_bytes() + 8) == mcu::kErrNone);
  REQUIRE(arena.view.inputs[0].count == input.size());
  arena.Put(arena.view.inputs[0], input.data());
  mcu::RunProgram(arena.view, arena.act());
  std::vector<float> got = arena.Get(arena.view.outputs[0]);
  CHECK(arena.GuardIntact());
  return got;
}

// 400 rounds of 1-4 bytes corrupted among the first `corruptible` of the
// program: each accepted program runs and must stay inside its arena.
// Returns how many were accepted.
int FuzzProgram(const McuProgramImage& image, size_t corruptible, uint32_t seed) {
  std::mt19937 rng(seed);
  int accepted = 0;
  for (int round = 0; round < 400; ++round) {
    std::string bytes = image.bytes;
    for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k) {
      size_t at = rng() % std::min(bytes.size(), corruptible);
      if (rng() % 2)
        bytes[at] ^= static_cast<char>(1u << (rng() % 8));
      else
        bytes[at] = static_cast<char>(rng());
    }
    HostArena arena;
    if (arena.Load(bytes, image.ram_bytes()) != mcu::kErrNone) continue;
    ++accepted;
    mcu::RunProgram(arena.view, arena.act());
    REQUIRE(arena.GuardIntact());
  }
  return accepted;
}

}  // namespace

TEST_CASE("mcu program: a QDQ model's weights are stored as int8, answers unchanged bit for bit", "[mcu][int8]") {
  for (Graph g : {WithInt8GridWeights(MakeKeywordSpottingGraph()), WithInt8GridWeights(MakeMcuOpsGraph()),
                  WithInt8GridWeights(MakeMlperfDsCnnGraph())}) {
    REQUIRE(g.Validate().ok());
    INFO(g.name);
    McuProgramOptions as_float;
    as_float.int8_weights = false;
    auto int8 = BuildMcuProgram(g, {});
    auto f32 = BuildMcuProgram(g, as_float);
    REQUIRE(int8.ok());
    REQUIRE(f32.ok());
    int weighted = 0;
    int64_t weights = 0;
    for (const Node& n : g.nodes)
      if (n.op == "Conv" || n.op == "Gemm") {
        ++weighted;
        weights += NumElements(g.values[n.inputs[1]].shape);
      }
    CHECK(int8->int8_weight_layers == weighted);
    CHECK(f32->int8_weight_layers == 0);
    // Each weight 3 bytes fewer, less a 4-byte scale per output channel and
    // the padding of each layer's codes to whole words.
    const int64_t saved = static_cast<int64_t>(f32->flash_bytes()) - static_cast<int64_t>(int8->flash_bytes());
    CHECK(saved > 3 * weights - 4 * 4 * weights / 9);
    CHECK(saved <= 3 * weights);
    CHECK(int8->ram_bytes() == f32->ram_bytes());
    auto input = SeededInput(g.values[g.inputs[0]].shape, 4);
    const std::vector<float> a = RunOnHostArena(g, input), b = RunOnHostArena(g, input, as_float);
    REQUIRE(a.size() == b.size());
    CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
    CHECK(MaxRel(a, Reference(g, input)) <= 1e-5);
  }
  // Float weights keep their float form.
  CHECK(BuildMcuProgram(MakeKeywordSpottingGraph(), {})->int8_weight_layers == 0);
}

TEST_CASE("fuzz: corrupted int8-weight programs are rejected or stay inside the arena", "[mcu][fuzz][int8]") {
  auto image = BuildMcuProgram(WithInt8GridWeights(MakeMcuOpsGraph()), {});
  REQUIRE(image.ok());
  REQUIRE(image->int8_weight_layers > 0);
  HostArena clean;
  REQUIRE(clean.Load(image->bytes, image->ram_bytes()) == mcu::kErrNone);
  const mcu::ProgramHeader& h = *clean.view.header;
  const size_t metadata =
      sizeof h + (h.num_inputs + h.num_outputs) * sizeof(mcu::IoEntry) + h.num_layers * sizeof(mcu::Layer);
  const int accepted = FuzzProgram(*image, metadata, 11);
  INFO("accepted " << accepted << " of 400 corrupted programs");
  CHECK(accepted < 400);
}

TEST_CASE("mcu kernels match the host executor", "[mcu]") {
  for (Graph g : {MakeKeywordSpottingGraph(), MakeMcuOpsGraph()}) {
    REQUIRE(g.Validate().ok());
    auto input = SeededInput(g.values[g.inputs[0]].shape, 3);
    INFO(g.name);
    CHECK(MaxRel(RunOnHostArena(g, input), Reference(g, input)) <= 1e-5);
  }
  CHECK(BuildMcuProgram(MakeKeywordSpottingGraph(), {})->macs == 853920);
}

// Issue 17 item 2 on the firmware: activations share the region by liveness.
// KWS layers conv1, pool1, conv2, pool2, conv3, fc; floats: input 490 and
// output 12 (alive throughout: the next input may arrive while outputs are
// sent), conv1 7840, pool1 1920, conv2 3840, pool2 768, conv3 768. The
// largest live sum is at pool1: 490 + 12 + 7840 + 1920 = 10262 floats, and
// the layout meets it; one region per value (the old layout) took the sum,
// 15638 floats.
TEST_CASE("mcu program: activations reuse the region by liveness", "[mcu]") {
  auto image = BuildMcuProgram(MakeKeywordSpottingGraph(), {});
  REQUIRE(image.ok());
  CHECK(image->activation_words == 10262);
  HostArena arena;
  REQUIRE(arena.Load(image->bytes, image->ram_bytes() + 8) == mcu::kErrNone);
  // Inputs and outputs never share bytes with each other or with a layer's operands.
  const mcu::IoEntry& in = arena.view.inputs[0];
  const mcu::IoEntry& out = arena.view.outputs[0];
  CHECK((in.offset + mcu::IoBytes(in) <= out.offset || out.offset + mcu::IoBytes(out) <= in.offset));
}

// Issue 17 item 5 on the firmware (METHODS §6 "Segments"): the DS-CNN
// keyword spotter, input 256 floats and output 12 (alive throughout), conv
// A 8192, depthwise B 8192, pointwise C 8192, pool 32. Apart, the largest
// live sum is at the depthwise: 268 + A + B = 16652 floats. In place, the
// depthwise writes over A through one 256-float plane of scratch and the
// pointwise over it through 32 floats (one pixel's channels): 268 + 8192 +
// 256 = 8716 floats at the depthwise, and nowhere more.
TEST_CASE("mcu program: depthwise and pointwise convs write over their input", "[mcu][segments]") {
  const Graph g = MakeDsCnnGraph();
  McuProgramOptions apart_options;
  apart_options.segments = false;
  auto apart = BuildMcuProgram(g, apart_options);
  auto merged = BuildMcuProgram(g, McuProgramOptions{});
  REQUIRE(apart.ok());
  REQUIRE(merged.ok());
  CHECK(apart->activation_words == 16652);
  CHECK(merged->activation_words == 8716);
  CHECK(apart->in_place_layers == 0);
  CHECK(merged->in_place_layers == 2);
  const std::vector<float> input = SeededInput(g.values[g.inputs[0]].shape, 4);
  std::vector<std::vector<float>> answers;
  for (const McuProgramImage* image : {&*apart, &*merged}) {
    HostArena arena;
    REQUIRE(arena.Load(image->bytes, image->ram_bytes()) == mcu::kErrNone);
    arena.Put(arena.view.inputs[0], input.data());
    mcu::RunProgram(arena.view, arena.act());
    answers.push_back(arena.Get(arena.view.outputs[0]));
    CHECK(arena.GuardIntact());
    CHECK(MaxRel(answers.back(), Reference(g, input)) <= 1e-5);
  }
  CHECK(answers[0] == answers[1]);  // ConvInPlace sums in Conv's order: bit for bit
  // The MCU-ops graph: its depthwise, residual Add and Relu may merge too.
  auto ops = BuildMcuProgram(MakeMcuOpsGraph(), McuProgramOptions{});
  REQUIRE(ops.ok());
  McuProgramOptions ops_apart;
  ops_apart.segments = false;
  CHECK(ops->activation_words <= BuildMcuProgram(MakeMcuOpsGraph(), ops_apart)->activation_words);
}

TEST_CASE("mcu program: an in-place conv must be a kind that can, with its scratch beside it", "[mcu][segments]") {
  auto image = BuildMcuProgram(MakeDsCnnGraph(), McuProgramOptions{});
  REQUIRE(image.ok());
  HostArena arena;
  REQUIRE(arena.Load(image->bytes, image->ram_bytes()) == mcu::kErrNone);
  const size_t layers_at = sizeof(mcu::ProgramHeader) + 2 * sizeof(mcu::IoEntry);
  auto layer = [&](std::string& bytes, int k) {
    return reinterpret_cast<mcu::Layer*>(&bytes[layers_at + k * sizeof(mcu::Layer)]);
  };
  std::string bad = image->bytes;
  REQUIRE(layer(bad, 1)->out == layer(bad, 1)->in0);  // the depthwise runs in place
  layer(bad, 1)->in1 = layer(bad, 1)->in0;            // scratch over its own buffer
  CHECK(arena.Load(bad, image->ram_bytes()) == mcu::kErrProgramLayer);
  bad = image->bytes;
  layer(bad, 0)->out = layer(bad, 0)->in0;  // the 3x3 conv cannot run in place
  CHECK(arena.Load(bad, image->ram_bytes()) == mcu::kErrProgramLayer);
  bad = image->bytes;
  layer(bad, 2)->in1 = 4 * image->activation_words;  // scratch past the region
  CHECK(arena.Load(bad, image->ram_bytes()) == mcu::kErrProgramLayer);
}

// Issue 16 item 1 on the MCU (mcu_program.h version 5): a QDQ model's
// tensors on an 8-bit grid are held as int8 codes — a quarter of the RAM —
// and every reader decodes exactly the float the host's QuantizeDequantize
// gives, so the answers are the host executor's bit for bit. KWS by hand:
// the float program's largest live set is at pool1, input 490 floats +
// output 12 + conv1 7840 + pool1 1920 = 10262 words; with codes the input
// stays float (1960 B, the model's input), the output is 12 codes, conv1
// (its QuantizeDequantize fused into it) 7840 B and pool1 1920 B: 11732 B =
// 2933 words.
TEST_CASE("mcu program: a QDQ model's activations are int8 codes, answers unchanged bit for bit", "[mcu][int8]") {
  const Graph float_kws = MakeKeywordSpottingGraph();
  // The last: a QuantizeDequantize after every step twice over, on another
  // grid each time (a QDQ model may requantize a tensor).
  for (const Graph& base :
       {float_kws, MakeMcuOpsGraph(), MakeDsCnnGraph(), MakeMlperfDsCnnGraph(), WithQdqActivations(MakeDsCnnGraph())}) {
    // int8 weights (a quantized model's), and float weights on codes
    // (decoded into a float copy first: the kernels read codes with int8
    // weights only).
    for (const bool int8_weights : {true, false}) {
      const Graph g = int8_weights ? WithInt8GridWeights(WithQdqActivations(base)) : WithQdqActivations(base);
      REQUIRE(g.Validate().ok());
      auto image = BuildMcuProgram(g, {});
      REQUIRE(image.ok());
      auto as_float = BuildMcuProgram(base, {});
      REQUIRE(as_float.ok());
      INFO(g.name << ": " << image->activation_words << " words against " << as_float->activation_words << " float, "
                  << image->int8_activation_tensors << " code tensors");
      CHECK(image->int8_activation_tensors > 0);
      // A quarter of the bytes, but for the model's float input (alive
      // throughout; most of the ops graph's region) and, with float weights,
      // the float copies those layers read. Measured: KWS 2933 / 10262
      // words, DS-CNN 2563 / 8716, MLPerf DS-CNN 2618 / 8627, ops 1875 / 2602.
      if (int8_weights) CHECK(image->activation_words * (base.name == "mcu_ops" ? 1 : 3) < as_float->activation_words);
      for (uint32_t seed : {1u, 2u, 3u}) {
        // Inputs past the grids' range too: saturation on both sides.
        std::vector<float> input = SeededInput(g.values[g.inputs[0]].shape, seed);
        for (float& x : input) x *= static_cast<float>(seed * seed);
        CHECK(RunOnHostArena(g, input) == Reference(g, input));
      }
    }
  }
  auto kws = BuildMcuProgram(WithInt8GridWeights(WithQdqActivations(float_kws)), {});
  REQUIRE(kws.ok());
  CHECK(kws->activation_words == 2933);
  CHECK(BuildMcuProgram(float_kws, {})->activation_words == 10262);
  // A corrupted program of codes is refused or stays inside its arena.
  CHECK(FuzzProgram(*kws, kws->bytes.size(), 16) > 0);
}

// The bridge's conversions (daemon/cluster/worker_mcu_bridge.h): floats on
// a grid become codes and back unchanged; a tensor of the wrong size is
// refused by name.
TEST_CASE("mcu program: tensors cross the MCU's UART as codes and come back as the same floats", "[mcu][int8]") {
  for (const QuantGrid& grid :
       {QuantGrid{0.037f, -3, -128, 127}, QuantGrid{0.5f, 128, 0, 255}, QuantGrid{1e-3f, 0, 0, 255}}) {
    std::vector<float> on_grid;
    for (int32_t q = grid.qmin; q <= grid.qmax; ++q) on_grid.push_back(DequantizeCode(q, grid));
    const std::string bytes(reinterpret_cast<const char*>(on_grid.data()), on_grid.size() * 4);
    auto codes = McuEncode(grid, bytes, static_cast<int64_t>(on_grid.size()));
    REQUIRE(codes.ok());
    CHECK(codes->size() == on_grid.size());
    auto back = McuDecode(grid, *codes, static_cast<int64_t>(on_grid.size()));
    REQUIRE(back.ok());
    CHECK(*back == bytes);
    // Off the grid: what QuantizeDequantize gives.
    const float x[3] = {grid.scale * 0.5f + DequantizeCode(grid.qmin + 1, grid), -1e30f, 1e30f};
    auto q = McuEncode(grid, std::string(reinterpret_cast<const char*>(x), sizeof x), 3);
    REQUIRE(q.ok());
    auto y = McuDecode(grid, *q, 3);
    REQUIRE(y.ok());
    for (int i = 0; i < 3; ++i) CHECK(reinterpret_cast<const float*>(y->data())[i] == QuantizeDequantize(x[i], grid));
    CHECK_FALSE(McuEncode(grid, bytes, static_cast<int64_t>(on_grid.size()) + 1).ok());
    CHECK_FALSE(McuDecode(grid, *codes, static_cast<int64_t>(on_grid.size()) - 1).ok());
  }
}

uint32_t g_fake_clock = 0;
uint32_t FakeClock() { return g_fake_clock += 10; }  // each read: 10 ticks later

TEST_CASE("mcu program: each layer's ticks are counted, later layers into the last word", "[mcu][cycles]") {
  // Issue 16 item 5: RunProgram reads the clock once before the first layer
  // and once after each, so with a clock that moves 10 ticks per read every
  // layer gets 10; with 3 words for the 6 KWS layers the last word sums 4.
  auto image = BuildMcuProgram(MakeKeywordSpottingGraph(), {});
  REQUIRE(image.ok());
  HostArena arena;
  REQUIRE(arena.Load(image->bytes, image->ram_bytes()) == mcu::kErrNone);
  REQUIRE(arena.view.header->num_layers == 6);
  uint32_t ticks[8] = {7, 7, 7, 7, 7, 7, 7, 7};
  mcu::RunProgram(arena.view, arena.act(), FakeClock, ticks, 8);
  for (int k = 0; k < 6; ++k) CHECK(ticks[k] == 10);
  CHECK(ticks[6] == 0);  // zeroed: no such layer
  mcu::RunProgram(arena.view, arena.act(), FakeClock, ticks, 3);
  CHECK(ticks[0] == 10);
  CHECK(ticks[1] == 10);
  CHECK(ticks[2] == 40);
}

TEST_CASE("mcu program: a STATUS reply is the status and its per-layer ticks", "[mcu][cycles]") {
  mcu::McuStatus s{};
  s.magic = mcu::kStatusMagic;
  s.tick_hz = 25000000;
  s.last_run_ticks = 90;
  s.timed_layers = 3;
  std::string reply(reinterpret_cast<const char*>(&s), sizeof s);
  for (uint32_t t : {20u, 30u, 40u}) reply.append(reinterpret_cast<const char*>(&t), 4);
  mcu::McuStatus got{};
  uint32_t ticks[mcu::kMaxTimedLayers] = {}, layers = 0;
  REQUIRE(mcu::DecodeStatusReply(reply.data(), reply.size(), &got, ticks, mcu::kMaxTimedLayers, &layers));
  CHECK(layers == 3);
  CHECK(ticks[2] == 40);
  CHECK(got.last_run_ticks == 90);
  CHECK_FALSE(mcu::DecodeStatusReply(reply.data(), reply.size() - 4, &got, ticks, mcu::kMaxTimedLayers, &layers));
  std::string bad = reply;
  bad[0] ^= 1;  // the magic
  CHECK_FALSE(mcu::DecodeStatusReply(bad.data(), bad.size(), &got, ticks, mcu::kMaxTimedLayers, &layers));
  s.timed_layers = mcu::kMaxTimedLayers + 1;  // more than any firmware sends
  std::string many(reinterpret_cast<const char*>(&s), sizeof s);
  many.append(4 * (mcu::kMaxTimedLayers + 1), '\0');
  CHECK_FALSE(mcu::DecodeStatusReply(many.data(), many.size(), &got, ticks, mcu::kMaxTimedLayers, &layers));
}

TEST_CASE("mcu program: the arena is checked before anything runs", "[mcu]") {
  auto image = BuildMcuProgram(MakeKeywordSpottingGraph(), {});
  REQUIRE(image.ok());
  HostArena arena;
  CHECK(arena.Load(image->bytes, image->ram_bytes() - 4) == mcu::kErrProgramTooLarge);
  CHECK(arena.Load(image->bytes.substr(0, image->bytes.size() - 4), image->ram_bytes()) == mcu::kErrProgramTruncated);
  std::string bad = image->bytes;
  bad[0] ^= 1;
  CHECK(arena.Load(bad, image->ram_bytes()) == mcu::kErrProgramMagic);
}

TEST_CASE("mcu program: unsupported ops are named", "[mcu]") {
  Graph g = MakeMcuOpsGraph();
  g.nodes[0].attrs.Set("activation", std::string("tanh"));
  auto r = BuildMcuProgram(g, {});
  REQUIRE(!r.ok());
  CHECK(r.status().IsNotSupported());
  CHECK(r.status().message().find("'conv'") != std::string::npos);
  g = MakeMcuOpsGraph();
  g.nodes[3].op = "Sigmoid";
  CHECK(BuildMcuProgram(g, {}).status().message().find("Sigmoid") != std::string::npos);
}

// A classifier's Softmax on the MCU (kOpSoftmax, e.g. MLPerf VWW's head):
// e^x without libm within 2 ulp of expf, and the whole answer within 1e-6
// relative of the host's (its Eigen exp is no closer to expf), or the same
// codes after a QuantizeDequantize but where the two roundings straddle a
// step (never seen here; at most one step).
TEST_CASE("mcu program: Softmax over the last axis runs on the MCU", "[mcu]") {
  float worst_ulps = 0, worst_x = 0;
  for (int i = 0; i <= 200000; ++i) {
    const float x = -87.0f * static_cast<float>(i) / 200000.0f;
    const float want = std::exp(x), got = mcu::ExpNonPositive(x);
    const float ulps = std::fabs(got - want) / (std::nextafter(want, 1e30f) - want);
    if (ulps > worst_ulps) worst_ulps = ulps, worst_x = x;
  }
  INFO("worst error " << worst_ulps << " ulp at x = " << worst_x);
  CHECK(worst_ulps <= 2.0f);
  CHECK(mcu::ExpNonPositive(0.0f) == 1.0f);
  CHECK(mcu::ExpNonPositive(-88.0f) == 0.0f);
  CHECK(mcu::ExpNonPositive(-INFINITY) == 0.0f);

  for (const bool qdq : {false, true}) {
    Graph g = MakeKeywordSpottingGraph();
    const int logits = g.outputs[0];
    const int probs = g.AddValue("probs", g.values[logits].shape);
    Node softmax{"softmax", "Softmax", {logits}, {probs}, {}};
    softmax.attrs.Set("axis", int64_t{1});
    g.AddNode(std::move(softmax));
    g.outputs = {probs};
    if (qdq) g = WithInt8GridWeights(WithQdqActivations(g));
    REQUIRE(g.Validate().ok());
    REQUIRE(McuCanRun(g, g.nodes[g.values[probs].producer]).ok());
    for (uint32_t seed : {1u, 2u, 3u}) {
      std::vector<float> input = SeededInput(g.values[g.inputs[0]].shape, seed);
      for (float& x : input) x *= 4.0f * static_cast<float>(seed);  // wide logits: some probabilities near 0 and 1
      const auto got = RunOnHostArena(g, input), want = Reference(g, input);
      INFO("qdq " << qdq << " seed " << seed);
      if (qdq) {
        CHECK(got == want);
      } else {
        CHECK(MaxRel(got, want) <= 1e-6);
        double sum = 0;
        for (float v : got) sum += v;
        CHECK(std::fabs(sum - 1.0) < 1e-5);
      }
    }
  }
  // Not over another axis: the firmware's rows are the last axis.
  Graph g = MakeKeywordSpottingGraph();
  const int x = g.inputs[0];  // [1, 1, 49, 10]
  const int y = g.AddValue("soft_rows", g.values[x].shape);
  Node softmax{"softmax_h", "Softmax", {x}, {y}, {}};
  softmax.attrs.Set("axis", int64_t{2});
  g.AddNode(std::move(softmax));
  const Status st = McuCanRun(g, g.nodes.back());
  CHECK(st.message().find("Softmax over an axis other than the last") != std::string::npos);
}

// Issue 16 item 1 on the firmware: a QDQ model's QuantizeDequantize steps
// (kOpQuantize) round exactly as the host does, ties, saturation and NaN
// included, and a quantized graph's answer stays on its grid.
TEST_CASE("mcu program: QuantizeDequantize is the host's, bit for bit", "[mcu][quantized]") {
  const QuantGrid grids[] = {{0.5f, 3, -128, 127}, {0.1f, -7, -128, 127}, {0.0213f, 0, 0, 255}, {3.0f, 127, -128, 127}};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-300, 300);
  for (const QuantGrid& g : grids) {
    const float q[4] = {g.scale, float(g.zero_point), float(g.qmin), float(g.qmax)};
    std::vector<float> xs = {0.0f, -0.0f, NAN, INFINITY, -INFINITY, 1e30f, -1e30f};
    for (int k = -600; k <= 600; ++k) xs.push_back(g.scale * (k + 0.5f));  // ties, as float rounds them
    for (int k = 0; k < 20000; ++k) xs.push_back(u(rng) * g.scale);
    int mismatches = 0;
    for (float x : xs) {
      const float want = QuantizeDequantize(x, g), got = mcu::QuantizeDequantizeValue(x, q);
      if (std::memcmp(&want, &got, 4) != 0 && !(want == 0.0f && got == 0.0f)) ++mismatches;
    }
    INFO("scale " << g.scale << " zero point " << g.zero_point);
    CHECK(mismatches == 0);
  }

  // The KWS graph with a step after its input and after every layer
  // (scale 0.05, zero point -3): the MCU's answer is on the grid and within
  // one step of the host's (the convs add in another order before the step).
  const Graph src = MakeKeywordSpottingGraph();
  Graph g = src;
  g.nodes.clear();
  for (Value& v : g.values) v.producer = -1;
  std::map<int, int> quantized;
  auto step = [&](int from, const std::string& name) {
    const int to = g.AddValue(name, g.values[from].shape);
    Node n{name, "QuantizeDequantize", {from}, {to}, {}};
    n.attrs.Set("scale", 0.05);
    n.attrs.Set("zero_point", int64_t{-3});
    n.attrs.Set("qmin", int64_t{-128});
    n.attrs.Set("qmax", int64_t{127});
    g.AddNode(std::move(n));
    return to;
  };
  quantized[g.inputs[0]] = step(g.inputs[0], "input/q");
  for (Node n : src.nodes) {
    for (int& i : n.inputs)
      if (quantized.count(i)) i = quantized[i];
    const std::vector<int> outs = n.outputs;
    g.AddNode(std::move(n));
    for (int y : outs) quantized[y] = step(y, g.values[y].name + "/q");
  }
  for (int& o : g.outputs) o = quantized.at(o);
  REQUIRE(g.Validate().ok());
  auto input = SeededInput(g.values[g.inputs[0]].shape, 9);
  const std::vector<float> got = RunOnHostArena(g, input);
  const std::vector<float> want = Reference(g, input);
  REQUIRE(got.size() == want.size());
  int on_grid = 0, equal = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float steps = got[i] / 0.05f;
    on_grid += std::fabs(steps - std::nearbyint(steps)) < 1e-3f;
    equal += got[i] == want[i];
    worst = std::max(worst, double(std::fabs(got[i] - want[i])) / 0.05);
  }
  INFO("equal " << equal << " of " << got.size() << ", worst " << worst << " steps");
  CHECK(on_grid == int(got.size()));
  CHECK(worst <= 1.0 + 1e-4);  // the guard band: checked by RunOnHostArena
}

TEST_CASE("fuzz: corrupted programs are rejected or stay inside the arena", "[mcu][fuzz]") {
  auto image = BuildMcuProgram(MakeMcuOpsGraph(), {});
  REQUIRE(image.ok());
  const size_t header_and_layers = image->bytes.size() - 4 * size_t{2000};  // mostly metadata, not weights
  const int accepted = FuzzProgram(*image, header_and_layers, 9);
  INFO("accepted " << accepted << " of 400 corrupted programs");
  CHECK(accepted < 400);
}

namespace {
// Whole layers: the first `k` on device 0 (the source), the rest on device 1.
PartitionPlan CutAfter(const Graph& g, size_t k) {
  PartitionPlan plan;
  plan.num_devices = 2;
  plan.source = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    LayerAssignment a;
    a.scheme = LayerScheme::kWhole;
    a.devices = {i < k ? 0 : 1};
    plan.layers.push_back(a);
  }
  return plan;
}
}  // namespace

TEST_CASE("mcu program from a compiled pipeline plan, bridged like a via worker would", "[mcu]") {
  Graph g = MakeKeywordSpottingGraph();
  // conv1, pool1, conv2 on the Linux worker; the rest on the MCU
  auto compiled = CompilePlan(g, CutAfter(g, 3));
  REQUIRE(compiled.ok());
  McuProgramOptions opt;
  opt.plan_id = 77;
  auto image = BuildMcuProgram(compiled->programs[1], opt);
  REQUIRE(image.ok());
  HostArena arena;
  REQUIRE(arena.Load(image->bytes, image->ram_bytes()) == mcu::kErrNone);
  REQUIRE(arena.view.header->num_inputs == 1);
  REQUIRE(arena.view.header->num_outputs == 1);

  // Device 0 runs on the host; the MCU's side of the link is served here.
  auto links = MakeInProcessLinkPair("0", "1");
  auto runner = ProgramRunner::Create(compiled->programs[0], RunnerOptions{});
  REQUIRE(runner.ok());
  auto input = SeededInput(g.values[g.inputs[0]].shape, 5);
  std::vector<TensorData> outputs;
  Status device0;
  std::thread host([&] {
    device0 = (*runner)->Run({nullptr, links.first.get()}, {TensorData{g.values[g.inputs[0]].shape, input}}, &outputs);
  });
  const mcu::IoEntry in = arena.view.inputs[0], out = arena.view.outputs[0];
  auto bytes = links.second->Recv(in.message, std::chrono::seconds(10));
  REQUIRE(bytes.ok());
  REQUIRE(bytes->size() == in.count * 4);
  arena.Put(in, reinterpret_cast<const float*>(bytes->data()));
  mcu::RunProgram(arena.view, arena.act());
  const std::vector<float> answer = arena.Get(out);
  REQUIRE(links.second->Send(out.message, std::string(reinterpret_cast<const char*>(answer.data()), answer.size() * 4))
              .ok());
  host.join();
  REQUIRE(device0.ok());
  CHECK(MaxRel(outputs[0].values, Reference(g, input)) <= 1e-5);
}

}  // namespace tessera

namespace tessera {
namespace {

// Serves one request of an MCU program on a host arena as the firmware does
// (firmware/main.cc Advance): phase by phase, the outputs due before the
// next layer are sent, then the next phase's inputs are received and its
// layers run. Messages from and to peers are in `program`'s wire form
// (WireGrid: int8 codes for a tensor on an 8-bit grid, else float32),
// converted as the bridge does (RecodeMessage).
Status ServeMcuRequest(const mcu::ProgramView& view, float* act, const std::map<uint64_t, Link*>& peer_of,
                       const DeviceProgram& program) {
  auto link_for = [&](uint32_t message) -> Link* {
    auto it = peer_of.find(message);
    return it == peer_of.end() ? nullptr : it->second;
  };
  std::map<uint32_t, std::optional<QuantGrid>> wire_grid;
  for (const ProgramStep& st : program.steps)
    if (st.kind == StepKind::kSend || st.kind == StepKind::kRecv)
      wire_grid[static_cast<uint32_t>(st.message)] = WireGrid(program, st);
  const mcu::ProgramHeader& h = *view.header;
  uint32_t next_in = 0, next_out = 0, layer = 0;
  // A run starts once its first phase's inputs are all here (a program of
  // no layers, e.g. a QuantizeDequantize fused into its Recv, sends them on).
  auto receive = [&](uint32_t upto) -> Status {
    while (next_in < h.num_inputs && view.inputs[next_in].layer <= upto) {
      const mcu::IoEntry in = view.inputs[next_in++];
      Link* link = link_for(in.message);
      if (!link) return Status::Internal("no peer for message " + std::to_string(in.message));
      auto received = link->Recv(in.message, std::chrono::seconds(10));
      if (!received.ok()) return received.status();
      auto bytes = RecodeMessage(wire_grid[in.message], std::nullopt, std::move(*received), in.count);
      if (!bytes.ok()) return bytes.status();
      std::vector<float> values(in.count);
      std::memcpy(values.data(), bytes->data(), bytes->size());
      mcu::EncodeTensor(view.weights, in.grid, values.data(), in.count, mcu::BytesAt(act, in.offset));
    }
    return Status::OK();
  };
  TS_RETURN_IF_ERROR(receive(0));
  for (;;) {
    while (next_out < h.num_outputs && view.outputs[next_out].layer <= layer) {
      const mcu::IoEntry out = view.outputs[next_out++];
      Link* link = link_for(out.message);
      if (!link) return Status::Internal("no peer for message " + std::to_string(out.message));
      // As the bridge relays it: in the peer's wire form (version 5 codes
      // decoded to float32, encoded again when the wire carries codes).
      std::vector<float> values(out.count);
      mcu::DecodeTensor(view.weights, out.grid, mcu::BytesAt(act, out.offset), out.count, values.data());
      auto bytes =
          RecodeMessage(std::nullopt, wire_grid[out.message],
                        std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4), out.count);
      if (!bytes.ok()) return bytes.status();
      TS_RETURN_IF_ERROR(link->Send(out.message, std::move(*bytes)));
    }
    if (layer >= h.num_layers && next_out >= h.num_outputs) return Status::OK();
    TS_RETURN_IF_ERROR(receive(layer));
    mcu::RunLayers(view, act, layer, layer + 1);
    ++layer;
  }
}

// The programs' Sends and Recvs of an MCU, relayed by a bridge, carry
// codes exactly where its program's IoEntries hold codes: the bridge's
// choice (McuWireGrid) and the builder's agree, message by message.
void CheckWireGridsAgree(const DeviceProgram& program, const mcu::ProgramView& view) {
  const McuFusions fusions = FuseMcuQuantizeSteps(program);
  std::map<uint32_t, uint32_t> grid_of;  // message -> IoEntry grid
  for (uint32_t i = 0; i < view.header->num_inputs + view.header->num_outputs; ++i)
    grid_of[view.inputs[i].message] = view.inputs[i].grid;
  for (const ProgramStep& s : program.steps) {
    if (s.kind != StepKind::kSend && s.kind != StepKind::kRecv) continue;
    INFO("message " << s.message);
    REQUIRE(grid_of.count(static_cast<uint32_t>(s.message)));
    const std::optional<QuantGrid> wire = McuWireGrid(program, fusions, s);
    const uint32_t g = grid_of[static_cast<uint32_t>(s.message)];
    CHECK(wire.has_value() == (g != mcu::kNoWeights));
    if (wire && g != mcu::kNoWeights) {
      CHECK(view.weights[g] == wire->scale);
      CHECK(view.weights[g + 1] == static_cast<float>(wire->zero_point));
    }
  }
}

struct SchemeCase {
  const char* name;
  ForcedScheme scheme;
  int devices;
  int64_t grid_rows;
  // The whole layers after the last FFMT tile on MCU 1, not the source: it
  // gathers the tiles from the other devices (--mcu-only's tiled stem).
  bool tail_on_mcu = false;
  // FDTI merged on MCU 1 (its devices[0]), not the source: the MCU adds the
  // others' int32 partial sums to its own and requantizes.
  bool merge_on_mcu = false;
};

}  // namespace

// A whole-layer pipeline of a QDQ model cut after every layer in turn: the
// first k layers on the host, the rest on an MCU. Each QuantizeDequantize
// the MCU gets runs inside the step that writes its input — a layer of the
// MCU, or the Recv of the tensor its bridge encodes (the model's input, when
// k = 0) — and the float tensor is never held; every answer equals the
// unsplit run bit for bit.
TEST_CASE("mcu program: a QDQ pipeline cut anywhere, QuantizeDequantize fused into its writer", "[mcu][int8]") {
  const Graph g = WithInt8GridWeights(WithQdqActivations(MakeKeywordSpottingGraph()));
  const auto input = SeededInput(g.values[g.inputs[0]].shape, 6);
  const std::vector<float> want = Reference(g, input);
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    INFO("first " << k << " nodes on the host");
    auto compiled = CompilePlan(g, CutAfter(g, k));
    REQUIRE(compiled.ok());
    const McuFusions fusions = FuseMcuQuantizeSteps(compiled->programs[1]);
    const int fused = static_cast<int>(std::count(fusions.fused_step.begin(), fusions.fused_step.end(), true));
    int quantize_steps = 0;
    for (const ProgramStep& st : compiled->programs[1].steps)
      if (st.kind == StepKind::kCompute &&
          compiled->programs[1].subgraphs[st.subgraph].nodes[0].op == "QuantizeDequantize")
        ++quantize_steps;
    // Every QuantizeDequantize on the MCU is fused: each follows its writer
    // there, or reads a tensor the host sends (k = 12: the output's, alone
    // on the MCU, which receives it as codes and sends it back).
    CHECK(fused == quantize_steps);
    auto image = BuildMcuProgram(compiled->programs[1], McuProgramOptions{});
    REQUIRE(image.ok());
    HostArena arena;
    REQUIRE(arena.Load(image->bytes, image->ram_bytes()) == mcu::kErrNone);
    CheckWireGridsAgree(compiled->programs[1], arena.view);
    if (k == 0) CHECK(arena.view.inputs[0].grid != mcu::kNoWeights);  // the model's input arrives as codes
    auto links = MakeInProcessLinkPair("0", "1");
    auto runner = ProgramRunner::Create(compiled->programs[0], RunnerOptions{});
    REQUIRE(runner.ok());
    std::vector<TensorData> outputs;
    Status device0, mcu;
    std::thread host([&] {
      device0 =
          (*runner)->Run({nullptr, links.first.get()}, {TensorData{g.values[g.inputs[0]].shape, input}}, &outputs);
    });
    std::map<uint64_t, Link*> peer_of;
    for (const ProgramStep& st : compiled->programs[1].steps)
      if (st.kind == StepKind::kSend || st.kind == StepKind::kRecv)
        peer_of[static_cast<uint64_t>(st.message)] = links.second.get();
    mcu = ServeMcuRequest(arena.view, arena.act(), peer_of, compiled->programs[1]);
    host.join();
    REQUIRE(mcu.ok());
    REQUIRE(device0.ok());
    CHECK(outputs[0].values == want);
    CHECK(arena.GuardIntact());
  }
}

// METHODS §3-§4 on microcontrollers (issue 16 item 4): every device but the
// source runs its part of a forced FFMT / FDTO / FDTI / fused-pair plan as an
// MCU program, served phase by phase on a host arena with the firmware's own
// interpreter; the source runs on the host. The answer must equal the
// unsplit run (1e-5 relative: float sums in another order).
// Int32 partial sums (CompileOptions::integer_partial_sums, the default;
// mcu::kInt32Sums): an MCU's FDTI slice stores its sums, and an MCU that
// merges adds them and requantizes once. ValidateProgram lets only Adds
// read sums and only integer kernels or Adds write them: a program that
// says otherwise is refused before it runs.
namespace {
// The program of MCU 1 in a forced FDTI plan of the quantized KWS CNN over 3
// devices whose FDTI layers merge on MCU 1 (their devices[0]): it computes
// a slice's int32 partial sums, adds the others' and requantizes.
Result<McuProgramImage> FdtiMergedOnMcuProgram() {
  const Graph g = WithInt8GridWeights(WithQdqActivations(MakeKeywordSpottingGraph()));
  ForcedPlanOptions fo;
  fo.devices = 3;
  TS_ASSIGN_OR_RETURN(PartitionPlan plan, MakeForcedPlan(g, ForcedScheme::kFdti, fo));
  for (LayerAssignment& a : plan.layers)
    if (a.scheme == LayerScheme::kFdti) std::rotate(a.devices.begin(), a.devices.begin() + 1, a.devices.end());
  TS_ASSIGN_OR_RETURN(CompiledPlan compiled, CompilePlan(g, plan));
  return BuildMcuProgram(compiled.programs[1], McuProgramOptions{});
}
}  // namespace

TEST_CASE("mcu program: int32 sums are written by integer kernels and read by Adds only", "[mcu][int8]") {
  auto image = FdtiMergedOnMcuProgram();
  INFO(image.status().ToString());
  REQUIRE(image.ok());
  HostArena arena;
  REQUIRE(arena.Load(image->bytes, image->ram_bytes()) == mcu::kErrNone);
  int partial = -1, merge = -1, requant = -1;
  for (uint32_t i = 0; i < arena.view.header->num_layers; ++i) {
    const mcu::Layer& l = arena.view.layers[i];
    if (l.op == mcu::kOpConv && l.out_grid == mcu::kInt32Sums && partial < 0) partial = static_cast<int>(i);
    if (l.op == mcu::kOpAdd && l.in0_grid == mcu::kInt32Sums)
      (l.out_grid == mcu::kInt32Sums ? merge : requant) = static_cast<int>(i);
  }
  REQUIRE(partial >= 0);
  REQUIRE(merge >= 0);
  REQUIRE(requant >= 0);
  CHECK(arena.view.layers[partial].weight_format == mcu::kWeightsInt8);
  CHECK(arena.view.layers[partial].bias == mcu::kNoWeights);
  CHECK(arena.view.layers[requant].in1_grid == mcu::kNoWeights);
  const size_t layers_at =
      reinterpret_cast<const char*>(arena.view.layers) - reinterpret_cast<const char*>(arena.view.header);
  auto refused = [&](int k, auto&& change) {
    std::string bytes = image->bytes;
    mcu::Layer l;
    std::memcpy(&l, bytes.data() + layers_at + k * sizeof l, sizeof l);
    change(l);
    std::memcpy(bytes.data() + layers_at + k * sizeof l, &l, sizeof l);
    HostArena a;
    return a.Load(bytes, image->ram_bytes()) == mcu::kErrProgramLayer;
  };
  CHECK(refused(partial, [](mcu::Layer& l) { l.weight_format = mcu::kWeightsFloat32; }));  // float kernels write floats
  CHECK(refused(partial, [](mcu::Layer& l) { l.in0_grid = mcu::kNoWeights; }));            // sums of codes only
  CHECK(refused(partial, [](mcu::Layer& l) { l.in0_grid = mcu::kInt32Sums; }));            // a conv reads no sums
  CHECK(refused(merge, [](mcu::Layer& l) { l.in1_grid = mcu::kNoWeights; }));              // sums + floats
  CHECK(refused(requant, [](mcu::Layer& l) { l.weight = 0xFFFFFF00u; }));                  // multipliers outside
  CHECK(refused(requant, [](mcu::Layer& l) { l.bias = mcu::kNoWeights; }));                // no bias
  for (uint32_t i = 0; i < arena.view.header->num_layers; ++i)
    if (arena.view.layers[i].op == mcu::kOpQuantize || arena.view.layers[i].op == mcu::kOpMaxPool)
      CHECK(refused(static_cast<int>(i), [](mcu::Layer& l) { l.in0_grid = mcu::kInt32Sums; }));
}

// A hostile program cannot use the sums form to reach outside the arena:
// every layer with each of its three operand forms turned into sums (or
// sums turned into floats or codes) is refused or, if valid, runs inside
// the region; so do random corruptions of a program that merges sums.
TEST_CASE("fuzz: int32-sums forms in any operand are refused or stay inside the arena", "[mcu][fuzz][int8]") {
  auto image = FdtiMergedOnMcuProgram();
  REQUIRE(image.ok());
  HostArena base;
  REQUIRE(base.Load(image->bytes, image->ram_bytes()) == mcu::kErrNone);
  const size_t layers_at =
      reinterpret_cast<const char*>(base.view.layers) - reinterpret_cast<const char*>(base.view.header);
  int accepted = 0, tried = 0;
  for (uint32_t k = 0; k < base.view.header->num_layers; ++k)
    for (int field = 0; field < 3; ++field)
      for (uint32_t form : {mcu::kInt32Sums, mcu::kNoWeights, base.view.layers[k].out_grid}) {
        std::string bytes = image->bytes;
        mcu::Layer l;
        std::memcpy(&l, bytes.data() + layers_at + k * sizeof l, sizeof l);
        (field == 0 ? l.in0_grid : field == 1 ? l.in1_grid : l.out_grid) = form;
        std::memcpy(bytes.data() + layers_at + k * sizeof l, &l, sizeof l);
        HostArena arena;
        ++tried;
        if (arena.Load(bytes, image->ram_bytes()) != mcu::kErrNone) continue;
        ++accepted;
        mcu::RunProgram(arena.view, arena.act());
        REQUIRE(arena.GuardIntact());
      }
  INFO("accepted " << accepted << " of " << tried);
  CHECK(accepted < tried);
  const int random = FuzzProgram(*image, image->bytes.size(), 11);
  INFO("accepted " << random << " of 400 randomly corrupted");
  CHECK(random < 400);
}

TEST_CASE("mcu program: an FFMT tile of a map with channels moves as one message per contiguous run", "[mcu][phases]") {
  const Graph g = WithInt8GridWeights(WithQdqActivations(MakeVwwStemGraph()));
  ForcedPlanOptions fo;
  fo.devices = 3;
  fo.grid_rows = 3;
  auto plan = MakeForcedPlan(g, ForcedScheme::kFfmt, fo);
  REQUIRE(plan.ok());
  // The layers after the tiles (pool, dense) on MCU 1: it gathers the
  // 32-channel map's tiles from devices 0 and 2.
  size_t tiled_end = 0, tiled_begin = plan->layers.size();
  for (size_t j = 0; j < plan->layers.size(); ++j)
    if (plan->layers[j].scheme == LayerScheme::kFfmt) tiled_end = j + 1, tiled_begin = std::min(tiled_begin, j);
  const int stack_input = g.nodes[tiled_begin].inputs[0];
  REQUIRE(g.values[stack_input].shape[1] == 3);
  REQUIRE(tiled_end >= 5);
  for (size_t j = tiled_end; j < plan->layers.size(); ++j) plan->layers[j].devices = {1};
  CompileOptions co;
  // Compiled for devices that move any box, the gather is refused by name.
  auto plain = CompilePlan(g, *plan, co);
  REQUIRE(plain.ok());
  auto refused = BuildMcuProgram(plain->programs[1], McuProgramOptions{});
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == StatusCode::kNotSupported);
  CHECK_THAT(refused.status().message(), Catch::Contains("not one contiguous run"));
  // For MCUs: every transfer of theirs is a run of its buffer on the MCU.
  // A tile of the 3-channel input (quantized on the source) is a whole
  // buffer on the MCU: one message (the source, on Linux, gathers its
  // rows), as codes. MCU 1 gathers the other
  // tiles of the 32-channel map as one message per channel and tile.
  co.contiguous_io_devices = {1, 2};
  auto compiled = CompilePlan(g, *plan, co);
  REQUIRE(compiled.ok());
  for (int d = 1; d < 3; ++d) {
    INFO("device " << d);
    const DeviceProgram& p = compiled->programs[d];
    int input_messages = 0;
    for (const ProgramStep& s : p.steps) {
      if (s.kind == StepKind::kRecv) {
        CHECK(ContiguousStart(p.buffers[s.dst_buffer].shape(), s.dst_box) >= 0);
        if (p.buffers[s.dst_buffer].value == stack_input) ++input_messages;
      } else if (s.kind == StepKind::kSend) {
        CHECK(ContiguousStart(p.buffers[s.src_buffer].shape(), s.src_box) >= 0);
      }
    }
    CHECK(input_messages == 1);
    auto image = BuildMcuProgram(p, McuProgramOptions{});
    INFO(image.status().ToString());
    REQUIRE(image.ok());
    HostArena arena;
    REQUIRE(arena.Load(image->bytes, image->ram_bytes()) == mcu::kErrNone);
    // Device 1: the input tile and 2 x 32 runs of the other tiles, all codes.
    const uint32_t inputs = arena.view.header->num_inputs;
    CHECK(inputs == (d == 1 ? 1u + 2 * 32 : 1u));
    for (uint32_t i = 0; i < inputs; ++i) CHECK(arena.view.inputs[i].grid != mcu::kNoWeights);
  }
}

TEST_CASE("mcu programs run FFMT tiles and FDT slices in phases", "[mcu][phases]") {
  const SchemeCase cases[] = {{"ffmt 3x1", ForcedScheme::kFfmt, 3, 3},
                              {"ffmt 3x1, the rest on an MCU", ForcedScheme::kFfmt, 3, 3, true},
                              {"fdto", ForcedScheme::kFdto, 3, 1},
                              {"fdti", ForcedScheme::kFdti, 3, 1},
                              {"pairs", ForcedScheme::kPairs, 3, 1},
                              {"fdti on 4", ForcedScheme::kFdti, 4, 1},
                              {"fdti merged on an MCU", ForcedScheme::kFdti, 3, 1, false, true}};
  // The QDQ forms hold codes on the MCUs (mcu_program.h version 5), crossing
  // each MCU's link as codes, and their FDTI slices sum in int32 wherever
  // they are merged: every answer equals the unsplit run bit for bit.
  // MakeVwwStemGraph's maps have 3-32 channels: an FFMT tile's rows of one
  // are a run per channel of the NCHW buffer, each its own message to or
  // from the MCU (CompileOptions::contiguous_io_devices).
  const Graph graphs[] = {MakeKeywordSpottingGraph(),
                          MakeDsCnnGraph(),
                          MakeMlperfDsCnnGraph(),
                          MakeVwwStemGraph(),
                          WithInt8GridWeights(WithQdqActivations(MakeKeywordSpottingGraph())),
                          WithInt8GridWeights(WithQdqActivations(MakeDsCnnGraph())),
                          WithInt8GridWeights(WithQdqActivations(MakeVwwStemGraph()))};
  for (const Graph& g : graphs) {
    const Node& last = g.nodes[g.values[g.outputs[0]].producer];
    const bool qdq = last.op == "QuantizeDequantize";
    for (const SchemeCase& c : cases) {
      // A float FDTI's merge adds the bias as a broadcast Add, which the firmware lacks.
      if (c.merge_on_mcu && !qdq) continue;
      INFO(g.name << ", " << c.name);
      ForcedPlanOptions fo;
      fo.devices = c.devices;
      fo.grid_rows = c.grid_rows;
      auto plan = MakeForcedPlan(g, c.scheme, fo);
      REQUIRE(plan.ok());
      if (c.tail_on_mcu) {
        size_t tiled_end = 0;
        for (size_t j = 0; j < plan->layers.size(); ++j)
          if (plan->layers[j].scheme == LayerScheme::kFfmt) tiled_end = j + 1;
        REQUIRE(tiled_end > 0);
        for (size_t j = tiled_end; j < plan->layers.size(); ++j) plan->layers[j].devices = {1};
      }
      if (c.merge_on_mcu)
        for (LayerAssignment& a : plan->layers)
          if (a.scheme == LayerScheme::kFdti) std::rotate(a.devices.begin(), a.devices.begin() + 1, a.devices.end());
      CompileOptions co;
      for (int d = 1; d < c.devices; ++d) co.contiguous_io_devices.insert(d);
      auto compiled = CompilePlan(g, *plan, co);
      REQUIRE(compiled.ok());
      // Every MCU program is built and validated first.
      std::vector<McuProgramImage> images;
      std::vector<HostArena> arenas(c.devices);
      bool phased = false;
      for (int d = 1; d < c.devices; ++d) {
        auto image = BuildMcuProgram(compiled->programs[d], McuProgramOptions{});
        INFO("device " << d << ": " << image.status().ToString());
        REQUIRE(image.ok());
        images.push_back(*image);
        REQUIRE(arenas[d].Load(images.back().bytes, images.back().ram_bytes()) == mcu::kErrNone);
        CheckWireGridsAgree(compiled->programs[d], arenas[d].view);  // here: Catch's assertions are not thread-safe
        const auto& v = arenas[d].view;
        if (v.header->num_inputs > 0 && v.inputs[v.header->num_inputs - 1].layer > 0) phased = true;
      }
      if (c.scheme != ForcedScheme::kFfmt) CHECK(phased);  // FDT rounds: receive after sending
      // Device 0 on the host, the MCUs on threads, over in-process links.
      std::vector<std::vector<std::unique_ptr<Link>>> links(c.devices);
      for (auto& row : links) row.resize(c.devices);
      for (int a = 0; a < c.devices; ++a)
        for (int b = a + 1; b < c.devices; ++b) {
          auto pair = MakeInProcessLinkPair(std::to_string(a), std::to_string(b));
          links[a][b] = std::move(pair.first);
          links[b][a] = std::move(pair.second);
        }
      auto runner = ProgramRunner::Create(compiled->programs[0], RunnerOptions{});
      REQUIRE(runner.ok());
      const auto input = SeededInput(g.values[g.inputs[0]].shape, 9);
      std::vector<Status> served(c.devices);
      std::vector<std::thread> mcus;
      for (int d = 1; d < c.devices; ++d)
        mcus.emplace_back([&, d] {
          // The MCU's bridge relays each message to / from the step's peer.
          std::map<uint64_t, Link*> peer_of;
          for (const ProgramStep& st : compiled->programs[d].steps)
            if (st.kind == StepKind::kSend || st.kind == StepKind::kRecv)
              peer_of[static_cast<uint64_t>(st.message)] = links[d][st.peer].get();
          served[d] = ServeMcuRequest(arenas[d].view, arenas[d].act(), peer_of, compiled->programs[d]);
        });
      std::vector<Link*> peers(c.devices, nullptr);
      for (int d = 1; d < c.devices; ++d) peers[d] = links[0][d].get();
      std::vector<TensorData> outputs;
      const Status source = (*runner)->Run(peers, {TensorData{g.values[g.inputs[0]].shape, input}}, &outputs);
      for (auto& t : mcus) t.join();
      REQUIRE(source.ok());
      for (int d = 1; d < c.devices; ++d) {
        INFO("device " << d);
        REQUIRE(served[d].ok());
        CHECK(arenas[d].GuardIntact());
      }
      const std::vector<float> want = Reference(g, input);
      if (qdq) {
        int codes = 0;
        for (const McuProgramImage& image : images) codes += image.int8_activation_tensors;
        CHECK(codes > 0);
        const double step = last.attrs.Float("scale", 0.0);
        REQUIRE(outputs[0].values.size() == want.size());
        double worst = 0;
        for (size_t i = 0; i < want.size(); ++i)
          worst = std::max(worst, double(std::fabs(outputs[0].values[i] - want[i])));
        INFO("max diff " << worst << " = " << worst / step << " output steps");
        CHECK(outputs[0].values == want);
      } else {
        const double rel = MaxRel(outputs[0].values, want);
        INFO("max rel. diff " << rel);
        CHECK(rel <= 1e-5);
      }
    }
  }
}

}  // namespace tessera
