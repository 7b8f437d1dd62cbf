#include <catch2/catch.hpp>
#include <numeric>

#include "partition/compile/device_program.h"

using namespace tessera;

TEST_CASE("box extract and insert move exactly the region, for ranks 1 to 4") {
  Shape shape = {2, 3, 4, 5};
  std::vector<float> t(NumElements(shape));
  std::iota(t.begin(), t.end(), 0.f);
  Box box{{{1, 2}, {0, 3}, {1, 3}, {2, 5}}};
  std::vector<float> packed(box.volume());
  ExtractBox(t.data(), shape, box, packed.data());
  // First packed row: n=1, c=0, h=1, w=2..4 -> offsets 60+0+5+2 .. = 67, 68, 69
  CHECK(packed[0] == 67.f);
  CHECK(packed[2] == 69.f);
  CHECK(packed[3] == 72.f);  // h=2
  std::vector<float> back(t.size(), -1.f);
  InsertBox(packed.data(), back.data(), shape, box);
  int64_t written = 0;
  for (size_t i = 0; i < back.size(); ++i)
    if (back[i] >= 0) {
      CHECK(back[i] == t[i]);
      ++written;
    }
  CHECK(written == box.volume());
  std::vector<float> v = {0, 1, 2, 3, 4, 5};
  float out[3];
  ExtractBox(v.data(), {6}, Box{{{2, 5}}}, out);
  CHECK(out[0] == 2.f);
  CHECK(out[2] == 4.f);
}

TEST_CASE("box algebra: intersection, containment, relative coordinates") {
  Box a{{{0, 4}, {2, 6}}}, b{{{2, 8}, {0, 3}}};
  Box i = a.Intersect(b);
  CHECK(i == Box{{{2, 4}, {2, 3}}});
  CHECK(a.Contains(i));
  CHECK_FALSE(a.Contains(b));
  CHECK(i.RelativeTo(a) == Box{{{2, 4}, {0, 1}}});
  CHECK(Box{{{0, 2}, {5, 5}}}.empty());
}

TEST_CASE("contiguous runs: where a box starts in its buffer, and a region cut into runs of two buffers") {
  const Shape s = {1, 4, 6, 5};  // NCHW
  const Box full = Box::Full(s);
  CHECK(ContiguousStart(s, full) == 0);
  CHECK(ContiguousStart(s, Box{{{0, 1}, {1, 3}, {0, 6}, {0, 5}}}) == 30);   // channels 1-2: one run
  CHECK(ContiguousStart(s, Box{{{0, 1}, {2, 3}, {1, 3}, {0, 5}}}) == 65);   // rows of one channel
  CHECK(ContiguousStart(s, Box{{{0, 1}, {3, 4}, {5, 6}, {4, 5}}}) == 119);  // one value: always one run
  CHECK(ContiguousStart(s, Box{{{0, 1}, {2, 3}, {1, 2}, {1, 4}}}) == 66);   // part of one row
  CHECK(ContiguousStart(s, Box{{{0, 1}, {0, 4}, {1, 3}, {0, 5}}}) == -1);   // rows of every channel
  CHECK(ContiguousStart(s, Box{{{0, 1}, {2, 3}, {1, 3}, {1, 4}}}) == -1);   // columns of several rows
  CHECK(ContiguousStart(s, Box{{{0, 1}, {0, 4}, {0, 6}}}) == -1);           // another rank

  auto total = [](const std::vector<Box>& pieces) {
    int64_t v = 0;
    for (const Box& b : pieces) v += b.volume();
    return v;
  };
  // An FFMT tile's rows with a halo, from the whole map into the tile's
  // buffer: one run per channel in the whole map (the tile's buffer holds
  // them back to back).
  const Box rows{{{0, 1}, {0, 4}, {2, 5}, {0, 5}}};
  const auto per_channel = ContiguousPieces(rows, full, rows);
  REQUIRE(per_channel.size() == 4);
  for (int c = 0; c < 4; ++c) CHECK(per_channel[c] == (Box{{{0, 1}, {c, c + 1}, {2, 5}, {0, 5}}}));
  // Already one run in both: itself.
  const Box two_channels{{{0, 1}, {1, 3}, {0, 6}, {0, 5}}};
  CHECK(ContiguousPieces(two_channels, full, two_channels) == std::vector<Box>{two_channels});
  // A column band: one run per channel and row; every value once.
  const Box cols{{{0, 1}, {0, 2}, {0, 6}, {1, 3}}};
  const auto per_row = ContiguousPieces(cols, full, cols);
  CHECK(per_row.size() == 12);
  CHECK(total(per_row) == cols.volume());
  for (const Box& b : per_row) {
    CHECK(ContiguousStart(s, b.RelativeTo(full)) >= 0);
    CHECK(ContiguousStart(cols.shape(), b.RelativeTo(cols)) >= 0);
  }
  // The rows of two tiles that meet inside the region: runs in both buffers.
  const Box a{{{0, 1}, {0, 4}, {0, 4}, {0, 5}}}, b{{{0, 1}, {0, 4}, {3, 6}, {0, 5}}};
  const Box overlap = a.Intersect(b);
  const auto pieces = ContiguousPieces(overlap, a, b);
  CHECK(pieces.size() == 4);
  CHECK(total(pieces) == overlap.volume());
  CHECK(ContiguousPieces(Box{{{0, 1}, {0, 0}, {0, 6}, {0, 5}}}, full, full).empty());  // nothing to move
}

