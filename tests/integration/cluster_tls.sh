#!/usr/bin/env bash
# Mutual TLS (issue 14 item 1) with real processes on loopback:
#   * `tessera certs init/issue` make a chain OpenSSL's own `openssl verify`
#     accepts (EC P-256, the names as subjectAltName, keys mode 0600); a
#     missing CA and an existing file are clear errors;
#   * 3 workers, each with only ca.crt and its own key/certificate, deployed
#     by `tessera deploy --tls-dir` and served by `tessera gateway --tls-dir`
#     (with a plan file, then planning and deploying itself): `tessera infer
#     --tls-dir` answers equal `tessera run` — every channel in between,
#     worker to worker included, is TLS;
#   * refused: deploy, gateway and infer in plaintext, or with a certificate
#     of another CA; every refusal names who was refused; no daemon dies.
# The precise server-side checks (no certificate, another CA's certificate,
# plaintext, on every Worker RPC) are in cluster_tls_test.
# Args: path to tessera, build dir. Exit 77 = a dependency is missing (a failure: install-deps.sh installs every one).
# ctest label: slow (takes 30 s or more; tests/CMakeLists.txt)
set -u
T=${1:?tessera binary}
CFG=/usr/share/darknet/cfg/yolov2-tiny.cfg
[ -f "$CFG" ] || { echo "FAIL: $CFG missing (Debian package darknet) (deploy/install-deps.sh installs it)"; exit 77; }
command -v curl >/dev/null || { echo "FAIL: curl missing (deploy/install-deps.sh installs it)"; exit 77; }
command -v openssl >/dev/null || { echo "FAIL: openssl missing (deploy/install-deps.sh installs it)"; exit 77; }
python=/usr/bin/python3
SHAPE=1x3x128x128

fail=0
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/../oracle" && pwd)/cluster_helpers.sh"
start_scratch tessera-tls
# Prints the refusal's one-line error (gRPC's own handshake logs aside).
said() { grep -ao "tessera [a-z ]*: error:.*" "$D/e.txt" | head -1 | cut -c1-400 | sed 's/^/  /'; }

# --- certificates -----------------------------------------------------------
CA=$D/ca
"$T" certs init --dir "$CA" >/dev/null && ok "certs init" || bad "certs init"
for n in w1 w2 w3 gateway deploy infer; do
  "$T" certs issue --dir "$CA" --name $n >/dev/null || bad "certs issue $n"
done
openssl verify -CAfile "$CA/ca.crt" "$CA"/w1.crt "$CA"/gateway.crt "$CA"/infer.crt >"$D/verify.txt" 2>&1 &&
  ok "openssl verify accepts the chain" || { bad "openssl verify"; cat "$D/verify.txt"; }
openssl x509 -in "$CA/w2.crt" -noout -text >"$D/w2.txt"
grep -q "NIST CURVE: P-256" "$D/w2.txt" && grep -q "DNS:w2, IP Address:127.0.0.1, DNS:localhost" "$D/w2.txt" &&
  grep -q "CA:FALSE" "$D/w2.txt" && ok "w2.crt: P-256, subjectAltName w2, 127.0.0.1, localhost" ||
  { bad "w2.crt contents"; cat "$D/w2.txt"; }
openssl x509 -in "$CA/ca.crt" -noout -text | grep -q "CA:TRUE" && ok "ca.crt is a CA" || bad "ca.crt is not a CA"
[ "$(stat -c %a "$CA/ca.key")" = 600 ] && [ "$(stat -c %a "$CA/w1.key")" = 600 ] && ok "keys are mode 0600" ||
  bad "key modes $(stat -c '%n %a' "$CA"/*.key)"
before=$(sha256sum <"$CA/w1.key")
"$T" certs issue --dir "$CA" --name w1 2>"$D/e.txt" && bad "issue over an existing w1 accepted" ||
  { grep -q "w1.* already exists.*--force" "$D/e.txt" && [ "$(sha256sum <"$CA/w1.key")" = "$before" ] &&
    ok "existing w1 not overwritten without --force" || { bad "overwrite error"; cat "$D/e.txt"; }; }
"$T" certs init --dir "$CA" 2>"$D/e.txt" && bad "init over an existing CA accepted" ||
  { grep -q "already exists" "$D/e.txt" && ok "existing CA not overwritten" || { bad "init error"; cat "$D/e.txt"; }; }
