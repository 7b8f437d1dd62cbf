// `tessera demo --mcu N`: the mixed Linux + MCU cluster (issue 6, issue 16 item 6).
//
// Two worker processes w1, w2 on loopback; two QEMU mps2-an386 machines run
// the MCU firmware with their UART0 on a pty; w1 owns mcu1 and w2 owns mcu2
// (`tessera worker --mcu NAME=PTY`), exactly the shape of
// configs/mixed-2linux-2mcu.yaml (written here with the real addresses and
// ptys). The keyword-spotting CNN is placed by planner/mixed_placement.h: the
// planner's latency plan when it gives every MCU a layer, else the fastest
// contiguous whole-layer pipeline that does.
// --mcu-chain joins the MCUs UART-to-UART in a chain (issue 16 item 4):
// UART1 of mcuK to UART2 of mcuK+1 through a Unix socket between the two
// QEMUs (no Linux board in between), described in the cluster file as
// direct links that the planner prices and the MCU programs use.
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <numeric>
#include <thread>

#include "daemon/cli/cli.h"
#include "daemon/cli/cli_demo.h"
#include "daemon/cli/cli_model_options.h"
#include "daemon/cli/demo_support.h"
#include "daemon/cluster/gateway.h"
#include "daemon/cluster/gateway_plan.h"
#include "daemon/cluster/mcu_direct_links.h"
#include "partition/compile/forced_plan.h"
#include "partition/compile/mcu_program_builder.h"
#include "partition/compile/program_compiler.h"
#include "planner/cluster.h"
#include "planner/mixed_placement.h"
#include "transport/wire/mcu_program.h"

namespace tessera {

namespace {

constexpr const char* kWhat = "demo --mcu";
constexpr uint32_t kBaud = 115200;

struct MixedCluster {
  Cluster cluster;
  std::vector<WorkerEndpoint> endpoints;  // per device; an MCU's is its bridge's address
};

// Exit 77 with a hint when QEMU or the firmware is missing; 0 when both are there.
int CheckEmulator(std::string* firmware) {
  if (!demo::QemuInstalled()) {
    std::fprintf(stderr, "demo --mcu: qemu-system-arm is not installed (deploy/install-deps.sh installs "
                         "qemu-system-arm); cannot emulate the MCUs\n");
    return 77;
  }
  *firmware = demo::FindMcuFirmware();
  if (firmware->empty() || !std::filesystem::exists(*firmware)) {
    std::fprintf(stderr, "demo --mcu: the MCU firmware %s is missing; build it with `cmake --build <build> --target "
                         "tessera_firmware` (needs gcc-arm-none-eabi) or set TESSERA_MCU_FIRMWARE\n",
                 firmware->c_str());
    return 77;
  }
  return 0;
}

// The MCU bridges' addresses the workers wrote after their own (NAME=ADDRESS lines).
Result<std::map<std::string, std::string>> ReadBridgeAddresses(const std::string& dir, int mcus) {
  std::map<std::string, std::string> mcu_address;
  for (int w = 1; w <= 2; ++w) {
    std::ifstream in(dir + "/w" + std::to_string(w) + ".port");
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line))
      if (const size_t eq = line.find('='); eq != std::string::npos) mcu_address[line.substr(0, eq)] = line.substr(eq + 1);
  }
  for (int m = 1; m <= mcus; ++m)
    if (!mcu_address.count("mcu" + std::to_string(m)))
      return Status::Unavailable("the workers did not report the bridge of mcu" + std::to_string(m) + " (see " + dir +
                                 ")");
  return mcu_address;
}

