#!/usr/bin/env python3
"""Reads the step traces of one point (tessera worker --step-trace; run.py
--step-trace DIR writes one file per point and device) and prints, for the
last request of each device: its span, the wall and CPU seconds of its
compute steps, the seconds its Recv steps waited, and the longest waits
with the time the peer's matching Send was issued (a wait much longer than
the bytes need on the cable is the sender's, not the network's).

  bench/cluster-emulated/steps.py DIR/yolov2-N2-1gbit-p1-w*.jsonl
"""
import json
import sys


def main(paths):
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    steps = []
    for path in paths:
        try:
            with open(path) as f:
                lines = [json.loads(x) for x in f if x.strip()]
        except OSError as e:
            print("%s: %s (run.py --step-trace DIR writes MODEL-NN-RATE-pP-wW.jsonl)" % (path, e.strerror),
                  file=sys.stderr)
            return 1
        except ValueError as e:
            print("%s: not a step trace (one JSON object a line): %s" % (path, e), file=sys.stderr)
            return 1
        if not lines:
            print("%s: no steps" % path, file=sys.stderr)
            return 1
        last = max(x["run"] for x in lines)
        steps += [x for x in lines if x["run"] == last]
    t0 = min(x["start_us"] for x in steps)
    devices = sorted(set(x["device"] for x in steps))
    sends = {}  # (from, to, message) -> when the Send step was issued
    for x in sorted(steps, key=lambda x: x["start_us"]):
        if x["kind"] == "send":
            sends[(x["device"], x["peer"], x.get("message", -1))] = x["start_us"]
    for d in devices:
        mine = [x for x in steps if x["device"] == d]
        span = (max(x["end_us"] for x in mine) - min(x["start_us"] for x in mine)) / 1e6
        wall = lambda kinds: sum(x["end_us"] - x["start_us"] for x in mine if x["kind"] in kinds) / 1e6
        cpu = sum(x["cpu_us"] for x in mine if x["kind"] in ("compute", "merge", "copy")) / 1e6
        print("device %d: span %.3f s, compute %.3f s (CPU %.3f s), waiting in Recv %.3f s, Send %.3f s" % (
            d, span, wall(("compute", "merge", "copy")), cpu, wall(("recv",)), wall(("send",))))
    print("longest Recv waits (ms from the request's first step):")
    recvs = sorted((x for x in steps if x["kind"] == "recv"), key=lambda x: x["start_us"] - x["end_us"])[:8]
    for x in recvs:
        issued = sends.get((x["peer"], x["device"], x.get("message", -1)))
        sent = "sent by device %d at %.0f" % (x["peer"], (issued - t0) / 1e3) if issued else "no matching Send"
        print("  device %d step %d: %d B from device %d, waited %.0f..%.0f (%s)" % (
            x["device"], x["step"], x["bytes"], x["peer"], (x["start_us"] - t0) / 1e3, (x["end_us"] - t0) / 1e3,
            sent))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
