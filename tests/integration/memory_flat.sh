#!/usr/bin/env bash
# Issue 11 item 6: 2 000 requests leave every worker's and the gateway's
# VmRSS flat — within 4 MiB of its value after a 200-request warm-up — on 4
# real worker processes and a real gateway on loopback (yolov2-tiny at
# 96x96, memory plan; the requests go over one keep-alive HTTP connection,
# bench/memory/measure.py --soak). Every request must be answered (HTTP 200).
# Counts, not times. Args: path to tessera, build dir.
# ctest label: slow (takes 30 s or more; tests/CMakeLists.txt)
set -u
T=${1:?tessera binary}
repo=$(cd "$(dirname "$0")/../.." && pwd)
py=/usr/bin/python3

out=$("$py" "$repo/bench/memory/measure.py" "$T" /usr/share/darknet/cfg/yolov2-tiny.cfg --input-shape 1x3x96x96 \
        --devices 4 --requests 1 --soak 2000 --warmup 200) || { echo "FAIL measure.py --soak"; exit 1; }
echo "$out" | "$py" -c '
import json, sys
s = json.load(sys.stdin)["soak"]
bad = 0
if s["errors"]:
    print("FAIL %d of %d requests were not answered with 200" % (s["errors"], s["requests"]))
    bad = 1
for name, warm in s["rss_after_warmup_bytes"].items():
    end = s["rss_at_end_bytes"][name]
    ok = end - warm <= 4 * 2**20
    bad |= not ok
    print("%s %s: VmRSS %.1f MiB after %d requests, %.1f MiB after %d (%+.2f MiB)" % (
        "PASS" if ok else "FAIL", name, warm / 2**20, s["warmup"], end / 2**20, s["requests"], (end - warm) / 2**20))
print("%d requests in %.1f s" % (s["requests"], s["seconds"]))
sys.exit(bad)'
