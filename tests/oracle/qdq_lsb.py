#!/usr/bin/python3
"""Compare two outputs of a quantized (QDQ) ONNX model in steps of its output grid.

  qdq_lsb.py MODEL.onnx ACTUAL.npy REFERENCE.npy [--max-lsb L] [--output NAME]

The grid is the scale of the DequantizeLinear that writes the graph output
(NAME, default the first output). Prints
  "max D LSB (K of M elements on another code), step S"
and exits 1 when the shapes differ, ACTUAL is not all finite, or D > L
(default 1, plus 1e-3 for float rounding of the division).
"""
import argparse
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def output_step(model, name):
    inits = {t.name: t for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "DequantizeLinear" and n.output[0] == name:
            s = numpy_helper.to_array(inits[n.input[1]]).astype(np.float64)
            if s.size != 1:
                raise SystemExit(f"qdq_lsb.py: output '{name}' is dequantized per axis")
            return float(s.reshape(()))
    raise SystemExit(f"qdq_lsb.py: no DequantizeLinear writes output '{name}'")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("actual")
    ap.add_argument("reference")
    ap.add_argument("--max-lsb", type=float, default=1.0)
    ap.add_argument("--output", default=None)
    a = ap.parse_args()
    model = onnx.load(a.model)
    name = a.output or model.graph.output[0].name
    step = output_step(model, name)
    x, r = np.load(a.actual), np.load(a.reference)
    if x.shape != r.shape:
        print(f"shape {x.shape} != reference {r.shape}")
        return 1
    if not np.all(np.isfinite(x)):
        print("actual holds values that are not finite")
        return 1
    d = np.abs(x.astype(np.float64) - r.astype(np.float64)) / step
    worst = float(d.max()) if d.size else 0.0
    print(f"max {worst:.3f} LSB ({int((d >= 0.5).sum())} of {d.size} elements on another code), step {step:.6g}")
    return 0 if worst <= a.max_lsb + 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
