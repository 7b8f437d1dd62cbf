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
// Activations live in one region of `activation_words` 4-byte words placed
// by the firmware right after the program in its static arena; every
// activation offset below is a *byte* offset into that region (weights:
// float index into the weight block). A tensor is float32 (4 B a value,
// 4-byte aligned) or, in version 5, int8 codes on a grid (1 B a value:
// "Activations as int8 codes" below). The arena a device needs is therefore
// known on the host before deployment: program bytes + 4 * activation_words.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>

namespace tessera::mcu {

constexpr uint32_t kProgramMagic = 0x504D5354;  // "TSMP"
constexpr uint32_t kProgramVersion = 5;
constexpr uint32_t kNoWeights = 0xFFFFFFFFu;
// A layer operand's "grid" that is no grid: int32 sums, 4 B a value (an FDTI
// slice's partial sums, METHODS §4, merged exactly and requantized once:
// partition/compile/program_compiler.h CompileOptions::integer_partial_sums).
// Written by a conv or dense layer with int8 weights on codes (its sums,
// without bias or activation); read by kOpAdd only: in0 and in1 sums and
// out sums (the merge), or in0 sums and an output of any other form (the
// requantization: out[c, ...] = act(fma(float(in0), weight[c], bias[c]))
// per channel c of oc, `weight` and `bias` oc floats each, in1 unused).
// On a link a sums tensor is 4 B a value, passed as is (IoEntry grid
// kNoWeights).
constexpr uint32_t kInt32Sums = 0xFFFFFFFEu;

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
  // partition/graph/quantization.h): `weight` indexes a grid (below). With
  // an out_grid the output is stored as codes, else as the float they
  // stand for.
  kOpQuantize = 9,
  // out = softmax of in0 along its last axis: rows of `group` values
  // (a classifier's head, e.g. MLPerf VWW's two classes); float32 or codes
  // in, stored as the output's form. e^x without libm (mcu_kernels.h
  // ExpNonPositive, within 1 ulp of expf): the host's Eigen exp differs by
  // as much, so answers match within 1e-5 relative, or one step of a
  // QuantizeDequantize after it.
  kOpSoftmax = 10,
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

// Activations as int8 codes (version 5, issue 16 item 1): a QDQ model's
// tensors that are outputs of a QuantizeDequantize hold only values
// (q - zero_point) * scale of an 8-bit grid, so a buffer of such a tensor
// keeps one byte per value, q - qmin (0..255), and every reader decodes
// float(q - zero_point) * scale — the very float the host's
// QuantizeDequantize gives (partition/graph/quantization.h DequantizeCode):
// the answers stay the float program's, bit for bit, in a quarter of the
// RAM and of the bytes on the UART. A *grid* is the index of 4 floats in the
// weight block: scale, zero point, qmin, qmax (integers held exactly as
// floats, qmin <= zero point <= qmax, qmax - qmin <= 255 for activations);
// kNoWeights: float32. A layer's in0_grid / in1_grid / out_grid and an
// IoEntry's grid say how its tensors are stored; a layer that writes codes
// rounds its result onto the grid (the QuantizeDequantize fused into it).
struct ProgramHeader {
  uint32_t magic, version, plan_id;
  uint32_t activation_words;  // the activation region, in 4-byte words
  uint32_t num_layers, num_inputs, num_outputs;
  uint32_t weight_floats;
};

// UARTs of an MCU (version 3, issue 16 item 4): port 0 is the link to the
// Linux board that owns it (`via`: programs, STATUS, tensors relayed over
// gRPC); ports 1..kMaxPorts-1 are direct MCU<->MCU links (METHODS §5's
// microcontroller chains), UART1 and UART2 of the board. A tensor of a
// direct link never passes through a Linux board.
constexpr uint32_t kMaxPorts = 3;
// The most inputs and outputs a program has (each one contiguous run of a
// buffer: an MCU gathering FFMT tiles of a map with C channels receives C
// runs per tile).
constexpr uint32_t kMaxIo = 256;

struct IoEntry {
  uint32_t message;  // message id on the link
  uint32_t offset;   // byte offset in the activation region
  uint32_t count;    // values (float32, or codes with a grid)
  uint32_t layer;    // the phase: received before layer `layer` runs / sent after layers 0..layer-1
  uint32_t port;     // the UART it arrives on / is sent on (< kMaxPorts)
  uint32_t grid;     // kNoWeights: float32 on the wire, else int8 codes of that grid (1 B a value)
};

struct Layer {
  uint32_t op, activation;
  uint32_t in0, in1, out;  // activation byte offsets (in1: Add's second operand, an in-place conv's float scratch)
  uint32_t c, h, w;        // input shape (one image)
  uint32_t oc, oh, ow;     // output shape
  uint32_t kh, kw, sh, sw, pad_top, pad_left, dh, dw;
  uint32_t group;          // conv groups; avg pool: count_include_pad
  uint32_t weight, bias;   // float offsets into the weight block (bias: kNoWeights = none)
  uint32_t weight_format;  // WeightFormat of Conv / Dense weights (others: kWeightsFloat32)
  uint32_t in0_grid, in1_grid, out_grid;  // how in0 / in1 / out are stored (grids; kNoWeights: float32)
};

static_assert(sizeof(ProgramHeader) == 32 && sizeof(IoEntry) == 24 && sizeof(Layer) == 104,
              "the program layout is fixed: 32-bit words only");

// Bytes a value of a tensor stored on `grid` takes (kNoWeights: float32).
inline uint32_t ValueBytes(uint32_t grid) { return grid >= kInt32Sums ? 4u : 1u; }
inline uint64_t IoBytes(const IoEntry& e) { return uint64_t(e.count) * ValueBytes(e.grid); }

// The steps of x on the grid q = {scale, zero point, qmin, qmax}:
// clamp(round_half_to_even(x / scale), qmin - zp, qmax - zp) as a float
// (q - zero_point of the host's QuantizeToCode, partition/graph/
// quantization.h), without libm: the clamped value is at most 2^32 wide, so
// |v| < 2^23 for 8-bit grids, and rounds half to even by adding and
// subtracting 1.5·2^23 (IEEE single precision in the default rounding
// mode; no -ffast-math here). NaN maps to the zero point.
inline float QuantizeSteps(float x, const float* q) {
  const float lo = q[2] - q[1], hi = q[3] - q[1];
  float v = x / q[0];
  if (!(v == v)) v = 0.0f;
  v = v < lo ? lo : (v > hi ? hi : v);
  if (v > -8388608.0f && v < 8388608.0f) {
    volatile float big = 12582912.0f;  // volatile: the compiler must not fold (v + big) - big into v
    v = (v + big) - big;
  }
  return v;
}
// A value as its stored code (q - qmin) and back.
inline uint8_t EncodeCode(float x, const float* q) {
  return uint8_t(int32_t(QuantizeSteps(x, q)) + int32_t(q[1]) - int32_t(q[2]));
}
inline float DecodeCode(uint8_t code, const float* q) {
  return float(int32_t(code) + int32_t(q[2]) - int32_t(q[1])) * q[0];
}

// A tensor of `count` values between its wire/arena form on `grid` (the
// weight block's index; kNoWeights: float32 bytes) and float32 values: what
// a Linux board's bridge does for the MCU (daemon/cluster/
// worker_mcu_bridge.h), and what host tests read. `weights`: the program's
// weight block (ProgramView::weights).
inline void DecodeTensor(const float* weights, uint32_t grid, const void* bytes, uint32_t count, float* out) {
  if (grid >= kInt32Sums) {  // float32, or int32 sums passed as they are
    memcpy(out, bytes, size_t{count} * 4);
    return;
  }
  const uint8_t* b = static_cast<const uint8_t*>(bytes);
  for (uint32_t i = 0; i < count; ++i) out[i] = DecodeCode(b[i], weights + grid);
}
inline void EncodeTensor(const float* weights, uint32_t grid, const float* values, uint32_t count, void* bytes) {
  if (grid >= kInt32Sums) {
    memcpy(bytes, values, size_t{count} * 4);
    return;
  }
  uint8_t* b = static_cast<uint8_t*>(bytes);
  for (uint32_t i = 0; i < count; ++i) b[i] = EncodeCode(values[i], weights + grid);
}

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
constexpr uint32_t kFirmwareFlashBytes =
    22 * 1024;                                 // code + constants, measured 21 976 B (integer conv kernels, Softmax)
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
// A grid at float `at` of the weight block of `wts` floats: scale > 0
// and finite, qmin <= zero point <= qmax, all small integers held exactly;
// `codes`: a grid activations are stored on (qmax - qmin <= 255).
inline bool GridOk(const float* weights, uint32_t at, uint64_t wts, bool codes) {
  if (!Inside(at, 4, wts)) return false;
  const float* q = weights + at;
  if (!(q[0] > 0.0f) || !(q[0] < 3.0e38f) || !(q[2] >= -2147483520.0f) || !(q[3] <= 2147483520.0f) || !(q[2] <= q[1]) ||
      !(q[1] <= q[3]))
    return false;
  if (!codes) return true;
  for (int k = 1; k < 4; ++k)
    if (float(int32_t(q[k])) != q[k]) return false;
  return q[3] - q[2] <= 255.0f;
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
  if (h->num_inputs > kMaxIo || h->num_outputs > kMaxIo || h->num_layers > 4096 || need != nbytes)
    return kErrProgramTruncated;
  if (uint64_t(h->activation_words) * 4 > ram_bytes) return kErrProgramTooLarge;
  const uint8_t* p = static_cast<const uint8_t*>(bytes) + sizeof(ProgramHeader);
  ProgramView v;
  v.header = h;
  v.inputs = reinterpret_cast<const IoEntry*>(p);
  v.outputs = v.inputs + h->num_inputs;
  v.layers = reinterpret_cast<const Layer*>(v.outputs + h->num_outputs);
  v.weights = reinterpret_cast<const float*>(v.layers + h->num_layers);
  v.bytes = nbytes;
  const uint64_t act = uint64_t(h->activation_words) * 4, wts = h->weight_floats;
  // A tensor of `count` values at byte `offset` stored on `grid`: a valid
  // grid, inside the region, a float tensor 4-byte aligned.
  auto tensor_ok = [&](uint32_t offset, uint64_t count, uint32_t grid) {
    if (grid < kInt32Sums && !GridOk(v.weights, grid, wts, true)) return false;
    return Inside(offset, count * ValueBytes(grid), act) && (grid < kInt32Sums || offset % 4 == 0);
  };
  for (uint32_t i = 0; i < h->num_inputs + h->num_outputs; ++i)
    if (!tensor_ok(v.inputs[i].offset, v.inputs[i].count, v.inputs[i].grid) || v.inputs[i].port >= kMaxPorts)
      return kErrProgramLayer;
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
    const uint64_t in_bytes = in * ValueBytes(l.in0_grid), out_bytes = out * ValueBytes(l.out_grid);
    if (!tensor_ok(l.in0, in, l.in0_grid) || !tensor_ok(l.out, out, l.out_grid) || out == 0) return kErrProgramLayer;
    if (l.op != kOpAdd && l.in1_grid != kNoWeights) return kErrProgramLayer;
    // Sums (kInt32Sums): read by an Add alone, written by an Add of sums or
    // by a conv / dense layer with int8 weights on codes.
    const bool sums_in = l.in0_grid == kInt32Sums, sums_out = l.out_grid == kInt32Sums;
    if (l.in1_grid == kInt32Sums && !sums_in) return kErrProgramLayer;
    if (sums_in && (l.op != kOpAdd || sums_out != (l.in1_grid == kInt32Sums))) return kErrProgramLayer;
    if (sums_out && l.op != kOpAdd &&
        ((l.op != kOpConv && l.op != kOpDense) || l.weight_format != kWeightsInt8 || l.in0_grid == kNoWeights))
      return kErrProgramLayer;
    if (l.activation > kActRelu || !SpatialFits(l)) return kErrProgramLayer;
    if (l.weight_format > kWeightsInt8 || (l.weight_format != kWeightsFloat32 && l.op != kOpConv && l.op != kOpDense))
      return kErrProgramLayer;
    // A conv or a dense layer reads codes only with int8 weights (the
    // firmware has those kernels only).
    if ((l.op == kOpConv || l.op == kOpDense) && l.in0_grid != kNoWeights && l.weight_format != kWeightsInt8)
      return kErrProgramLayer;
    // Those kernels sum in int32, at most 65535 terms of |k · (q − z)| <=
    // 32640 each, which cannot overflow (partition/graph/int8_weights.h
    // kMaxIntegerDotTerms; the builder stores such rows only).
    if ((l.op == kOpConv || l.op == kOpDense) && l.in0_grid != kNoWeights &&
        (l.op == kOpDense ? uint64_t(l.c) * l.h * l.w : uint64_t(l.c / (l.group ? l.group : 1)) * l.kh * l.kw) > 65535)
      return kErrProgramLayer;
    switch (l.op) {
      case kOpConv: {
        if (l.group == 0 || l.c % l.group || l.oc % l.group || l.sh == 0 || l.sw == 0 || l.kh == 0 || l.kw == 0 ||
            l.dh == 0 || l.dw == 0)  // the kernel divides by the stride and the dilation
          return kErrProgramLayer;
        if (!Inside(l.weight, WeightWords(l.weight_format, l.oc, uint64_t(l.c / l.group) * l.kh * l.kw), wts))
          return kErrProgramLayer;
        if (l.bias != kNoWeights && !Inside(l.bias, l.oc, wts)) return kErrProgramLayer;
        if (l.out == l.in0) {  // in place: a kind that can, both stored alike, a float scratch beside the buffer
          const uint64_t scratch = InPlaceScratchFloats(l), buffer = in_bytes > out_bytes ? in_bytes : out_bytes;
          if (scratch == 0 || ValueBytes(l.in0_grid) != ValueBytes(l.out_grid) ||
              !tensor_ok(l.in1, scratch, kNoWeights))
            return kErrProgramLayer;
          if (l.in1 < l.in0 + buffer && l.in0 < l.in1 + scratch * 4) return kErrProgramLayer;
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
        if (out != in) return kErrProgramLayer;
        if (sums_in && !sums_out) {  // requantization: oc multipliers and biases, no in1
          if (!Inside(l.weight, l.oc, wts) || !Inside(l.bias, l.oc, wts) || l.oc == 0) return kErrProgramLayer;
        } else if (!tensor_ok(l.in1, in, l.in1_grid)) {
          return kErrProgramLayer;
        }
        break;
      case kOpCopy:  // disjoint runs
        if (out != in || (l.in0 < l.out + out_bytes && l.out < l.in0 + in_bytes)) return kErrProgramLayer;
        break;
      case kOpQuantize:
        if (out != in || !GridOk(v.weights, l.weight, wts, false)) return kErrProgramLayer;
        break;
      case kOpSoftmax:  // whole rows, not in place (the kernel reads each row twice)
        if (out != in || l.group == 0 || uint32_t(in) % l.group ||  // 32-bit: tensor_ok bounded it by the arena
            (l.in0 < l.out + out_bytes && l.out < l.in0 + in_bytes))
          return kErrProgramLayer;
        break;
      default:
        return kErrProgramLayer;
    }
  }
  *view = v;
  return kErrNone;
}

// Which inputs of the current request are complete: bit i for input i.
struct ReadySet {
  uint32_t words[kMaxIo / 32];
  void Clear() {
    for (uint32_t& w : words) w = 0;
  }
  void Set(uint32_t i) { words[i >> 5] |= 1u << (i & 31); }
  bool Has(uint32_t i) const { return (words[i >> 5] >> (i & 31) & 1u) != 0; }
};

// Whether every input of a layer <= `layer` has arrived.
inline bool InputsReadyFor(const ProgramView& p, const ReadySet& ready, uint32_t layer) {
  for (uint32_t i = 0; i < p.header->num_inputs && p.inputs[i].layer <= layer; ++i)
    if (!ready.Has(i)) return false;
  return true;
}

}  // namespace tessera::mcu
