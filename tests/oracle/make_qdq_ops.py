#!/usr/bin/python3
"""Write small single-op quantized (QDQ) ONNX models for tests/integration/qdq_oracle.sh.

    make_qdq_ops.py OUT_DIR

Every model (opset 13) takes float32 input(s), quantizes each with
QuantizeLinear -> DequantizeLinear on a grid calibrated from that input's
min/max (so the values use most of the 256 codes), runs one op on the
dequantized values and ends with QuantizeLinear -> DequantizeLinear on a grid
calibrated from the float output's min/max: the float32 output lies on the grid
(q - zero_point) * OUTPUT_SCALE. Constant weights are int8, symmetric per
output channel (zero point 0) and dequantized with DequantizeLinear(axis);
biases are int32 with scale x_scale * w_scale[c] (DequantizeLinear axis 0).

This is the form onnxruntime's QDQ transformers fuse into its int8 kernels
(QLinearConv, QGemm, QLinearMatMul, QLinearAdd, QLinearAveragePool, ...).
qlinearconv / qlinearmatmul use the QLinearConv / QLinearMatMul operators
themselves between a QuantizeLinear of the input and a DequantizeLinear of the
output.

Weights use 7 of the 8 bits (|q| <= 63, as onnxruntime's quantizer does with
reduce_range): on x86 CPUs without VNNI (AVX2, AVX-512F) onnxruntime's u8 x s8
kernels add pairs of 8-bit products in int16 (VPMADDUBSW), which saturates for
|w| > 64 next to large activations; with full-range weights its int8 results
then differed from its own reference (--opt disabled) by up to 80 steps of
the output grid on these models (AVX2 machine), which says nothing about
tessera. With |q| <= 63 no pair can overflow (2 * 255 * 63 < 32768) and the
kernels are exact.

Activations are int8 unless noted (conv_uint8: uint8 with a non-zero zero
point); activation grids are asymmetric (zero point from the range, e.g. -128
after a Relu). MaxPool's output grid is its input's: its outputs are a subset
of its input values (quantization tools tie the two, and onnxruntime runs
MaxPool on int8 only then).

Writes OUT_DIR/NAME.onnx, NAME.input.npy (or NAME.input0.npy, NAME.input1.npy
in the model's input order) and OUT_DIR/manifest.txt with one line per model:
    NAME OUTPUT_SCALE INPUT_FILES...
OUTPUT_SCALE is printed with enough digits to be the float32 in the model.
Seeded (numpy default_rng(20240601)); each model checked with onnx.checker.
"""
import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEED = 20240601
OPSET = 13
QRANGE = {np.int8: (-128, 127), np.uint8: (0, 255)}
W_MAX = 63  # weight codes in [-63, 63]: see the module docstring


# ---------------------------------------------------------------- grids ----

class Grid:
    """A per-tensor activation grid: value = (q - zero_point) * scale."""

    def __init__(self, lo, hi, dtype):
        qmin, qmax = QRANGE[dtype]
        lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)  # 0 must be exact
        self.dtype = dtype
        self.scale = np.float32((hi - lo) / (qmax - qmin))
        self.zero_point = int(np.clip(np.rint(qmin - lo / float(self.scale)), qmin, qmax))

    @classmethod
    def of(cls, values, dtype=np.int8):
        return cls(np.min(values), np.max(values), dtype)

    def fake_quant(self, x):
        """QuantizeLinear then DequantizeLinear, ONNX semantics (round half to even, saturate)."""
        qmin, qmax = QRANGE[self.dtype]
        q = np.clip(np.rint(np.asarray(x, np.float32) / self.scale) + self.zero_point, qmin, qmax)
        return ((q - self.zero_point) * self.scale).astype(np.float32)


