// Direct MCU<->MCU links at run time (issue 16 item 4): a cluster file may
// join two MCUs UART-to-UART (planner/cluster.h, `links.pairs` with
// `ports`), as METHODS §5 assumes for microcontroller chains. The planner
// already prices such a pair as one UART hop; this marks every Send and
// Recv between the two so that the MCU programs send and receive the
// tensor on that UART (transport/wire/mcu_program.h IoEntry::port) and
// the bridges of their Linux boards do not relay it
// (daemon/cluster/worker_mcu_bridge.h).
#pragma once

#include <map>
#include <utility>
#include <vector>

#include "partition/compile/device_program.h"

namespace tessera {

class Cluster;  // planner/cluster.h

// (from, to) plan device indices -> the UART of `from` joined directly to
// `to`; only pairs of MCUs joined UART-to-UART appear.
using McuPortMap = std::map<std::pair<int, int>, int>;

// Plan device d runs on cluster.devices[cluster_index[d]].
McuPortMap DirectMcuPorts(const Cluster& cluster, const std::vector<int>& cluster_index);

// Sets ProgramStep::uart_port on every Send/Recv of `program` whose peer
// `ports` joins it to directly (and 0 on the others). Returns how many.
int MarkDirectMcuTransfers(const McuPortMap& ports, DeviceProgram* program);

}  // namespace tessera
