#!/usr/bin/env bash
# Issue 11 item 6, the large case (label `large`, run by .ci/run after the
# default suite): YOLOv2 at 1x3x608x608 on 4 real worker processes on
# loopback (memory plan, deploy, gateway, 3 requests): every worker's VmHWM
# within the plan's promise for its device (at most 0.5 MiB over, 8 MiB
# under: tests/oracle/memory_bounds.py), and `tessera run` of
# the same model on one device peaks <= 1.15 x (its weights as stored + its
# arena) + 40 MiB. Counts, not times. Args: path to tessera, build dir.
set -u
T=${1:?tessera binary}
repo=$(cd "$(dirname "$0")/../../.." && pwd)
py=/usr/bin/python3
out=$("$py" "$repo/bench/memory/measure.py" "$T" /usr/share/darknet/cfg/yolov2.cfg --input-shape 1x3x608x608 \
        --devices 4 --requests 3) || { echo "FAIL measure.py on YOLOv2 608"; exit 1; }
echo "$out" | "$py" "$repo/tests/oracle/memory_bounds.py"