class Builder:
    """Collects nodes and initializers of one model."""

    def __init__(self, name):
        self.name = name
        self.nodes = []
        self.inits = []
        self.inputs = []
        self.n = 0

    def const(self, name, array):
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op, inputs, out, **attrs):
        """Appends op(inputs) -> out; returns out."""
        self.n += 1
        self.nodes.append(helper.make_node(op, inputs, [out], name=f"{op}_{self.n}", **attrs))
        return out

    def input(self, name, shape):
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        return name

    def grid_consts(self, base, grid):
        s = self.const(f"{base}_scale", np.array(grid.scale, np.float32))
        z = self.const(f"{base}_zero_point", np.array(grid.zero_point, grid.dtype))
        return s, z

    def quantize(self, x, grid, base):
        """x (float) -> QuantizeLinear: the int8/uint8 tensor's name."""
        s, z = self.grid_consts(base, grid)
        return self.node("QuantizeLinear", [x, s, z], f"{base}_q")

    def dequantize(self, q, grid, base, out=None):
        s, z = self.grid_consts(base + "_dq", grid)
        return self.node("DequantizeLinear", [q, s, z], out or f"{base}_dq")

    def qdq(self, x, grid, base, out=None):
        return self.dequantize(self.quantize(x, grid, base), grid, base, out)

    def weight(self, base, w_q, w_scale, axis):
        """Constant int8 weight, per-channel scales along `axis`, dequantized."""
        q = self.const(f"{base}_quantized", w_q.astype(np.int8))
        s = self.const(f"{base}_scale", w_scale.astype(np.float32))
        z = self.const(f"{base}_zero_point", np.zeros(w_scale.shape, np.int8))
        return self.node("DequantizeLinear", [q, s, z], f"{base}_dq", axis=axis)

    def bias(self, base, b_q, b_scale):
        q = self.const(f"{base}_quantized", b_q.astype(np.int32))
        s = self.const(f"{base}_scale", b_scale.astype(np.float32))
        return self.node("DequantizeLinear", [q, s], f"{base}_dq", axis=0)

    def finish(self, output, out_shape):
        graph = helper.make_graph(self.nodes, self.name, self.inputs,
                                  [helper.make_tensor_value_info(output, TensorProto.FLOAT, list(out_shape))],
                                  initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="tessera make_qdq_ops.py")
        model.ir_version = 8
        onnx.checker.check_model(model, full_check=True)
        return model


# ------------------------------------------------------- float reference ----
# Only used to calibrate the output grid (its min/max), in float64.

def conv2d(x, w, b=None, stride=1, pads=(0, 0, 0, 0), group=1):
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    pt, pl, pb, pr = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    ho = (h + pt + pb - kh) // stride + 1
    wo = (wd + pl + pr - kw) // stride + 1
    out = np.zeros((n, m, ho, wo))
    mg = m // group
    for g in range(group):
        xs = xp[:, g * cg:(g + 1) * cg]
        ws = w[g * mg:(g + 1) * mg].astype(np.float64)
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i:i + stride * (ho - 1) + 1:stride, j:j + stride * (wo - 1) + 1:stride]
                out[:, g * mg:(g + 1) * mg] += np.einsum("nchw,mc->nmhw", patch, ws[:, :, i, j])
    if b is not None:
        out += b.reshape(1, -1, 1, 1)
    return out


def pool2d(x, k, stride, reduce):
    n, c, h, w = x.shape
    ho, wo = (h - k) // stride + 1, (w - k) // stride + 1
    win = np.stack([x[:, :, i:i + stride * (ho - 1) + 1:stride, j:j + stride * (wo - 1) + 1:stride]
                    for i in range(k) for j in range(k)])
    return reduce(win.astype(np.float64), axis=0)


# -------------------------------------------------------------- helpers ----

