#!/usr/bin/python3
"""Per-op oracle of a quantized (QDQ) ONNX model against onnxruntime.

  qdq_ops.py MODEL.onnx INPUT.npy TESSERA ORT_RUN_JS WORKDIR [--opt all|disabled] [--max-lsb L]

Issue 16 item 1 asks that tessera's answers match onnxruntime's "exactly or
within 1 LSB, stated per op". End to end that cannot hold for a deep model
in general: two correct implementations round a value that lies within
float32 precision of a rounding tie (x / scale = k + 0.5 ± 1e-7) to
neighbouring codes, and each later layer can widen the difference. So each
op is compared on the same inputs:

  1. onnxruntime runs the whole model once, every activation's
     DequantizeLinear output added to the graph outputs: the values each op
     reads (on their grids).
  2. For every activation QuantizeLinear Q (in graph order) the segment from
     the previous quantized tensors to Q's DequantizeLinear — one op, or an
     op with its data movement (Conv + Relu + Pad), with the QuantizeLinear /
     DequantizeLinear of its inputs, so tessera sees codes exactly as in the
     model — is extracted (onnx.utils.Extractor) and run by `tessera run`
     and by onnxruntime on those values.
  3. Their outputs are compared in steps of Q's grid.

Prints one line per op kind ("Conv+Relu: 13 ops, 124416 values, 2 on a
neighbouring code, max 1 LSB") and a total, and exits 1 when any op differs
by more than L steps (default 1) or a run fails.
"""
import argparse
import collections
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper
from onnx import utils as onnx_utils

