#!/usr/bin/env bash
# Issue 11 item 3: a gateway holds no model. 4 worker processes on loopback,
# `tessera gateway --failover` planning YOLOv2 (darknet cfg, seeded weights)
# at 1x3x608x608 for them itself and deploying (it reads each device's
# weights while it builds that device's program, then frees them). Counts,
# not times:
#  * the answers equal `tessera run` (max|a-b|/max|b| <= 1e-5, as every
#    cluster test), before and after a worker is killed (failover: re-plan on
#    3 workers and redeploy, the largest per-device share of the weights);
#  * the gateway's peak RSS (VmHWM) stays <= 150 MiB through both deploys
#    (it held the whole model, 437 MiB, before; YOLOv2's weights alone are
#    194 MiB).
# About 25 s on 2 shared cores, so it runs with the other integration tests.
# Args: path to tessera, build dir.
set -u
T=${1:?tessera binary}
CFG=/usr/share/darknet/cfg/yolov2.cfg
[ -f "$CFG" ] || { echo "FAIL: $CFG missing (Debian package darknet)"; exit 1; }
command -v curl >/dev/null || { echo "FAIL: curl missing"; exit 1; }
python=/usr/bin/python3
SHAPE=1x3x608x608
LIMIT_KIB=$((150 * 1024))

fail=0
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/../oracle" && pwd)/cluster_helpers.sh"
start_scratch tessera-gateway-memory

start_loopback_workers 4 || exit 1

"$python" -c "import numpy as np; np.save('$D/x.npy', np.random.default_rng(5).standard_normal((1,3,608,608)).astype(np.float32))"
"$T" run "$CFG" --input-shape $SHAPE --input "$D/x.npy" --output "$D/ref.npy" >/dev/null || { echo "FAIL tessera run"; exit 1; }

start_gateway 180 --model "$CFG" --input-shape $SHAPE --failover || exit 1

infer() {  # tag
  "$T" infer --gateway $GRPC --deadline-ms 300000 --input "$D/x.npy" --output "$D/$1.npy" >/dev/null 2>"$D/$1.err" &&
    compare "$D/$1.npy" "$D/ref.npy"
}
gateway_peak_kib() { sed -n 's/^VmHWM:\s*\([0-9]*\) kB/\1/p' /proc/$GW/status; }
check_peak() {  # what
  local peak
  peak=$(gateway_peak_kib)
  if [ -n "$peak" ] && [ "$peak" -le $LIMIT_KIB ]; then
    ok "$1: gateway VmHWM $((peak / 1024)) MiB <= 150 MiB"
  else
    bad "$1: gateway VmHWM ${peak:-?} KiB > 150 MiB"
  fi
}
workers_in_plan() { curl -sf http://$HTTP/metrics | grep -c '^tessera_worker_up{'; }

infer four && ok "4 workers: infer == run" || { bad "4 workers: infer"; cat "$D/four.err"; }
[ "$(workers_in_plan)" = 4 ] && ok "the plan spans 4 workers" || bad "plan spans $(workers_in_plan) workers"
check_peak "planned and deployed on 4 workers, 1 request"

kill -9 ${PIDS[4]}; wait ${PIDS[4]} 2>/dev/null; unset 'PIDS[4]'
sleep 1.5  # the health loop notices
infer three && ok "w4 killed: the gateway re-plans, redeploys and still == run" ||
  { bad "w4 killed: infer"; cat "$D/three.err"; tail -20 "$D/gateway.log"; }
[ "$(workers_in_plan)" = 3 ] && ok "the new plan spans the 3 survivors" || bad "new plan spans $(workers_in_plan) workers"
check_peak "after the failover's redeploy on 3 workers"

stop_processes $GW "${PIDS[@]}"
GW=
PIDS=()
[ $fail = 0 ] && echo "PASS memory_gateway_yolov2" || echo "FAIL memory_gateway_yolov2"
exit $fail
