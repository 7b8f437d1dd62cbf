#!/usr/bin/env bash
# A redeploy holds one plan at a time (issue 11: the promise is what runs;
# issue 14's rejoin). 2 worker processes on loopback with `ram: 200MiB`
# each, `tessera gateway --failover --objective memory` serving yolov2-tiny
# at 416² over both (each worker promised ~100-115 MiB), 2 clients sending
# back to back the whole time. w2 is SIGKILLed: the gateway fails over to w1
# alone (the whole model, promised ~159 MiB). w2 comes back: the rejoin plan
# spans both again, but w1 cannot hold the one-device plan and its part of
# the new one at once (~241 MiB > 200 MiB), so the gateway drains (no new
# request starts until the running ones finish), deploys, and swaps.
# Checks:
#   * w1's VmHWM over the whole test stays within its ram: — a worker that
#     kept the old program while decoding the new one (failover or rejoin)
#     peaked at both (~241 MiB);
#   * the rejoin drained (gateway log) and the plan spans 2 workers again;
#   * every answer equals `tessera run` (relative <= 1e-5), none lost, and
#     no request failed after the failover (the drain delays, it loses none).
# Args: path to tessera, build dir. Exit 77 = a dependency is missing (a failure: install-deps.sh installs every one).
set -u
T=${1:?tessera binary}
B=${2:?build dir}
CFG=/usr/share/darknet/cfg/yolov2-tiny.cfg
CLIENT=$B/bench/tessera_soak_client
[ -f "$CFG" ] || { echo "FAIL: $CFG missing (Debian package darknet) (deploy/install-deps.sh installs it)"; exit 77; }
command -v curl >/dev/null || { echo "FAIL: curl missing (deploy/install-deps.sh installs it)"; exit 77; }
[ -x "$CLIENT" ] || { echo "FAIL: $CLIENT missing (cmake --build builds it)"; exit 77; }
python=/usr/bin/python3
SHAPE=1x3x416x416
RAM_MIB=200

fail=0
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/../oracle" && pwd)/cluster_helpers.sh"
start_scratch tessera-rejoin-mem

start_loopback_workers 2 --data-dir "$D/%n.data" || exit 1
sed -i "s/ram: 1GiB/ram: ${RAM_MIB}MiB/" "$D/cluster.yaml"

# The promises this test rests on: each plan fits ram:, both at once do not.
promised() {  # cluster file -> "bytes bytes ..." (worker RAM per device, 2 requests in flight)
  "$T" plan "$CFG" --input-shape $SHAPE --cluster "$1" --objective memory --in-flight 2 --json 2>/dev/null |
    "$python" -c "import json,sys; print(' '.join(str(d['worker_ram']['promised_bytes']) for d in json.load(sys.stdin)['device_summary']))"
}
head -2 "$D/cluster.yaml" >"$D/one.yaml"; tail -2 "$D/cluster.yaml" >>"$D/one.yaml"
read -r P2_W1 P2_W2 <<<"$(promised "$D/cluster.yaml")"
read -r P1 <<<"$(promised "$D/one.yaml")"
BASE=$((32 << 20))
RAM=$((RAM_MIB << 20))
mib() { awk "BEGIN{printf \"%.1f MiB\", $1/1048576}"; }
echo "  promised: 2 devices w1 $(mib $P2_W1), w2 $(mib $P2_W2); w1 alone $(mib $P1); both on w1 $(mib $((P1 + P2_W1 - BASE))); ram $(mib $RAM)"
[ "$P1" -le $RAM ] && [ "$P2_W1" -le $RAM ] && [ $((P1 + P2_W1 - BASE)) -gt $RAM ] &&
  ok "each plan fits w1's ram:, both at once do not" || { bad "the premise does not hold (see the figures above)"; exit 1; }

"$python" -c "import numpy as np; np.save('$D/x.npy', np.random.default_rng(5).standard_normal((1,3,416,416)).astype(np.float32))"
"$T" run "$CFG" --input-shape $SHAPE --input "$D/x.npy" --output "$D/ref.npy" >/dev/null || { echo "FAIL tessera run"; exit 1; }

start_gateway 90 --model "$CFG" --input-shape $SHAPE --objective memory --failover --max-in-flight 2 || exit 1
[ "$(plan_workers)" = 2 ] && ok "the plan spans 2 workers" || bad "plan spans $(plan_workers) workers"

start_clients 2 120 30000
sleep 2
kill_worker 2 1 300
sleep 2
restart_worker 2 2 300
grep -q "rejoin: w1 (both .*) cannot hold plans .* at once; draining" "$D/gateway.log" &&
  ok "the rejoin drained: $(grep -o 'rejoin: w1 (both [^)]*)' "$D/gateway.log" | head -1)" ||
  bad "no drain in the gateway log: $(grep rejoin "$D/gateway.log" | tail -3)"
grep -q "rejoin done in .* (drained in" "$D/gateway.log" && ok "$(grep -o 'rejoin done in .*requests paused [0-9.]* s' "$D/gateway.log" | head -1)" ||
  bad "no drained rejoin finished"
grep -q "released before loading plan" "$D/w1.log" && ok "w1 released the old plan before loading the new one ($(grep -c 'released before loading plan' "$D/w1.log") times)" ||
  bad "w1 never released a plan before loading"
sleep 3
touch "$D/stop"
wait $CL
client_rc=$?

hwm=$(awk '/VmHWM/{print $2 * 1024}' /proc/${PIDS[1]}/status)
[ "$hwm" -le $RAM ] && ok "w1's peak over the test (VmHWM) $(mib $hwm) <= ram: $(mib $RAM) (one plan's promise at most $(mib $P1))" ||
  bad "w1's peak (VmHWM) $(mib $hwm) > ram: $(mib $RAM): it held two plans at once"

check_request_phases
[ $client_rc = 0 ] || bad "the client reported lost or wrong requests (rc $client_rc): $(cat "$D/summary.json")"
kill -0 $GW 2>/dev/null && ok "gateway alive" || bad "gateway died"
stop_processes "${PIDS[@]}" $GW && PIDS=() && GW=
exit $fail