# Data movement and shape arithmetic: not named in an op's kind.
MOVES = {"Pad", "Reshape", "Flatten", "Transpose", "Identity", "Squeeze", "Unsqueeze", "Cast", "Constant", "Shape",
         "Gather", "Concat", "ConstantOfShape", "Slice", "Range", "Expand"}


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:2])} exited {r.returncode}: {r.stderr.strip().splitlines()[-1:]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("input")
    ap.add_argument("tessera")
    ap.add_argument("ort_run")
    ap.add_argument("workdir")
    ap.add_argument("--opt", default="disabled")
    ap.add_argument("--max-lsb", type=float, default=1.0)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    model = onnx.shape_inference.infer_shapes(onnx.load(a.model))
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    constants = set(inits)
    for n in g.node:
        if n.op_type == "Constant":
            constants.update(n.output)
    producer = {o: n for n in g.node for o in n.output}
    readers = collections.defaultdict(list)
    for n in g.node:
        for i in n.input:
            readers[i].append(n)
    # Activation quantizations: Q (input not a constant) -> its DequantizeLinear.
    boundaries = []  # (Q node, DQ output name, scale)
    for n in g.node:
        if n.op_type != "QuantizeLinear" or n.input[0] in constants:
            continue
        dqs = [r for r in readers[n.output[0]] if r.op_type == "DequantizeLinear"]
        if not dqs:
            continue
        scale = numpy_helper.to_array(inits[n.input[1]]).astype(np.float64)
        if scale.size != 1:
            raise SystemExit(f"qdq_ops.py: activation {n.input[0]} is quantized per axis")
        boundaries.append((n, dqs[0].output[0], float(scale.reshape(()))))
    by_dq = {dq: q for q, dq, _ in boundaries}

    # 1. onnxruntime's values of every quantized activation.
    full = onnx.ModelProto()
    full.CopyFrom(model)
    infos = {v.name: v for v in list(g.value_info) + list(g.output) + list(g.input)}
    have = {o.name for o in full.graph.output}
    for _, dq, _ in boundaries:
        if dq not in have:
            full.graph.output.append(infos[dq])
    full_path = os.path.join(a.workdir, "all_outputs.onnx")
    onnx.save(full, full_path)
    names = [o.name for o in full.graph.output]
    outs = []
    for i, name in enumerate(names):
        outs += ["--output", os.path.join(a.workdir, f"ort_all_{i}.npy")]
    run(["node", a.ort_run, full_path, "--opt", a.opt, "--input", a.input] + outs)
    value = {name: np.load(os.path.join(a.workdir, f"ort_all_{i}.npy")) for i, name in enumerate(names)}
    graph_inputs = [i.name for i in g.input if i.name not in inits]
    if len(graph_inputs) != 1:
        raise SystemExit("qdq_ops.py: one model input expected")
    value[graph_inputs[0]] = np.load(a.input)

    # 2-3. one segment per activation quantization.
    per_kind = collections.OrderedDict()
    failures = []
    for k, (q, dq, step) in enumerate(boundaries):
        seg_inputs, feeds, kinds = [], [], []
        seen, stack = set(), [q.input[0]]
        while stack:
            t = stack.pop()
            if t in seen or t in constants:
                continue
            seen.add(t)
            if t in by_dq:  # a quantized activation: the segment starts at its QuantizeLinear's input
                src = by_dq[t]
                if src.input[0] not in seg_inputs:
                    seg_inputs.append(src.input[0])
                    feeds.append(value[t])
                continue
            if t in graph_inputs:
                seg_inputs.append(t)
                feeds.append(value[t])
                continue
            n = producer[t]
            if n.op_type not in MOVES and n.op_type not in ("QuantizeLinear", "DequantizeLinear"):
                kinds.append(n.op_type)
            stack.extend(n.input)
        kind = "+".join(reversed(kinds)) or "input quantization"
        seg_path = os.path.join(a.workdir, f"seg{k}.onnx")
        seg = onnx_utils.Extractor(model).extract_model(seg_inputs, [dq])
        # The segment's inputs get the shapes of the values fed to them.
        for i in seg.graph.input:
            if i.name in seg_inputs:
                dims = i.type.tensor_type.shape.dim
                del dims[:]
                for d in feeds[seg_inputs.index(i.name)].shape:
                    dims.add().dim_value = int(d)
        onnx.save(seg, seg_path)
        ins, t_out, o_out = [], os.path.join(a.workdir, f"seg{k}.tessera.npy"), os.path.join(a.workdir, f"seg{k}.ort.npy")
        order = [i.name for i in seg.graph.input if i.name not in {t.name for t in seg.graph.initializer}]
        for j, name in enumerate(order):
            path = os.path.join(a.workdir, f"seg{k}.in{j}.npy")
            np.save(path, feeds[seg_inputs.index(name)].astype(np.float32))
            ins += ["--input", path]
        try:
            run([a.tessera, "run", seg_path] + ins + ["--output", t_out])
            run(["node", a.ort_run, seg_path, "--opt", a.opt] + ins + ["--output", o_out])
        except RuntimeError as e:
            failures.append(f"{kind} -> {dq}: {e}")
            continue
        x, r = np.load(t_out).astype(np.float64), np.load(o_out).astype(np.float64)
        if x.shape != r.shape or not np.all(np.isfinite(x)):
            failures.append(f"{kind} -> {dq}: shape {x.shape} vs {r.shape} or not finite")
            continue
        d = np.rint(np.abs(x - r) / step)
        s = per_kind.setdefault(kind, [0, 0, 0, 0.0])
        s[0] += 1
        s[1] += d.size
        s[2] += int((d > 0).sum())
        s[3] = max(s[3], float(d.max()) if d.size else 0.0)
        if d.size and d.max() > a.max_lsb:
            failures.append(f"{kind} -> {dq}: {d.max():.0f} LSB")
    total = [0, 0, 0, 0.0]
    for kind, (ops, values, off, worst) in per_kind.items():
        print(f"  {kind}: {ops} ops, {values} values, {off} on a neighbouring code, max {worst:.0f} LSB")
        total = [total[0] + ops, total[1] + values, total[2] + off, max(total[3], worst)]
    print(f"all ops: {total[0]} ops, {total[1]} values, {total[2]} on a neighbouring code, max {total[3]:.0f} LSB")
    for f in failures:
        print(f"  FAIL {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