// Boots `mcus` MCUs and the two workers that own them (mcu1 via w1, mcu2
// via w2, mcu3 via w1, ...); the cluster of configs/mixed-2linux-2mcu.yaml
// with this run's addresses and ptys. `preset` ("": STM32H743ZI and
// STM32F446RE in turn) sets every MCU's flash, RAM and speed.
// `chain`: UART1 of mcuK joined to UART2 of mcuK+1 (a Unix socket
// between the two QEMUs; mcuK listens, mcuK+1 connects).
Result<MixedCluster> StartMixedCluster(const std::string& firmware, const std::string& dir, int threads, int mcus,
                                       const std::string& preset, bool chain) {
  std::vector<std::string> ptys;
  auto socket_of = [&](int m) {
    return dir + "/uart-mcu" + std::to_string(m) + "-mcu" + std::to_string(m + 1) + ".sock";
  };
  for (int m = 1; m <= mcus; ++m) {
    const bool next = chain && m < mcus, prev = chain && m > 1;
    const std::vector<std::string> serials = {next ? "unix:" + socket_of(m) + ",server=on,wait=off" : "null",
                                              prev ? "unix:" + socket_of(m - 1) : "null"};
    TS_ASSIGN_OR_RETURN(std::string pty,
                        demo::BootQemuMcu(firmware, dir + "/qemu-mcu" + std::to_string(m) + ".log", serials));
    ptys.push_back(pty);
    if (next) {  // the next board connects to this one's socket
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!std::filesystem::exists(socket_of(m)) && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (!std::filesystem::exists(socket_of(m)))
        return Status::DeadlineExceeded("QEMU of mcu" + std::to_string(m) + " did not open its UART1 socket " +
                                        socket_of(m) + " within 10 s");
    }
  }
  const std::string baud = std::to_string(kBaud);
  std::vector<std::vector<std::string>> worker_args(2);
  for (int m = 1; m <= mcus; ++m) {
    worker_args[(m - 1) % 2].push_back("--mcu");
    worker_args[(m - 1) % 2].push_back("mcu" + std::to_string(m) + "=" + ptys[m - 1] + "@" + baud);
  }
  TS_ASSIGN_OR_RETURN(auto addresses, demo::StartWorkers(2, dir, threads, worker_args));
  TS_ASSIGN_OR_RETURN(auto mcu_address, ReadBridgeAddresses(dir, mcus));
  const std::string linux_board = ", ram: 1GiB, flash: 4GiB, cpu_hz: 1.5e9, cycles_per_mac: 0.4 }\n";
  std::string yaml =
      "devices:\n"
      "  - { name: w1, kind: linux, address: " +
      addresses[0] + linux_board + "  - { name: w2, kind: linux, address: " + addresses[1] + linux_board;
  for (int m = 1; m <= mcus; ++m)
    yaml += "  - { name: mcu" + std::to_string(m) +
            ", kind: mcu, preset: " + (preset.empty() ? (m % 2 ? "STM32H743ZI" : "STM32F446RE") : preset) +
            ", serial: " + ptys[m - 1] + ", baud: " + baud + ", via: w" + std::to_string((m - 1) % 2 + 1) + " }\n";
  yaml +=
      "links:\n"
      "  default: { bandwidth: 10Gbit/s, latency: 20us }\n";
  if (chain && mcus > 1) {
    yaml += "  pairs:\n";
    for (int m = 1; m < mcus; ++m)
      yaml += "    - { between: [mcu" + std::to_string(m) + ", mcu" + std::to_string(m + 1) + "], bandwidth: " + baud +
              "baud, ports: [1, 2] }\n";
  }
  MixedCluster mc;
  TS_ASSIGN_OR_RETURN(mc.cluster, ParseCluster(yaml, "mixed demo cluster", PresetDirectories()));
  for (const auto& dev : mc.cluster.devices)
    mc.endpoints.push_back({dev.name, dev.kind == DeviceKind::kMcu ? mcu_address[dev.name] : dev.address});
  return mc;
}

// The layers of `placement` on its devices (whole, or an --mcu-only stem
// in row tiles); the plan id names them.
Result<CompiledPlan> CompileMixedPlan(const Graph& graph, const MixedCluster& mc, const MixedPlacement& placement,
                                      std::string* plan_id) {
  const PartitionPlan pp = MixedPartitionPlan(placement, mc.cluster.size());
  // Runs of layers cut alike: "mixed-mcu1+mcu2:ffmt9-mcu3:40-..." (devices, scheme, layers).
  *plan_id = "mixed";
  for (size_t j = 0; j < pp.layers.size();) {
    const LayerAssignment& a = pp.layers[j];
    size_t end = j + 1;
    while (end < pp.layers.size() && pp.layers[end].devices == a.devices && pp.layers[end].scheme == a.scheme) ++end;
    std::string devices;
    for (int d : a.devices) devices += (devices.empty() ? "" : "+") + mc.cluster.devices[d].name;
    *plan_id += "-" + devices + ":" + (a.scheme == LayerScheme::kWhole ? "" : LayerSchemeName(a.scheme)) +
                std::to_string(end - j);
    j = end;
  }
  return CompilePlan(graph, pp, McuCompileOptions(mc.cluster));
}