TEST_CASE("programs whose sends and receives do not pair up are rejected naming both ends") {
  std::vector<DeviceProgram> p(2);
  p[0].device = 0;
  p[1].device = 1;
  int b0 = p[0].AddBuffer(0, Box::Full({4}), "x");
  int b1 = p[1].AddBuffer(0, Box::Full({4}), "x");
  ProgramStep send;
  send.kind = StepKind::kSend;
  send.peer = 1;
  send.message = 7;
  send.src_buffer = b0;
  send.src_box = Box::Full({4});
  p[0].steps.push_back(send);
  Status st = ValidatePrograms(p);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message() == "device 0 sends message 7 to device 1, which never receives it");
  ProgramStep recv;
  recv.kind = StepKind::kRecv;
  recv.peer = 0;
  recv.message = 7;
  recv.dst_buffer = b1;
  recv.dst_box = Box{{{0, 2}}};
  p[1].steps.push_back(recv);
  st = ValidatePrograms(p);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("sends 4 values, device 1 expects 2") != std::string::npos);
  p[1].steps[0].dst_box = Box::Full({4});
  CHECK(ValidatePrograms(p).ok());
}

namespace {
ProgramStep Transfer(StepKind kind, int peer, int64_t message, int buffer) {
  ProgramStep s;
  s.kind = kind;
  s.peer = peer;
  s.message = message;
  (kind == StepKind::kSend ? s.src_buffer : s.dst_buffer) = buffer;
  (kind == StepKind::kSend ? s.src_box : s.dst_box) = Box::Full({4});
  return s;
}
}  // namespace

