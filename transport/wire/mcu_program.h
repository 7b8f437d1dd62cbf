// The compact MCU program (issue 6): what a microcontroller worker runs.
// Header-only and freestanding (<stdint.h>/<stddef.h> only: the arm-none-eabi toolchain ships no C++ library): the host
// builds it (partition/compile/mcu_program_builder.h), the firmware validates and runs it, and host tests run the very
// same interpreter against the host executor.
//
// Layout: little-endian 32-bit words, 4-byte aligned, no pointers.
//   ProgramHeader
//   IoEntry  inputs[num_inputs]     tensors received (DATA frames, message id)
//   IoEntry  outputs[num_outputs]   tensors sent (DATA frames)
//   Layer    layers[num_layers]     executed in order
// A run is a sequence of *phases* (version 2): each IoEntry names the layer
// it belongs before. Layer L runs once every input of layer <= L has
// arrived; an output of layer L is sent once layers 0..L-1 have run, before
// layer L. So an MCU can receive, compute, send and receive again within one
// request: the FDT rounds of METHODS §4 (send a partial sum, receive the
// merged map of the next layer) and FFMT stacks after other layers.
//   float    weights[weight_floats]  4-byte words: floats, and the int8 codes
//                                    of kWeightsInt8 layers packed 4 per word
// Activations live in one region of `activation_floats` floats placed by the
// firmware right after the program in its static arena; every offset below is
// a float index into that region (weights: into the weight block). The
// arena a device needs is therefore known on the host before deployment:
// program bytes + 4 * activation_floats.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>

