#!/usr/bin/python3
"""Export torchvision CNNs with seeded random weights as an independent oracle.

For each model this writes, into OUT_DIR:
  NAME.onnx         the model (opset 13, fixed 1x3xSxS input "input"; S = 224
                    unless INPUT_SIZE says otherwise)
  NAME.input.npy    a seeded N(0,1) float32 input
  NAME.output.npy   PyTorch's output for that input (eval mode)

Weights are random but reproducible (torch.manual_seed per model). Two
choices keep the comparison meaningful:
  * BatchNorm running statistics are *calibrated* on a seeded random batch
    (so activations stay O(1) through deep nets instead of vanishing or
    exploding) and the affine gamma/beta are randomised, so mean != 0,
    var != 1, gamma != 1, beta != 0 and folding BN into the preceding conv is
    actually exercised.
  * LayerNorm affine terms are randomised the same way, and ConvNeXt's
    layer_scale (1e-6 at init, which would hide every block) is set to
    U(0.5, 1.0), so GELU and LayerNorm inside the blocks matter.
  * The export uses TrainingMode.PRESERVE on an eval-mode model, which keeps
    BatchNormalization nodes in the ONNX file (TrainingMode.EVAL would let
    the exporter fold them itself and tessera's BN folding would go untested).

Run with the Debian interpreter: /usr/bin/python3 export_torchvision.py OUT_DIR
"""
import argparse
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn.functional as F
import torchvision

SEED = 20240601
OPSET = 13


def build(name):
    m = torchvision.models
    if name == "mobilenet_v2":
        return m.mobilenet_v2(weights=None)
    if name == "resnet18":
        return m.resnet18(weights=None)
    if name == "squeezenet1_0":
        return m.squeezenet1_0(weights=None)
    if name == "googlenet":
        return m.googlenet(weights=None, aux_logits=False, init_weights=True)
    if name == "mnasnet1_0":
        return m.mnasnet1_0(weights=None)
    if name == "convnext_tiny":  # GELU (Erf), LayerNorm over channels, depthwise 7x7
        return m.convnext_tiny(weights=None)
    if name == "lraspp_mobilenet_v3_large":  # bilinear Resize (sizes, half_pixel), SE, hardswish
        return SegmentationOut(m.segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None))
    if name == "ops_decoder":
        return OpsDecoder()
    if name == "resnet50":  # for bench/planner, not the default test set
        return m.resnet50(weights=None)
    if name == "vgg16":  # for bench/memory (528 MB of weights), not the default test set
        return m.vgg16(weights=None)
    # Modern edge architectures (issue 13): squeeze-and-excitation, grouped
    # and channel-shuffled convolutions, dense concatenations, inception.
    if name == "efficientnet_b0":
        return m.efficientnet_b0(weights=None)
    if name == "mobilenet_v3_small":
        return m.mobilenet_v3_small(weights=None)
    if name == "regnet_y_400mf":
        return m.regnet_y_400mf(weights=None)
    if name == "resnext50_32x4d":
        return m.resnext50_32x4d(weights=None)
    if name == "shufflenet_v2_x0_5":
        return m.shufflenet_v2_x0_5(weights=None)
    if name == "densenet121":
        return m.densenet121(weights=None)
    if name == "inception_v3":
        return m.inception_v3(weights=None, aux_logits=False, init_weights=True)
    raise ValueError(f"unknown model {name}")


class SegmentationOut(torch.nn.Module):
    """torchvision segmentation models return a dict; export its "out"."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


class OpsDecoder(torch.nn.Module):
    """A small encoder-decoder that uses each op of issue 13 once or more:
    nn.GELU, bilinear F.interpolate with align_corners False and True (scale
    and size forms), nn.ConvTranspose2d (strides, pads, output_padding,
    dilation, groups, bias), torch.split + cat, and nn.LayerNorm over
    channels (as ConvNeXt applies it)."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.gelu = torch.nn.GELU()
        self.down = torch.nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.up1 = torch.nn.ConvTranspose2d(32, 16, 3, stride=2, padding=1, output_padding=1)
        self.up2 = torch.nn.ConvTranspose2d(16, 8, (3, 2), stride=(2, 3), padding=(1, 0), output_padding=(1, 2),
                                            dilation=(1, 2), groups=2, bias=True)
        self.norm = torch.nn.LayerNorm(24)
        self.head = torch.nn.Conv2d(24, 5, 1)

    def forward(self, x):
        s = self.gelu(self.stem(x))                      # 1/2
        d = self.gelu(self.down(s))                      # 1/4
        u = self.up1(d)                                  # 1/2
        a, b = torch.split(u, [6, 10], dim=1)
        u = torch.cat([b, a], dim=1) + s
        up = F.interpolate(u, scale_factor=2.0, mode="bilinear", align_corners=False)   # 1/1
        v = self.up2(u)                                  # odd size: resized back below
        v = F.interpolate(v, size=up.shape[-2:], mode="bilinear", align_corners=True)
        y = torch.cat([up, v], dim=1)
        y = self.norm(y.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return self.head(self.gelu(y))


MODELS = ["mobilenet_v2", "resnet18", "squeezenet1_0", "googlenet", "mnasnet1_0"]
# Models of issue 13 (Erf/GELU, LayerNorm, bilinear Resize, ConvTranspose, Split).
OPS_MODELS = ["ops_decoder", "convnext_tiny", "lraspp_mobilenet_v3_large"]
EXTRA_MODELS = ["resnet50", "vgg16"]
# mobilenet_v2's features (the same weights, BN statistics and all, as the
# "mobilenet_v2" export) under another head: two models that share a
# backbone, for `--with-model` (issue 18 item 4, tests/integration/merged_models.sh).
SECOND_HEAD_MODELS = ["mobilenet_v2_second_head"]
ZOO_MODELS = ["efficientnet_b0", "mobilenet_v3_small", "regnet_y_400mf", "resnext50_32x4d",
              "shufflenet_v2_x0_5", "densenet121", "inception_v3"]
INPUT_SIZE = {"convnext_tiny": 64, "lraspp_mobilenet_v3_large": 128, "ops_decoder": 40}


def randomize_norms_and_scales(model, seed):
    """LayerNorm affine terms random; ConvNeXt's tiny layer_scale made O(1)."""
    gen = torch.Generator().manual_seed(seed + 2)
    n = 0
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, torch.nn.LayerNorm) and mod.elementwise_affine:
                mod.weight.copy_(torch.empty_like(mod.weight).uniform_(0.5, 1.5, generator=gen))
                mod.bias.copy_(torch.randn(mod.bias.shape, generator=gen) * 0.2)
                n += 1
            scale = getattr(mod, "layer_scale", None)
            if isinstance(scale, torch.nn.Parameter):
                scale.copy_(torch.empty_like(scale).uniform_(0.5, 1.0, generator=gen))
                n += 1
    return n