TEST_CASE("a Recv's message can arrive only after the receiver's steps that happen-before its Send") {
  // Device 0: send 1 to d1, send 2 to d2, recv 3 from d1, recv 4 from d2, recv 5 from d2.
  // Device 1: recv 1, send 3.   Device 2: send 5 (depends on nothing), recv 2, send 4.
  std::vector<DeviceProgram> p(3);
  std::vector<int> b(3);
  for (int d = 0; d < 3; ++d) p[d].device = d, b[d] = p[d].AddBuffer(0, Box::Full({4}), "x");
  p[0].steps = {Transfer(StepKind::kSend, 1, 1, b[0]), Transfer(StepKind::kSend, 2, 2, b[0]),
                Transfer(StepKind::kRecv, 1, 3, b[0]), Transfer(StepKind::kRecv, 2, 4, b[0]),
                Transfer(StepKind::kRecv, 2, 5, b[0])};
  p[1].steps = {Transfer(StepKind::kRecv, 0, 1, b[1]), Transfer(StepKind::kSend, 0, 3, b[1])};
  p[2].steps = {Transfer(StepKind::kSend, 0, 5, b[2]), Transfer(StepKind::kRecv, 0, 2, b[2]),
                Transfer(StepKind::kSend, 0, 4, b[2])};
  REQUIRE(ValidatePrograms(p).ok());
  REQUIRE(SetMessageWindows(&p).ok());
  CHECK(p[0].steps[2].receive_from == 1);  // d1 answers message 1, sent at d0's step 0
  CHECK(p[0].steps[3].receive_from == 2);  // d2's message 4 follows message 2 (step 1)
  CHECK(p[0].steps[4].receive_from == 0);  // message 5 needs nothing from d0: any time
  CHECK(p[1].steps[0].receive_from == 0);
  CHECK(p[2].steps[1].receive_from == 0);
  // A Send's memory is free once a later step of its device depends on the peer's Recv.
  CHECK(p[0].steps[0].release_after == 2);  // message 3 answers message 1
  CHECK(p[0].steps[1].release_after == 3);  // message 4 follows message 2's Recv
  CHECK(p[1].steps[1].release_after == 2);  // nothing comes back: the request's end
  CHECK(p[2].steps[0].release_after == 3);
  CHECK(p[2].steps[2].release_after == 3);
  CHECK(ValidatePrograms(p).ok());
  // A receive window beyond its own step is refused (a program from the wire).
  p[0].steps[2].receive_from = 3;
  CHECK(ValidateProgram(p[0], 3).message().find("arrives from step 3") != std::string::npos);
  p[0].steps[2].receive_from = 1;
  p[0].steps[0].release_after = 6;
  CHECK(ValidateProgram(p[0], 3).message().find("free after step 6") != std::string::npos);
  // Two devices that each wait for the other first can never run.
  std::vector<DeviceProgram> stuck(2);
  for (int d = 0; d < 2; ++d) stuck[d].device = d, stuck[d].AddBuffer(0, Box::Full({4}), "x");
  stuck[0].steps = {Transfer(StepKind::kRecv, 1, 1, 0), Transfer(StepKind::kSend, 1, 2, 0)};
  stuck[1].steps = {Transfer(StepKind::kRecv, 0, 2, 0), Transfer(StepKind::kSend, 0, 1, 0)};
  REQUIRE(ValidatePrograms(stuck).ok());
  const Status st = SetMessageWindows(&stuck);
  CHECK(st.code() == StatusCode::kInternal);
  CHECK(st.message().find("would wait forever") != std::string::npos);
}

#include "partition/compile/program_codec.h"