// --force SCHEME: every layer the scheme can cut split over all four
// devices, the MCUs included (issue 16 item 4: FFMT tiles and FDT slices on
// MCUs, run in phases); the rest whole on w1. Not the planner's choice, so
// no predicted latency.
Result<CompiledPlan> CompileForcedMixedPlan(const Graph& graph, const MixedCluster& mc, const std::string& scheme_name,
                                            std::string* plan_id, MixedPlacement* placement, std::string* text) {
  TS_ASSIGN_OR_RETURN(ForcedScheme scheme, ParseForcedScheme(scheme_name));
  ForcedPlanOptions fo;
  fo.devices = mc.cluster.size();
  fo.grid_rows = fo.devices;
  TS_ASSIGN_OR_RETURN(PartitionPlan pp, MakeForcedPlan(graph, scheme, fo));
  *plan_id = "mixed-forced-" + scheme_name;
  placement->forced = true;
  placement->note = "forced " + scheme_name + " over every device (--force; not the planner's plan, no prediction)";
  for (size_t j = 0; j < graph.nodes.size() && j < pp.layers.size(); ++j) {
    const LayerAssignment& a = pp.layers[j];
    std::string devices;
    for (int d : a.devices) devices += (devices.empty() ? "" : "+") + mc.cluster.devices[d].name;
    *text += (j ? ", " : "") + graph.nodes[j].name + ":" + LayerSchemeName(a.scheme) + "@" + devices;
  }
  return CompilePlan(graph, pp, McuCompileOptions(mc.cluster));
}

// The MCU's own figures from its STATUS frame, through the owning worker
// (Worker.GetStatus of the bridge).
void AddMcuStatus(const std::string& bridge_address, nlohmann::json* row) {
  const auto reply = demo::WorkerStatus(bridge_address);
  if (!reply) return;
  const proto::McuState& m = reply->mcu();
  (*row)["mcu_status_present"] = reply->has_mcu();
  (*row)["mcu_arena_bytes"] = m.arena_bytes();
  (*row)["mcu_free_ram_bytes"] = m.free_bytes();
  (*row)["mcu_flash_bytes"] = m.flash_bytes();  // program and weights, in flash (issue 16 item 3)
  (*row)["mcu_flash_free_bytes"] = m.flash_free_bytes();
  (*row)["mcu_firmware_ram_bytes"] = m.firmware_ram_bytes();  // measured: static RAM and stack high-water mark
  (*row)["mcu_stack_peak_bytes"] = m.stack_peak_bytes();
  (*row)["mcu_used_bytes"] = reply->memory_bytes();
  (*row)["mcu_runs"] = m.runs();
  (*row)["mcu_last_run_ms"] = m.last_run_ms();
  (*row)["mcu_plan_id"] = m.plan_id();
  (*row)["uart_wire_bytes_sent"] = reply->uart().wire_bytes_sent();
  (*row)["uart_wire_bytes_received"] = reply->uart().wire_bytes_received();
  (*row)["uart_retransmissions"] = reply->uart().retransmissions();
  (*row)["mcu_port_payload_sent"] = std::vector<uint32_t>(m.port_payload_sent().begin(), m.port_payload_sent().end());
  (*row)["mcu_port_payload_received"] =
      std::vector<uint32_t>(m.port_payload_received().begin(), m.port_payload_received().end());
}

