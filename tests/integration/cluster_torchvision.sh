#!/usr/bin/env bash
# Issue 5 proof on torchvision exports (seeded weights, tests/oracle/
# ensure_models.sh) over 4 real worker processes on loopback:
#  * mobilenet_v2: `tessera plan --cluster` -> plan.pb, `tessera deploy
#    --cluster --plan --model`, a gateway serving that plan without
#    redeploying, `tessera infer` == `tessera run` (<= 1e-5 relative).
#  * resnet18: the gateway plans for the 4 live workers itself (the default
#    plan) and deploys; `tessera infer` and HTTP == `tessera run`.
#  * a worker killed (SIGKILL) while requests run: they fail with
#    Unavailable or DeadlineExceeded within their deadline (no hang), the
#    gateway's /metrics shows the worker down, and the gateway survives.
# Args: path to tessera, build dir. Exit 77 = a dependency is missing (a failure: install-deps.sh installs every one).
# ctest label: slow (takes 30 s or more; tests/CMakeLists.txt)
set -u
T=${1:?tessera binary}
build=${2:?build dir}
build=$(mkdir -p "$build" && cd "$build" && pwd) || exit 1
repo=$(cd "$(dirname "$0")/../.." && pwd)
models=(mobilenet_v2 resnet18)
source "$repo/tests/oracle/ensure_models.sh"
command -v curl >/dev/null || { echo "FAIL: curl missing (deploy/install-deps.sh installs it)"; exit 77; }

fail=0
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/../oracle" && pwd)/cluster_helpers.sh"
start_scratch tessera-tv-test

start_worker() {  # i
  rm -f "$D/w$1.port"
  "$T" worker --listen 127.0.0.1:0 --name w$1 --port-file "$D/w$1.port" 2>>"$D/w$1.log" &
  PIDS[$1]=$!
  for _ in $(seq 200); do [ -f "$D/w$1.port" ] && break; sleep 0.05; done
  [ -f "$D/w$1.port" ] || { echo "FAIL worker w$1 did not start"; cat "$D/w$1.log"; exit 1; }
}
{ echo "devices:"
  for i in 1 2 3 4; do
    start_worker $i
    echo "  - { name: w$i, kind: linux, address: $(cat $D/w$i.port), ram: 1GiB, flash: 4GiB, cpu_hz: 1.5e9, cycles_per_mac: 0.4 }"
  done
  echo "links:"; echo "  default: { bandwidth: 10Gbit/s, latency: 20us }"; } > "$D/cluster.yaml"

GRPC=127.0.0.1:$(free_port); HTTP=127.0.0.1:$(free_port)
start_gateway() {  # model, extra args...
  local model=$1; shift
  "$T" gateway --cluster "$D/cluster.yaml" --model "$model" --listen $GRPC --http $HTTP --data-dir "$D/gw" "$@" \
    2>"$D/gateway.log" &
  GW=$!
  for _ in $(seq 600); do curl -sf http://$HTTP/healthz >/dev/null && return 0; kill -0 $GW 2>/dev/null || break; sleep 0.1; done
  echo "gateway did not become healthy:"; tail -20 "$D/gateway.log"; return 1
}
stop_gateway() { kill $GW 2>/dev/null; wait $GW 2>/dev/null; GW=; }