class Gen:
    def __init__(self, out_dir):
        self.out_dir = out_dir
        self.rng = np.random.default_rng(SEED)
        self.manifest = []

    def normal(self, shape, sigma=1.0):
        return (self.rng.standard_normal(shape) * sigma).astype(np.float32)

    def weights_per_channel(self, shape, axis):
        """Float weights ~ N(0, 1/fan_in) quantized int8 symmetric per channel along axis (|q| <= W_MAX)."""
        fan_in = int(np.prod(shape)) // shape[axis]
        w = self.normal(shape, 1.0 / np.sqrt(fan_in))
        red = tuple(a for a in range(len(shape)) if a != axis)
        scale = (np.max(np.abs(w), axis=red) / W_MAX).astype(np.float32)
        bshape = [1] * len(shape)
        bshape[axis] = -1
        w_q = np.clip(np.rint(w / scale.reshape(bshape)), -W_MAX, W_MAX).astype(np.int8)
        w_dq = w_q.astype(np.float64) * scale.reshape(bshape).astype(np.float64)
        return w_q, scale, w_dq

    def bias_int32(self, n, x_scale, w_scale):
        b = self.normal((n,), 0.2)
        b_scale = (np.float32(x_scale) * w_scale).astype(np.float32)
        b_q = np.rint(b / b_scale).astype(np.int32)
        return b_q, b_scale, b_q.astype(np.float64) * b_scale.astype(np.float64)

    def save(self, name, model, inputs, y_grid):
        onnx.save(model, os.path.join(self.out_dir, f"{name}.onnx"))
        files = [f"{name}.input.npy"] if len(inputs) == 1 else [f"{name}.input{i}.npy" for i in range(len(inputs))]
        for f, x in zip(files, inputs):
            np.save(os.path.join(self.out_dir, f), x.astype(np.float32))
        self.manifest.append(f"{name} {float(y_grid.scale)!r} {' '.join(files)}")


# --------------------------------------------------------------- models ----

def conv_model(g, name, x_shape, w_shape, *, stride=1, pads=(0, 0, 0, 0), group=1, relu=False, act=np.int8):
    x = g.normal(x_shape)
    xg = Grid.of(x, act)
    x_dq = xg.fake_quant(x)
    w_q, w_s, w_dq = g.weights_per_channel(w_shape, 0)
    b_q, b_s, b_dq = g.bias_int32(w_shape[0], xg.scale, w_s)
    y = conv2d(x_dq, w_dq, b_dq, stride, pads, group)
    if relu:
        y = np.maximum(y, 0)
    yg = Grid.of(y, act)

    b = Builder(name)
    xin = b.input("x", x_shape)
    xdq = b.qdq(xin, xg, "x")
    wdq = b.weight("w", w_q, w_s, 0)
    bdq = b.bias("b", b_q, b_s)
    attrs = dict(kernel_shape=list(w_shape[2:]), strides=[stride, stride], pads=list(pads))
    if group != 1:
        attrs["group"] = group
    yf = b.node("Conv", [xdq, wdq, bdq], "conv", **attrs)
    if relu:
        yf = b.node("Relu", [yf], "relu")
    out = b.qdq(yf, yg, "y", out="y")
    g.save(name, b.finish(out, y.shape), [x], yg)


def gemm_model(g, name, trans_b):
    x = g.normal((1, 64))
    xg = Grid.of(x)
    x_dq = xg.fake_quant(x).astype(np.float64)
    n, k = 32, 64
    # transB=1: W is [N, K], per output channel = axis 0; transB=0: W is [K, N], per column = axis 1.
    w_shape, axis = ((n, k), 0) if trans_b else ((k, n), 1)
    w_q, w_s, w_dq = g.weights_per_channel(w_shape, axis)
    b_q, b_s, b_dq = g.bias_int32(n, xg.scale, w_s)
    y = x_dq @ (w_dq.T if trans_b else w_dq) + b_dq
    yg = Grid.of(y)

    b = Builder(name)
    xdq = b.qdq(b.input("x", x.shape), xg, "x")
    wdq = b.weight("w", w_q, w_s, axis)
    bdq = b.bias("b", b_q, b_s)
    yf = b.node("Gemm", [xdq, wdq, bdq], "gemm", transB=1 if trans_b else 0)
    out = b.qdq(yf, yg, "y", out="y")
    g.save(name, b.finish(out, y.shape), [x], yg)


