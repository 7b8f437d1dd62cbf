#!/usr/bin/python3
"""How fast a device computes while others share the host (issue 15): runs K
copies of `tessera run MODEL` at once, each in its own cgroup with the same
CPU quota (emulation.Cgroups, pinned to --cpus like run.py's devices), and
prints each copy's time a run and the median against K = 1 run just before.

  sudo bench/cluster-emulated/cotenants.py --model /usr/share/darknet/cfg/vgg-16.cfg \\
      --shape 1x3x224x224 --fraction 0.0984 --counts 1,4,6

run.py declares, at a point of N devices, the rate measured this way with
N copies (device_rate_for). Root; removes its groups on exit.
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import emulation  # noqa: E402


def run_copies(cgroups, tessera, model, shape, k, fraction, period):
    outs = emulation.run_in_quotas(cgroups, [tessera, "--log-level", "warn", "run", model, "--input-shape", shape,
                                             "--threads", "1", "--warmup", "1", "--json"], k, fraction, period)
    if outs is None:
        raise RuntimeError("a copy of tessera run failed")
    return [json.loads(o)["median_ms"] for o in outs]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tessera", default="build/tessera")
    ap.add_argument("--model", required=True)
    ap.add_argument("--shape", required=True)
    ap.add_argument("--fraction", type=float, required=True, help="each copy's share of one CPU")
    ap.add_argument("--period-us", type=int, default=0, help="CFS period (default: as run.py, >= 1 ms of quota)")
    ap.add_argument("--counts", default="1,4")
    ap.add_argument("--cpus", default="0", help="CPUs the copies run on (comma list, or 'all')")
    ap.add_argument("--isa", default="baseline", help="TESSERA_ISA of the copies ('native': the CPU's)")
    args = ap.parse_args()
    if args.isa != "native":
        os.environ["TESSERA_ISA"] = args.isa
    period = args.period_us or int(min(1_000_000, max(10_000, -(-1000 // args.fraction))))
    cgroups = emulation.Cgroups()
    cgroups.cpus = None if args.cpus == "all" else {int(c) for c in args.cpus.split(",")}
    try:
        for k in (int(c) for c in args.counts.split(",")):
            alone = statistics.median(run_copies(cgroups, os.path.realpath(args.tessera), args.model, args.shape, 1,
                                                 args.fraction, period))
            times = run_copies(cgroups, os.path.realpath(args.tessera), args.model, args.shape, k, args.fraction,
                               period)
            print("%d at once: %s ms a run (median %.1f), one alone just before %.1f ms: %.2fx" % (
                k, " / ".join("%.1f" % t for t in times), statistics.median(times), alone,
                statistics.median(times) / alone))
    finally:
        cgroups.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