namespace tessera::mcu {

constexpr uint32_t kProgramMagic = 0x504D5354;  // "TSMP"
constexpr uint32_t kProgramVersion = 4;
constexpr uint32_t kNoWeights = 0xFFFFFFFFu;

enum LayerOp : uint32_t {
  kOpConv = 1,   // NCHW conv, groups (depthwise: group == C == OC), dilation
  kOpDense = 2,  // out[o] = b[o] + Σ W[o, i] x[i], x = the C·H·W input flattened
  kOpMaxPool = 3,
  kOpAvgPool = 4,  // `group` field = count_include_pad
  kOpGlobalAvgPool = 5,
  kOpRelu = 6,
  kOpAdd = 7,   // out = in0 + in1 (same size)
  kOpCopy = 8,  // out = in0, c·h·w floats (a part of one buffer into a part of another)
  // out = in0 put on an int8/uint8 grid (a QDQ model's QuantizeDequantize,
  // partition/graph/quantization.h): `weight` indexes 4 floats, scale,
  // zero point, qmin, qmax (integers held exactly as floats).
  kOpQuantize = 9,
};

enum Activation : uint32_t { kActNone = 0, kActRelu = 1 };

// How a Conv's or a Dense's weights are stored (version 4, issue 16 item 3):
// float32, or int8 — one float scale per output channel (oc floats at
// `weight`), then the channels' codes, 1 byte each, oc × per values
// (per = c/group·kh·kw, or c·h·w for Dense) in the following
// ceil(oc·per / 4) words. The kernels use float(code) · scale, which the
// host checked reproduces the float weight bit for bit
// (partition/graph/int8_weights.h): the answers are the float program's.
enum WeightFormat : uint32_t { kWeightsFloat32 = 0, kWeightsInt8 = 1 };

struct ProgramHeader {
  uint32_t magic, version, plan_id;
  uint32_t activation_floats;
  uint32_t num_layers, num_inputs, num_outputs;
  uint32_t weight_floats;
};

// UARTs of an MCU (version 3, issue 16 item 4): port 0 is the link to the
// Linux board that owns it (`via`: programs, STATUS, tensors relayed over
// gRPC); ports 1..kMaxPorts-1 are direct MCU<->MCU links (METHODS §5's
// microcontroller chains), UART1 and UART2 of the board. A tensor of a
// direct link never passes through a Linux board.
constexpr uint32_t kMaxPorts = 3;

struct IoEntry {
  uint32_t message;  // message id on the link
  uint32_t offset;   // float index in the activation region
  uint32_t count;    // floats
  uint32_t layer;    // the phase: received before layer `layer` runs / sent after layers 0..layer-1
  uint32_t port;     // the UART it arrives on / is sent on (< kMaxPorts)
};

struct Layer {
  uint32_t op, activation;
  uint32_t in0, in1, out;  // activation offsets (in1: Add only)
  uint32_t c, h, w;        // input shape (one image)
  uint32_t oc, oh, ow;     // output shape
  uint32_t kh, kw, sh, sw, pad_top, pad_left, dh, dw;
  uint32_t group;          // conv groups; avg pool: count_include_pad
  uint32_t weight, bias;   // float offsets into the weight block (bias: kNoWeights = none)
  uint32_t weight_format;  // WeightFormat of Conv / Dense weights (others: kWeightsFloat32)
};

static_assert(sizeof(ProgramHeader) == 32 && sizeof(IoEntry) == 20 && sizeof(Layer) == 92,
              "the program layout is fixed: 32-bit words only");

// Reply to a STATUS request (frame type kFrameStatus), little-endian words.
struct McuStatus {
  uint32_t magic;            // kStatusMagic
  uint32_t state;            // McuState
  uint32_t plan_id;          // of the loaded program (0: none)
  uint32_t arena_bytes;      // the RAM arena (activations)
  uint32_t free_bytes;       // RAM arena not used by the program's activations
  uint32_t last_error;       // McuError
  uint32_t runs;             // completed inferences
  uint32_t last_run_ms;      // duration of the last run (SysTick)
  uint32_t bad_frames;       // dropped by the frame decoder
  uint32_t refused_frames;   // tensors of another plan / not expected
  uint32_t held_frames;      // reliable frames kept past a gap until it was filled (selective repeat)
  // Compute time of the last run (issue 16 item 5) in ticks of a clock of
  // tick_hz (SysTick on the processor clock: on a Cortex-M board one tick
  // is one CPU cycle; under QEMU with -icount shift=S one instruction
  // advances the clock by 2^S ns, so a tick is tick_hz⁻¹ s of that virtual
  // time). timed_layers per-layer counts follow this struct in the reply
  // (layer k's in word k; layers past kMaxTimedLayers add to the last word).
  uint32_t tick_hz;
  uint32_t last_run_ticks;
  uint32_t timed_layers;
  // The flash region the program (layers and weights) is written to once
  // when it arrives, read-only afterwards (issue 16 item 3).
  uint32_t flash_bytes;
  uint32_t flash_free_bytes;
  // DATA payload bytes per UART (port k in word k) since boot, each frame
  // counted once (not its retransmissions or duplicates): what the direct
  // MCU<->MCU links carried is measured here, not only predicted.
  uint32_t port_payload_sent[kMaxPorts];
  uint32_t port_payload_received[kMaxPorts];
  // What the firmware itself occupies in RAM outside the arena: its static
  // data (.data + .bss without the arena: link state of every UART, frame
  // buffers, counters), and the deepest its stack has reached since boot
  // (the stack is painted at reset and the untouched words counted).
  uint32_t firmware_ram_bytes;
  uint32_t stack_peak_bytes;
};

// What the tessera firmware takes on a board besides the program: the
// planner gives an MCU's program only the rest of its RAM and flash
// (planner/cluster.cc), so a plan that fits the preset fits the board with
// the firmware on it. Budgets, not measurements: integration.mcu_qemu checks
// the built image (arm-none-eabi-size) and STATUS (firmware_ram_bytes,
// stack_peak_bytes after the largest models it runs) stay inside them.
constexpr uint32_t kFirmwareStaticRamBytes = 24 * 1024;  // measured 22 360 B: 3 UART links ~6.4 KiB each
constexpr uint32_t kFirmwareStackBytes = 2 * 1024;  // measured <= 960 B (mlperf-dscnn, SysTick and UART interrupts)
constexpr uint32_t kFirmwareRamBytes = kFirmwareStaticRamBytes + kFirmwareStackBytes;
constexpr uint32_t kFirmwareFlashBytes = 16 * 1024;  // code + constants, measured ~12 KiB
constexpr uint32_t kStatusMagic = 0x54535453;  // "STST"
constexpr uint32_t kMaxTimedLayers = 64;

// A STATUS reply: the McuStatus, then its per-layer ticks (at most
// max_layers are copied to layer_ticks; *layers gets how many were sent).
// False when the size or the magic is wrong.
inline bool DecodeStatusReply(const void* bytes, uint64_t n, McuStatus* status, uint32_t* layer_ticks,
                              uint32_t max_layers, uint32_t* layers) {
  if (n < sizeof(McuStatus)) return false;
  memcpy(status, bytes, sizeof(McuStatus));
  if (status->magic != kStatusMagic || status->timed_layers > kMaxTimedLayers ||
      n != sizeof(McuStatus) + uint64_t(status->timed_layers) * 4)
    return false;
  const uint32_t k = status->timed_layers < max_layers ? status->timed_layers : max_layers;
  memcpy(layer_ticks, static_cast<const uint8_t*>(bytes) + sizeof(McuStatus), size_t{k} * 4);
  *layers = status->timed_layers;
  return true;
}

// Frames the firmware keeps past a gap on its UART (selective repeat,
// frame_codec.h): each slot holds one frame header and kMaxPayload bytes,
// ~1 KiB of RAM per slot outside the arena. A host link towards an MCU
// sends at most kRxSlots + 1 sequences ahead (UartLinkOptions::window).
constexpr uint32_t kRxSlots = 4;

enum McuState : uint32_t { kStateIdle = 0, kStateLoaded = 1, kStateError = 2 };

enum McuError : uint32_t {
  kErrNone = 0,
  kErrProgramTooLarge,   // the program exceeds the flash region, or its activations the RAM arena
  kErrProgramMagic,      // not a program / wrong version
  kErrProgramTruncated,  // sizes in the header exceed the bytes received
  kErrProgramLayer,      // a layer reads or writes outside its regions, or an unknown op
  kErrTensorRefused,     // a tensor of another plan, or of the wrong size
};

// A validated program: pointers into the caller's (aligned) bytes.
struct ProgramView {
  const ProgramHeader* header = nullptr;
  const IoEntry* inputs = nullptr;
  const IoEntry* outputs = nullptr;
  const Layer* layers = nullptr;
  const float* weights = nullptr;
  uint32_t bytes = 0;  // program size
};

namespace detail {
inline bool Inside(uint64_t offset, uint64_t count, uint64_t limit) { return offset + count <= limit; }
// The kernels index with int32 (firmware/mcu_kernels.h: oy*sh - pad + ky*dh,
// iy*W + ix): every spatial field below 2^14 keeps each of those inside int32
// for any layer a program may declare (a corrupted one included).
constexpr uint32_t kMaxSpatial = 1u << 14;
inline bool SpatialFits(const Layer& l) {
  const uint32_t fields[] = {l.h, l.w, l.oh, l.ow, l.kh, l.kw, l.sh, l.sw, l.pad_top, l.pad_left, l.dh, l.dw};
  for (uint32_t f : fields)
    if (f >= kMaxSpatial) return false;
  return true;
}
inline uint64_t InputFloats(const Layer& l) { return uint64_t(l.c) * l.h * l.w; }
inline uint64_t OutputFloats(const Layer& l) { return uint64_t(l.oc) * l.oh * l.ow; }
}  // namespace detail

// Words of the weight block that `oc` output channels of `per` weights take
// in `format` (WeightFormat).
inline uint64_t WeightWords(uint32_t format, uint64_t oc, uint64_t per) {
  return format == kWeightsInt8 ? oc + (oc * per + 3) / 4 : oc * per;
}

// Segments (METHODS §6 "Segments"): a conv whose output starts where its
// input does (out == in0) writes each output segment over input it has
// consumed, through a scratch region of InPlaceScratchFloats at in1
// (firmware/mcu_kernels.h ConvInPlace):
//   pointwise (1x1, stride 1, no pad, group 1): one pixel's min(C, OC) values;
//   depthwise (group == C == OC, output plane no larger): one input plane.
// 0: the conv cannot run in place. Relu and Add are elementwise: any of
// their operands may be their output, with no scratch.
inline bool IsPointwise(const Layer& l) {
  return l.kh == 1 && l.kw == 1 && l.sh == 1 && l.sw == 1 && l.pad_top == 0 && l.pad_left == 0 && l.group == 1 &&
         l.oh == l.h && l.ow == l.w;
}
inline bool IsDepthwise(const Layer& l) {
  return l.group == l.c && l.c == l.oc && uint64_t(l.oh) * l.ow <= uint64_t(l.h) * l.w;
}
inline uint64_t InPlaceScratchFloats(const Layer& l) {
  if (l.op != kOpConv) return 0;
  if (IsPointwise(l)) return l.c < l.oc ? l.c : l.oc;
  if (IsDepthwise(l)) return uint64_t(l.h) * l.w;
  return 0;
}

// Checks that every read and write of every layer stays inside the
// activation region and the weight block, so a corrupted or hostile program
// can never make the interpreter touch memory outside them. The program
// itself (in flash) is `bytes`; its activations need `ram_bytes` of RAM.
// `bytes` must be 4-byte aligned. Returns kErrNone and fills `view` on success.
inline McuError ValidateProgram(const void* bytes, uint32_t nbytes, uint64_t ram_bytes, ProgramView* view) {
  using namespace detail;
  if (nbytes < sizeof(ProgramHeader)) return kErrProgramTruncated;
  const auto* h = static_cast<const ProgramHeader*>(bytes);
  if (h->magic != kProgramMagic || h->version != kProgramVersion) return kErrProgramMagic;
  uint64_t need = sizeof(ProgramHeader) + uint64_t(h->num_inputs + uint64_t(h->num_outputs)) * sizeof(IoEntry) +
                  uint64_t(h->num_layers) * sizeof(Layer) + uint64_t(h->weight_floats) * 4;
  if (h->num_inputs > 64 || h->num_outputs > 64 || h->num_layers > 4096 || need != nbytes) return kErrProgramTruncated;
  if (uint64_t(h->activation_floats) * 4 > ram_bytes) return kErrProgramTooLarge;
  const uint8_t* p = static_cast<const uint8_t*>(bytes) + sizeof(ProgramHeader);
  ProgramView v;
  v.header = h;
  v.inputs = reinterpret_cast<const IoEntry*>(p);
  v.outputs = v.inputs + h->num_inputs;
  v.layers = reinterpret_cast<const Layer*>(v.outputs + h->num_outputs);
  v.weights = reinterpret_cast<const float*>(v.layers + h->num_layers);
  v.bytes = nbytes;
  const uint64_t act = h->activation_floats, wts = h->weight_floats;
  for (uint32_t i = 0; i < h->num_inputs + h->num_outputs; ++i)
    if (!Inside(v.inputs[i].offset, v.inputs[i].count, act) || v.inputs[i].port >= kMaxPorts) return kErrProgramLayer;
  // Phases: a run starts with an input of layer 0; inputs come before a
  // layer that exists; both lists are in phase order; the last layer's
  // outputs are sent at the end (layer == num_layers). A program without
  // inputs is an idle device's: no layers, no outputs, it never runs.
  if (h->num_inputs == 0 && (h->num_layers > 0 || h->num_outputs > 0)) return kErrProgramLayer;
  if (h->num_inputs > 0 && v.inputs[0].layer != 0) return kErrProgramLayer;
  for (uint32_t i = 0; i < h->num_inputs; ++i)
    if (v.inputs[i].layer >= (h->num_layers > 0 ? h->num_layers : 1) ||
        (i > 0 && v.inputs[i].layer < v.inputs[i - 1].layer))
      return kErrProgramLayer;
  for (uint32_t i = 0; i < h->num_outputs; ++i)
    if (v.outputs[i].layer > h->num_layers || (i > 0 && v.outputs[i].layer < v.outputs[i - 1].layer))
      return kErrProgramLayer;
  for (uint32_t i = 0; i < h->num_layers; ++i) {
    const Layer& l = v.layers[i];
    const uint64_t in = InputFloats(l), out = OutputFloats(l);
    if (!Inside(l.in0, in, act) || !Inside(l.out, out, act) || out == 0) return kErrProgramLayer;
    if (l.activation > kActRelu || !SpatialFits(l)) return kErrProgramLayer;
    if (l.weight_format > kWeightsInt8 || (l.weight_format != kWeightsFloat32 && l.op != kOpConv && l.op != kOpDense))
      return kErrProgramLayer;
    switch (l.op) {
      case kOpConv: {
        if (l.group == 0 || l.c % l.group || l.oc % l.group || l.sh == 0 || l.sw == 0 || l.kh == 0 || l.kw == 0 ||
            l.dh == 0 || l.dw == 0)  // the kernel divides by the stride and the dilation
          return kErrProgramLayer;
        if (!Inside(l.weight, WeightWords(l.weight_format, l.oc, uint64_t(l.c / l.group) * l.kh * l.kw), wts))
          return kErrProgramLayer;
        if (l.bias != kNoWeights && !Inside(l.bias, l.oc, wts)) return kErrProgramLayer;
        if (l.out == l.in0) {  // in place: a kind that can, and its scratch beside the buffer
          const uint64_t scratch = InPlaceScratchFloats(l), buffer = in > out ? in : out;
          if (scratch == 0 || !Inside(l.in1, scratch, act)) return kErrProgramLayer;
          if (l.in1 < l.in0 + buffer && l.in0 < l.in1 + scratch) return kErrProgramLayer;
        }
        break;
      }
      case kOpDense:
        if (l.oh != 1 || l.ow != 1 || !Inside(l.weight, WeightWords(l.weight_format, l.oc, in), wts))
          return kErrProgramLayer;
        if (l.bias != kNoWeights && !Inside(l.bias, l.oc, wts)) return kErrProgramLayer;
        break;
      case kOpMaxPool:
      case kOpAvgPool:
        if (l.oc != l.c || l.sh == 0 || l.sw == 0 || l.kh == 0 || l.kw == 0) return kErrProgramLayer;
        break;
      case kOpGlobalAvgPool:
        if (l.oc != l.c || l.oh != 1 || l.ow != 1 || in == 0) return kErrProgramLayer;
        break;
      case kOpRelu:
        if (out != in) return kErrProgramLayer;
        break;
      case kOpAdd:
        if (out != in || !Inside(l.in1, in, act)) return kErrProgramLayer;
        break;
      case kOpCopy:  // disjoint runs: memcpy
        if (out != in || (l.in0 < l.out + out && l.out < l.in0 + in)) return kErrProgramLayer;
        break;
      case kOpQuantize: {
        if (out != in || !Inside(l.weight, 4, wts)) return kErrProgramLayer;
        const float* q = v.weights + l.weight;  // scale > 0, qmin <= zero point <= qmax, all small integers
        if (!(q[0] > 0.0f) || !(q[0] < 3.0e38f) || !(q[2] >= -2147483520.0f) || !(q[3] <= 2147483520.0f) ||
            !(q[2] <= q[1]) || !(q[1] <= q[3]))
          return kErrProgramLayer;
        break;
      }
      default:
        return kErrProgramLayer;
    }
  }
  *view = v;
  return kErrNone;
}

// Whether every input of a layer <= `layer` has arrived (`ready`: bit i set
// once input i is complete).
inline bool InputsReadyFor(const ProgramView& p, uint64_t ready, uint32_t layer) {
  for (uint32_t i = 0; i < p.header->num_inputs && p.inputs[i].layer <= layer; ++i)
    if (!(ready >> i & 1u)) return false;
  return true;
}

}  // namespace tessera::mcu