def matmul_const(g, name="matmul_const"):
    x = g.normal((1, 6, 64))
    xg = Grid.of(x)
    x_dq = xg.fake_quant(x).astype(np.float64)
    w_q, w_s, w_dq = g.weights_per_channel((64, 24), 1)
    y = x_dq @ w_dq
    yg = Grid.of(y)

    b = Builder(name)
    xdq = b.qdq(b.input("x", x.shape), xg, "x")
    wdq = b.weight("w", w_q, w_s, 1)
    yf = b.node("MatMul", [xdq, wdq], "matmul")
    out = b.qdq(yf, yg, "y", out="y")
    g.save(name, b.finish(out, y.shape), [x], yg)


def matmul_two(g, name="matmul_two"):
    a = g.normal((6, 32))
    c = g.normal((32, 10))
    ag, cg = Grid.of(a), Grid.of(c)
    y = ag.fake_quant(a).astype(np.float64) @ cg.fake_quant(c).astype(np.float64)
    yg = Grid.of(y)

    b = Builder(name)
    adq = b.qdq(b.input("a", a.shape), ag, "a")
    cdq = b.qdq(b.input("b", c.shape), cg, "b")
    yf = b.node("MatMul", [adq, cdq], "matmul")
    out = b.qdq(yf, yg, "y", out="y")
    g.save(name, b.finish(out, y.shape), [a, c], yg)


def add_model(g, name, relu):
    shape = (1, 8, 12, 12)
    a = g.normal(shape)
    c = g.normal(shape, 3.0)  # a clearly different grid
    ag, cg = Grid.of(a), Grid.of(c)
    y = ag.fake_quant(a).astype(np.float64) + cg.fake_quant(c).astype(np.float64)
    if relu:
        y = np.maximum(y, 0)
    yg = Grid.of(y)

    b = Builder(name)
    adq = b.qdq(b.input("a", shape), ag, "a")
    cdq = b.qdq(b.input("b", shape), cg, "b")
    yf = b.node("Add", [adq, cdq], "add")
    if relu:
        yf = b.node("Relu", [yf], "relu")
    out = b.qdq(yf, yg, "y", out="y")
    g.save(name, b.finish(out, y.shape), [a, c], yg)


def pool_model(g, name, op, x_shape, k=None, stride=None):
    x = g.normal(x_shape)
    xg = Grid.of(x)
    x_dq = xg.fake_quant(x)
    if op == "MaxPool":
        y = pool2d(x_dq, k, stride, np.max)
        yg = xg  # see the module docstring
        attrs = dict(kernel_shape=[k, k], strides=[stride, stride])
    elif op == "AveragePool":
        y = pool2d(x_dq, k, stride, np.mean)
        yg = Grid.of(y)
        attrs = dict(kernel_shape=[k, k], strides=[stride, stride])
    else:
        y = x_dq.astype(np.float64).mean(axis=(2, 3), keepdims=True)
        yg = Grid.of(y)
        attrs = {}

    b = Builder(name)
    xdq = b.qdq(b.input("x", x_shape), xg, "x")
    yf = b.node(op, [xdq], "pool", **attrs)
    out = b.qdq(yf, yg, "y", out="y")
    g.save(name, b.finish(out, y.shape), [x], yg)


def concat_model(g, name="concat"):
    a = g.normal((1, 8, 12, 12))
    c = g.normal((1, 4, 12, 12), 2.0)
    ag, cg = Grid.of(a), Grid.of(c)
    y = np.concatenate([ag.fake_quant(a), cg.fake_quant(c)], axis=1)
    yg = Grid.of(y)

    b = Builder(name)
    adq = b.qdq(b.input("a", a.shape), ag, "a")
    cdq = b.qdq(b.input("b", c.shape), cg, "b")
    yf = b.node("Concat", [adq, cdq], "concat", axis=1)
    out = b.qdq(yf, yg, "y", out="y")
    g.save(name, b.finish(out, y.shape), [a, c], yg)