"$T" certs issue --dir "$D/nowhere" --name w1 2>"$D/e.txt" && bad "issue without a CA accepted" ||
  { grep -q "$D/nowhere/ca.crt is missing.*certs init" "$D/e.txt" && { ok "missing CA named"; said; } || { bad "missing CA error"; cat "$D/e.txt"; }; }
# Another CA, whose certificates carry the cluster's names.
ROGUE=$D/rogue
"$T" certs init --dir "$ROGUE" >/dev/null && for n in deploy infer gateway; do
  "$T" certs issue --dir "$ROGUE" --name $n >/dev/null; done
openssl verify -CAfile "$CA/ca.crt" "$ROGUE/deploy.crt" >/dev/null 2>&1 && bad "openssl trusts the other CA's certificate" ||
  ok "openssl refuses the other CA's certificate"

# Each process gets a directory with ca.crt and its own identity only.
tls_dir() {  # name [ca dir]
  local from=${2:-$CA}
  mkdir -p "$D/$1-tls-$(basename "$from")"
  cp "$from/ca.crt" "$from/$1.crt" "$from/$1.key" "$D/$1-tls-$(basename "$from")/"
  echo "$D/$1-tls-$(basename "$from")"
}
for n in w1 w2 w3; do mkdir -p "$D/$n"; cp "$CA/ca.crt" "$CA/$n.crt" "$CA/$n.key" "$D/$n/"; done

# --- a TLS cluster ----------------------------------------------------------
start_loopback_workers 3 --tls-dir "$D/%n" || exit 1

"$python" -c "import numpy as np; np.save('$D/x.npy', np.random.default_rng(7).standard_normal((1,3,128,128)).astype(np.float32))"
"$T" run "$CFG" --input-shape $SHAPE --input "$D/x.npy" --output "$D/ref.npy" >/dev/null || { echo "FAIL tessera run"; exit 1; }
"$T" plan "$CFG" --input-shape $SHAPE --cluster "$D/cluster.yaml" --objective latency --out "$D/plan.pb" >/dev/null ||
  { echo "FAIL tessera plan"; exit 1; }

# Refused deploys first: nothing may reach a worker.
t0=$SECONDS
"$T" deploy --cluster "$D/cluster.yaml" --plan "$D/plan.pb" --model "$CFG" --input-shape $SHAPE 2>"$D/e.txt" >/dev/null &&
  bad "plaintext deploy to TLS workers accepted" ||
  { grep -q "w1\|w2\|w3" "$D/e.txt" && { ok "plaintext deploy refused, naming the worker"; said; } || { bad "plaintext deploy error"; cat "$D/e.txt"; }; }
# A refused session is reported once it repeats (grpc_channel.cc
# WaitUntilConnected), not after the 10 s a starting worker is given.
took=$(( SECONDS - t0 ))
[ $took -le 5 ] && grep -q "took the connection but refused the session" "$D/e.txt" &&
  ok "the refusal is reported in $took s (not at the 10 s connect deadline)" ||
  { bad "plaintext deploy refusal took $took s"; cat "$D/e.txt"; }
"$T" deploy --cluster "$D/cluster.yaml" --plan "$D/plan.pb" --model "$CFG" --input-shape $SHAPE \
  --tls-dir "$(tls_dir deploy "$ROGUE")" 2>"$D/e.txt" >/dev/null && bad "deploy with another CA's certificate accepted" ||
  { grep -q "w1\|w2\|w3" "$D/e.txt" && { ok "deploy with another CA's certificate refused, naming the worker"; said; } ||
    { bad "other-CA deploy error"; cat "$D/e.txt"; }; }
# A TLS directory without this process's files: the file is named.
"$T" deploy --cluster "$D/cluster.yaml" --plan "$D/plan.pb" --model "$CFG" --input-shape $SHAPE \
  --tls-dir "$D/w1" 2>"$D/e.txt" >/dev/null && bad "deploy without deploy.crt accepted" ||
  { grep -q "$D/w1/deploy.crt is missing" "$D/e.txt" && { ok "missing deploy.crt named"; said; } || { bad "missing file error"; cat "$D/e.txt"; }; }

DEPLOY_TLS=$(tls_dir deploy)
"$T" deploy --cluster "$D/cluster.yaml" --plan "$D/plan.pb" --model "$CFG" --input-shape $SHAPE \
  --tls-dir "$DEPLOY_TLS" >"$D/deploy.txt" 2>&1 && ok "tessera deploy --tls-dir" || { bad "deploy --tls-dir"; cat "$D/deploy.txt"; }

