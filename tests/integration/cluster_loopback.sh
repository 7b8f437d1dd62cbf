#!/usr/bin/env bash
# Multi-process cluster on loopback (issue 5): `tessera demo` starts real
# worker processes on 127.0.0.1, plans, deploys over gRPC and checks every
# answer against the single-device run (max rel diff <= 1e-5).
# Args: path to tessera, build dir. Exit 77 = a dependency is missing (a failure: install-deps.sh installs every one).
set -u
TESSERA=${1:?tessera binary}
CFG=/usr/share/darknet/cfg/yolov2-tiny.cfg
[ -f "$CFG" ] || { echo "FAIL: $CFG missing (Debian package darknet) (deploy/install-deps.sh installs it)"; exit 77; }
fail=0
check() {  # name, json
  local name=$1 json=$2
  if echo "$json" | /usr/bin/python3 -c '
import json,sys
j=json.load(sys.stdin)
ok = j["all_match"] and j["answered"]==j["requests"] and j["max_rel_diff"]<=1e-5
ok = ok and j["measured_payload_bytes"]==j["expected_payload_bytes"]
print("  devices=%d requests=%d clients=%d max_rel_diff=%.3g latency_ms=%.2f single_ms=%.2f thr=%.1f/s wire/payload=%.5f" % (
  j["devices"], j["requests"], j["clients"], j["max_rel_diff"], j["latency_ms"], j["single_device_latency_ms"],
  j["throughput_per_s"], j["measured_wire_bytes"]/max(1,j["measured_payload_bytes"])))
sys.exit(0 if ok else 1)'; then echo "PASS $name"; else echo "FAIL $name"; echo "$json" | head -50; fail=1; fi
}
for n in 4 6; do
  out=$(timeout 300 "$TESSERA" demo --devices $n --input-shape 1x3x160x160 --requests 12 --json) || { echo "FAIL demo $n: rc=$?"; echo "$out"; fail=1; continue; }
  check "yolov2-tiny on $n workers" "$out"
done
# 200 requests, 8 concurrent clients: all answered, all correct.
out=$(timeout 300 "$TESSERA" demo --devices 4 --input-shape 1x3x128x128 --requests 200 --clients 8 --json) || { echo "FAIL concurrent: rc=$?"; echo "$out"; fail=1; }
[ -n "$out" ] && check "200 requests x 8 clients on 4 workers" "$out"
# A forced pipeline plan (whole layers on different workers), 4 clients:
# several inferences are in flight at once (issue 5's throughput mode) —
# every worker reports running more than one request at a time.
out=$(timeout 300 "$TESSERA" demo --devices 3 --input-shape 1x3x128x128 --requests 24 --clients 4 --force pipeline --json) || { echo "FAIL pipeline: rc=$?"; echo "$out"; fail=1; }
[ -n "$out" ] && check "forced pipeline on 3 workers, 4 clients" "$out"
if [ -n "$out" ] && echo "$out" | /usr/bin/python3 -c '
import json,sys
j=json.load(sys.stdin)
peaks=[d["peak_in_flight"] for d in j["device_memory"]]
print("  peak requests in flight per worker:", peaks)
sys.exit(0 if min(peaks) >= 2 else 1)'; then echo "PASS pipelined plan keeps several inferences in flight"; else echo "FAIL pipeline in flight"; fail=1; fi
# A board unplugged half-way (`demo --unplug`): the last worker is SIGKILLed
# while 2 clients keep sending; the gateway fails over to the other 3 and
# every request is still answered correctly.
out=$(timeout 300 "$TESSERA" demo --devices 4 --input-shape 1x3x160x160 --requests 16 --clients 2 --unplug --json) ||
  { echo "FAIL unplug: rc=$?"; echo "$out"; fail=1; }
if [ -n "$out" ] && echo "$out" | /usr/bin/python3 -c '
import json,sys
j=json.load(sys.stdin)
print("  answered=%d/%d max_rel_diff=%.3g failovers=%d final_devices=%d unplugged=%s" % (
  j["answered"], j["requests"], j["max_rel_diff"], j["failovers"], j["final_devices"], j.get("unplugged")))
sys.exit(0 if j["all_match"] and j["failovers"] == 1 and j["final_devices"] == 3 else 1)'; then
  echo "PASS unplug one of 4 workers mid-stream"
else
  echo "FAIL unplug"; fail=1
fi
exit $fail
