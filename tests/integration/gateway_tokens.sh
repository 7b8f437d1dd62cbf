#!/usr/bin/env bash
# Gateway bearer tokens (issue 14 item 2) against a real `tessera gateway
# --token-file` over real workers: HTTP without a token, with a wrong one and
# with the right one (401 + WWW-Authenticate, no body echoed; 200 equal to
# `tessera run`), gRPC Infer through `tessera infer --token-file` (none /
# wrong -> UNAUTHENTICATED, right -> the answer), /healthz and /metrics open
# by default and protected with --protect-metrics; a gateway refuses to start
# on an empty or unreadable token file. gRPC Status: cluster_gateway_tokens_test.
# Args: path to tessera, build dir. Exit 77 = skipped.
set -u
T=${1:?tessera binary}
CFG=/usr/share/darknet/cfg/yolov2-tiny.cfg
[ -f "$CFG" ] || { echo "skip: $CFG missing"; exit 77; }
command -v curl >/dev/null || { echo "skip: curl missing"; exit 77; }
. "$(dirname "$0")/../oracle/cluster_helpers.sh"
start_scratch tessera-tokens
SHAPE=1x3x96x96
start_loopback_workers 2 --data-dir "$D/%n" || exit 1
"$python" -c "import numpy as np; np.save('$D/x.npy', np.random.default_rng(5).standard_normal((1,3,96,96)).astype(np.float32))"
"$T" run "$CFG" --input-shape $SHAPE --input "$D/x.npy" --output "$D/ref.npy" >/dev/null || { echo "FAIL tessera run"; exit 1; }

printf '# tokens of the tessera gateway\n\n  s3cret-one  \nsecond-token\n' > "$D/tokens"
printf 'not-a-token-of-the-gateway\n' > "$D/wrong"
printf '# only a comment\n\n' > "$D/empty"

# Refused before anything is planned: an empty and an unreadable token file.
for f in "$D/empty" "$D/missing"; do
  "$T" gateway --cluster "$D/cluster.yaml" --model "$CFG" --input-shape $SHAPE --listen 127.0.0.1:0 --http "" \
    --token-file "$f" 2>"$D/e.txt" && bad "gateway started with token file $(basename "$f")" ||
    { grep -q "token-file $f" "$D/e.txt" && ok "gateway refuses token file $(basename "$f"): $(grep -o 'error:.*' "$D/e.txt" | cut -c1-100)" ||
      { bad "token file $(basename "$f") error text"; cat "$D/e.txt"; }; }
done

