#!/usr/bin/python3
"""Compare an output .npy against a reference .npy.

Error measure (one number per tensor, the same everywhere in tests/):

    rel = max|actual - reference| / max(max|reference|, 1e-12)

i.e. the largest absolute deviation relative to the reference's dynamic
range. A per-element relative error is not used because it blows up at
outputs that are (near) zero. The test passes when rel <= --tol (default
1e-4), shapes are equal and every actual value is finite.

Usage: compare_npy.py ACTUAL.npy REFERENCE.npy [--tol 1e-4] [--label NAME]
Prints one line; exit 0 on pass, 1 on mismatch, 2 on unreadable input.
"""
import argparse
import sys

import numpy as np

TINY = 1e-12


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("actual")
    ap.add_argument("reference")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    label = f"{args.label}: " if args.label else ""

    try:
        a = np.load(args.actual)
        b = np.load(args.reference)
    except (OSError, ValueError) as e:
        print(f"{label}cannot read: {e}")
        return 2

    if a.shape != b.shape:
        print(f"{label}shape mismatch: actual {a.shape} vs reference {b.shape}")
        return 1
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    if not np.all(np.isfinite(a)):
        print(f"{label}actual has {np.count_nonzero(~np.isfinite(a))} non-finite values")
        return 1

    diff = np.abs(a - b)
    max_abs_diff = float(diff.max()) if diff.size else 0.0
    max_abs_ref = float(np.abs(b).max()) if b.size else 0.0
    rel = max_abs_diff / max(max_abs_ref, TINY)
    worst = np.unravel_index(int(diff.argmax()), diff.shape) if diff.size else ()
    ok = rel <= args.tol
    print(f"{label}shape={list(a.shape)} max_abs_diff={max_abs_diff:.3e} max_abs_ref={max_abs_ref:.4g} "
          f"rel={rel:.3e} (tol {args.tol:g}) worst_at={list(map(int, worst))} {'ok' if ok else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