// Every direct MCU<->MCU link the programs use: the payload bytes its Sends
// carry per request times the answered requests (expected), against what
// the sending MCU's STATUS says it sent on that UART and the receiving
// one's says it received (both counted since boot: the demo boots them).
// *as_expected: every link's three figures agree.
nlohmann::json MixedDirectLinks(const MixedCluster& mc, const std::vector<DeviceProgram>& programs,
                                const nlohmann::json& memory, int answered, bool* as_expected) {
  *as_expected = true;
  // Per link: payload bytes per request, and the values they hold (a
  // tensor of int8 codes takes 1 B a value, mcu_program.h version 5).
  std::map<std::pair<int, int>, int64_t> per_request, values;
  for (const DeviceProgram& p : programs) {
    const McuFusions fusions = FuseMcuQuantizeSteps(p);
    for (const ProgramStep& s : p.steps)
      if (s.kind == StepKind::kSend && s.uart_port > 0) {
        per_request[{p.device, s.peer}] += McuWireBytes(p, fusions, s);
        values[{p.device, s.peer}] += s.src_box.volume();
      }
  }
  auto port_count = [&](int device, const char* key, int port) -> int64_t {
    const auto& row = memory.at(device);
    if (!row.contains(key) || static_cast<int>(row[key].size()) <= port) return -1;
    return row[key][port].get<int64_t>();
  };
  nlohmann::json links = nlohmann::json::array();
  for (const auto& [pair, bytes] : per_request) {
    const int from_port = mc.cluster.McuPort(pair.first, pair.second);
    const int to_port = mc.cluster.McuPort(pair.second, pair.first);
    const int64_t expected = bytes * answered;
    const int64_t sent = port_count(pair.first, "mcu_port_payload_sent", from_port);
    const int64_t received = port_count(pair.second, "mcu_port_payload_received", to_port);
    const bool ok = sent == expected && received == expected;
    *as_expected = *as_expected && ok;
    links.push_back({{"from", mc.cluster.devices[pair.first].name},
                     {"to", mc.cluster.devices[pair.second].name},
                     {"from_uart", from_port},
                     {"to_uart", to_port},
                     {"expected_payload_bytes", expected},
                     {"values", values[pair] * answered},
                     {"sent_payload_bytes", sent},
                     {"received_payload_bytes", received},
                     {"as_expected", ok}});
  }
  return links;
}

// Each MCU's flash and RAM: promised (its program built here), the preset's,
// and what its STATUS reports (flash: the region's used bytes; RAM: the
// arena's). *as_promised: every MCU reports exactly its promise.
nlohmann::json MixedMemory(const MixedCluster& mc, const std::vector<DeployedDevice>& deployed,
                           const std::map<int, McuProgramImage>& promises, bool* as_promised) {
  *as_promised = true;
  nlohmann::json mem = nlohmann::json::array();
  for (size_t i = 0; i < mc.endpoints.size(); ++i) {
    const auto& dev = mc.cluster.devices[i];
    nlohmann::json row = {{"device", dev.name},
                          {"kind", DeviceKindName(dev.kind)},
                          {"address", mc.endpoints[i].address},
                          {"memory_bytes", deployed[i].memory_bytes},
                          {"weight_bytes", deployed[i].weight_bytes},
                          {"program_bytes", deployed[i].program_bytes}};
    if (dev.kind == DeviceKind::kMcu) {
      row["via"] = dev.via;
      row["serial"] = dev.serial;
      AddMcuStatus(mc.endpoints[i].address, &row);
      const McuProgramImage& promise = promises.at(static_cast<int>(i));
      row["preset"] = dev.preset;
      // The board's flash and RAM, what the tessera firmware takes of them
      // and the rest, which the program was planned into (planner/cluster.cc).
      row["preset_flash_bytes"] = dev.flash_bytes + int64_t{mcu::kFirmwareFlashBytes};
      row["preset_ram_bytes"] = dev.ram_bytes + int64_t{mcu::kFirmwareRamBytes};
      row["firmware_flash_bytes"] = mcu::kFirmwareFlashBytes;
      row["firmware_ram_bytes"] = mcu::kFirmwareRamBytes;
      row["program_flash_bytes_available"] = dev.flash_bytes;
      row["program_ram_bytes_available"] = dev.ram_bytes;
      row["promised_flash_bytes"] = promise.flash_bytes();
      row["promised_ram_bytes"] = promise.ram_bytes();
      // Conv / dense layers whose weights the program holds as int8 codes
      // (a QDQ model's: partition/graph/int8_weights.h); the rest float32.
      row["int8_weight_layers"] = promise.int8_weight_layers;
      row["int8_activation_tensors"] = promise.int8_activation_tensors;
      if (row.contains("mcu_flash_bytes")) {
        row["reported_flash_bytes"] =
            row["mcu_flash_bytes"].get<int64_t>() - row["mcu_flash_free_bytes"].get<int64_t>();
        row["reported_ram_bytes"] = row["mcu_arena_bytes"].get<int64_t>() - row["mcu_free_ram_bytes"].get<int64_t>();
      }
      const bool kept = row.contains("reported_flash_bytes") &&
                        row["reported_flash_bytes"].get<int64_t>() == static_cast<int64_t>(promise.flash_bytes()) &&
                        row["reported_ram_bytes"].get<int64_t>() == static_cast<int64_t>(promise.ram_bytes());
      // The firmware's share, measured on the MCU, within what the planner reserved for it.
      const bool firmware_within =
          row.contains("mcu_firmware_ram_bytes") &&
          row["mcu_firmware_ram_bytes"].get<int64_t>() <= int64_t{mcu::kFirmwareStaticRamBytes} &&
          row["mcu_stack_peak_bytes"].get<int64_t>() > 0 &&
          row["mcu_stack_peak_bytes"].get<int64_t>() <= int64_t{mcu::kFirmwareStackBytes};
      row["firmware_within_budget"] = firmware_within;
      row["memory_as_promised"] = kept && firmware_within;
      *as_promised = *as_promised && kept && firmware_within;
    }
    mem.push_back(row);
  }
  return mem;
}

