// WeightForms: the forms kernels make of a weight in Prepare (PackedGemm
// panels, Winograd-transformed planes), shared by every kernel of one device
// program that reads the same weight in the same form (issue 17).
//
// Why: an FFMT stack a device computes as tiles in turn (METHODS §4, and the
// one-device paths of METHODS §6 "Path discovery") is one subgraph per tile,
// each naming the stack's weights. The program keeps each raw weight once
// (DeviceProgram::shared_constants, program_runner.cc); without sharing the
// forms too, a path of n tiles would keep n packed copies of its layers'
// weights, undoing most of what tiling saves in the arena.
//
// A kernel asks Share() for a form by its constant input and its own
// description of the form (strategy and the geometry the packing depends
// on). The constant is told by the address of its data: a device program
// resolves every constant to one TensorData per identity (ConstantIdentity,
// graph.h) before its kernels prepare, both in a real Prepare and in a
// shapes-only one (KernelContext::shapes_only, the planner's sizing), so
// the promise shares exactly what is allocated.
//
// Used only while a program prepares, while every constant's TensorData
// stays in place; the kernels keep their forms alive through shared_ptr.
// Not thread-safe (programs prepare on one thread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "daemon/runtime/kernels/kernel.h"

namespace tessera {

class WeightForms {
 public:
  // Form `form` (the kernel's strategy and the geometry its packing depends
  // on) of constant input `input` of ctx.node, shared by every kernel of the
  // program: the form made before (*made = false), or make()'s result,
  // kept for the next kernel (*made = true; only that kernel counts its
  // bytes). shapes_only: nothing is made or returned (nullptr); *made says
  // whether this kernel would make it. Without ctx.weight_forms the kernel
  // always makes its own.
  template <class T, class Make>
  static std::shared_ptr<const T> Share(const KernelContext& ctx, size_t input, const std::string& form, Make make,
                                        bool* made) {
    WeightForms* forms = ctx.weight_forms;
    // The constant is told by its data's address (see above).
    const std::string key = std::to_string(reinterpret_cast<uintptr_t>(ctx.constant_inputs.at(input))) + "|" + form;
    if (forms != nullptr) {
      auto it = forms->forms_.find(key);
      if (it != forms->forms_.end()) {
        *made = false;
        return ctx.shapes_only ? nullptr : std::static_pointer_cast<const T>(it->second);
      }
    }
    *made = true;
    std::shared_ptr<const T> result;
    std::shared_ptr<const void> kept = std::make_shared<const int>(0);  // shapes_only: a placeholder
    if (!ctx.shapes_only) kept = result = make();
    if (forms != nullptr) forms->forms_[key] = std::move(kept);
    return result;
  }

 private:
  std::unordered_map<std::string, std::shared_ptr<const void>> forms_;
};

}  // namespace tessera
