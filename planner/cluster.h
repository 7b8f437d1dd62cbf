// The cluster model (ARCHITECTURE.md "Cluster file"): devices with memory,
// clock and cycles per MAC, and the links between them. Loaded from a YAML
// cluster file, or made up for `--devices N`.
//
// Cluster file:
//   devices:
//     - name: pi1                 # unique
//       kind: linux               # linux | mcu (default: mcu when `serial` is given)
//       preset: RPi4-4GB          # optional: ram/flash/clock/CpM from a preset file
//       address: 10.0.0.11:7070   # linux: gRPC endpoint
//       ram: 4GiB                 # largest live buffers
//       flash: 32GiB              # storage for weights
//       cpu_hz: 1.5e9             # with cycles_per_mac ...
//       cycles_per_mac: 0.4
//       # macs_per_s: 3.7e9       # ... or a measured rate instead
//       # macs_per_s_by_kind:     # measured per op kind (`tessera calibrate`);
//       #   { conv: 9e9, conv1x1: 7e9, depthwise: 1.5e9, dense: 4e9, pool: 2e9, elementwise: 1e9 }
//       #                         # a kind not listed runs at macs_per_s
//     - name: mcu1
//       preset: STM32F446RE
//       serial: /dev/ttyUSB0      # mcu: port on the `via` device
//       baud: 115200              # makes the mcu<->via link (UART 8N1)
//       via: pi1
//       address: 10.0.0.11:7071   # optional: where pi1's worker serves mcu1
//                                 # (tessera worker --mcu mcu1=/dev/ttyUSB0@115200,listen=0.0.0.0:7071)
//   links:
//     default: { bandwidth: 1Gbit/s, latency: 0.2ms }
//     pairs:
//       - { between: [pi1, pi2], bandwidth: 100Mbit/s, latency: 1ms }
//       # Two MCUs joined UART-to-UART (issue 16 item 4, METHODS §5's
//       # microcontroller chains): bandwidth in baud; tensors between them
//       # never pass through a Linux board. `ports`: which UART of each
//       # (1 or 2: UART1/UART2; UART0 is the one to `via`); default: each
//       # MCU's direct links take UART1, then UART2, in the order listed.
//       - { between: [mcu1, mcu2], bandwidth: 115200baud, ports: [1, 1] }
//     # The cable between the gateway and the devices (every request's
//     # input goes in and its answer comes back over it): a map like
//     # `default`, or `none` when the gateway runs on the source device.
//     # Absent: the default link (the gateway is another box on the network).
//     gateway: { bandwidth: 1Gbit/s, latency: 0.2ms }
//
// A pair without an entry uses `default`, except that an mcu with `via`
// reaches everyone through its via device (two hops). Presets are looked up
// by name in every *.yaml under the preset directories (PresetDirectories).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "partition/graph/metrics.h"
#include "util/status.h"

namespace tessera {

inline constexpr int64_t kUnlimitedBytes = std::numeric_limits<int64_t>::max();

enum class DeviceKind { kLinux, kMcu };
const char* DeviceKindName(DeviceKind kind);

struct Device {
  std::string name;
  DeviceKind kind = DeviceKind::kLinux;
  std::string preset;   // preset name used, if any
  std::string address;  // linux: host:port
  std::string serial;   // mcu: serial port
  int64_t baud = 0;     // mcu: UART rate
  std::string via;      // mcu: the linux device it hangs off
  int64_t ram_bytes = kUnlimitedBytes;
  int64_t flash_bytes = kUnlimitedBytes;
  double macs_per_s = 0;  // cpu_hz / cycles_per_mac, or measured
  double cpu_hz = 0;
  double cycles_per_mac = 0;
  // Measured rate per OpKind (macs_per_s_by_kind); 0 = not given, the kind
  // runs at macs_per_s. Index 0 (kOther) is always 0.
  std::array<double, kOpKinds> kind_macs_per_s{};
  // The CPU this device's network stack (kernel TCP, gRPC, copies) spends on
  // each byte it sends or receives, in MACs of its own compute: a byte costs
  // net_macs_per_byte / macs_per_s seconds of the device's time on top of the
  // wire time. 0 (the default) = free. Measured by bench/cluster-emulated.
  double net_macs_per_byte = 0;
  // The CPU this device spends on each request it serves as the source
  // (device 0: the gateway's call with the model's inputs, decoding them,
  // the answer's reply), beyond its layers and the network stack's per-byte
  // cost, in MACs of its own compute. 0 (the default) = free. Measured by
  // bench/cluster-emulated (request_cost).
  double request_macs = 0;