nlohmann::json MixedLinks(Gateway& gateway, const MixedCluster& mc,
                          std::map<std::pair<int, int>, int64_t> expected_link_bytes, int answered) {
  gateway.RefreshWorkerState();
  nlohmann::json links = nlohmann::json::array();
  for (const auto& l : gateway.Links()) {
    const auto key = std::make_pair(l.from, l.to);
    const int64_t expected = expected_link_bytes.count(key) ? expected_link_bytes[key] * answered : 0;
    const bool uart = mc.cluster.devices[l.from].kind == DeviceKind::kMcu ||
                      mc.cluster.devices[l.to].kind == DeviceKind::kMcu;
    links.push_back({{"from", mc.endpoints[l.from].name},
                     {"to", mc.endpoints[l.to].name},
                     {"payload_bytes", l.payload_bytes},
                     {"wire_bytes", l.wire_bytes},
                     {"expected_payload_bytes", expected},
                     {"over_uart", uart}});
  }
  return links;
}

struct MixedReport {
  demo::RequestTally tally;
  double deploy_s = 0, single_ms = 0;
  std::string plan_id, placement_text;
  nlohmann::json memory, links, direct_links;
  bool memory_as_promised = false;  // every MCU's STATUS flash and RAM == its program's, its firmware within budget
  bool direct_as_expected = true;   // every direct MCU<->MCU link carried what the programs send
};

void PrintMixedJson(const Graph& graph, const DemoOptions& d, const MixedPlacement& placement, const MixedReport& r,
                    int devices) {
  nlohmann::json j = {
      {"devices", devices},
      {"linux_workers", 2},
      {"mcus", d.mcu},
      {"mcu_memory_as_promised", r.memory_as_promised},
      {"model", graph.name},
      {"requests", d.requests},
      {"answered", r.tally.answered},
      {"all_match", r.tally.AllMatch(d.requests)},
      {"max_rel_diff", r.tally.max_rel},
      {"max_diff_output_steps", r.tally.max_steps},
      {"latency_ms", demo::Median(r.tally.latencies_ms)},
      {"predicted_latency_ms",
       placement.cost.latency_s > 0 ? nlohmann::json(placement.cost.latency_s * 1e3) : nlohmann::json(nullptr)},
      {"single_device_latency_ms", r.single_ms},
      {"plan_id", r.plan_id},
      {"forced_pipeline", placement.forced && d.force.empty()},
      {"forced_scheme", d.force.empty() ? nlohmann::json(nullptr) : nlohmann::json(d.force)},
      {"placement_note", placement.note},
      {"placement", r.placement_text},
      {"deploy_seconds", r.deploy_s},
      {"device_memory", r.memory},
      {"links", r.links},
      {"mcu_chain", d.mcu_chain},
      {"mcu_only", d.mcu_only},
      {"direct_links", r.direct_links},
      {"direct_links_as_expected", r.direct_as_expected}};
  if (!r.tally.first_error.empty()) j["error"] = r.tally.first_error;
  std::printf("%s\n", j.dump(1).c_str());
}