TEST_CASE("device programs survive serialisation, and corrupted bytes are refused") {
  Graph g;
  int x = g.AddValue("x", {1, 2});
  int w = g.AddConstant("w", {{3, 2}, {1, 2, 3, 4, 5, 6}});
  int y = g.AddValue("y", {1, 3});
  Node n{"dense", "Gemm", {x, w}, {y}, {}};
  n.attrs.Set("activation", std::string("relu"));
  n.attrs.Set("alpha", 0.5);
  n.attrs.Set("pads", std::vector<int64_t>{1, 2});
  n.attrs.Set("scales", std::vector<double>{1.5});
  n.attrs.Set("group", int64_t{2});
  g.AddNode(n);
  g.inputs = {x};
  g.outputs = {y};
  DeviceProgram p;
  p.device = 1;
  int bx = p.AddBuffer(0, Box::Full({1, 2}), "x");
  int by = p.AddBuffer(1, Box::Full({1, 3}), "y");
  p.subgraphs.push_back(g);
  ProgramStep c;
  c.kind = StepKind::kCompute;
  c.subgraph = 0;
  c.inputs = {bx};
  c.outputs = {by};
  c.layer = 4;
  p.steps.push_back(c);
  ProgramStep s;
  s.kind = StepKind::kSend;
  s.peer = 0;
  s.message = 12;
  s.src_buffer = by;
  s.src_box = Box{{{0, 1}, {1, 3}}};
  p.steps.push_back(s);
  p.model_inputs = {{0, bx}};
  std::string bytes = SerializeProgram(p, "plan-abc");
  std::string id;
  auto back = ParseProgram(bytes, "mem", &id);
  INFO(back.status().ToString());
  REQUIRE(back.ok());
  CHECK(id == "plan-abc");
  CHECK(back->device == 1);
  CHECK(SerializeProgram(*back, "plan-abc") == bytes);
  const Node& bn = back->subgraphs[0].nodes[0];
  CHECK(bn.attrs.String("activation") == "relu");
  CHECK(bn.attrs.Ints("pads") == std::vector<int64_t>{1, 2});
  CHECK(back->subgraphs[0].ConstantData(w)->values[5] == 6.f);
  CHECK(back->steps[1].src_box == s.src_box);
  // The consuming encoder (one subgraph at a time, issue 11) gives bytes that
  // parse to the same program.
  DeviceProgram consumed = p;
  std::string streamed = SerializeProgram(std::move(consumed), "plan-abc");
  CHECK(streamed.size() == bytes.size());
  // Byte for byte: a worker identifies a program by the SHA-256 of these
  // bytes, and deploy (moving encoder) and the gateway (copying encoder)
  // must send the same program the same way.
  CHECK(streamed == bytes);
  std::string streamed_id;
  auto again = ParseProgram(streamed, "streamed", &streamed_id);
  INFO(again.status().ToString());
  REQUIRE(again.ok());
  CHECK(streamed_id == "plan-abc");
  CHECK(SerializeProgram(*again, "plan-abc") == bytes);
  // Truncation and bit flips give an error, never a crash.
  for (size_t cut : {size_t{1}, bytes.size() / 2, bytes.size() - 1}) CHECK_FALSE(ParseProgram(bytes.substr(0, cut), "cut", nullptr).ok());
  std::string junk = bytes;
  for (size_t i = 0; i < junk.size(); i += 7) junk[i] = static_cast<char>(junk[i] ^ 0x5a);
  (void)ParseProgram(junk, "junk", nullptr);  // must not crash; may or may not parse
}

// Found by tests/fuzz/fuzz_program (tests/fuzz/regressions/program/
// empty_constant_memcpy_null.pb, replayed under UBSan by the fuzz build's
// fuzz_regressions.program): a constant with a 0 dimension was copied with
// memcpy into a vector with no storage (a null pointer, undefined even for
// 0 bytes). Here: an empty constant is a valid graph value and survives.
TEST_CASE("graphs with an empty constant (a 0 dimension) serialise and parse back (fuzz_program)") {
  Graph g;
  const int x = g.AddValue("x", {1, 4});
  const int empty = g.AddConstant("nothing", TensorData{{0, 4}, {}});
  const int y = g.AddValue("y", {1, 4});
  Node n;
  n.name = "concat";
  n.op = "Concat";
  n.inputs = {x, empty};
  n.outputs = {y};
  n.attrs.Set("axis", int64_t{0});
  g.AddNode(n);
  g.inputs = {x};
  g.outputs = {y};
  auto back = ParseGraph(SerializeGraph(g), "empty-constant");
  INFO(back.status().ToString());
  REQUIRE(back.ok());
  REQUIRE(back->constants.count(empty) == 1);
  CHECK(back->constants.at(empty).shape == Shape{0, 4});
  CHECK(back->constants.at(empty).values.empty());
}

