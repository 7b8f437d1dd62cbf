// FusedActivation (declared in daemon/kernel.h): the activation a producer
// (Conv, Gemm) may carry after import folded it in (graph.h; METHODS §1
// "activation folded into the producer"). Defaults follow the ONNX operators
// of the same name. Lives in kernels/ so the tessera_kernels glob builds it.
#include "daemon/kernel.h"

#include <algorithm>
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
  // Eigen array expressions vectorise exp/tanh/logistic; plain loops for the
  // piecewise-linear ones vectorise on their own.
  switch (kind) {
    case kNone:
      return;
    case kRelu:
      for (size_t i = 0; i < n; ++i) data[i] = std::max(data[i], 0.f);
      return;
    case kLeakyRelu: {
      const float a = alpha;
      for (size_t i = 0; i < n; ++i) data[i] = data[i] < 0.f ? a * data[i] : data[i];
      return;
    }
    case kClip: {
      const float lo = alpha, hi = beta;
      for (size_t i = 0; i < n; ++i) data[i] = std::min(std::max(data[i], lo), hi);
      return;
    }
    case kHardSigmoid: {
      const float a = alpha, b = beta;
      for (size_t i = 0; i < n; ++i) data[i] = std::min(std::max(a * data[i] + b, 0.f), 1.f);
      return;
    }
    case kSigmoid: {
      Eigen::Map<Eigen::ArrayXf> x(data, static_cast<Eigen::Index>(n));
      x = x.logistic();
      return;
    }
    case kTanh: {
      Eigen::Map<Eigen::ArrayXf> x(data, static_cast<Eigen::Index>(n));
      x = x.tanh();
      return;
    }
  }
}

}  // namespace tessera