  // The rate layers of `kind` run at on this device.
  double MacsPerSecond(OpKind kind) const {
    const double r = kind_macs_per_s[static_cast<int>(kind)];
    return r > 0 ? r : macs_per_s;
  }
  // The highest of its rates: bounds that must not overestimate any
  // layer's time (the placement searches) divide by this.
  double FastestMacsPerSecond() const {
    double r = macs_per_s;
    for (double k : kind_macs_per_s) r = std::max(r, k);
    return r;
  }
  // METHODS §5: L_ij = MAC_j · CpM_i / f_i, with f_i / CpM_i the measured
  // rate of layer j's kind when the device file gives one.
  double ComputeSeconds(int64_t macs, OpKind kind = OpKind::kOther) const {
    return static_cast<double>(macs) / MacsPerSecond(kind);
  }
  // The device time its network stack spends on `bytes` sent or received.
  double NetworkCpuSeconds(double bytes) const {
    return net_macs_per_byte > 0 && macs_per_s > 0 ? bytes * net_macs_per_byte / macs_per_s : 0.0;
  }
  // The source's CPU for one request of `bytes` in and out: the network
  // stack's per-byte cost plus the fixed cost of serving it (request_macs).
  double RequestCpuSeconds(double bytes) const {
    return NetworkCpuSeconds(bytes) + (request_macs > 0 && macs_per_s > 0 ? request_macs / macs_per_s : 0.0);
  }
  // One pipeline stage's share of the period, from its compute time and the
  // wire time of what it sends each inference. METHODS §5 adds the two: the
  // device's CPU drives its link. A device that declares its network
  // stack's CPU (net_macs_per_byte > 0, a measured transport) has that CPU
  // in compute_s already, and its kernel carries the bytes on the cable
  // while the CPU computes the next inference: the stage lasts the longer
  // of the two. Measured on the emulated cluster (bench/cluster-emulated,
  // MobileNetV2's throughput plan on 4 devices at 100 Mbit/s, three runs):
  // 10.6-11.8 requests/s against 7.85 predicted with the sum.
  double StageSeconds(double compute_s, double send_s) const {
    return net_macs_per_byte > 0 ? std::max(compute_s, send_s) : compute_s + send_s;
  }
  // The longest compute time that keeps StageSeconds(compute, send_s)
  // within `period_s`.
  double StageComputeLimit(double period_s, double send_s) const {
    return net_macs_per_byte > 0 ? period_s : period_s - send_s;
  }
  // Same memory and speed (every kind); links are the cluster's.
  bool SameCapacity(const Device& o) const {
    return ram_bytes == o.ram_bytes && flash_bytes == o.flash_bytes && macs_per_s == o.macs_per_s &&
           kind_macs_per_s == o.kind_macs_per_s && net_macs_per_byte == o.net_macs_per_byte;
  }
};

struct LinkSpec {
  double bytes_per_s = 0;  // payload rate (UART: baud/10)
  double latency_s = 0;    // per message
  bool uart = false;
  // A direct MCU<->MCU UART: the port on the pair's lower-index device and
  // on the higher one (1..kMaxMcuLinkPort). 0: not a direct MCU link.
  int mcu_port_low = 0, mcu_port_high = 0;
};
// UART1 and UART2 of an MCU board can join other MCUs (firmware/main.cc).
inline constexpr int kMaxMcuLinkPort = 2;

class Cluster {
 public:
  std::vector<Device> devices;
  std::string origin;  // file name, or "--devices N"
  // `models:` of the cluster file: the model files it serves, merged into
  // one graph with shared layers (partition/graph/merge_models.h), the
  // first as the main model. LoadClusterFile makes relative paths relative
  // to the cluster file. Used by `tessera gateway` / `deploy` without --model.
  std::vector<std::string> models;

  int size() const { return static_cast<int>(devices.size()); }
  // Index of a device by name, -1 when absent.
  int Find(const std::string& name) const;
  // METHODS §5: T_ih = bytes / bandwidth_ih (+ per-message latency), through
  // the `via` device for an mcu without a direct link. 0 for from == to.
  double TransferSeconds(int from, int to, int64_t bytes) const;
  // Effective payload rate between two devices (for tables).
  double BytesPerSecond(int from, int to) const;
  // True when every device has the same memory, speed and links (splits even).
  bool Homogeneous() const;
  // The UART of MCU `from` that joins it directly to MCU `to`, or 0 when the
  // two are not joined UART-to-UART (their traffic goes through `via`).
  int McuPort(int from, int to) const;

  // Seconds the gateway's link takes to carry `bytes` of one request (its
  // input in, its answer out: two messages): links.gateway, else the
  // default link, else 0 (no link to price; `gateway: none` says the
  // gateway runs on the source device).
  double GatewaySeconds(int64_t bytes) const;
  // The gateway link's payload rate in bytes/s, 0 when it is not priced.
  double GatewayBytesPerSecond() const;

  // Filled by the loader. Direct links by ordered pair (a < b).
  std::map<std::pair<int, int>, LinkSpec> links;
  bool has_default_link = false;
  LinkSpec default_link;
  // links.gateway: set (a link, or none = gateway_local) or absent.
  bool has_gateway_link = false, gateway_local = false;
  LinkSpec gateway_link;

 private:
  // The direct link between two devices, or nullptr (then: route via).
  const LinkSpec* DirectLink(int a, int b) const;
};

// Directories searched for device presets, in order: $TESSERA_SHARED_DIR/devices,
// <repo>/../shared/devices, <repo>/configs/devices, and next to the binary
// (<bin>/devices, <bin>/../share/tessera/devices). Only existing ones.
std::vector<std::string> PresetDirectories();

// Parses a cluster file. Every mistake (unknown key, duplicate name, bad
// unit, missing link, unknown preset) is one line "file:line: what; how to
// fix"; all of them are returned together in one InvalidArgument.
// `preset_dirs` empty = PresetDirectories() plus <file dir>/devices.
Result<Cluster> LoadClusterFile(const std::string& path, std::vector<std::string> preset_dirs = {});
Result<Cluster> ParseCluster(const std::string& yaml_text, const std::string& origin,
                             const std::vector<std::string>& preset_dirs);

// `--devices N`: N identical linux devices with unlimited memory, each a
// Raspberry Pi 4 class CPU (1.5 GHz, 0.4 cycles per MAC), 1 Gbit/s links.
Cluster UniformCluster(int n);

}  // namespace tessera
