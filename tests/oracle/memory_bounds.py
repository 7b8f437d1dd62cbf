#!/usr/bin/python3
"""Checks a bench/memory/measure.py result (JSON on stdin) against issue 11's
bounds: every worker's VmHWM <= 1.15 x promised + 40 MiB; `tessera run`'s
peak <= 1.15 x max(weights as stored + arena, weights held while
repacking) + 40 MiB (a one-process run imports every raw weight first). Exit 1 on any miss."""
import json
import sys

MIB = 2**20
j = json.load(sys.stdin)
bad = 0
for d in j["device_memory"]:
    bound = 1.15 * d["promised_bytes"] + 40 * MIB
    ok = d["peak_rss_bytes"] <= bound
    bad |= not ok
    print("%s %s: VmHWM %.1f MiB, promised %.1f MiB, bound %.1f MiB" % (
        "PASS" if ok else "FAIL", d["name"], d["peak_rss_bytes"] / MIB, d["promised_bytes"] / MIB, bound / MIB))
run = j["run"]
held = max(run["weight_bytes"] + run["arena_bytes"], run["load_peak_bytes"])
bound = 1.15 * held + 40 * MIB
ok = run["peak_rss_bytes"] <= bound
bad |= not ok
print("%s tessera run: peak %.1f MiB, max(weights as stored + arena, while repacking) %.1f MiB, bound %.1f MiB" % (
    "PASS" if ok else "FAIL", run["peak_rss_bytes"] / MIB, held / MIB, bound / MIB))
print("gateway: peak %.1f MiB" % (j["gateway"]["peak_rss_bytes"] / MIB))
sys.exit(1 if bad else 0)