void PrintMixedDevices(const MixedReport& r) {
  std::printf("%-6s %-6s %-22s %12s %12s %14s\n", "device", "kind", "address", "weights B", "memory B",
              "MCU free RAM B");
  for (const auto& row : r.memory)
    std::printf("%-6s %-6s %-22s %12lld %12lld %14s\n", row["device"].get<std::string>().c_str(),
                row["kind"].get<std::string>().c_str(), row["address"].get<std::string>().c_str(),
                static_cast<long long>(row["weight_bytes"].get<int64_t>()),
                static_cast<long long>(row.contains("mcu_used_bytes") ? row["mcu_used_bytes"].get<int64_t>()
                                                                      : row["memory_bytes"].get<int64_t>()),
                row.contains("mcu_free_ram_bytes") ? std::to_string(row["mcu_free_ram_bytes"].get<int64_t>()).c_str()
                                                   : "-");
  std::printf("\n%-5s %-5s %14s %14s %s\n", "from", "to", "payload B", "expected B", "");
  for (const auto& l : r.links)
    std::printf("%-5s %-5s %14lld %14lld %s\n", l["from"].get<std::string>().c_str(),
                l["to"].get<std::string>().c_str(), static_cast<long long>(l["payload_bytes"].get<int64_t>()),
                static_cast<long long>(l["expected_payload_bytes"].get<int64_t>()),
                l["over_uart"].get<bool>() ? "(gRPC hop + UART to/from the MCU; direct MCU links below)" : "");
  for (const auto& l : r.direct_links)
    std::printf("direct UART %s(UART%d) -> %s(UART%d): %lld payload bytes expected, %lld sent, %lld received%s\n",
                l["from"].get<std::string>().c_str(), l["from_uart"].get<int>(), l["to"].get<std::string>().c_str(),
                l["to_uart"].get<int>(), static_cast<long long>(l["expected_payload_bytes"].get<int64_t>()),
                static_cast<long long>(l["sent_payload_bytes"].get<int64_t>()),
                static_cast<long long>(l["received_payload_bytes"].get<int64_t>()),
                l["as_expected"].get<bool>() ? "" : "  NOT AS EXPECTED");
  for (const auto& row : r.memory)
    if (row.contains("uart_wire_bytes_sent"))
      std::printf("uart %s<->%s: %lld wire bytes to the MCU, %lld from it, %lld retransmissions\n",
                  row["via"].get<std::string>().c_str(), row["device"].get<std::string>().c_str(),
                  static_cast<long long>(row["uart_wire_bytes_sent"].get<int64_t>()),
                  static_cast<long long>(row["uart_wire_bytes_received"].get<int64_t>()),
                  static_cast<long long>(row["uart_retransmissions"].get<int64_t>()));
}

