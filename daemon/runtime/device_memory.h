// The memory a Linux worker holds for one device program, computed by the
// worker's own code (issue 11 item 4: "the planner's per-device RAM is what
// the worker allocates"). PreparedProgram sizes the program exactly as the
// worker prepares it when it loads (same kernels, same packed weight forms,
// same device-arena layout by liveness, METHODS §6), but reads no weight
// values and allocates nothing, so the planner can size a shapes-only model.
//
//   RAM(device) = kWorkerBaselineBytes                     (the daemon itself)
//               + max( weights as the kernels store them   (held once)
//                      + compute_slots × working memory    (shared by requests)
//                      + in_flight × (pipeline buffers     (one set per request)
//                                     + request I/O)       (model inputs/outputs
//                                                           as messages, 3 copies)
//                      + peers × kLinkBytesPerPeer,        (tensor frames in flight)
//                      weights held while loading )        (forms so far + one block)
//
// Working memory and pipeline buffers are the two parts of the device arena
// (program_runner.h, issue 18 item 2): a request holds the working memory
// only while it computes a run of steps between two sends or receives; what
// it keeps across a send or receive (received tiles, a stage's output on its
// way out, model inputs and outputs) is its own pipeline buffers.
//
// The second term: a worker decodes its program from a file and leaves the
// weights there; each kernel reads its weight as it prepares, a block of
// 1 MiB (with its transform) at a time when it packs it (issue 11 item 2;
// ExecutorOptions::streamed_constants), the tiles of an FFMT stack from
// the same place in the file. A kernel that repacks without streaming
// (ConvTranspose, LayerNorm) holds one layer's raw weights beside its
// form (PreparedProgram::load_peak_bytes, RunnerOptions::streamed_load).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "partition/compile/device_program.h"
#include "util/status.h"

namespace tessera {

// What a `tessera worker` process holds besides the program's weights,
// arena and request I/O: code, gRPC's threads and buffers, thread stacks,
// malloc arenas and fragmentation, the Exchange inbox. Measured as a worker's
// peak RSS (VmHWM) after deploy and 3 requests minus the rest of its promise,
// on x86-64 Debian 12 (release build, --threads 1): 26-34 MiB over
// yolov2-tiny on 1 and 4 workers and YOLOv2 608² on 1
// (bench/memory/measure.py). tests/integration/memory_promise.sh measures
// it again on every CI run and fails if the median leaves [0.5, 1.15] x this.
inline constexpr int64_t kWorkerBaselineBytes = 32ll << 20;

// What a worker's link to one peer holds outside the device arena while
// tensors move: each way, about two frames of kExchangeFrameBytes (64 KiB,
// transport/grpc/grpc_channel.h; daemon/cluster/worker.cc
// static_asserts the tie) on each
// end: the frame's own copy and gRPC's serialized or received message.
// Measured as the growth of peak RSS over the promise with the number of
// peers: YOLOv2 608² on 6 emulated devices (memory plan, every device
// exchanging with every other) peaked up to 0.43 MiB over a promise
// without this term, 4 devices (3 peers) 0.7-3.2 MiB under.
inline constexpr int64_t kLinkFrameBytes = 64 << 10;
inline constexpr int64_t kLinkBytesPerPeer = 4 * kLinkFrameBytes;

struct DeviceMemory {
  int device = 0;
  int64_t weight_bytes = 0;    // weights as stored by the kernels (packed, Winograd-transformed)
  int64_t arena_bytes = 0;     // one request's device arena: working_bytes + buffer_bytes
  int64_t working_bytes = 0;   // one working memory (shared by the requests in flight)
  int64_t buffer_bytes = 0;    // one request's pipeline buffers
  int64_t baseline_bytes = kWorkerBaselineBytes;
  int in_flight = 1;           // requests a worker runs at once (pipeline buffers each)
  int compute_slots = 1;       // working memories (RunnerOptions::compute_slots)
  int64_t load_peak_bytes = 0; // weights held at once while the program loads
  // Model inputs/outputs this device receives or answers (the source
  // device): the gRPC message, its parsed tensor and the TensorData each
  // hold a copy while a request runs.
  int64_t io_bytes = 0;
  // Tensor frames in flight on the links to its peers (the devices its
  // Send and Recv steps name): peers × kLinkBytesPerPeer.
  int64_t link_bytes = 0;
  // One request's live bytes at each step of the program (its buffers alive
  // there + the step's own working memory; PreparedProgram::live_bytes): what
  // the one-device memory flow reads its critical values and ties from.
  std::vector<int64_t> step_live_bytes;
  int64_t request_bytes() const { return buffer_bytes + io_bytes; }  // each request in flight
  int64_t serving_bytes() const {
    return weight_bytes + compute_slots * working_bytes + in_flight * request_bytes() + link_bytes;
  }
  int64_t total_bytes() const { return baseline_bytes + std::max(serving_bytes(), load_peak_bytes); }
};

struct DeviceMemoryOptions {
  int threads = 1;    // the worker's --threads (scratch per thread)
  int in_flight = 1;  // requests at once on the worker
  int compute_slots = 1;  // the worker's --compute-slots
};

// Sizes one device program as a worker would hold it. The program's weights
// may have no values (a shapes-only model). Fails, naming the device and
// node, where the worker would refuse the program.
Result<DeviceMemory> SizeDeviceProgram(const DeviceProgram& program, const DeviceMemoryOptions& options);

// "123.4 MiB (weights 80.0 + arena 19.4 + baseline 24.0)": for tables and errors.
std::string DescribeDeviceMemory(const DeviceMemory& memory);

// The largest number of requests in flight whose memory fits `ram_bytes`
// (0 when not even one does).
int InFlightThatFits(const DeviceMemory& memory, int64_t ram_bytes);

}  // namespace tessera
