#!/usr/bin/env bash
# Rejoin (issue 14 item 4): a worker that comes back is taken back. 4 worker
# processes on loopback (each with a --data-dir), `tessera gateway --failover`
# planning yolov2-tiny for them, 4 clients sending requests back to back the
# whole time (bench/soak's client over gRPC). w4 is SIGKILLed: the gateway
# fails over and 3 workers serve. w4 is started again with the same name,
# port and data dir: within 10 s the gateway's plan spans 4 workers again
# (/metrics, /healthz), counted as tessera_gateway_replans_total{reason=
# "rejoin"}; the old plan was retired on the workers. Every answer equals
# `tessera run` (relative <= 1e-5); no request is lost or wrong, and the only
# errors are ones the failover itself gave (counted; none after it, so the
# rejoin's swap lost none).
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
SHAPE=1x3x128x128

fail=0
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/../oracle" && pwd)/cluster_helpers.sh"
start_scratch tessera-rejoin

start_loopback_workers 4 --data-dir "$D/%n.data" || exit 1

"$python" -c "import numpy as np; np.save('$D/x.npy', np.random.default_rng(4).standard_normal((1,3,128,128)).astype(np.float32))"
"$T" run "$CFG" --input-shape $SHAPE --input "$D/x.npy" --output "$D/ref.npy" >/dev/null || { echo "FAIL tessera run"; exit 1; }

start_gateway 60 --model "$CFG" --input-shape $SHAPE --failover || exit 1

metric() { curl -sf http://$HTTP/metrics | sed -n "s/^$1 //p"; }
rejoins() { metric 'tessera_gateway_replans_total{reason="rejoin"}'; }

[ "$(plan_workers)" = 4 ] && ok "the plan spans 4 workers" || bad "plan spans $(plan_workers) workers"

# Clients for the whole test (bounded: 90 s at most), stopped by $D/stop.
start_clients 4 90 15000
sleep 2
kill_worker 4 3 100
sleep 2  # requests keep flowing on 3 workers

rejoins_before=$(rejoins)
restart_worker 4 4 100
[ "$(rejoins)" = $((rejoins_before + 1)) ] && ok "/metrics: tessera_gateway_replans_total{reason=\"rejoin\"} = $(rejoins)" ||
  bad "/metrics: rejoins $rejoins_before -> $(rejoins)"
curl -sf http://$HTTP/healthz | grep -q "on 4 workers: w.*w4" && ok "/healthz names the 4 workers: $(curl -sf http://$HTTP/healthz)" ||
  bad "/healthz: $(curl -s http://$HTTP/healthz)"
sleep 3  # requests on the new plan; the old one retires once its last request is done
touch "$D/stop"
wait $CL
client_rc=$?
grep -q "gateway: plan .* retired" "$D/gateway.log" && ok "the old plan was retired on the workers" ||
  bad "no 'plan ... retired' in the gateway log"

# Every request, by outcome and by phase: errors are allowed only while the
# failover itself ran; none from the restart on.
check_request_phases
[ $client_rc = 0 ] || bad "the client reported lost or wrong requests (rc $client_rc): $(cat "$D/summary.json")"
kill -0 $GW 2>/dev/null && ok "gateway alive" || bad "gateway died"
stop_processes "${PIDS[@]}" $GW && PIDS=() && GW=
exit $fail
