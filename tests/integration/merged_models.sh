#!/usr/bin/env bash
# Several models on one cluster (issue 18 item 4, reuse across models):
# mobilenet_v2 and mobilenet_v2_second_head (the same backbone weights under
# another head, tests/oracle/export_torchvision.py) merged with --with-model.
#  * the merged graph shares the backbone (62 of the second model's 65 layers);
#  * `tessera run` of the merged graph gives each model's PyTorch output
#    (rel <= 1e-4, compare_npy.py) and each model's own `tessera run` (<= 1e-5);
#  * the weights it holds are the union, not the sum (measured by the run's
#    own sizing: below 0.65 x the two runs' sum);
#  * a gateway whose cluster file lists both (models:) plans for 3 live workers, deploys (each
#    device's program built from the merged models) and `tessera infer`
#    answers both outputs equal to the merged `tessera run` (<= 1e-5).
# Args: tessera binary, build dir. Exit 77: a dependency is missing (a failure).
set -u
T=${1:?tessera binary}
build=${2:?build dir}
build=$(mkdir -p "$build" && cd "$build" && pwd) || exit 1
repo=$(cd "$(dirname "$0")/../.." && pwd)
py=/usr/bin/python3
models=(mobilenet_v2 mobilenet_v2_second_head)
source "$repo/tests/oracle/ensure_models.sh"
A=$out/mobilenet_v2.onnx B=$out/mobilenet_v2_second_head.onnx
X=$out/mobilenet_v2.input.npy
D=$(mktemp -d /tmp/tessera-merged-XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$D"; }
trap cleanup EXIT
fail=0
ok() { echo "PASS $1"; }
bad() { echo "FAIL $1"; fail=1; }
compare() { "$py" "$repo/tests/oracle/compare_npy.py" "$1" "$2" --tol "$3"; }

# The merged run, and what it says it shares.
"$T" run "$A" --with-model "$B" --input "$X" --output "$D/a.npy" --output "$D/b.npy" --json >"$D/merged.json" \
  2>"$D/merged.err" || { bad "tessera run --with-model"; cat "$D/merged.err"; exit 1; }
cat "$D/merged.err"
grep -q "mobilenet_v2_second_head: 65 layers, 62 shared" "$D/merged.err" && ok "the backbone is shared (62 of 65 layers)" ||
  bad "the backbone is not shared"
compare "$D/a.npy" "$out/mobilenet_v2.output.npy" 1e-4 && ok "merged output 1 == PyTorch mobilenet_v2" || bad "output 1 vs PyTorch"
compare "$D/b.npy" "$out/mobilenet_v2_second_head.output.npy" 1e-4 && ok "merged output 2 == PyTorch second head" ||
  bad "output 2 vs PyTorch"
"$T" run "$A" --input "$X" --output "$D/a1.npy" --json >"$D/a.json" 2>/dev/null || bad "tessera run A"
"$T" run "$B" --input "$X" --output "$D/b1.npy" --json >"$D/b.json" 2>/dev/null || bad "tessera run B"
compare "$D/a.npy" "$D/a1.npy" 1e-5 && ok "merged output 1 == tessera run A" || bad "output 1 vs run A"
compare "$D/b.npy" "$D/b1.npy" 1e-5 && ok "merged output 2 == tessera run B" || bad "output 2 vs run B"
"$py" - "$D" <<'EOF' || fail=1
import json, sys
d = sys.argv[1]
m, a, b = (json.load(open(f"{d}/{n}.json")) for n in ("merged", "a", "b"))
ratio = m["weight_bytes"] / (a["weight_bytes"] + b["weight_bytes"])
ok = m["weight_bytes"] >= max(a["weight_bytes"], b["weight_bytes"]) and ratio < 0.65
print("%s weights held: merged %.2f MiB, alone %.2f + %.2f MiB (%.2fx their sum)" % (
    "PASS" if ok else "FAIL", m["weight_bytes"] / 2**20, a["weight_bytes"] / 2**20, b["weight_bytes"] / 2**20, ratio))
sys.exit(0 if ok else 1)
EOF

# A gateway serving both on 3 workers.
free_port() { "$py" -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
{ echo "devices:"
  for i in 1 2 3; do
    "$T" worker --listen 127.0.0.1:0 --name w$i --data-dir "$D/w$i" --port-file "$D/w$i.port" 2>>"$D/w$i.log" &
    PIDS[$i]=$!
    for _ in $(seq 200); do [ -f "$D/w$i.port" ] && break; sleep 0.05; done
    echo "  - { name: w$i, kind: linux, address: $(cat "$D/w$i.port"), ram: 1GiB, flash: 4GiB, cpu_hz: 1.5e9, cycles_per_mac: 0.4 }"
  done
  echo "links:"; echo "  default: { bandwidth: 10Gbit/s, latency: 20us }"
  # The models the cluster serves, merged (no --model: the gateway takes these).
  echo "models:"; echo "  - $A"; echo "  - $B"; } >"$D/cluster.yaml"
GRPC=127.0.0.1:$(free_port) HTTP=127.0.0.1:$(free_port)
"$T" gateway --cluster "$D/cluster.yaml" --listen "$GRPC" --http "$HTTP" \
  --data-dir "$D" 2>"$D/gateway.log" &
PIDS[0]=$!
for _ in $(seq 600); do curl -sf "http://$HTTP/healthz" >/dev/null && break; sleep 0.1; done
if ! curl -sf "http://$HTTP/healthz" >/dev/null; then
  bad "gateway --with-model never became healthy"; tail -20 "$D/gateway.log"; exit 1
fi
grep -q "2 models as one graph" "$D/gateway.log" && ok "the gateway merged the models" || bad "gateway: no merge report"
if "$T" infer --gateway "$GRPC" --input "$X" --output "$D/ga.npy" --output "$D/gb.npy" >"$D/infer.log" 2>&1; then
  compare "$D/ga.npy" "$D/a.npy" 1e-5 && ok "gateway output 1 == merged run" || bad "gateway output 1"
  compare "$D/gb.npy" "$D/b.npy" 1e-5 && ok "gateway output 2 == merged run" || bad "gateway output 2"
else
  bad "tessera infer"; cat "$D/infer.log"; tail -20 "$D/gateway.log"
fi
# Scenarios (issue 18 item 5): a request naming one model gets its outputs
# only, equal to that model's own run (that only its steps run and only its
# messages travel is program_runner_test's "[scenarios]"); requests of
# either model and of both alternate with no re-deploy.
for round in 1 2; do
  for m in mobilenet_v2_second_head mobilenet_v2 ""; do
    outs=(--output "$D/s.npy")
    [ -z "$m" ] && outs+=(--output "$D/s2.npy")  # every model: both outputs
    if "$T" infer --gateway "$GRPC" --model-name "$m" --input "$X" "${outs[@]}" >"$D/infer.log" 2>&1; then
      case $m in
        mobilenet_v2) ref=$D/a1.npy ;;
        mobilenet_v2_second_head) ref=$D/b1.npy ;;
        *) ref=$D/a.npy ;;
      esac
      compare "$D/s.npy" "$ref" 1e-5 >/dev/null && ok "round $round, model '${m:-every}': output == its own run" ||
        bad "round $round, model '${m:-every}': output differs"
    else
      bad "round $round: infer --model-name '$m'"; cat "$D/infer.log"
    fi
  done