void PrintMixedTable(const Graph& graph, const DemoOptions& d, const MixedPlacement& placement, const MixedReport& r) {
  std::printf("tessera demo --mcu %d — %s on 2 Linux workers + %d QEMU mps2-an386 MCUs (UART %u baud via ptys%s)\n",
              d.mcu, graph.name.c_str(), d.mcu, kBaud, d.mcu_chain ? "; neighbouring MCUs joined UART-to-UART" : "");
  if (!placement.planner_table.empty()) std::printf("\nplanner (latency objective):\n%s", placement.planner_table.c_str());
  std::printf("\n%s\nplacement: %s\n", placement.note.c_str(), r.placement_text.c_str());
  std::printf("plan %s deployed in %.2f s (MCU programs over the UART)\n\n", r.plan_id.c_str(), r.deploy_s);
  PrintMixedDevices(r);
  std::printf("\nrequests: %d answered of %d, %d match the single-device run (max rel diff %.3g", r.tally.answered,
              d.requests, r.tally.matched, r.tally.max_rel);
  if (r.tally.max_steps > 0) std::printf("; %.3g steps of the output's int8 grid", r.tally.max_steps);
  std::printf(")\n");
  const std::string predicted =
      placement.cost.latency_s > 0 ? std::to_string(placement.cost.latency_s * 1e3) + " ms" : "none (forced plan)";
  std::printf("latency: predicted %s, measured %.1f ms median (single device in this process: %.3f ms)\n",
              predicted.c_str(), demo::Median(r.tally.latencies_ms), r.single_ms);
  for (const auto& row : r.memory) {
    if (!row.contains("promised_flash_bytes")) continue;
    auto num = [&](const char* key) {
      return row.contains(key) ? std::to_string(row[key].get<int64_t>()) : std::string("?");
    };
    std::printf(
        "%s (%s): flash %s B promised (int8 weights in %s layers), %s B in STATUS (%s B left by the firmware of the "
        "preset's %s B); RAM %s B promised (%s tensors as int8 codes), %s B in STATUS (%s B left of %s B); firmware "
        "%s B static RAM, %s B stack peak%s\n",
        row["device"].get<std::string>().c_str(), row["preset"].get<std::string>().c_str(),
        num("promised_flash_bytes").c_str(), num("int8_weight_layers").c_str(), num("reported_flash_bytes").c_str(),
        num("program_flash_bytes_available").c_str(), num("preset_flash_bytes").c_str(),
        num("promised_ram_bytes").c_str(), num("int8_activation_tensors").c_str(), num("reported_ram_bytes").c_str(),
        num("program_ram_bytes_available").c_str(), num("preset_ram_bytes").c_str(),
        num("mcu_firmware_ram_bytes").c_str(), num("mcu_stack_peak_bytes").c_str(),
        row["memory_as_promised"].get<bool>() ? "" : "  NOT AS PROMISED");
  }
  if (!r.tally.first_error.empty()) std::printf("first error: %s\n", r.tally.first_error.c_str());
}

}  // namespace

