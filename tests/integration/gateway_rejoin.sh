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
plan_workers() { curl -sf http://$HTTP/metrics | grep -c '^tessera_worker_up{'; }
rejoins() { metric 'tessera_gateway_replans_total{reason="rejoin"}'; }
ms() { date +%s%3N; }

[ "$(plan_workers)" = 4 ] && ok "the plan spans 4 workers" || bad "plan spans $(plan_workers) workers"

# Clients for the whole test (bounded: 90 s at most), stopped by $D/stop.
"$CLIENT" --gateway $GRPC --input "$D/x.npy" --reference "$D/ref.npy" --clients 4 --duration-s 90 \
  --until-file "$D/stop" --deadline-ms 15000 --grace-ms 3000 --log "$D/requests.csv" >"$D/summary.json" 2>"$D/client.err" &
CL=$!
sleep 2

port4=$(cat "$D/w4.port")
t_kill=$(ms)
kill -9 ${PIDS[4]}; wait ${PIDS[4]} 2>/dev/null
for _ in $(seq 100); do [ "$(plan_workers)" = 3 ] && break; sleep 0.1; done
t_failed_over=$(ms)
[ "$(plan_workers)" = 3 ] && ok "w4 killed: 3 workers serve (failover)" || bad "after the kill the plan spans $(plan_workers) workers"
sleep 2  # requests keep flowing on 3 workers

rejoins_before=$(rejoins)
rm -f "$D/w4.port"
"$T" worker --listen $port4 --name w4 --port-file "$D/w4.port" --data-dir "$D/w4.data" 2>>"$D/w4.log" &
PIDS[4]=$!
t_restart=$(ms)
back=0
for _ in $(seq 100); do
  [ "$(plan_workers)" = 4 ] && { back=1; break; }
  sleep 0.1
done
t_back=$(ms)
secs=$(awk "BEGIN{printf \"%.1f\", ($t_back-$t_restart)/1000}")
[ $back = 1 ] && ok "w4 restarted (same name, port, data dir): the plan spans 4 workers again after $secs s" ||
  { bad "w4 restarted: after $secs s the plan spans $(plan_workers) workers"; tail -30 "$D/gateway.log"; }
[ "$(rejoins)" = $((rejoins_before + 1)) ] && ok "/metrics: tessera_gateway_replans_total{reason=\"rejoin\"} = $(rejoins)" ||
  bad "/metrics: rejoins $rejoins_before -> $(rejoins)"
curl -sf http://$HTTP/healthz | grep -q "on 4 workers: w.*w4" && ok "/healthz names the 4 workers: $(curl -sf http://$HTTP/healthz)" ||
  bad "/healthz: $(curl -s http://$HTTP/healthz)"
sleep 3  # requests on the new plan; the old one retires once its last request is done
touch "$D/stop"
wait $CL
client_rc=$?
t_end=$(ms)
grep -q "gateway: plan .* retired" "$D/gateway.log" && ok "the old plan was retired on the workers" ||
  bad "no 'plan ... retired' in the gateway log"

# Every request, by outcome and by phase: errors are allowed only while the
# failover itself ran (from the kill until 3 workers served, plus the
# failover's own request deadline); none from the restart on.
"$python" - "$D/requests.csv" "$D/summary.json" $t_kill $t_failed_over $t_restart $t_back $t_end <<'EOF'
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
summary = json.load(open(sys.argv[2]))
t_kill, t_failed_over, t_restart, t_back, t_end = map(int, sys.argv[3:8])
count = lambda pred: sum(1 for r in rows if pred(r))
by = {o: count(lambda r, o=o: r["outcome"] == o) for o in ("correct", "wrong", "errored", "lost")}
print("  %d requests: %s; p50 %.1f ms, p99 %.1f ms" % (len(rows), by, summary["p50_ms"], summary["p99_ms"]))
for r in rows:
    if r["outcome"] != "correct":
        print("  %s, sent %+d ms after the kill: %s" % (r["outcome"], int(r["start_unix_ms"]) - t_kill, r["message"][:200]))
ok = True
def check(cond, what):
    global ok
    print(("PASS " if cond else "FAIL ") + what)
    ok = ok and cond
check(by["wrong"] == 0, "no wrong answer (every answer == tessera run, rel <= 1e-5)")
check(by["lost"] == 0, "no request lost (each answered or given an error before deadline + grace)")
during_failover = count(lambda r: r["outcome"] == "errored" and int(r["end_unix_ms"]) <= t_failed_over + 100)
later = count(lambda r: r["outcome"] == "errored" and int(r["end_unix_ms"]) > t_failed_over + 100)
print("  errors during the failover: %d" % during_failover)
check(later == 0, "no request failed after the failover: the rejoin swap lost none (%d errored later)" % later)
spanning = [r for r in rows if int(r["start_unix_ms"]) < t_back and int(r["end_unix_ms"]) > t_restart]
check(len(spanning) > 0 and all(r["outcome"] == "correct" for r in spanning),
      "%d requests in flight during the rejoin (restart .. swap) all answered correctly" % len(spanning))
after = count(lambda r: int(r["start_unix_ms"]) > t_back and r["outcome"] == "correct")
check(after > 0, "%d requests answered on the 4-worker plan after the rejoin" % after)
sys.exit(0 if ok else 1)
EOF
[ $? = 0 ] || { fail=1; tail -30 "$D/gateway.log"; }
[ $client_rc = 0 ] || bad "the client reported lost or wrong requests (rc $client_rc): $(cat "$D/summary.json")"
kill -0 $GW 2>/dev/null && ok "gateway alive" || bad "gateway died"
stop_processes "${PIDS[@]}" $GW && PIDS=() && GW=
exit $fail