def qlinearconv(g, name="qlinearconv"):
    x_shape, w_shape = (1, 8, 12, 12), (16, 8, 3, 3)
    x = g.normal(x_shape)
    xg = Grid.of(x)
    w_q, w_s, w_dq = g.weights_per_channel(w_shape, 0)
    b_q, b_s, b_dq = g.bias_int32(w_shape[0], xg.scale, w_s)
    y = conv2d(xg.fake_quant(x), w_dq, b_dq, 1, (1, 1, 1, 1), 1)
    yg = Grid.of(y)

    b = Builder(name)
    xq = b.quantize(b.input("x", x_shape), xg, "x")
    xs, xz = b.grid_consts("x_conv", xg)
    w = b.const("w_quantized", w_q)
    ws = b.const("w_scale", w_s)
    wz = b.const("w_zero_point", np.zeros(w_s.shape, np.int8))
    ys, yz = b.grid_consts("y", yg)
    bias = b.const("b_quantized", b_q)
    yq = b.node("QLinearConv", [xq, xs, xz, w, ws, wz, ys, yz, bias], "y_q",
                kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])
    out = b.dequantize(yq, yg, "y", out="y")
    g.save(name, b.finish(out, y.shape), [x], yg)


def qlinearmatmul(g, name="qlinearmatmul"):
    x = g.normal((4, 64))
    xg = Grid.of(x)
    w_q, w_s, w_dq = g.weights_per_channel((64, 24), 1)
    y = xg.fake_quant(x).astype(np.float64) @ w_dq
    yg = Grid.of(y)

    b = Builder(name)
    xq = b.quantize(b.input("x", x.shape), xg, "x")
    xs, xz = b.grid_consts("x_mm", xg)
    w = b.const("w_quantized", w_q)
    ws = b.const("w_scale", w_s)
    wz = b.const("w_zero_point", np.zeros(w_s.shape, np.int8))
    ys, yz = b.grid_consts("y", yg)
    yq = b.node("QLinearMatMul", [xq, xs, xz, w, ws, wz, ys, yz], "y_q")
    out = b.dequantize(yq, yg, "y", out="y")
    g.save(name, b.finish(out, y.shape), [x], yg)


MODELS = {
    "conv3x3": lambda g: conv_model(g, "conv3x3", (1, 8, 12, 12), (16, 8, 3, 3), pads=(1, 1, 1, 1), relu=True),
    "conv_stride2": lambda g: conv_model(g, "conv_stride2", (1, 8, 15, 15), (12, 8, 5, 5), stride=2),
    "conv_depthwise": lambda g: conv_model(g, "conv_depthwise", (1, 8, 12, 12), (8, 1, 3, 3), pads=(1, 1, 1, 1),
                                           group=8),
    "conv_grouped": lambda g: conv_model(g, "conv_grouped", (1, 8, 12, 12), (12, 4, 3, 3), pads=(1, 1, 1, 1),
                                         group=2),
    "conv_1x1": lambda g: conv_model(g, "conv_1x1", (1, 8, 12, 12), (16, 8, 1, 1)),
    "conv_uint8": lambda g: conv_model(g, "conv_uint8", (1, 8, 12, 12), (16, 8, 3, 3), pads=(1, 1, 1, 1),
                                       act=np.uint8),
    "gemm": lambda g: gemm_model(g, "gemm", True),
    "gemm_noT": lambda g: gemm_model(g, "gemm_noT", False),
    "matmul_const": matmul_const,
    "matmul_two": matmul_two,
    "add": lambda g: add_model(g, "add", False),
    "add_relu": lambda g: add_model(g, "add_relu", True),
    "maxpool": lambda g: pool_model(g, "maxpool", "MaxPool", (1, 8, 13, 13), 3, 2),
    "averagepool": lambda g: pool_model(g, "averagepool", "AveragePool", (1, 8, 12, 12), 2, 2),
    "globalaveragepool": lambda g: pool_model(g, "globalaveragepool", "GlobalAveragePool", (1, 16, 7, 7)),
    "concat": concat_model,
    "qlinearconv": qlinearconv,
    "qlinearmatmul": qlinearmatmul,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    g = Gen(args.out_dir)
    for make in MODELS.values():  # one generator, drawn from in this fixed order
        make(g)
    with open(os.path.join(args.out_dir, "manifest.txt"), "w") as f:
        f.write("\n".join(g.manifest) + "\n")
    print(f"make_qdq_ops.py: wrote {len(g.manifest)} models into {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