done
# The v2 protocol: each merged model is a v2 model of its own
# (/v2/models/NAME metadata and infer); JSON in, JSON out.
"$py" - "$HTTP" "$X" "$D/b1.npy" <<'EOF' && ok "v2 /v2/models/mobilenet_v2_second_head/infer == its own run" || bad "v2 infer of one model"
import json, sys, urllib.request
import numpy as np
http, x, ref = sys.argv[1:]
meta = json.load(urllib.request.urlopen(f"http://{http}/v2/models/mobilenet_v2_second_head"))
assert meta["name"] == "mobilenet_v2_second_head" and len(meta["inputs"]) == 1 and len(meta["outputs"]) == 1, meta
xv = np.load(x)
body = {"inputs": [{"name": meta["inputs"][0]["name"], "shape": list(xv.shape), "datatype": "FP32",
                    "data": xv.reshape(-1).tolist()}]}
req = urllib.request.Request(f"http://{http}/v2/models/mobilenet_v2_second_head/infer", json.dumps(body).encode(),
                             {"Content-Type": "application/json"})
out = json.load(urllib.request.urlopen(req))["outputs"]
assert len(out) == 1, out
got, want = np.array(out[0]["data"], dtype=np.float32), np.load(ref).reshape(-1)
rel = np.abs(got - want).max() / np.abs(want).max()
print("  v2 output %s, max rel diff %.3g" % (out[0]["shape"], rel))
sys.exit(0 if rel <= 1e-5 else 1)
EOF
if err=$("$T" infer --gateway "$GRPC" --model-name resnet --input "$X" 2>&1); then
  bad "an unknown model name was answered"
else
  grep -q "unknown model 'resnet'.*'mobilenet_v2', 'mobilenet_v2_second_head'" <<<"$err" &&
    ok "an unknown model is refused naming the served ones" || bad "unknown model: $err"
fi
# A missing --with-model file: a clear error naming it, nothing served.
if err=$("$T" run "$A" --with-model "$D/nope.onnx" 2>&1); then
  bad "a missing --with-model ran"
else
  grep -q -- "--with-model.*nope.onnx" <<<"$err" && ok "a missing --with-model is named: $(tail -1 <<<"$err" | cut -c1-160)" ||
    bad "missing --with-model: $err"
fi
# A gateway given neither --model nor models: says what to give.
sed '/^models:/,$d' "$D/cluster.yaml" >"$D/nomodels.yaml"
if err=$("$T" gateway --cluster "$D/nomodels.yaml" --listen 127.0.0.1:0 2>&1); then
  bad "a gateway without a model started"
else
  grep -q "no model: give --model FILE, or list the models" <<<"$err" && ok "no model: $(tail -1 <<<"$err" | cut -c1-150)" ||
    bad "no model: $err"
fi
exit $fail
