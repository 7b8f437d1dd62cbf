// FusedActivation (declared in daemon/runtime/kernels/kernel.h): the activation a producer
// (Conv, Gemm) may carry after import folded it in (graph.h; METHODS §1
// "activation folded into the producer"). Defaults follow the ONNX operators
// of the same name. Lives in kernels/ so the tessera_kernels glob builds it.
#include "daemon/runtime/kernels/kernel.h"

#include <limits>

#include <Eigen/Core>

namespace tessera {

Result<FusedActivation> FusedActivation::FromAttributes(const Attributes& attrs) {
  const std::string name = attrs.String("activation", "");
  FusedActivation act;
  if (name.empty() || name == "linear") return act;
  if (name == "relu") {
    act.kind = kRelu;
  } else if (name == "leaky_relu") {
    act.kind = kLeakyRelu;
    act.alpha = static_cast<float>(attrs.Float("act_alpha", 0.01));
  } else if (name == "clip") {
    act.kind = kClip;
    act.alpha = static_cast<float>(attrs.Float("act_alpha", -std::numeric_limits<double>::infinity()));
    act.beta = static_cast<float>(attrs.Float("act_beta", std::numeric_limits<double>::infinity()));
  } else if (name == "sigmoid") {
    act.kind = kSigmoid;
  } else if (name == "hard_sigmoid") {
    act.kind = kHardSigmoid;
    act.alpha = static_cast<float>(attrs.Float("act_alpha", 0.2));
    act.beta = static_cast<float>(attrs.Float("act_beta", 0.5));
  } else if (name == "tanh") {
    act.kind = kTanh;
  } else {
    return Status::NotSupported("fused activation '" + name +
                                "' is not supported (relu, leaky_relu, clip, sigmoid, hard_sigmoid, tanh)");
  }
  return act;
}

void FusedActivation::Apply(float* data, size_t n) const {
  // Eigen array expressions are explicitly vectorised (GCC's -O2 cost model
  // leaves plain loops with a remainder scalar).
  Eigen::Map<Eigen::ArrayXf> x(data, static_cast<Eigen::Index>(n));
  switch (kind) {
    case kNone:
      return;
    case kRelu:
      x = x.max(0.f);
      return;
    case kLeakyRelu:
      x = (x < 0.f).select(alpha * x, x);
      return;
    case kClip:
      x = x.max(alpha).min(beta);
      return;
    case kHardSigmoid:
      x = (alpha * x + beta).max(0.f).min(1.f);
      return;
    case kSigmoid:
      x = x.logistic();
      return;
    case kTanh:
      x = x.tanh();
      return;
  }
}

}  // namespace tessera