def calibrate_batchnorm(model, seed, size=224, batch_shape=None):
    """Give every BatchNorm realistic, non-trivial statistics and affine terms,
    from two seeded random batches of batch_shape (default 4x3xSIZExSIZE)."""
    bns = [mod for mod in model.modules() if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return 0
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        # Random gamma/beta first so the calibrated statistics see them.
        for bn in bns:
            bn.weight.copy_(torch.empty_like(bn.weight).uniform_(0.5, 1.5, generator=gen))
            bn.bias.copy_(torch.randn(bn.bias.shape, generator=gen) * 0.2)
            bn.reset_running_stats()
            bn.momentum = None  # cumulative average over the calibration batches
        model.train()
        for _ in range(2):
            model(torch.randn(tuple(batch_shape or (4, 3, size, size)), generator=gen))
        # Perturb the variance a little so it is not exactly the batch statistic.
        for bn in bns:
            bn.running_var.mul_(torch.empty_like(bn.running_var).uniform_(0.8, 1.25, generator=gen))
    model.eval()
    return len(bns)


class SecondHead(torch.nn.Module):
    """A backbone's features -> 1x1 conv to 32 channels -> ReLU -> global average."""

    def __init__(self, features, channels):
        super().__init__()
        self.features = features
        gen = torch.Generator().manual_seed(SEED + 7)
        self.head = torch.nn.Conv2d(channels, 32, 1)
        with torch.no_grad():
            self.head.weight.copy_(torch.randn(self.head.weight.shape, generator=gen) * 0.05)
            self.head.bias.copy_(torch.randn(self.head.bias.shape, generator=gen) * 0.1)

    def forward(self, x):
        return F.adaptive_avg_pool2d(F.relu(self.head(self.features(x))), 1).flatten(1)


def write_model(model, x, y, out_dir, name):
    """Writes OUT_DIR/NAME.onnx (opset OPSET, input "input", output "output",
    TrainingMode.PRESERVE so BatchNormalization stays), NAME.input.npy and
    NAME.output.npy; the .onnx appears last, so its presence means complete.
    Returns the .onnx path. Shared with export_mlperf_tiny.py."""
    # The exporter warns about constant folding under PRESERVE; the model is in
    # eval mode, so folding cannot touch learnable state.
    warnings.filterwarnings("ignore", message=".*constant folding.*")
    onnx_path = os.path.join(out_dir, f"{name}.onnx")
    tmp_path = onnx_path + ".tmp"
    torch.onnx.export(
        model,
        torch.from_numpy(x),
        tmp_path,
        opset_version=OPSET,
        input_names=["input"],
        output_names=["output"],
        training=torch.onnx.TrainingMode.PRESERVE,
        do_constant_folding=True,
    )
    np.save(os.path.join(out_dir, f"{name}.input.npy"), x)
    np.save(os.path.join(out_dir, f"{name}.output.npy"), y)
    os.replace(tmp_path, onnx_path)
    return onnx_path


def export_one(name, out_dir):
    second_head = name in SECOND_HEAD_MODELS
    base = name.replace("_second_head", "") if second_head else name
    torch.manual_seed(SEED)
    model = build(base)
    size = INPUT_SIZE.get(name, 224)
    randomize_norms_and_scales(model, SEED)
    n_bn = calibrate_batchnorm(model, SEED, size)
    if second_head:
        model = SecondHead(model.features, model.last_channel)
    model.eval()

    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((1, 3, size, size), dtype=np.float32)
    with torch.no_grad():
        y = model(torch.from_numpy(x)).numpy().astype(np.float32)

    onnx_path = write_model(model, x, y, out_dir, name)

    import onnx  # only for the summary line; the export itself does not need it
    ops = [n.op_type for n in onnx.load(onnx_path).graph.node]
    print(f"{name}: {len(ops)} nodes, {ops.count('BatchNormalization')} BatchNormalization "
          f"({n_bn} BN modules), output {tuple(y.shape)} max|y|={np.abs(y).max():.4g} "
          f"std={y.std():.4g}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--models", nargs="*", default=MODELS,
                    choices=MODELS + OPS_MODELS + EXTRA_MODELS + SECOND_HEAD_MODELS + ZOO_MODELS)
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    for name in args.models:
        export_one(name, args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
