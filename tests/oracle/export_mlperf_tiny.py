#!/usr/bin/python3
"""Export the four MLPerf Tiny v0.5/v1.0 reference networks with seeded random weights.

The architectures follow the Keras reference definitions of MLPerf Tiny
(github.com/mlcommons/tiny, benchmark/training/*: keyword_spotting/keras_model.py
"ds_cnn", visual_wake_words/vww_model.py, image_classification/keras_model.py
resnet_v1_eembc with 16 filters, anomaly_detection/keras_model.py), rebuilt
layer by layer in PyTorch. Dropout is left out (it is the identity at inference).

  name                  input       network
  ds_cnn_kws            1x1x49x10   keyword spotting DS-CNN, 12 classes, softmax
  mobilenet_v1_025_vww  1x3x96x96   MobileNetV1 alpha 0.25 (13 depthwise-separable
                                    blocks), 2 classes (visual wake words), softmax
  resnet8_cifar         1x3x32x32   ResNet-8 (3 residual stacks of 16/32/64), 10
                                    classes (CIFAR-10), softmax
  fc_autoencoder        1x640       dense autoencoder 640-128x4-8-128x4-640 with
                                    BatchNorm1d (anomaly detection, ToyCar)

Parameter counts. MLPerf Tiny itself quotes int8 model sizes (DS-CNN ~53 KB,
MobileNet 325 KB, ResNet 96 KB, FC-AutoEncoder 270 KB); the parameter counts
usually quoted for these networks are Keras model.summary() "Total params" of
the reference models, which count BatchNormalization's moving mean and
variance as (non-trainable) parameters. Worked out from the reference
definitions (every Keras Conv2D, DepthwiseConv2D and Dense has a bias):

  name                  quoted (approx.)  Keras total  Keras trainable
  ds_cnn_kws            38.6k (see below)    24,908        23,756
  mobilenet_v1_025_vww  221k                221,794       216,322
  resnet8_cifar         78k                  78,666        78,186
  fc_autoencoder        270k                269,992       267,928

The exporter checks that the PyTorch model has the Keras total (parameters plus
BN running mean/var) and trainable (nn.Module.parameters()) counts within 1%.
For ds_cnn_kws the ~38.6k sometimes quoted does not follow from the MLPerf Tiny
reference definition: a 10x4 conv with 64 filters (2,624), four blocks of
depthwise 3x3 (640) + pointwise 64->64 (4,160) and a 64->12 dense (780), plus
nine BatchNorms of 64 (256 each), give 24,908 (23,756 trainable; NXP's eIQ
model zoo lists the same 23,756 for the MLPerf Tiny DS-CNN). Where 38.6k comes
from is not verified here (possibly the DS-CNN-S entry of the "Hello Edge"
paper, arXiv 1711.07128, a different accounting); the check uses 24,908.

Padding. Keras padding='same' pads the extra row/column at the bottom/right
when the total padding is odd. Where that happens (the stride-2 convolutions)
the module is an explicit nn.ZeroPad2d followed by an unpadded convolution, so
a trained reference checkpoint would map one-to-one and the ONNX file has a
Pad in front of those Convs; symmetric cases use the Conv's own padding.
  * ds_cnn_kws: the 10x4 stride-2 stem pads 49x10 by (top 4, bottom 5, left 1,
    right 1), giving a 25x5 map. The reference then average-pools with
    pool_size (int(49/2), int(10/2)) = (24, 5), 'valid': one window over rows
    0-23, so the last row of the 25x5 map is not averaged. This is kept
    (AvgPool2d((24, 5))) rather than a pool over the whole map.
  * mobilenet_v1_025_vww, resnet8_cifar: every stride-2 3x3 convolution on an
    even size pads (top 0, bottom 1, left 0, right 1); ResNet's 1x1 stride-2
    shortcut needs no padding. The final pools are AvgPool2d with the exact
    map size (3 and 8), as the reference's AveragePooling2D.
With torch 1.13 and TrainingMode.PRESERVE the exporter does not fold the
ZeroPad2d's pads computation, so each such Pad is fed by a small constant
subgraph (Constant, ConstantOfShape, Concat, Reshape, Slice, Transpose, Cast),
and AvgPool2d exports as a Pad with zero pads before the AveragePool.

For each model this writes, into OUT_DIR:
  NAME.onnx         the model (opset 13, fixed input "input", output "output")
  NAME.input.npy    a seeded N(0,1) float32 input of the shape above (the
                    autoencoder's too)
  NAME.output.npy   PyTorch's output for that input (eval mode)

Weights are random but reproducible (torch.manual_seed per model). As in
export_torchvision.py, BatchNorm running statistics are calibrated on a
seeded random batch (activations stay O(1)) and gamma/beta are randomised, so
mean != 0, var != 1, gamma != 1, beta != 0; the export uses
TrainingMode.PRESERVE on the eval-mode model so the BatchNormalization nodes
stay in the ONNX file and tessera's own BN folding is exercised.

Run with the Debian interpreter:
  /usr/bin/python3 export_mlperf_tiny.py OUT_DIR [--models NAME ...]
  /usr/bin/python3 export_mlperf_tiny.py --list
"""
import argparse
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_torchvision import OPSET as TORCHVISION_OPSET, calibrate_batchnorm, write_model  # noqa: E402

