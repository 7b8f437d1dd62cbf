#!/usr/bin/python3
"""Write a seeded N(0,1) float32 .npy of a given shape: make_input.py OUT.npy 1x3x48x192 [--seed S]."""
import argparse
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("shape", help="dims separated by x, e.g. 1x76x32x1")
    ap.add_argument("--seed", type=int, default=20240601)
    args = ap.parse_args()
    try:
        dims = tuple(int(d) for d in args.shape.split("x"))
    except ValueError:
        print(f"make_input.py: bad shape '{args.shape}', expected e.g. 1x3x224x224", file=sys.stderr)
        return 2
    if any(d <= 0 for d in dims):
        print(f"make_input.py: dims must be positive: '{args.shape}'", file=sys.stderr)
        return 2
    x = np.random.default_rng(args.seed).standard_normal(dims, dtype=np.float32)
    np.save(args.out, x)
    return 0


if __name__ == "__main__":
    sys.exit(main())