# ---- mobilenet_v2: plan file, explicit deploy, gateway on that plan, infer.
M=$out/mobilenet_v2.onnx
X=$out/mobilenet_v2.input.npy
"$T" run "$M" --input "$X" --output "$D/mn.ref.npy" >/dev/null || bad "mobilenet_v2: tessera run"
if "$T" plan "$M" --cluster "$D/cluster.yaml" --out "$D/mn.plan.pb" >"$D/plan.txt" 2>&1; then
  ok "mobilenet_v2: tessera plan --cluster"
  if "$T" deploy --cluster "$D/cluster.yaml" --plan "$D/mn.plan.pb" --model "$M" >"$D/deploy.txt" 2>&1 &&
     grep -q "deployed" "$D/deploy.txt"; then
    ok "mobilenet_v2: tessera deploy"
    n=$(grep -c "weights  *[0-9.]* MiB" "$D/deploy.txt")
    [ "$n" = 4 ] && ok "deploy reports 4 workers" || bad "deploy reports $n workers"
  else
    bad "mobilenet_v2: tessera deploy"; tail -5 "$D/deploy.txt"
  fi
  if start_gateway "$M" --plan "$D/mn.plan.pb"; then
    grep -q "deployed plan" "$D/gateway.log" && bad "gateway with --plan redeployed" 
    for r in 1 2 3; do
      "$T" infer --gateway $GRPC --input "$X" --output "$D/mn.$r.npy" >/dev/null 2>"$D/infer.err" &&
        compare "$D/mn.$r.npy" "$D/mn.ref.npy" && ok "mobilenet_v2 on 4 workers: infer #$r == run" ||
        { bad "mobilenet_v2 infer #$r"; cat "$D/infer.err"; }
    done
  else
    bad "mobilenet_v2: gateway"
  fi
  stop_gateway
else
  bad "mobilenet_v2: tessera plan"; tail -5 "$D/plan.txt"
fi

# ---- resnet18: the gateway plans for the live workers and deploys.
M=$out/resnet18.onnx
X=$out/resnet18.input.npy
"$T" run "$M" --input "$X" --output "$D/rn.ref.npy" >/dev/null || bad "resnet18: tessera run"
if ! start_gateway "$M"; then bad "resnet18: gateway"; exit 1; fi
for r in 1 2; do
  "$T" infer --gateway $GRPC --input "$X" --output "$D/rn.$r.npy" >/dev/null 2>"$D/infer.err" &&
    compare "$D/rn.$r.npy" "$D/rn.ref.npy" && ok "resnet18 on 4 workers (gateway's plan): infer #$r == run" ||
    { bad "resnet18 infer #$r"; cat "$D/infer.err"; }
done
curl -sf -H 'Accept: application/x-npy' -H 'Content-Type: application/x-npy' --data-binary @"$X" \
  http://$HTTP/v1/infer -o "$D/rn.http.npy" && compare "$D/rn.http.npy" "$D/rn.ref.npy" &&
  ok "resnet18 HTTP .npy == run" || bad "resnet18 HTTP .npy"
# Bytes per link from /metrics against the plan: 3 answered requests, so each
# link's payload counter must be 3x its planned bytes; wire/payload is the
# gRPC framing overhead.
fresh_metrics $HTTP "$D/rn.metrics" && "$python" - "$D/rn.metrics" <<'PY' && ok "resnet18 /metrics link bytes == 3 x planned" || bad "resnet18 /metrics link bytes"
import re, sys
text = open(sys.argv[1]).read()
def series(name):
    return {(m[0], m[1]): float(m[2]) for m in re.findall(name + r'\{from="(\d+)",to="(\d+)"\} (\S+)', text)}
planned, payload, wire = (series("tessera_link_planned_payload_bytes"), series("tessera_link_payload_bytes_total"),
                          series("tessera_link_wire_bytes_total"))
ok_requests = float(re.search(r'tessera_requests_total\{code="ok"\} (\S+)', text).group(1))
assert planned, "no planned link bytes in /metrics"
assert ok_requests == 3, ok_requests
bad = [(k, payload.get(k, 0), v * ok_requests) for k, v in planned.items() if payload.get(k, 0) != v * ok_requests]
extra = [k for k in payload if k not in planned and payload[k]]
for k, v in sorted(planned.items()):
    print("  link %s->%s planned %d B/request, measured payload %d B, wire/payload %.5f"
          % (k[0], k[1], v, payload.get(k, 0), wire.get(k, 0) / max(1, payload.get(k, 0))))
print("  total wire/planned payload ratio %.5f" % (sum(wire.values()) / (ok_requests * sum(planned.values()))))
assert not bad, bad
assert not extra, extra
PY

