// Kernels for the darknet-only ops (graph.h: Reorg, Region, DarknetCrop),
// implemented in darknet_registry.cc. FindKernel (registry.cc) falls back to
// this table for names it does not know.
#pragma once

#include <string>

#include "daemon/runtime/kernels/kernel.h"

namespace tessera {

// The factory for a darknet-only op, or nullptr if `op` is not one.
KernelFactory FindDarknetKernel(const std::string& op);

}  // namespace tessera