SEED = 20240601
OPSET = 13
assert OPSET == TORCHVISION_OPSET, "write_model exports at export_torchvision's opset"

MODELS = ["ds_cnn_kws", "mobilenet_v1_025_vww", "resnet8_cifar", "fc_autoencoder"]
INPUT_SHAPE = {
    "ds_cnn_kws": (1, 1, 49, 10),
    "mobilenet_v1_025_vww": (1, 3, 96, 96),
    "resnet8_cifar": (1, 3, 32, 32),
    "fc_autoencoder": (1, 640),
}
# (Keras total params incl. BN moving mean/var, Keras trainable params) of the
# MLPerf Tiny reference definitions; see the docstring.
REFERENCE_PARAMS = {
    "ds_cnn_kws": (24908, 23756),
    "mobilenet_v1_025_vww": (221794, 216322),
    "resnet8_cifar": (78666, 78186),
    "fc_autoencoder": (269992, 267928),
}
PARAM_TOLERANCE = 0.01


def same_padding(size, kernel, stride):
    """Keras/TensorFlow padding='same' along one axis: (before, after)."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2, out


def conv_same(cin, cout, kernel, stride, in_hw, groups=1):
    """A Conv2d with Keras 'same' padding for an in_hw input; returns (module, out_hw).

    Symmetric padding goes into the Conv itself; asymmetric padding (odd total,
    the extra row/column at the bottom/right) becomes a ZeroPad2d in front."""
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    top, bottom, oh = same_padding(in_hw[0], kh, stride)
    left, right, ow = same_padding(in_hw[1], kw, stride)
    if top == bottom and left == right:
        return nn.Conv2d(cin, cout, (kh, kw), stride=stride, padding=(top, left), groups=groups), (oh, ow)
    conv = nn.Conv2d(cin, cout, (kh, kw), stride=stride, padding=0, groups=groups)
    return nn.Sequential(nn.ZeroPad2d((left, right, top, bottom)), conv), (oh, ow)


def conv_bn_relu(cin, cout, kernel, stride, in_hw, groups=1):
    conv, out_hw = conv_same(cin, cout, kernel, stride, in_hw, groups)
    return [conv, nn.BatchNorm2d(cout), nn.ReLU()], out_hw


class DSCNN(nn.Module):
    """MLPerf Tiny keyword spotting DS-CNN (49x10 MFCC input, 12 classes)."""

    def __init__(self, filters=64, classes=12, in_hw=(49, 10)):
        super().__init__()
        layers, hw = conv_bn_relu(1, filters, (10, 4), 2, in_hw)
        for _ in range(4):
            dw, hw = conv_bn_relu(filters, filters, 3, 1, hw, groups=filters)
            pw, hw = conv_bn_relu(filters, filters, 1, 1, hw)
            layers += dw + pw
        self.features = nn.Sequential(*layers)
        assert hw == (25, 5), hw
        # Reference: AveragePooling2D(pool_size=(int(49/2), int(10/2))), 'valid'.
        self.pool = nn.AvgPool2d((in_hw[0] // 2, in_hw[1] // 2))
        self.fc = nn.Linear(filters, classes)
        self.softmax = nn.Softmax(dim=1)

    def forward(self, x):
        x = self.pool(self.features(x))
        return self.softmax(self.fc(torch.flatten(x, 1)))


class MobileNetV1VWW(nn.Module):
    """MLPerf Tiny visual wake words MobileNetV1, alpha 0.25, 96x96, 2 classes."""

    # (output channels, stride) of the 13 depthwise-separable blocks.
    BLOCKS = [(16, 1), (32, 2), (32, 1), (64, 2), (64, 1), (128, 2),
              (128, 1), (128, 1), (128, 1), (128, 1), (128, 1), (256, 2), (256, 1)]

    def __init__(self, first=8, classes=2, in_hw=(96, 96)):
        super().__init__()
        layers, hw = conv_bn_relu(3, first, 3, 2, in_hw)
        cin = first
        for cout, stride in self.BLOCKS:
            dw, hw = conv_bn_relu(cin, cin, 3, stride, hw, groups=cin)
            pw, hw = conv_bn_relu(cin, cout, 1, 1, hw)
            layers += dw + pw
            cin = cout
        self.features = nn.Sequential(*layers)
        assert hw == (3, 3), hw
        self.pool = nn.AvgPool2d(hw)  # AveragePooling2D(pool_size=x.shape[1:3])
        self.fc = nn.Linear(cin, classes)
        self.softmax = nn.Softmax(dim=1)

    def forward(self, x):
        x = self.pool(self.features(x))
        return self.softmax(self.fc(torch.flatten(x, 1)))


class ResidualStack(nn.Module):
    """conv3x3(stride)-BN-ReLU-conv3x3-BN, plus the input (through a 1x1 conv
    with the same stride, no BN, when the shape changes), then ReLU."""

    def __init__(self, cin, cout, stride, in_hw):
        super().__init__()
        first, hw = conv_bn_relu(cin, cout, 3, stride, in_hw)
        second, hw = conv_same(cout, cout, 3, 1, hw)
        self.body = nn.Sequential(*first, second, nn.BatchNorm2d(cout))
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut, _ = conv_same(cin, cout, 1, stride, in_hw)
        self.relu = nn.ReLU()
        self.out_hw = hw

    def forward(self, x):
        skip = x if self.shortcut is None else self.shortcut(x)
        return self.relu(skip + self.body(x))


class ResNet8(nn.Module):
    """MLPerf Tiny image classification ResNet-8 (resnet_v1_eembc, 16 filters)."""

    def __init__(self, filters=16, classes=10, in_hw=(32, 32)):
        super().__init__()
        stem, hw = conv_bn_relu(3, filters, 3, 1, in_hw)
        self.stem = nn.Sequential(*stem)
        stacks = []
        cin = filters
        for cout, stride in [(filters, 1), (2 * filters, 2), (4 * filters, 2)]:
            stacks.append(ResidualStack(cin, cout, stride, hw))
            hw = stacks[-1].out_hw
            cin = cout
        self.stacks = nn.Sequential(*stacks)
        assert hw == (8, 8), hw
        self.pool = nn.AvgPool2d(hw)
        self.fc = nn.Linear(cin, classes)
        self.softmax = nn.Softmax(dim=1)

    def forward(self, x):
        x = self.pool(self.stacks(self.stem(x)))
        return self.softmax(self.fc(torch.flatten(x, 1)))


class FCAutoencoder(nn.Module):
    """MLPerf Tiny anomaly detection autoencoder: Dense-BN-ReLU 128 x4, 8,
    128 x4, then Dense 640 (linear output)."""

    def __init__(self, dim=640, hidden=128, bottleneck=8):
        super().__init__()
        widths = [hidden] * 4 + [bottleneck] + [hidden] * 4
        layers = []
        cin = dim
        for w in widths:
            layers += [nn.Linear(cin, w), nn.BatchNorm1d(w), nn.ReLU()]
            cin = w
        layers.append(nn.Linear(cin, dim))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


def build(name):
    if name == "ds_cnn_kws":
        return DSCNN()
    if name == "mobilenet_v1_025_vww":
        return MobileNetV1VWW()
    if name == "resnet8_cifar":
        return ResNet8()
    if name == "fc_autoencoder":
        return FCAutoencoder()
    raise ValueError(f"unknown model {name}")


def count_params(model):
    """(Keras-style total incl. BN running mean/var, trainable)."""
    trainable = sum(p.numel() for p in model.parameters())
    stats = sum(mod.running_mean.numel() + mod.running_var.numel()
                for mod in model.modules() if isinstance(mod, nn.modules.batchnorm._BatchNorm))
    return trainable + stats, trainable


def check_params(name, model):
    total, trainable = count_params(model)
    ref_total, ref_trainable = REFERENCE_PARAMS[name]
    for what, got, ref in (("total", total, ref_total), ("trainable", trainable, ref_trainable)):
        if abs(got - ref) > PARAM_TOLERANCE * ref:
            raise AssertionError(f"{name}: {what} parameter count {got} is not within "
                                 f"{PARAM_TOLERANCE:.0%} of the reference {ref}")
    return total, trainable


def export_one(name, out_dir):
    start = time.monotonic()
    torch.manual_seed(SEED)
    model = build(name)
    total, trainable = check_params(name, model)
    shape = INPUT_SHAPE[name]
    # Batches of 8: BatchNorm1d (the autoencoder) has one value per channel
    # and sample, so it needs more than the conv nets' 4 for stable statistics.
    n_bn = calibrate_batchnorm(model, SEED, batch_shape=(8,) + tuple(shape[1:]))
    model.eval()

    rng = np.random.default_rng(SEED)
    x = rng.standard_normal(shape, dtype=np.float32)
    with torch.no_grad():
        y = model(torch.from_numpy(x)).numpy().astype(np.float32)

    onnx_path = write_model(model, x, y, out_dir, name)
    seconds = time.monotonic() - start

    import onnx  # only for the summary line; the export itself does not need it
    ops = [n.op_type for n in onnx.load(onnx_path).graph.node]
    kinds = ",".join(f"{op}x{ops.count(op)}" for op in sorted(set(ops)))
    print(f"{name}: params {total} ({trainable} trainable; reference {REFERENCE_PARAMS[name][0]}), "
          f"{len(ops)} nodes [{kinds}], {n_bn} BN modules, input {'x'.join(map(str, shape))}, "
          f"output {tuple(y.shape)} max|y|={np.abs(y).max():.4g} std={y.std():.4g}, {seconds:.2f}s",
          flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", nargs="?")
    ap.add_argument("--models", nargs="*", default=MODELS, choices=MODELS)
    ap.add_argument("--list", action="store_true", help="print each model's name and input shape, then exit")
    args = ap.parse_args()
    if args.list:
        for name in MODELS:
            print(name, "x".join(map(str, INPUT_SHAPE[name])))
        return 0
    if not args.out_dir:
        ap.error("OUT_DIR is required (unless --list)")
    os.makedirs(args.out_dir, exist_ok=True)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    for name in args.models:
        export_one(name, args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