int RunMixedDemo(const DemoOptions& d) {
  if (d.mcu < 1 || d.mcu > 4)
    return ReportError(kWhat, Status::InvalidArgument("--mcu takes 1 to 4 MCUs (QEMU boards on this machine)"));
  std::string firmware;
  if (int rc = CheckEmulator(&firmware)) return rc;
  // The default: the keyword-spotting CNN the firmware is sized for; --model
  // any model the planner can place on the MCUs and workers (a layer the
  // firmware cannot run fails its program build, naming the node).
  Graph graph;
  if (d.model == kDefaultDemoModel) {
    graph = MakeKeywordSpottingGraph();
  } else {
    ModelOptions mo;
    mo.model_path = d.model;
    mo.input_shapes = d.input_shapes;
    auto loaded = LoadModel(mo);
    if (!loaded.ok()) return ReportError(kWhat, loaded.status());
    graph = std::move(*loaded);
  }
  if (Status st = graph.Validate(); !st.ok()) return ReportError(kWhat, st);
  auto ref = demo::RunReference(graph, 1, std::min(d.requests, 4), 1);  // the oracle: the whole model here
  if (!ref.ok()) return ReportError(kWhat, ref.status());
  MixedReport report;
  report.single_ms = demo::Median(ref->ms);

  auto demo_dir = demo::DemoDirectory::Create("tessera-mixed", d.keep);
  if (!demo_dir.ok()) return ReportError(kWhat, demo_dir.status());
  demo::ChildProcesses children;
  demo::InstallSignalHandlers();
  if (d.mcu_only && !d.force.empty())
    return ReportError(
        kWhat,
        Status::InvalidArgument(
            "--mcu-only chooses its own placement (whole layers, tiles where needed); it does not go with --force"));
  if (d.mcu_chain && d.mcu < 2)
    return ReportError(kWhat, Status::InvalidArgument("--mcu-chain joins MCUs to each other: give --mcu 2 or more"));
  auto mc = StartMixedCluster(firmware, (*demo_dir)->path(), d.threads, d.mcu, d.mcu_preset, d.mcu_chain);
  if (!mc.ok()) return ReportError(kWhat, mc.status());
  Result<MixedPlacement> placement = MixedPlacement{};
  Result<CompiledPlan> compiled = Status::Internal("not compiled");
  if (d.force.empty()) {
    placement = PlaceMixed(graph, mc->cluster, d.mcu_only);
    if (!placement.ok()) return ReportError(kWhat, placement.status());
    compiled = CompileMixedPlan(graph, *mc, *placement, &report.plan_id);
    const PartitionPlan pp = MixedPartitionPlan(*placement, mc->cluster.size());
    for (size_t j = 0; j < graph.nodes.size() && j < pp.layers.size(); ++j) {
      std::string devices;
      for (int dev : pp.layers[j].devices) devices += (devices.empty() ? "" : "+") + mc->cluster.devices[dev].name;
      const bool whole = pp.layers[j].scheme == LayerScheme::kWhole;
      report.placement_text += (j ? ", " : "") + graph.nodes[j].name +
                               (whole ? "" : std::string(":") + LayerSchemeName(pp.layers[j].scheme)) + "@" + devices;
    }
  } else {
    compiled = CompileForcedMixedPlan(graph, *mc, d.force, &report.plan_id, &*placement, &report.placement_text);
  }
  if (!compiled.ok()) return ReportError(kWhat, compiled.status());
  {  // transfers between MCUs joined UART-to-UART go over that UART
    std::vector<int> same(mc->cluster.size());
    std::iota(same.begin(), same.end(), 0);  // plan device i is cluster device i
    const McuPortMap ports = DirectMcuPorts(mc->cluster, same);
    int direct = 0;
    for (DeviceProgram& p : compiled->programs) direct += MarkDirectMcuTransfers(ports, &p);
    if (Status st = ValidatePrograms(compiled->programs); !st.ok()) return ReportError(kWhat, st);
    if (d.mcu_chain && direct == 0)
      std::fprintf(stderr,
                   "demo --mcu-chain: the placement sends nothing from one MCU to its neighbour; the direct "
                   "links stay unused\n");
  }
  // What each MCU will hold (issue 16 item 6): its program built here, as
  // the bridge will build it, against its flash and RAM.
  auto promises = BuildMcuPrograms(mc->cluster, *compiled);
  if (!promises.ok()) return ReportError(kWhat, promises.status());
  const auto expected_link_bytes = PlannedLinkBytes(compiled->programs);

  const auto td = std::chrono::steady_clock::now();
  auto deployed = DeployPrograms(compiled->programs, report.plan_id, 0, mc->endpoints, TransportSecurity{}, nullptr);
  if (!deployed.ok()) return ReportError(kWhat, deployed.status());
  report.deploy_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - td).count();

  GatewayOptions go;
  go.served = {report.plan_id, 0, mc->endpoints, expected_link_bytes};
  go.signature = ModelSignature::Of(graph);
  go.max_in_flight = 1;
  auto local = demo::StartLocalGateway(go);
  if (!local.ok()) return ReportError(kWhat, local.status());
  report.tally.output_steps = demo::QuantizedOutputSteps(graph);
  for (int r = 0; r < d.requests; ++r) {
    const int k = r % static_cast<int>(ref->inputs.size());
    std::vector<TensorData> outputs;
    double ms = 0;
    Status st = demo::InferThroughGateway(*(*local)->stub, ref->inputs[k], static_cast<uint64_t>(r) + 1, 60000,
                                          &outputs, &ms);
    report.tally.Record(st, outputs, ref->outputs[k], ms);
  }
  report.memory = MixedMemory(*mc, *deployed, *promises, &report.memory_as_promised);
  report.links = MixedLinks(*(*local)->gateway, *mc, expected_link_bytes, report.tally.answered);
  report.direct_links =
      MixedDirectLinks(*mc, compiled->programs, report.memory, report.tally.answered, &report.direct_as_expected);
  // An MCU busy on its UART may not answer a STATUS frame within the
  // bridge's budget, which then reports its last figures: a loaded machine
  // (QEMU MCUs beside other tests) showed a direct link's sender at half its
  // bytes. Ask again, up to ~10 s, before calling the counters wrong.
  for (int retry = 0; retry < 40 && !report.direct_as_expected; ++retry) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    report.memory = MixedMemory(*mc, *deployed, *promises, &report.memory_as_promised);
    report.direct_links =
        MixedDirectLinks(*mc, compiled->programs, report.memory, report.tally.answered, &report.direct_as_expected);
  }
  if (d.json)
    PrintMixedJson(graph, d, *placement, report, mc->cluster.size());
  else
    PrintMixedTable(graph, d, *placement, report);
  return report.tally.AllMatch(d.requests) && report.memory_as_promised && report.direct_as_expected ? 0 : 2;
}

}  // namespace tessera
