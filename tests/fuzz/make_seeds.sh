#!/bin/bash
# Writes the binary seeds of tests/fuzz/corpus/ that need the project's
# codecs: UART frames (transport/wire/frame_codec.h, compiled here with the
# host compiler) and device programs (proto/program.proto via protoc
# --encode). The text seeds come from make_seeds.py. Run from the repo root.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$root/tests/fuzz/corpus
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cat > "$tmp/frames.cc" <<'CC'
#include <cstdio>
#include <string>
#include "transport/wire/frame_codec.h"
using namespace tessera::wire;
static std::string Encode(FrameHeader h, const std::string& payload) {
  static uint8_t scratch[kMaxRawFrame], out[kMaxEncodedFrame];
  h.length = static_cast<uint16_t>(payload.size());
  size_t n = EncodeFrame(h, reinterpret_cast<const uint8_t*>(payload.data()), scratch, out);
  return std::string(reinterpret_cast<char*>(out), n);
}
static uint8_t scratch_c[kMaxRawFrame], out_c[kMaxEncodedFrame];
static void Write(const char* path, const std::string& bytes) {
  FILE* f = std::fopen(path, "wb");
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}
int main(int argc, char** argv) {
  const std::string dir = argv[1];
  FrameHeader data{kFrameData, 0, 0, 7, 1, 0, 3, 0, 8};
  FrameHeader ack{kFrameAck, 0, 0, 7, 1, 1, 0, 0, 0};
  FrameHeader status{kFrameStatus, 0, 0, 7, 1, 2, 0, 0, 0};
  const std::string zeros(40, '\0'), big(kMaxPayload, '\x5a');
  // The first byte of every seed is where fuzz_frame splits the rest.
  Write((dir + "/data.bin").c_str(), std::string(1, '\x10') + Encode(data, "abcdefgh"));
  Write((dir + "/ack_status.bin").c_str(), std::string(1, '\x05') + Encode(ack, "") + Encode(status, ""));
  Write((dir + "/zeros_payload.bin").c_str(), std::string(1, '\x00') + Encode(data, zeros));
  Write((dir + "/max_payload.bin").c_str(), std::string(1, '\x80') + Encode(data, big));
  Write((dir + "/garbage_then_frame.bin").c_str(), std::string("\x03\x11\x22\x00\x01\x02", 6) + Encode(ack, ""));
  // A message's first frame (sequence 0: the decoder learns session 1), then
  // a compact continuation frame of that session.
  FrameHeader first{kFrameData, 0, 0, 7, 1, 0, 3, 0, 16};
  size_t n = EncodeCompactFrame(1, 1, reinterpret_cast<const uint8_t*>("ijklmnop"), 8, scratch_c, out_c);
  Write((dir + "/compact_continuation.bin").c_str(),
        std::string(1, '\x20') + Encode(first, "abcdefgh") + std::string(reinterpret_cast<char*>(out_c), n));
  return 0;
}
CC
mkdir -p "$out/frame" "$out/program"
c++ -std=c++20 -I"$root" "$tmp/frames.cc" -o "$tmp/frames"
"$tmp/frames" "$out/frame"

# One device running Relu on its input, and a two-device sender.
protoc -I"$root/proto" --encode=tessera.proto.DeviceProgramMsg "$root/proto/program.proto" \
  > "$out/program/relu.pb" <<'TXT'
plan_id: "seed-relu"
device: 0
buffers { name: "x" value: 0 box { dims { begin: 0 end: 1 } dims { begin: 0 end: 4 } } }
buffers { name: "y" value: 1 box { dims { begin: 0 end: 1 } dims { begin: 0 end: 4 } } }
subgraphs {
  name: "g"
  values { name: "x" shape: 1 shape: 4 }
  values { name: "y" shape: 1 shape: 4 }
  nodes { name: "relu" op: "Relu" inputs: 0 outputs: 1 }
  inputs: 0
  outputs: 1
}
steps { kind: COMPUTE subgraph: 0 inputs: 0 outputs: 1 }
model_inputs { value: 0 buffer: 0 }
model_outputs { value: 1 buffer: 1 }
TXT
protoc -I"$root/proto" --encode=tessera.proto.DeviceProgramMsg "$root/proto/program.proto" \
  > "$out/program/send_conv.pb" <<'TXT'