start_gateway 60 --model "$CFG" --input-shape $SHAPE --token-file "$D/tokens" || exit 1
ok "gateway with --token-file: /healthz open without a token"
http() {  # out-file [curl args...] -> prints the status code
  local out=$1
  shift
  curl -s -o "$out" -D "$out.headers" -w '%{http_code}' "$@"
}
code=$(http "$D/h0" --data-binary @"$D/x.npy" -H 'Content-Type: application/x-npy' http://$HTTP/v1/infer)
[ "$code" = 401 ] && grep -qi '^WWW-Authenticate: Bearer' "$D/h0.headers" && ok "HTTP without a token -> 401 + WWW-Authenticate" ||
  { bad "HTTP without a token -> $code"; cat "$D/h0.headers"; }
code=$(http "$D/h1" --data-binary @"$D/x.npy" -H 'Content-Type: application/x-npy' -H 'Authorization: Bearer not-a-token-of-the-gateway' http://$HTTP/v1/infer)
[ "$code" = 401 ] && ! grep -q "not-a-token" "$D/h1" && ok "HTTP with a wrong token -> 401, token not echoed" ||
  { bad "HTTP with a wrong token -> $code"; cat "$D/h1"; }
code=$(http "$D/h2" -H 'Authorization: Basic czNjcmV0LW9uZQ==' --data-binary '[1]' http://$HTTP/v1/infer)
[ "$code" = 401 ] && ok "HTTP with another scheme -> 401" || bad "HTTP Basic -> $code"
code=$(http "$D/h3.npy" --data-binary @"$D/x.npy" -H 'Content-Type: application/x-npy' -H 'Accept: application/x-npy' -H 'Authorization: Bearer second-token' http://$HTTP/v1/infer)
[ "$code" = 200 ] && compare "$D/h3.npy" "$D/ref.npy" && ok "HTTP with the second token == run" || bad "HTTP with the right token -> $code"
code=$(http "$D/h4" -H 'Authorization: bearer s3cret-one' --data-binary '[1,2,3]' http://$HTTP/v1/infer)
[ "$code" = 400 ] && ok "HTTP with the first token (scheme in lower case) reaches the handler (wrong shape -> 400)" || bad "first token -> $code"
code=$(http "$D/m0" http://$HTTP/metrics)
[ "$code" = 200 ] && grep -q '^tessera_gateway_unauthenticated_total 3$' "$D/m0" && ok "/metrics open, counts 3 refusals" ||
  { bad "/metrics -> $code"; grep unauth "$D/m0"; }

"$T" infer --gateway $GRPC --input "$D/x.npy" 2>"$D/e.txt" >/dev/null && bad "gRPC Infer without a token accepted" ||
  { grep -q "Unauthenticated" "$D/e.txt" && ok "gRPC Infer without a token -> UNAUTHENTICATED" || { bad "gRPC without a token"; cat "$D/e.txt"; }; }
"$T" infer --gateway $GRPC --input "$D/x.npy" --token-file "$D/wrong" 2>"$D/e.txt" >/dev/null && bad "gRPC Infer with a wrong token accepted" ||
  { grep -q "Unauthenticated" "$D/e.txt" && ok "gRPC Infer with a wrong token -> UNAUTHENTICATED" || { bad "gRPC wrong token"; cat "$D/e.txt"; }; }
"$T" infer --gateway $GRPC --input "$D/x.npy" --output "$D/y.npy" --token-file "$D/tokens" >/dev/null 2>"$D/e.txt" &&
  compare "$D/y.npy" "$D/ref.npy" && ok "tessera infer --token-file == run" || { bad "infer --token-file"; cat "$D/e.txt"; }
grep -q "s3cret-one\|second-token\|not-a-token" "$D/gateway.log" && bad "a token appears in the gateway log" || ok "no token in the gateway log"
stop_processes $GW
GW=

# --protect-metrics: /healthz and /metrics need a token too (the plan is the one deployed above).
GRPC=127.0.0.1:$(free_port); HTTP=127.0.0.1:$(free_port)
"$T" gateway --cluster "$D/cluster.yaml" --model "$CFG" --input-shape $SHAPE --plan "$D/gw/plan.pb" --listen $GRPC \
  --http $HTTP --token-file "$D/tokens" --protect-metrics 2>"$D/gateway2.log" &
GW=$!
for _ in $(seq 300); do curl -sf -H 'Authorization: Bearer s3cret-one' http://$HTTP/healthz >/dev/null && break; sleep 0.1; done
code=$(http "$D/p0" http://$HTTP/healthz)
[ "$code" = 401 ] && ok "--protect-metrics: /healthz without a token -> 401" || bad "protected /healthz -> $code"
code=$(http "$D/p1" http://$HTTP/metrics)
[ "$code" = 401 ] && ok "--protect-metrics: /metrics without a token -> 401" || bad "protected /metrics -> $code"
code=$(http "$D/p2" -H 'Authorization: Bearer s3cret-one' http://$HTTP/metrics)
[ "$code" = 200 ] && grep -q tessera_requests_total "$D/p2" && ok "--protect-metrics: /metrics with a token -> 200" || bad "protected /metrics with token -> $code"
code=$(http "$D/p3" -H 'Authorization: Bearer s3cret-one' http://$HTTP/healthz)
[ "$code" = 200 ] && ok "--protect-metrics: /healthz with a token -> 200" || bad "protected /healthz with token -> $code"
"$T" gateway --cluster "$D/cluster.yaml" --model "$CFG" --input-shape $SHAPE --listen 127.0.0.1:0 --http "" \
  --protect-metrics 2>"$D/e.txt" && bad "--protect-metrics without --token-file accepted" ||
  { grep -q "needs --token-file" "$D/e.txt" && ok "--protect-metrics needs --token-file" || { bad "protect-metrics error"; cat "$D/e.txt"; }; }
stop_processes $GW "${PIDS[@]}"
GW=; PIDS=()
exit $fail
