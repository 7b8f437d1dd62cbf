#include "daemon/runtime/device_memory.h"

#include <cstdio>
#include <set>

#include "daemon/runtime/program_runner.h"

namespace tessera {

Result<DeviceMemory> SizeDeviceProgram(const DeviceProgram& program, const DeviceMemoryOptions& options) {
  RunnerOptions ro;
  ro.threads = options.threads;
  ro.shapes_only = true;
  // A worker decodes its program from a file and reads each weight as its
  // kernel prepares (worker.cc; issue 11 item 2).
  ro.streamed_load = true;
  ro.compute_slots = options.compute_slots;
  TS_ASSIGN_OR_RETURN(auto prepared, PreparedProgram::Prepare(program, ro));
  DeviceMemory m;
  m.device = program.device;
  m.weight_bytes = static_cast<int64_t>(prepared->weight_bytes());
  m.arena_bytes = static_cast<int64_t>(prepared->memory_bytes());
  m.working_bytes = static_cast<int64_t>(prepared->working_bytes());
  m.buffer_bytes = static_cast<int64_t>(prepared->request_bytes());
  m.compute_slots = prepared->compute_slots();
  m.load_peak_bytes = static_cast<int64_t>(prepared->load_peak_bytes());
  m.step_live_bytes = prepared->live_bytes();
  int64_t io_values = 0;
  for (const auto& [value, b] : program.model_inputs) io_values += program.buffers[b].box.volume();
  for (const auto& [value, b] : program.model_outputs) io_values += program.buffers[b].box.volume();
  m.io_bytes = 3 * io_values * static_cast<int64_t>(sizeof(float));
  std::set<int> peers;
  for (const ProgramStep& step : program.steps)
    if ((step.kind == StepKind::kSend || step.kind == StepKind::kRecv) && step.peer >= 0) peers.insert(step.peer);
  m.link_bytes = static_cast<int64_t>(peers.size()) * kLinkBytesPerPeer;
  m.in_flight = options.in_flight < 1 ? 1 : options.in_flight;
  return m;
}

std::string DescribeDeviceMemory(const DeviceMemory& m) {
  const double mib = 1048576.0;
  char text[384];
  const std::string slots = m.compute_slots == 1 ? "" : std::to_string(m.compute_slots) + " x ";
  const std::string each = (m.in_flight == 1 ? "" : std::to_string(m.in_flight) + " x ") +
                           (m.io_bytes > 0 ? "(pipeline buffers + request I/O)" : "pipeline buffers");
  char links[64] = "";
  if (m.link_bytes > 0) std::snprintf(links, sizeof links, " + links %.2f", m.link_bytes / mib);
  char serving[256];
  std::snprintf(serving, sizeof serving, "weights %.1f + %sworking memory %.1f + %s %.1f%s", m.weight_bytes / mib,
                slots.c_str(), m.compute_slots * m.working_bytes / mib, each.c_str(),
                static_cast<double>(m.in_flight * m.request_bytes()) / mib, links);
  if (m.load_peak_bytes > m.serving_bytes())
    std::snprintf(text, sizeof text, "%.1f MiB (worker baseline %.1f + weights while loading %.1f; serving: %s)",
                  m.total_bytes() / mib, m.baseline_bytes / mib, m.load_peak_bytes / mib, serving);
  else
    std::snprintf(text, sizeof text, "%.1f MiB (%s + worker baseline %.1f)", m.total_bytes() / mib, serving,
                  m.baseline_bytes / mib);
  return text;
}

int InFlightThatFits(const DeviceMemory& m, int64_t ram_bytes) {
  const int64_t fixed = m.weight_bytes + m.compute_slots * m.working_bytes + m.link_bytes + m.baseline_bytes,
                each = m.request_bytes();
  if (ram_bytes < fixed + each || ram_bytes < m.baseline_bytes + m.load_peak_bytes) return 0;
  if (each == 0) return 1 << 20;
  const int64_t n = (ram_bytes - fixed) / each;
  return n > (1 << 20) ? (1 << 20) : static_cast<int>(n);
}

}  // namespace tessera