GATEWAY_TLS=$(tls_dir gateway)
INFER_TLS=$(tls_dir infer)
start_gateway 60 --model "$CFG" --input-shape $SHAPE --plan "$D/plan.pb" --tls-dir "$GATEWAY_TLS" || exit 1
"$T" infer --gateway $GRPC --tls-dir "$INFER_TLS" --input "$D/x.npy" --output "$D/y.npy" >/dev/null 2>"$D/e.txt" &&
  compare "$D/y.npy" "$D/ref.npy" && ok "TLS cluster (tessera deploy's plan): infer == run" ||
  { bad "infer over TLS"; cat "$D/e.txt"; tail -5 "$D/gateway.log"; }
curl -sf --data-binary @"$D/x.npy" -H 'Content-Type: application/x-npy' -H 'Accept: application/x-npy' \
  http://$HTTP/v1/infer -o "$D/h.npy" && compare "$D/h.npy" "$D/ref.npy" && ok "HTTP (loopback) == run" || bad "HTTP"

# --tls-name: another identity from a directory (any certificate of the cluster CA is a client today).
"$T" infer --gateway $GRPC --tls-dir "$D/w1" --tls-name w1 --input "$D/x.npy" --output "$D/y1.npy" >/dev/null 2>"$D/e.txt" &&
  compare "$D/y1.npy" "$D/ref.npy" && ok "infer --tls-name w1 == run" || { bad "infer --tls-name"; cat "$D/e.txt"; }

# Clients the gateway refuses.
"$T" infer --gateway $GRPC --input "$D/x.npy" 2>"$D/e.txt" >/dev/null && bad "plaintext infer accepted" ||
  { grep -q "gateway $GRPC" "$D/e.txt" && { ok "plaintext infer refused, naming the gateway"; said; } || { bad "plaintext infer error"; cat "$D/e.txt"; }; }
"$T" infer --gateway $GRPC --tls-dir "$(tls_dir infer "$ROGUE")" --input "$D/x.npy" 2>"$D/e.txt" >/dev/null &&
  bad "infer with another CA's certificate accepted" ||
  { grep -q "gateway $GRPC" "$D/e.txt" && { ok "infer with another CA's certificate refused"; said; } || { bad "other-CA infer error"; cat "$D/e.txt"; }; }
stop_processes $GW
GW=

# A gateway without TLS, or with another CA's certificate, cannot use the workers.
for variant in plaintext rogue; do
  args=()
  [ $variant = rogue ] && args=(--tls-dir "$(tls_dir gateway "$ROGUE")")
  "$T" gateway --cluster "$D/cluster.yaml" --model "$CFG" --input-shape $SHAPE --plan "$D/plan.pb" --deploy \
    --listen 127.0.0.1:$(free_port) --http "" "${args[@]}" >/dev/null 2>"$D/e.txt" &
  gpid=$!
  for _ in $(seq 300); do kill -0 $gpid 2>/dev/null || break; sleep 0.1; done
  if kill -0 $gpid 2>/dev/null; then bad "$variant gateway kept running against TLS workers"; stop_processes $gpid
  else wait $gpid; rc=$?
    [ $rc != 0 ] && grep -q "w1\|w2\|w3" "$D/e.txt" && { ok "$variant gateway refused by the workers (exit $rc), naming one"; said; } ||
      { bad "$variant gateway: exit $rc"; cat "$D/e.txt"; }
  fi
done

# The gateway planning and deploying itself over TLS (probes, LoadProgram).
start_gateway 60 --model "$CFG" --input-shape $SHAPE --objective memory --tls-dir "$GATEWAY_TLS" || exit 1
"$T" infer --gateway $GRPC --tls-dir "$INFER_TLS" --input "$D/x.npy" --output "$D/y2.npy" >/dev/null 2>"$D/e.txt" &&
  compare "$D/y2.npy" "$D/ref.npy" && ok "TLS cluster (gateway's own plan): infer == run" ||
  { bad "infer over TLS (gateway plan)"; cat "$D/e.txt"; tail -5 "$D/gateway.log"; }

for i in 1 2 3; do kill -0 ${PIDS[$i]} 2>/dev/null || bad "worker w$i died"; done
kill -0 $GW 2>/dev/null || bad "gateway died"
exit $fail
