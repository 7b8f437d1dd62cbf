"""Models the benches run: darknet cfgs Debian ships and torchvision exports.

A model spec is a darknet cfg name (optionally @SIZE for the input side; a
spec with @SIZE is always a darknet cfg, so resnet18@224 is darknet's and
resnet18 torchvision's), a torchvision model name (exported at 1x3x224x224
with seeded random weights by tests/oracle/export_torchvision.py with
Debian's python3-torch, never downloaded) or a path to an .onnx file.
"""
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPORTER = os.path.join(REPO, "tests", "oracle", "export_torchvision.py")
# What export_torchvision.py builds (its MODELS + EXTRA_MODELS).
TORCHVISION = {"mobilenet_v2", "resnet18", "squeezenet1_0", "googlenet", "mnasnet1_0", "resnet50", "vgg16",
               "mobilenet_v2_second_head"}
DEBIAN_PYTHON = "/usr/bin/python3"  # sees Debian's python3-torch / torchvision
DARKNET_CFG = "/usr/share/darknet/cfg"


def export_torchvision(names, out_dir, who):
    """Exports the torchvision models `names` into out_dir; {name: .onnx path}."""
    missing = [n for n in names if not os.path.exists(os.path.join(out_dir, f"{n}.onnx"))]
    if missing:
        print(f"exporting {' '.join(missing)} with {DEBIAN_PYTHON} (torchvision, seeded weights) ...",
              file=sys.stderr, flush=True)
        p = subprocess.run([DEBIAN_PYTHON, EXPORTER, out_dir, "--models", *missing], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            sys.exit(f"{who}: exporting {' '.join(missing)} failed (needs python3-torch and "
                     f"python3-torchvision for {DEBIAN_PYTHON}):\n{p.stderr[-2000:]}")
    return {n: os.path.join(out_dir, f"{n}.onnx") for n in names}


def export_wanted(specs, out_dir, who):
    """Exports the torchvision models among `specs`; {name: .onnx path}."""
    wanted = [s for s in specs if "@" not in s and s in TORCHVISION]
    return export_torchvision(wanted, out_dir, who) if wanted else {}


def resolve(spec, onnx_paths, who):
    """(model path, input shape or None) of a spec."""
    name, _, size = spec.partition("@")
    if not size and name in onnx_paths:
        model = onnx_paths[name]
    elif name.endswith(".onnx"):
        model = name
    else:
        model = os.path.join(DARKNET_CFG, f"{name}.cfg")
        if not os.path.exists(model):
            sys.exit(f"{who}: {spec}: no darknet cfg {model}, no torchvision model of that name "
                     f"({', '.join(sorted(TORCHVISION))}) and not an .onnx file")
    return model, (f"1x3x{size}x{size}" if size else None)
