// FusedActivation (declared in daemon/runtime/kernels/kernel.h): the activation a producer
// (Conv, Gemm) may carry after import folded it in (graph.h; METHODS §1
// "activation folded into the producer"). Defaults follow the ONNX operators
// of the same name. Lives in kernels/ so the tessera_kernels glob builds it.
//
// darknet's activations (its activations.h, as the darknet importer names
// them; graph.h):
//   elu               x ≥ 0 ? x : alpha·(eˣ − 1)          (darknet: alpha 1)
//   selu              x ≥ 0 ? beta·x : beta·alpha·(eˣ − 1) (darknet: alpha
//                     1.6732, beta 1.0507)
//   darknet_ramp      x·[x > 0] + 0.1·x
//   darknet_plse      x < −4: 0.01·(x + 4); x > 4: 0.01·(x − 4) + 1; else 0.125·x + 0.5
//   darknet_loggy     2/(1 + e⁻ˣ) − 1
//   darknet_stair     n = floor(x): n even: floor(x/2); odd: (x − n) + floor(x/2)
//   darknet_lhtan     x < 0: 0.001·x; x > 1: 0.001·(x − 1) + 1; else x
#include "daemon/runtime/kernels/kernel.h"
#include "daemon/runtime/kernels/microkernels.h"

#include <cmath>
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
    act.logistic = MicrokernelsFor(ActiveIsa()).logistic;
  } else if (name == "silu") {
    act.kind = kSilu;
    act.logistic = MicrokernelsFor(ActiveIsa()).logistic;
  } else if (name == "hard_sigmoid") {
    act.kind = kHardSigmoid;
    act.alpha = static_cast<float>(attrs.Float("act_alpha", 0.2));
    act.beta = static_cast<float>(attrs.Float("act_beta", 0.5));
  } else if (name == "hard_swish") {
    act.kind = kHardSwish;
    act.alpha = static_cast<float>(attrs.Float("act_alpha", 1.0 / 6.0));
    act.beta = static_cast<float>(attrs.Float("act_beta", 0.5));
  } else if (name == "tanh") {
    act.kind = kTanh;
  } else if (name == "elu") {
    act.kind = kElu;
    act.alpha = static_cast<float>(attrs.Float("act_alpha", 1.0));
  } else if (name == "selu") {
    act.kind = kSelu;
    act.alpha = static_cast<float>(attrs.Float("act_alpha", 1.67326319217681884765625));
    act.beta = static_cast<float>(attrs.Float("act_beta", 1.05070102214813232421875));
  } else if (name == "darknet_ramp") {
    act.kind = kDarknetRamp;
  } else if (name == "darknet_plse") {
    act.kind = kDarknetPlse;
  } else if (name == "darknet_loggy") {
    act.kind = kDarknetLoggy;
  } else if (name == "darknet_stair") {
    act.kind = kDarknetStair;
  } else if (name == "darknet_lhtan") {
    act.kind = kDarknetLhtan;
  } else {
    return Status::NotSupported(
        "fused activation '" + name +
        "' is not supported (relu, leaky_relu, clip, sigmoid, silu, hard_sigmoid, hard_swish, tanh, elu, selu, "
        "darknet_ramp, darknet_plse, darknet_loggy, darknet_stair, darknet_lhtan)");
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
    case kHardSwish:
      x = x * (alpha * x + beta).max(0.f).min(1.f);
      return;
    case kSigmoid:
      logistic(data, static_cast<int64_t>(n), false);
      return;
    case kSilu:
      logistic(data, static_cast<int64_t>(n), true);
      return;
    case kTanh:
      x = x.tanh();
      return;
    case kElu:
      x = (x < 0.f).select(alpha * (x.exp() - 1.f), x);
      return;
    case kSelu:
      x = (x < 0.f).select(beta * alpha * (x.exp() - 1.f), beta * x);
      return;
    case kDarknetRamp:
      x = x.max(0.f) + 0.1f * x;
      return;
    case kDarknetLoggy:
      x = 2.f / (1.f + (-x).exp()) - 1.f;
      return;
    case kDarknetPlse:
      for (float& v : x) v = v < -4.f ? 0.01f * (v + 4.f) : v > 4.f ? 0.01f * (v - 4.f) + 1.f : 0.125f * v + 0.5f;
      return;
    case kDarknetLhtan:
      for (float& v : x) v = v < 0.f ? 0.001f * v : v > 1.f ? 0.001f * (v - 1.f) + 1.f : v;
      return;
    case kDarknetStair:
      for (float& v : x) {
        const float n = std::floor(v);
        const float half = std::floor(v / 2.f);
        v = std::fmod(n, 2.f) == 0.f ? half : (v - n) + half;
      }
      return;
  }
}

}  // namespace tessera