# ---- a worker killed while requests run. The source is the device that
# receives inputs; kill another one (w3), then the source itself.
DEADLINE=3000
timed_infer() {  # tag: runs infer, writes rc, stderr and elapsed ms
  local t0=$(date +%s%N)
  "$T" infer --gateway $GRPC --deadline-ms $DEADLINE --input "$X" --output "$D/$1.npy" >/dev/null 2>"$D/$1.err"
  echo $? >"$D/$1.rc"
  echo $(( ($(date +%s%N) - t0) / 1000000 )) >"$D/$1.ms"
}
check_failed_in_time() {  # tag, label
  local rc=$(cat "$D/$1.rc") ms=$(cat "$D/$1.ms")
  if [ "$rc" = 0 ]; then bad "$2: answered although a worker was killed"; return; fi
  if grep -q "Unavailable\|DeadlineExceeded" "$D/$1.err" && [ "$ms" -le $((DEADLINE + 2000)) ]; then
    ok "$2: failed in ${ms} ms ($(grep -o 'Unavailable\|DeadlineExceeded' "$D/$1.err" | head -1))"
  else
    bad "$2: rc=$rc after ${ms} ms"; cat "$D/$1.err"
  fi
}
timed_infer before &
inflight=$!
sleep 0.05
kill -9 ${PIDS[3]}; wait ${PIDS[3]} 2>/dev/null
wait $inflight
# The request in flight at the kill either finished first (then it is correct) or failed in time.
if [ "$(cat "$D/before.rc")" = 0 ]; then
  compare "$D/before.npy" "$D/rn.ref.npy" && ok "request racing the kill answered correctly" || bad "request racing the kill"
else
  check_failed_in_time before "request in flight at the kill"
fi
# By now the health loop has seen w3 down: the next request fails fast, naming it.
timed_infer after
check_failed_in_time after "request after w3 was killed"
if grep -q "worker w3 .*does not answer.*Unavailable" "$D/after.err" && [ "$(cat "$D/after.ms")" -le 1500 ]; then
  ok "request after the kill fails fast naming w3"
else
  bad "request after the kill: not a fast Unavailable naming w3"; cat "$D/after.err"
fi
down=0
for _ in $(seq 30); do
  curl -sf http://$HTTP/metrics | grep -qF 'tessera_worker_up{worker="w3",device=' &&
    curl -sf http://$HTTP/metrics | grep -F 'tessera_worker_up{worker="w3",device=' | grep -q ' 0$' && { down=1; break; }
  sleep 0.1
done
[ $down = 1 ] && ok "/metrics shows w3 down" || { bad "/metrics does not show w3 down"; curl -s http://$HTTP/metrics | grep worker_up; }
code=$(curl -s -o /dev/null -w '%{http_code}' http://$HTTP/healthz)
[ "$code" = 503 ] && ok "healthz 503 with a worker down" || bad "healthz -> $code with a worker down"
# Every worker killed (the source among them): the gateway cannot reach the cluster.
for i in 1 2 4; do kill -9 ${PIDS[$i]} 2>/dev/null; wait ${PIDS[$i]} 2>/dev/null; done
PIDS=()
timed_infer nosource
check_failed_in_time nosource "request with every worker killed"
kill -0 $GW 2>/dev/null && ok "gateway survives dead workers" || bad "gateway died"
stop_gateway

# ---- 6 worker processes, the default (planner's) plan for both models.
for m in "${models[@]}"; do
  j=$(timeout 300 "$T" --log-level warn demo --model "$out/$m.onnx" --devices 6 --requests 3 --json 2>"$D/demo6.err")
  echo "$j" | "$python" -c '
import json, sys
j = json.load(sys.stdin)
print("  %s devices=%d max_rel_diff=%.3g payload measured/expected=%d/%d planner=%s" % (
    sys.argv[1], j["devices"], j["max_rel_diff"], j["measured_payload_bytes"], j["expected_payload_bytes"], j["planner"]))
sys.exit(0 if j["all_match"] and j["planner"] and j["devices"] == 6 and j["max_rel_diff"] <= 1e-5
         and j["measured_payload_bytes"] == j["expected_payload_bytes"] else 1)' "$m" &&
    ok "$m on 6 workers (default plan) == run" || { bad "$m on 6 workers"; tail -5 "$D/demo6.err"; }
done
exit $fail
