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
// A form is found by a key the kernel builds from ConstantKey() (which
// constant) and its own description of the form (strategy and the geometry
// the packing depends on). The constant is told by the address of its data:
// a device program resolves every constant to one TensorData per identity
// (ConstantIdentity, graph.h) before its kernels prepare, both in a real
// Prepare and in a shapes-only one (KernelContext::shapes_only, the
// planner's sizing), so the promise shares exactly what is allocated.
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
  // Which constant input `input` of ctx.node is (its data's address).
  static std::string ConstantKey(const KernelContext& ctx, size_t input) {
    return std::to_string(reinterpret_cast<uintptr_t>(ctx.constant_inputs.at(input)));
  }

  // The form stored under `key`, or nullptr. T must be the type stored.
  template <class T>
  std::shared_ptr<const T> Find(const std::string& key) const {
    auto it = forms_.find(key);
    return it == forms_.end() ? nullptr : std::static_pointer_cast<const T>(it->second);
  }
  bool Contains(const std::string& key) const { return forms_.count(key) != 0; }
  // shapes_only kernels insert a placeholder: only Contains() may ask for it.
  void Insert(const std::string& key, std::shared_ptr<const void> form) { forms_[key] = std::move(form); }
  size_t size() const { return forms_.size(); }

 private:
  std::unordered_map<std::string, std::shared_ptr<const void>> forms_;
};

}  // namespace tessera
