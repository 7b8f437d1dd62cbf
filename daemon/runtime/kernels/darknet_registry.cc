// The darknet-only ops (graph.h): Reorg, Region, Detection, DarknetCrop,
// and DarknetShortcut (a [shortcut] between layers of different shapes). FindKernel
// (registry.cc) falls back to this table for op names it does not know.
#include "daemon/runtime/kernels/darknet_registry.h"

#include <memory>
#include <string_view>

namespace tessera {

// Defined in reorg.cc, region.cc (Region, Detection), darknet_crop.cc, darknet_shortcut.cc.
std::unique_ptr<Kernel> MakeReorgKernel();
std::unique_ptr<Kernel> MakeRegionKernel();
std::unique_ptr<Kernel> MakeDetectionKernel();
std::unique_ptr<Kernel> MakeDarknetCropKernel();
std::unique_ptr<Kernel> MakeDarknetShortcutKernel();

namespace {

struct DarknetKernelEntry {
  std::string_view op;
  KernelFactory factory;
};

constexpr DarknetKernelEntry kDarknetKernels[] = {
    {"DarknetCrop", MakeDarknetCropKernel},
    {"DarknetShortcut", MakeDarknetShortcutKernel},
    {"Detection", MakeDetectionKernel},
    {"Region", MakeRegionKernel},
    {"Reorg", MakeReorgKernel},
};

}  // namespace

KernelFactory FindDarknetKernel(const std::string& op) {
  for (const DarknetKernelEntry& e : kDarknetKernels)
    if (e.op == op) return e.factory;
  return nullptr;
}

}  // namespace tessera
