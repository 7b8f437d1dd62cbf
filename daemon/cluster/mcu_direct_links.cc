#include "daemon/cluster/mcu_direct_links.h"

#include "planner/cluster.h"
#include "transport/wire/mcu_program.h"

namespace tessera {

// The planner's ports (planner/cluster.h) are the firmware's UART1..
static_assert(kMaxMcuLinkPort == static_cast<int>(mcu::kMaxPorts) - 1,
              "direct-link UARTs of the cluster file and firmware");

McuPortMap DirectMcuPorts(const Cluster& cluster, const std::vector<int>& cluster_index) {
  McuPortMap ports;
  for (size_t a = 0; a < cluster_index.size(); ++a)
    for (size_t b = 0; b < cluster_index.size(); ++b) {
      if (a == b || cluster_index[a] < 0 || cluster_index[b] < 0) continue;
      if (const int port = cluster.McuPort(cluster_index[a], cluster_index[b]); port > 0)
        ports[{static_cast<int>(a), static_cast<int>(b)}] = port;
    }
  return ports;
}

int MarkDirectMcuTransfers(const McuPortMap& ports, DeviceProgram* program) {
  int marked = 0;
  for (ProgramStep& s : program->steps) {
    if (s.kind != StepKind::kSend && s.kind != StepKind::kRecv) continue;
    const auto it = ports.find({program->device, s.peer});
    s.uart_port = it == ports.end() ? 0 : it->second;
    marked += s.uart_port > 0;
  }
  return marked;
}

}  // namespace tessera
