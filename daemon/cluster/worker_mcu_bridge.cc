#include "daemon/cluster/worker_mcu_bridge.h"

#include <spdlog/spdlog.h>

#include <cstring>

#include "partition/compile/mcu_program_builder.h"
#include "transport/wire/frame_codec.h"

namespace tessera {

namespace {

std::chrono::milliseconds Remaining(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

}  // namespace

Result<std::unique_ptr<McuBridge>> McuBridge::Open(const McuBridgeOptions& options) {
  std::unique_ptr<McuBridge> bridge(new McuBridge(options));
  UartLinkOptions uo;
  uo.device = options.serial;
  uo.baud = options.baud;
  uo.window = static_cast<int>(mcu::kRxSlots) + 1;  // what the firmware can hold past a gap
  TS_ASSIGN_OR_RETURN(bridge->link_, UartLink::Open(uo));
  spdlog::info("mcu bridge {}: UART {} at {} baud", options.name, options.serial, options.baud);
  return bridge;
}

Result<mcu::McuStatus> McuBridge::QueryStatus(std::chrono::milliseconds timeout) {
  std::unique_lock<std::timed_mutex> io(status_io_mu_, std::defer_lock);
  if (!io.try_lock_for(timeout))
    return Status::Unavailable("MCU " + options_.name + ": another STATUS query is still waiting for its answer");
  uint32_t id;
  {
    std::lock_guard<std::mutex> lock(status_mu_);
    id = next_status_id_++;
  }
  const std::string who = "MCU " + options_.name + " on " + options_.serial;
  auto got = QueryMcuStatus(*link_, id, timeout);
  if (!got.ok()) {
    if (got.status().code() == StatusCode::kDataLoss) return got.status().WithContext(who + " sent ");
    return Status::Unavailable(who + " does not answer STATUS: " + got.status().message() +
                               " (is the firmware running and the port right?)");
  }
  const mcu::McuStatus s = *got;
  std::lock_guard<std::mutex> lock(status_mu_);
  last_status_ = s;
  has_status_ = true;
  return s;
}

mcu::McuStatus McuBridge::last_status() const {
  std::lock_guard<std::mutex> lock(status_mu_);
  return last_status_;
}

bool McuBridge::has_status() const {
  std::lock_guard<std::mutex> lock(status_mu_);
  return has_status_;
}

Result<McuLoadInfo> McuBridge::Load(const DeviceProgram& program, const std::string& plan_id) {
  const std::string who = "MCU " + options_.name + " (device " + std::to_string(program.device) + ")";
  if (!program.model_inputs.empty() || !program.model_outputs.empty())
    return Status::NotSupported(who + " would hold model inputs or outputs; plan with a Linux source device");
  for (const auto& s : program.steps)
    if ((s.kind == StepKind::kSend || s.kind == StepKind::kRecv) && (s.message < 0 || s.message > 0xFFFFFFFFll))
      return Status::InvalidArgument(who + ": message id " + std::to_string(s.message) + " does not fit the UART's 32 bits");
  McuProgramOptions mo;
  mo.plan_id = PlanIdHash(plan_id);
  auto built = BuildMcuProgram(program, mo);
  if (!built.ok()) return built.status().WithContext(who);
  McuProgramImage image = std::move(*built);

  std::lock_guard<std::mutex> run_lock(run_mu_);
  TS_ASSIGN_OR_RETURN(mcu::McuStatus before, QueryStatus(std::chrono::seconds(10)));
  if (image.flash_bytes() > before.flash_bytes)
    return Status::ResourceExhausted(who + ": the program and its weights need " + std::to_string(image.flash_bytes()) +
                                     " bytes of flash, the MCU has " + std::to_string(before.flash_bytes));
  if (image.ram_bytes() > before.arena_bytes)
    return Status::ResourceExhausted(who + ": the activations need " + std::to_string(image.ram_bytes()) +
                                     " bytes of RAM, the MCU's arena has " + std::to_string(before.arena_bytes));
  const auto t0 = std::chrono::steady_clock::now();
  TS_RETURN_IF_ERROR(link_->SendTyped(wire::kFrameProgram, 1, image.bytes).WithContext(who));
  // Upload time is bytes * 10 / baud; allow five times that plus 20 s: a
  // noisy cable retransmits, and an emulated MCU on a busy host (QEMU in CI,
  // integration.mixed_gateway) was seen needing over four times the line
  // time. A dead MCU is caught before, by the STATUS round trip.
  const auto upload_budget = std::chrono::milliseconds(
      20000 + static_cast<int64_t>(5000.0 * 10.0 * static_cast<double>(image.bytes.size()) / options_.baud));
  TS_RETURN_IF_ERROR(link_->Flush(upload_budget).WithContext(who + ", uploading " +
                                                             std::to_string(image.bytes.size()) + " program bytes"));
  const double upload_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  TS_ASSIGN_OR_RETURN(mcu::McuStatus after, QueryStatus(std::chrono::seconds(10)));
  if (after.state != mcu::kStateLoaded || after.plan_id != mo.plan_id)
    return Status::FailedPrecondition(who + " refused the program: state " + std::to_string(after.state) +
                                      ", error " + std::to_string(after.last_error) + ", plan " +
                                      std::to_string(after.plan_id) + " (want " + std::to_string(mo.plan_id) + ")");
  link_->set_plan_id(mo.plan_id);
  spdlog::info(
      "mcu bridge {}: loaded plan {} ({} program bytes in {:.2f} s, {} MACs), free RAM {} of {} bytes, free flash {} "
      "of {} bytes",
      options_.name, plan_id, image.bytes.size(), upload_s, image.macs, after.free_bytes, after.arena_bytes,
      after.flash_free_bytes, after.flash_bytes);
  McuLoadInfo info;
  info.program_bytes = static_cast<int64_t>(image.bytes.size());
  info.arena_bytes = static_cast<int64_t>(image.ram_bytes());
  info.macs = image.macs;
  info.status = after;
  return info;
}

Status McuBridge::Relay(const DeviceProgram& program, const std::vector<Link*>& peers,
                        std::chrono::steady_clock::time_point deadline) {
  std::lock_guard<std::mutex> run_lock(run_mu_);
  auto peer_link = [&](int d) -> Result<Link*> {
    if (d < 0 || d >= static_cast<int>(peers.size()) || !peers[d])
      return Status::Internal("MCU " + options_.name + " has no link to device " + std::to_string(d));
    return peers[d];
  };
  // The MCU runs its program in phases (transport/wire/mcu_program.h): each
  // step is relayed in program order, so a tensor the MCU sends (a partial
  // sum) reaches its peer before the bridge waits for the tensor that
  // depends on it (the merged map of the next layer).
  const McuFusions fusions = FuseMcuQuantizeSteps(program);
  for (const auto& s : program.steps) {
    // A tensor of a direct MCU<->MCU UART (ProgramStep::uart_port) goes
    // from one MCU to the other without this board.
    if (s.uart_port > 0) continue;
    // A tensor the MCU holds as int8 codes crosses its UART as codes, a
    // quarter of the float bytes (mcu_program.h version 5); so does a
    // tensor received into a QuantizeDequantize fused with its Recv
    // (FuseMcuQuantizeSteps). Between devices over gRPC a tensor on an
    // 8-bit grid travels as codes too (WireGrid, device_program.h). The
    // two agree but for a fused Recv (floats or other codes from the peer,
    // codes of the QuantizeDequantize's grid to the MCU): converted here.
    const std::optional<QuantGrid> uart_grid = McuWireGrid(program, fusions, s);
    const std::optional<QuantGrid> grpc_grid = WireGrid(program, s);
    const std::string what = "message " + std::to_string(s.message) + " of MCU " + options_.name;
    if (s.kind == StepKind::kRecv) {
      TS_ASSIGN_OR_RETURN(Link * from, peer_link(s.peer));
      TS_ASSIGN_OR_RETURN(std::string bytes, from->Recv(s.message, Remaining(deadline)));
      Result<std::string> converted = RecodeMessage(grpc_grid, uart_grid, std::move(bytes), s.dst_box.volume());
      if (!converted.ok()) return converted.status().WithContext(what + ": ");
      TS_RETURN_IF_ERROR(
          link_->Send(s.message, std::move(*converted))
              .WithContext("relaying message " + std::to_string(s.message) + " to MCU " + options_.name));
    } else if (s.kind == StepKind::kSend) {
      TS_ASSIGN_OR_RETURN(Link * to, peer_link(s.peer));
      auto bytes = link_->Recv(s.message, Remaining(deadline));
      if (!bytes.ok())
        return bytes.status().WithContext("waiting for message " + std::to_string(s.message) + " from MCU " +
                                          options_.name + " (" + options_.serial + ")");
      Result<std::string> converted = RecodeMessage(uart_grid, grpc_grid, std::move(*bytes), s.src_box.volume());
      if (!converted.ok()) return converted.status().WithContext(what + ": ");
      TS_RETURN_IF_ERROR(to->Send(s.message, std::move(*converted)));
    }
  }
  return Status::OK();
}


}  // namespace tessera