TEST_CASE("scenarios, hand-worked: each model's steps and wait counts on every device, its messages paired") {
  // Device 0 holds the input x (value 0). Step 0 computes a shared layer
  // (value 1); step 1 model a's head (value 2, a's output); step 2 sends
  // value 1 to device 1 as message 7; step 3 receives b's output (value 4)
  // as message 8. Device 1: step 0 receives message 7, step 1 computes b's
  // head (value 3 -> value 4 via a Copy at step 2), step 3 sends value 4 back.
  const Box box{{{0, 4}}};
  std::vector<DeviceProgram> p(2);
  p[0].device = 0;
  for (int v : {0, 1, 2, 4}) p[0].AddBuffer(v, box, "v" + std::to_string(v));  // buffers 0..3
  auto compute = [](std::vector<int> in, std::vector<int> out) {
    ProgramStep s;
    s.kind = StepKind::kCompute;
    s.inputs = std::move(in);
    s.outputs = std::move(out);
    return s;
  };
  // A Send of buffer b (kSend) or a Recv into it (kRecv).
  auto transfer = [&](StepKind kind, int b, int peer, int64_t message) {
    ProgramStep s;
    s.kind = kind;
    (kind == StepKind::kSend ? s.src_buffer : s.dst_buffer) = b;
    (kind == StepKind::kSend ? s.src_box : s.dst_box) = box;
    s.peer = peer;
    s.message = message;
    return s;
  };
  auto send = [&](int b, int peer, int64_t message) { return transfer(StepKind::kSend, b, peer, message); };
  auto recv = [&](int b, int peer, int64_t message) { return transfer(StepKind::kRecv, b, peer, message); };
  p[0].steps = {compute({0}, {1}), compute({1}, {2}), send(1, 1, 7), recv(3, 1, 8)};
  p[0].model_inputs = {{0, 0}};
  p[0].model_outputs = {{2, 2}, {4, 3}};
  p[1].device = 1;
  for (int v : {1, 3, 4}) p[1].AddBuffer(v, box, "v" + std::to_string(v));  // buffers 0..2
  ProgramStep copy;
  copy.kind = StepKind::kCopy;
  copy.src_buffer = 1;
  copy.dst_buffer = 2;
  copy.src_box = copy.dst_box = box;
  p[1].steps = {recv(0, 0, 7), compute({0}, {1}), copy, send(2, 0, 8)};
  const std::vector<GraphModel> models = {{"a", {0}, {2}}, {"b", {0}, {4}}};
  SetScenarios(models, &p);
  REQUIRE(p[0].scenarios.size() == 2);
  REQUIRE(p[1].scenarios.size() == 2);
  CHECK(p[0].scenarios[0].name == "a");
  CHECK(p[0].scenarios[0].steps == std::vector<int>{0, 1});     // a: the shared layer and its head
  CHECK(p[1].scenarios[0].steps.empty());                       // device 1 idles
  CHECK(p[0].scenarios[1].steps == std::vector<int>{0, 2, 3});  // b: shared layer, send, receive its output
  CHECK(p[1].scenarios[1].steps == std::vector<int>{0, 1, 2, 3});
  CHECK(p[0].scenarios[1].outputs == std::vector<int>{4});
  // Wait counts: the earlier steps writing what a step reads. Device 0:
  // the head and the Send read value 1 (step 0); device 1: each step reads
  // what the one before it wrote; Recvs and the model input's reader wait
  // for no step.
  CHECK(p[0].scenarios[0].waits == std::vector<int>{0, 1});
  CHECK(p[0].scenarios[1].waits == std::vector<int>{0, 1, 0});
  CHECK(p[1].scenarios[1].waits == std::vector<int>{0, 1, 1, 1});
  CHECK(p[1].scenarios[0].waits.empty());
  // Two tiles writing one buffer: its reader waits for both; a later
  // rewrite is not waited for.
  DeviceProgram tiles;
  for (int v : {0, 1, 2}) tiles.AddBuffer(v, box, "t" + std::to_string(v));
  tiles.steps = {compute({0}, {1}), compute({0}, {1}), compute({1}, {2}), compute({0}, {1})};
  CHECK(StepWriters(tiles) == std::vector<std::vector<int>>{{}, {}, {0, 1}, {}});
  // One model (or none): no scenarios.
  SetScenarios({models[0]}, &p);
  CHECK(p[0].scenarios.empty());
}
