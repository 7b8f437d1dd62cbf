// Factories of the kernels in this folder; the table in registry.cc maps
// canonical op names (partition/graph/graph.h) to them. Each op family lives in its
// own small file (conv.cc, pool.cc, ...).
#pragma once

#include <memory>

#include "daemon/runtime/kernels/kernel.h"

namespace tessera {

std::unique_ptr<Kernel> MakeConvKernel();
std::unique_ptr<Kernel> MakeConvTransposeKernel();
std::unique_ptr<Kernel> MakeGemmKernel();
std::unique_ptr<Kernel> MakeMatMulKernel();
std::unique_ptr<Kernel> MakeMaxPoolKernel();
std::unique_ptr<Kernel> MakeAveragePoolKernel();
std::unique_ptr<Kernel> MakeGlobalAveragePoolKernel();
std::unique_ptr<Kernel> MakeGlobalMaxPoolKernel();
std::unique_ptr<Kernel> MakeBatchNormalizationKernel();
std::unique_ptr<Kernel> MakeConcatKernel();
std::unique_ptr<Kernel> MakeCopyKernel();  // Reshape, Flatten, Identity, Squeeze, Unsqueeze
std::unique_ptr<Kernel> MakeTransposeKernel();
std::unique_ptr<Kernel> MakeSoftmaxKernel();
std::unique_ptr<Kernel> MakePadKernel();
std::unique_ptr<Kernel> MakeResizeKernel();
std::unique_ptr<Kernel> MakeSliceKernel();
std::unique_ptr<Kernel> MakeLayerNormalizationKernel();
std::unique_ptr<Kernel> MakeReduceKernel();  // ReduceMean, ReduceSum, ReduceMax, ReduceMin

// Pointwise unary ops (unary.cc), one factory dispatching on the node's op.
std::unique_ptr<Kernel> MakeUnaryKernel();
// Broadcasting binary / variadic ops (binary.cc): Add Sub Mul Div Max Min Sum Pow PRelu.
std::unique_ptr<Kernel> MakeBroadcastKernel();

}  // namespace tessera
