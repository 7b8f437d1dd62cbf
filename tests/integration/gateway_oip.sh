#!/usr/bin/env bash
# The Open Inference Protocol v2 on a real gateway (issue 14 item 3): a
# `tessera gateway --token-file` over 2 real workers serving yolov2-tiny at
# 96x96, driven by tests/integration/gateway_oip.py:
#   * REST with a plain HTTP client (http.client): health, server and model
#     metadata, infer with JSON tensors (flat, nested) and with the binary
#     tensor data extension both ways, every documented error status;
#   * gRPC with stubs generated from proto/oip.proto at run time
#     (grpc_tools.protoc): every RPC, fp32_contents and raw_input_contents;
# answers compared with `tessera run` (relative <= 1e-5). Then a gateway with
# --protect-metrics (the v2 probes need the token) and a worker killed
# (ready turns false, live stays true).
# Args: path to tessera, build dir. Exit 77 = a dependency is missing (a
# failure: deploy/install-deps.sh installs every one).
set -u
T=${1:?tessera binary}
CFG=/usr/share/darknet/cfg/yolov2-tiny.cfg
HERE=$(cd "$(dirname "$0")" && pwd)
PROTO=$HERE/../../proto/oip.proto
[ -f "$CFG" ] || { echo "FAIL: $CFG missing (deploy/install-deps.sh installs it)"; exit 77; }
command -v curl >/dev/null || { echo "FAIL: curl missing (deploy/install-deps.sh installs it)"; exit 77; }
/usr/bin/python3 -c 'import grpc, grpc_tools.protoc, numpy' 2>/dev/null ||
  { echo "FAIL: python3-grpcio / python3-grpc-tools / python3-numpy missing (deploy/install-deps.sh installs them)"; exit 77; }
. "$HERE/../oracle/cluster_helpers.sh"
start_scratch tessera-oip
SHAPE=1x3x96x96
start_loopback_workers 2 --data-dir "$D/%n" || exit 1
"$python" -c "import numpy as np; np.save('$D/x.npy', np.random.default_rng(14).standard_normal((1,3,96,96)).astype(np.float32))"
"$T" run "$CFG" --input-shape $SHAPE --input "$D/x.npy" --output "$D/ref.npy" >/dev/null || { echo "FAIL tessera run"; exit 1; }
TOKEN=oip-test-token-1
printf '%s\n' "$TOKEN" > "$D/tokens"

# Every route and RPC. The body limit is small enough that the client can
# go over it cheaply and large enough for JSON tensors of this input.
start_gateway 120 --model "$CFG" --input-shape $SHAPE --token-file "$D/tokens" --max-body-bytes 2000000 || exit 1
"$python" "$HERE/gateway_oip.py" serve $HTTP $GRPC $TOKEN "$D" "$PROTO" || fail=1
# curl, as the README shows it.
curl -sf http://$HTTP/v2/health/ready >/dev/null && ok "curl /v2/health/ready" || bad "curl /v2/health/ready"
"$python" -c "
import json, numpy as np; x = np.load('$D/x.npy')
print(json.dumps({'inputs': [{'name': 'data', 'shape': list(x.shape), 'datatype': 'FP32', 'data': x.reshape(-1).tolist()}]}))" > "$D/req.json"
input=$(curl -sf -H "Authorization: Bearer $TOKEN" http://$HTTP/v2/models/yolov2-tiny | "$python" -c 'import json,sys; print(json.load(sys.stdin)["inputs"][0]["name"])')
sed -i "s/\"name\": \"data\"/\"name\": \"$input\"/" "$D/req.json"
curl -sf -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' --data-binary @"$D/req.json" \
  http://$HTTP/v2/models/yolov2-tiny/infer -o "$D/answer.json" &&
  "$python" -c "
import json, numpy as np, sys
a = np.array(json.load(open('$D/answer.json'))['outputs'][0]['data'], np.float32); b = np.load('$D/ref.npy').reshape(-1)
r = np.abs(a - b).max() / np.abs(b).max(); print('  max rel diff %.3g' % r); sys.exit(0 if r <= 1e-5 else 1)" &&
  ok "curl POST /v2/models/yolov2-tiny/infer == tessera run" || bad "curl infer"
grep -q "$TOKEN" "$D/gateway.log" && bad "the token appears in the gateway log" || ok "no token in the gateway log"
kill -0 $GW 2>/dev/null && ok "gateway alive after every error case" || bad "gateway died"
stop_processes $GW
GW=

# --protect-metrics: the v2 probes need the token too; then a worker dies.
GRPC=127.0.0.1:$(free_port); HTTP=127.0.0.1:$(free_port)
"$T" gateway --cluster "$D/cluster.yaml" --model "$CFG" --input-shape $SHAPE --plan "$D/gw/plan.pb" --listen $GRPC \
  --http $HTTP --token-file "$D/tokens" --protect-metrics 2>"$D/gateway2.log" &
GW=$!
for _ in $(seq 300); do curl -sf -H "Authorization: Bearer $TOKEN" http://$HTTP/v2/health/ready >/dev/null && break; sleep 0.1; done
"$python" "$HERE/gateway_oip.py" protect $HTTP $GRPC $TOKEN "$D" "$PROTO" || fail=1
kill -9 "${PIDS[2]}"
wait "${PIDS[2]}" 2>/dev/null
# The health loop probes every second.
for _ in $(seq 100); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TOKEN" http://$HTTP/v2/health/ready)" = 400 ] && break
  sleep 0.1
done
"$python" "$HERE/gateway_oip.py" notready $HTTP $GRPC $TOKEN "$D" "$PROTO" || fail=1
stop_processes $GW "${PIDS[1]}"
GW=; PIDS=()
exit $fail
