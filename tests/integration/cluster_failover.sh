#!/usr/bin/env bash
# Failover: a board unplugged while the cluster serves. 4 worker processes on
# loopback, `tessera gateway --failover` planning yolov2-tiny for them itself.
# A worker is SIGKILLed; the next request re-plans on the 3 survivors,
# redeploys and still answers exactly like `tessera run`; then the source
# worker (device 0) is killed too and the 2 left carry on. /metrics counts the
# failovers and serves the new plan. Without --failover the same kill gives a
# fast UNAVAILABLE naming the worker (integration.cluster_torchvision).
# Args: path to tessera, build dir. Exit 77 = a dependency is missing (a failure: install-deps.sh installs every one).
set -u
T=${1:?tessera binary}
CFG=/usr/share/darknet/cfg/yolov2-tiny.cfg
[ -f "$CFG" ] || { echo "FAIL: $CFG missing (Debian package darknet) (deploy/install-deps.sh installs it)"; exit 77; }
command -v curl >/dev/null || { echo "FAIL: curl missing (deploy/install-deps.sh installs it)"; exit 77; }
python=/usr/bin/python3
SHAPE=1x3x128x128

fail=0
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/../oracle" && pwd)/cluster_helpers.sh"
start_scratch tessera-failover

start_loopback_workers 4 || exit 1

"$python" -c "import numpy as np; np.save('$D/x.npy', np.random.default_rng(3).standard_normal((1,3,128,128)).astype(np.float32))"
"$T" run "$CFG" --input-shape $SHAPE --input "$D/x.npy" --output "$D/ref.npy" >/dev/null || { echo "FAIL tessera run"; exit 1; }

start_gateway 60 --model "$CFG" --input-shape $SHAPE --failover || exit 1

infer() {  # tag
  "$T" infer --gateway $GRPC --deadline-ms 60000 --input "$D/x.npy" --output "$D/$1.npy" >/dev/null 2>"$D/$1.err" &&
    compare "$D/$1.npy" "$D/ref.npy"
}
workers_in_plan() { curl -sf http://$HTTP/metrics | grep -c '^tessera_worker_up{'; }
failovers() { curl -sf http://$HTTP/metrics | sed -n 's/^tessera_failovers_total //p'; }

infer before && ok "4 workers: infer == run" || { bad "4 workers: infer"; cat "$D/before.err"; }
[ "$(workers_in_plan)" = 4 ] && ok "the plan spans 4 workers" || bad "plan spans $(workers_in_plan) workers"

kill -9 ${PIDS[3]}; wait ${PIDS[3]} 2>/dev/null; unset 'PIDS[3]'
sleep 1.5  # the health loop notices (the request would find out by itself too)
infer after3 && ok "w3 killed: the next request fails over and still == run" ||
  { bad "w3 killed: infer"; cat "$D/after3.err"; tail -20 "$D/gateway.log"; }
[ "$(failovers)" = 1 ] && ok "/metrics: 1 failover" || bad "/metrics: failovers = $(failovers)"
[ "$(workers_in_plan)" = 3 ] && ok "the new plan spans the 3 survivors" || bad "new plan spans $(workers_in_plan) workers"
curl -sf http://$HTTP/metrics | grep -q 'tessera_worker_up{worker="w3"' && bad "w3 still in the plan" || ok "w3 is out of the plan"
infer again3 && ok "and the next one too (no second failover)" || { bad "second request on 3 workers"; cat "$D/again3.err"; }
[ "$(failovers)" = 1 ] && ok "still 1 failover" || bad "failovers = $(failovers)"

# The source (device 0 of the new plan: w1) goes too, without waiting for the health loop.
kill -9 ${PIDS[1]}; wait ${PIDS[1]} 2>/dev/null; unset 'PIDS[1]'
infer after1 && ok "w1 (the source) killed: fails over to 2 workers, == run" ||
  { bad "w1 killed: infer"; cat "$D/after1.err"; tail -20 "$D/gateway.log"; }
[ "$(failovers)" = 2 ] && ok "/metrics: 2 failovers" || bad "/metrics: failovers = $(failovers)"
[ "$(workers_in_plan)" = 2 ] && ok "the plan spans the 2 survivors" || bad "plan spans $(workers_in_plan) workers"
# Unplugged mid-request: requests back to back while w4 dies. The source
# aborts the request when a device's Run fails, the gateway fails over and
# retries it: every request is answered, and correctly.
( for r in $(seq 12); do
    "$T" infer --gateway $GRPC --deadline-ms 60000 --input "$D/x.npy" --output "$D/loop$r.npy" >/dev/null 2>"$D/loop$r.err"
    echo $? >"$D/loop$r.rc"
  done ) &
loop=$!
sleep 0.3
kill -9 ${PIDS[4]}; wait ${PIDS[4]} 2>/dev/null; unset 'PIDS[4]'
wait $loop
answered=0
for r in $(seq 12); do
  if [ "$(cat "$D/loop$r.rc")" = 0 ] && compare "$D/loop$r.npy" "$D/ref.npy" >/dev/null; then answered=$((answered + 1))
  else echo "  request $r: $(cat "$D/loop$r.err")"; fi
done
[ $answered = 12 ] && ok "w4 killed during a stream of 12 requests: all 12 answered == run" ||
  { bad "w4 killed during a stream: $answered of 12 answered correctly"; tail -20 "$D/gateway.log"; }
grep -q "retrying it on plan" "$D/gateway.log" && echo "  (a request in flight at the kill was retried on the new plan)" ||
  echo "  (no request was in flight at the kill)"
# One more, in case the stream ended before the kill landed.
infer final && ok "after w4: answered by the last worker == run" || { bad "after w4: infer"; cat "$D/final.err"; }
[ "$(failovers)" = 3 ] && ok "/metrics: 3 failovers" || bad "/metrics: failovers = $(failovers)"
[ "$(workers_in_plan)" = 1 ] && ok "the last worker serves alone" || bad "plan spans $(workers_in_plan) workers"
kill -0 $GW 2>/dev/null && ok "gateway alive" || bad "gateway died"
stop_processes "${PIDS[@]}" $GW && PIDS=() && GW=
exit $fail
