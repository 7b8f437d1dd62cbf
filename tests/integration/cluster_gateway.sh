#!/usr/bin/env bash
# Worker daemons + gateway as separate processes on loopback (issue 5):
# the gateway plans for the live workers and deploys; `tessera infer` and
# HTTP answers equal `tessera run`; bad input gets a clear error, no crash;
# a restarted worker resumes its program from --data-dir without a redeploy.
# Args: path to tessera, build dir. Exit 77 = a dependency is missing (a failure: install-deps.sh installs every one).
set -u
T=${1:?tessera binary}
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/../oracle" && pwd)/cluster_helpers.sh"  # fresh_metrics
CFG=/usr/share/darknet/cfg/yolov2-tiny.cfg
[ -f "$CFG" ] || { echo "FAIL: $CFG missing (deploy/install-deps.sh installs it)"; exit 77; }
command -v curl >/dev/null || { echo "FAIL: curl missing (deploy/install-deps.sh installs it)"; exit 77; }
D=$(mktemp -d /tmp/tessera-gw-test-XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$D"; }
trap cleanup EXIT
free_port() { /usr/bin/python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
start_worker() {  # i
  rm -f "$D/w$1.port"
  "$T" worker --listen 127.0.0.1:0 --name w$1 --data-dir "$D/w$1" --port-file "$D/w$1.port" \
    --step-trace "$D/w$1.steps" 2>>"$D/w$1.log" &
  PIDS[$1]=$!
  for _ in $(seq 200); do [ -f "$D/w$1.port" ] && break; sleep 0.05; done
}
SHAPE=1x3x128x128
{ echo "devices:"
  for i in 1 2 3; do
    start_worker $i
    echo "  - { name: w$i, kind: linux, address: $(cat $D/w$i.port), ram: 1GiB, flash: 4GiB, cpu_hz: 1.5e9, cycles_per_mac: 0.4 }"
  done
  echo "links:"; echo "  default: { bandwidth: 10Gbit/s, latency: 20us }"; } > "$D/cluster.yaml"
GRPC=127.0.0.1:$(free_port); HTTP=127.0.0.1:$(free_port)
"$T" gateway --cluster "$D/cluster.yaml" --model "$CFG" --input-shape $SHAPE --listen $GRPC --http $HTTP \
  --data-dir "$D" 2>"$D/gateway.log" &
PIDS[0]=$!
for _ in $(seq 300); do curl -sf http://$HTTP/healthz >/dev/null && break; sleep 0.1; done
fail=0
ok() { echo "PASS $1"; }
bad() { echo "FAIL $1"; fail=1; }
curl -sf http://$HTTP/healthz >/dev/null && ok healthz || { bad healthz; cat "$D/gateway.log"; exit 1; }

# The reference: tessera run on the same input.
/usr/bin/python3 -c "
import numpy as np; np.random.seed(3); np.save('$D/x.npy', np.random.uniform(-1,1,(1,3,128,128)).astype(np.float32))"
"$T" run "$CFG" --input-shape $SHAPE --input "$D/x.npy" --output "$D/ref.npy" >/dev/null || bad "tessera run"
"$T" infer --gateway $GRPC --input "$D/x.npy" --output "$D/y.npy" >/dev/null && ok "tessera infer" || bad "tessera infer"
compare() { /usr/bin/python3 -c "
import numpy as np,sys; a=np.load('$1'); b=np.load('$2'); r=np.abs(a-b).max()/np.abs(b).max(); print('  max rel diff %.3g' % r); sys.exit(0 if r<=1e-5 else 1)"; }
compare "$D/y.npy" "$D/ref.npy" && ok "infer == run" || bad "infer == run"
curl -sf -H 'Accept: application/x-npy' --data-binary @"$D/x.npy" -H 'Content-Type: application/x-npy' \
  http://$HTTP/v1/infer -o "$D/h.npy" && compare "$D/h.npy" "$D/ref.npy" && ok "HTTP .npy == run" || bad "HTTP .npy"
# JSON body (a flat array takes the model's shape).
/usr/bin/python3 -c "
import numpy as np,json; print(json.dumps(np.load('$D/x.npy').reshape(-1).tolist()))" > "$D/x.json"
curl -sf --data-binary @"$D/x.json" -H 'Content-Type: application/json' http://$HTTP/v1/infer -o "$D/h.json" &&
/usr/bin/python3 -c "
import numpy as np,json,sys; j=json.load(open('$D/h.json')); a=np.array(j['outputs'][0]['data'],dtype=np.float32); b=np.load('$D/ref.npy').reshape(-1)
r=np.abs(a-b).max()/np.abs(b).max(); sys.exit(0 if r<=1e-5 else 1)" && ok "HTTP JSON == run" || bad "HTTP JSON"

# Bad input: wrong shape -> 400 / INVALID_ARGUMENT; garbage -> 400; unknown path -> 404.
code=$(curl -s -o "$D/e.json" -w '%{http_code}' --data-binary '[1,2,3]' http://$HTTP/v1/infer)
[ "$code" = 400 ] && grep -q "shape" "$D/e.json" && ok "wrong shape -> 400" || { bad "wrong shape -> $code"; cat "$D/e.json"; }
code=$(curl -s -o /dev/null -w '%{http_code}' --data-binary 'not json' http://$HTTP/v1/infer)
[ "$code" = 400 ] && ok "garbage -> 400" || bad "garbage -> $code"
code=$(curl -s -o /dev/null -w '%{http_code}' http://$HTTP/nope)
[ "$code" = 404 ] && ok "unknown path -> 404" || bad "unknown path -> $code"
/usr/bin/python3 -c "import numpy as np; np.save('$D/bad.npy', np.zeros((1,3,64,64),np.float32))"
"$T" infer --gateway $GRPC --input "$D/bad.npy" 2>"$D/e.txt" && bad "infer wrong shape accepted" ||
  { grep -q "InvalidArgument\|expects" "$D/e.txt" && ok "infer wrong shape -> INVALID_ARGUMENT" || { bad "infer error text"; cat "$D/e.txt"; }; }

# Metrics: requests, latency histogram, bytes per link, worker up.
curl -sf http://$HTTP/metrics > "$D/metrics.txt"
for m in 'tessera_requests_total{code="ok"}' tessera_request_latency_seconds_bucket tessera_link_payload_bytes_total 'tessera_worker_up{worker="w1",device="0"} 1'; do
  grep -qF "$m" "$D/metrics.txt" && ok "metrics has $m" || bad "metrics lacks $m"
done
# Messages per link (issue 15: bench/cluster-emulated prices each one's CPU):
# the requests above sent some between devices (fresh_metrics: the gateway
# pulls the link counters from the workers in its 1 s health loop).
fresh_metrics $HTTP "$D/metrics.txt" &&
  awk '/^tessera_link_messages_total\{from="[0-9]+",to="[0-9]+"\} / {n += $2} END {exit !(n > 0)}' "$D/metrics.txt" &&
  ok "metrics counts the messages between devices" || { bad "metrics has no tessera_link_messages_total > 0"; grep '^tessera_link' "$D/metrics.txt"; }

# Step traces (--step-trace): every worker of the plan wrote its steps; each
# Recv has the peer's Send of the same message in the same request order,
# issued before the Recv ended, on the one monotonic clock of this host.
/usr/bin/python3 - "$D" <<'PY' && ok "step traces: every Recv ends after its Send was issued" || bad "step traces"
import glob, json, sys
steps = [json.loads(l) for f in glob.glob(sys.argv[1] + "/w*.steps") for l in open(f)]
assert steps, "no step traced"
kinds = {x["kind"] for x in steps}
assert {"compute", "send", "recv"} <= kinds, kinds
for x in steps:
    assert x["end_us"] >= x["start_us"] and x["cpu_us"] >= 0, x
sends = {}
for x in steps:
    if x["kind"] == "send":
        sends.setdefault((x["device"], x["peer"], x["message"]), []).append(x)
recvs = [x for x in steps if x["kind"] == "recv"]
for x in recvs:
    mine = sorted((r for r in recvs if (r["device"], r["peer"], r["message"]) == (x["device"], x["peer"], x["message"])),
                  key=lambda r: r["start_us"])
    theirs = sorted(sends.get((x["peer"], x["device"], x["message"]), []), key=lambda s: s["start_us"])
    assert len(theirs) == len(mine), (x, len(theirs), len(mine))
    s = theirs[mine.index(x)]
    assert s["bytes"] == x["bytes"] and s["start_us"] <= x["end_us"], (s, x)
print("  %d steps traced, %d messages" % (len(steps), len(recvs)))
PY

# A restarted worker resumes from its data dir: kill w2, start it on the same port.
kill ${PIDS[2]}; wait ${PIDS[2]} 2>/dev/null
addr=$(cat "$D/w2.port")
"$T" worker --listen $addr --name w2 --data-dir "$D/w2" 2>>"$D/w2.log" &
PIDS[2]=$!
sleep 1.5
"$T" infer --gateway $GRPC --deadline-ms 20000 --input "$D/x.npy" --output "$D/y2.npy" >/dev/null && compare "$D/y2.npy" "$D/ref.npy" &&
  ok "restarted worker resumes without redeploy" || { bad "restart resume"; tail -5 "$D/w2.log"; }

# The gateway and workers are still alive after all of it.
for p in "${PIDS[@]}"; do kill -0 $p 2>/dev/null || bad "process $p died"; done
exit $fail