plan_id: "seed-send"
device: 1
buffers { name: "x" value: 0 box { dims { begin: 0 end: 1 } dims { begin: 0 end: 1 } dims { begin: 0 end: 3 } dims { begin: 0 end: 3 } } }
buffers { name: "y" value: 2 box { dims { begin: 0 end: 1 } dims { begin: 0 end: 1 } dims { begin: 0 end: 3 } dims { begin: 0 end: 3 } } }
subgraphs {
  name: "conv"
  values { name: "x" shape: 1 shape: 1 shape: 3 shape: 3 }
  values { name: "w" shape: 1 shape: 1 shape: 1 shape: 1 constant: true data: "\000\000\200\077" }
  values { name: "y" shape: 1 shape: 1 shape: 3 shape: 3 }
  nodes { name: "c" op: "Conv" inputs: 0 inputs: 1 outputs: 2 attrs { name: "kernel_shape" ints { v: 1 v: 1 } } }
  inputs: 0
  outputs: 2
}
steps { kind: RECV peer: 0 message: 1 dst_buffer: 0 dst_box { dims { begin: 0 end: 1 } dims { begin: 0 end: 1 } dims { begin: 0 end: 3 } dims { begin: 0 end: 3 } } }
steps { kind: COMPUTE subgraph: 0 inputs: 0 outputs: 1 layer: 0 }
steps { kind: SEND peer: 0 message: 2 src_buffer: 1 src_box { dims { begin: 0 end: 1 } dims { begin: 0 end: 1 } dims { begin: 0 end: 3 } dims { begin: 0 end: 3 } } }
TXT
# MCU programs (transport/wire/mcu_program.h, format 5): every layer op (a
# conv and a dense also with int8 weights; a quantize, a conv and a max pool
# on int8 codes, an output of codes), a phased second input on a
# direct-link UART, an output on UART2. Offsets are written here in floats
# and stored in bytes.
cat > "$tmp/mcu.cc" <<'CC'
#include <cstdio>
#include <string>
#include <vector>
#include "transport/wire/mcu_program.h"
using namespace tessera::mcu;
static Layer L(uint32_t op, uint32_t in0, uint32_t out, uint32_t c, uint32_t h, uint32_t w, uint32_t oc, uint32_t oh,
               uint32_t ow) {
  Layer l{};
  l.op = op; l.in0 = l.in1 = 4 * in0; l.out = 4 * out;
  l.in0_grid = l.in1_grid = l.out_grid = kNoWeights;
  l.c = c; l.h = h; l.w = w; l.oc = oc; l.oh = oh; l.ow = ow;
  l.kh = l.kw = l.sh = l.sw = l.dh = l.dw = l.group = 1;
  l.weight = l.bias = kNoWeights;
  return l;
}
static void Write(const std::string& path, std::vector<IoEntry> in, std::vector<IoEntry> out, std::vector<Layer> layers,
                  std::vector<float> weights, uint32_t act) {
  ProgramHeader h{kProgramMagic, kProgramVersion, 7, act, uint32_t(layers.size()), uint32_t(in.size()),
                  uint32_t(out.size()), uint32_t(weights.size())};
  std::string b(reinterpret_cast<const char*>(&h), sizeof h);
  b.append(reinterpret_cast<const char*>(in.data()), in.size() * sizeof(IoEntry));
  b.append(reinterpret_cast<const char*>(out.data()), out.size() * sizeof(IoEntry));
  b.append(reinterpret_cast<const char*>(layers.data()), layers.size() * sizeof(Layer));
  b.append(reinterpret_cast<const char*>(weights.data()), weights.size() * 4);
  ProgramView v;
  if (ValidateProgram(b.data(), uint32_t(b.size()), 64 * 1024, &v) != kErrNone) { std::fprintf(stderr, "bad seed %s\n", path.c_str()); std::exit(1); }
  FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(b.data(), 1, b.size(), f);
  std::fclose(f);
}
int main(int argc, char** argv) {
  const std::string dir = argv[1];
  std::vector<float> w(100);
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i % 7) - 3) * 0.125f;
  w[20] = 0.1f; w[21] = 0; w[22] = -128; w[23] = 127;  // the QDQ grid
  Layer conv = L(kOpConv, 0, 36, 1, 6, 6, 2, 6, 6);
  conv.kh = conv.kw = 3; conv.pad_top = conv.pad_left = 1; conv.weight = 0; conv.bias = 18; conv.activation = kActRelu;
  Layer pool = L(kOpMaxPool, 36, 108, 2, 6, 6, 2, 3, 3);
  pool.kh = pool.kw = pool.sh = pool.sw = 2;
  Layer q = L(kOpQuantize, 108, 126, 2, 3, 3, 2, 3, 3);
  q.weight = 20;
  Layer dense = L(kOpDense, 126, 144, 18, 1, 1, 4, 1, 1);
  dense.weight = 24; dense.bias = 96;
  Layer add = L(kOpAdd, 144, 148, 4, 1, 1, 4, 1, 1);
  Layer copy = L(kOpCopy, 148, 152, 4, 1, 1, 4, 1, 1);
  Layer gap = L(kOpGlobalAvgPool, 36, 156, 2, 6, 6, 2, 1, 1);
  Layer avg = L(kOpAvgPool, 36, 158, 2, 6, 6, 2, 3, 3);
  avg.kh = avg.kw = 3; avg.sh = avg.sw = 2; avg.pad_top = avg.pad_left = 1;
  Layer relu = L(kOpRelu, 158, 158, 2, 3, 3, 2, 3, 3);
  Layer dw = L(kOpConv, 0, 176, 1, 6, 6, 1, 6, 6);
  dw.kh = dw.kw = 3; dw.pad_top = dw.pad_left = 2; dw.dh = dw.dw = 2; dw.weight = 0;
  Layer qconv = conv;  // int8 weights: 2 scales, 18 codes in 5 words
  qconv.weight_format = kWeightsInt8; qconv.weight = 30; qconv.out = 4 * 212;
  Layer qdense = dense;  // 4 scales, 72 codes in 18 words
  qdense.weight_format = kWeightsInt8; qdense.weight = 40; qdense.out = 4 * 284;
  // int8 codes on the grid at w[20]: the input quantized to codes, an
  // int8-weight conv from codes to codes, a max pool of codes (1 B a value).
  Layer to_codes = L(kOpQuantize, 0, 300, 1, 6, 6, 1, 6, 6);
  to_codes.weight = 20; to_codes.out_grid = 20;
  Layer code_conv = qconv;
  code_conv.in0 = 4 * 300; code_conv.in0_grid = 20; code_conv.out = 4 * 310; code_conv.out_grid = 20;
  Layer code_pool = pool;
  code_pool.in0 = 4 * 310; code_pool.in0_grid = 20; code_pool.out = 4 * 330; code_pool.out_grid = 20;
  const uint32_t F = kNoWeights;
  Write(dir + "/every_op.bin", {{1, 0, 36, 0, 0, F}},
        {{2, 4 * 152, 4, 15, 0, F}, {3, 4 * 156, 2, 15, 0, F}, {4, 4 * 330, 18, 15, 0, 20}},
        {conv, pool, q, dense, add, copy, gap, avg, relu, dw, qconv, qdense, to_codes, code_conv, code_pool}, w, 340);
  // Phases and UARTs: a second input on UART1 before the Add, an output on UART2 after the pool.
  Write(dir + "/phases_ports.bin", {{1, 0, 36, 0, 0, F}, {5, 4 * 148, 4, 4, 1, F}},
        {{6, 4 * 108, 18, 2, 2, F}, {2, 4 * 152, 4, 6, 0, F}}, {conv, pool, q, dense, add, copy}, w, 156);
  return 0;
}
CC
mkdir -p "$out/mcu_program"
c++ -std=c++20 -I"$root" "$tmp/mcu.cc" -o "$tmp/mcu"
"$tmp/mcu" "$out/mcu_program"

echo "make_seeds.sh: wrote $(ls "$out/frame" | wc -l) frame, $(ls "$out/program" | wc -l) program and" \
  "$(ls "$out/mcu_program" | wc -l) MCU program seeds"
