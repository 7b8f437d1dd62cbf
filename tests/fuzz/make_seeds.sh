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
echo "make_seeds.sh: wrote $(ls "$out/frame" | wc -l) frame and $(ls "$out/program" | wc -l) program seeds"
