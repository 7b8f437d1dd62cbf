#!/usr/bin/env bash
# Issue 14, "one small request kills the gateway" and friends: hostile input
# against the CLI and against real worker + gateway processes on loopback.
# Every case must end in a clear error naming what is wrong (CLI: exit code
# 1, never a signal; daemons: an HTTP 4xx, and the process still alive and
# answering correctly afterwards):
#   * an 86-byte .npy whose shape product overflows; an .npy whose 'descr' is
#     40 KB (run --input, infer, HTTP);
#   * JSON nested 60 000 deep; 100 MB of JSON (413, and the gateway's peak
#     RSS stays far below what parsing it as a document cost: 2.2 GB);
#   * --input-shape 1x3x100000x100000, ONNX pads of 2^40, darknet
#     filters=2^40 and width=2e9;
#   * --http 0.0.0.0:PORT without --insecure is refused like gRPC's --listen;
#   * idle HTTP connections beyond the cap are refused, /healthz says so while
#     it lasts, gRPC keeps serving, and idle ones are closed after the timeout;
#     idle TCP connections to a worker's gRPC port are closed after 10 s.
# Args: path to tessera, build dir.
set -u
T=${1:?tessera binary}
CFG=/usr/share/darknet/cfg/yolov2-tiny.cfg
[ -f "$CFG" ] || { echo "FAIL $CFG missing (Debian package darknet)"; exit 1; }
command -v curl >/dev/null || { echo "FAIL curl missing"; exit 1; }
python=/usr/bin/python3
SHAPE=1x3x64x64

fail=0
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/../oracle" && pwd)/cluster_helpers.sh"
start_scratch tessera-bad-input

# refused NAME PATTERN CMD...: CMD exits 1 (not killed by a signal, not 0) and
# its stderr matches PATTERN.
refused() {
  local name=$1 pattern=$2; shift 2
  "$@" >/dev/null 2>"$D/err.txt"
  local rc=$?
  if [ $rc = 1 ] && grep -qiE -- "$pattern" "$D/err.txt"; then ok "$name: $(head -c 200 "$D/err.txt" | tr '\n' ' ')"
  else bad "$name: exit $rc (want 1 with /$pattern/): $(head -c 300 "$D/err.txt")"; fi
}

# ---- hostile files ---------------------------------------------------------
"$python" - "$D" <<'EOF'
import sys, struct, numpy as np
d = sys.argv[1]
def npy(path, header, data=b""):
    h = header.encode("latin1")
    pre = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) if len(h) < 65536 else b"\x93NUMPY\x02\x00" + struct.pack("<I", len(h))
    open(path, "wb").write(pre + h + data)
npy(f"{d}/overflow.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 16), }")
npy(f"{d}/descr.npy", "{'descr': '" + "f" * 40000 + "', 'fortran_order': False, 'shape': (1,), }", b"\0" * 4)
np.save(f"{d}/x.npy", np.random.default_rng(3).standard_normal((1, 3, 64, 64)).astype(np.float32))
open(f"{d}/deep.json", "w").write("[" * 60000 + "1" + "]" * 60000)
# 100 MB of JSON numbers.
with open(f"{d}/big.json", "w") as f:
    f.write("[")
    chunk = ",".join(["0.123456789"] * 100000)
    for i in range(96):
        f.write(("," if i else "") + chunk)
    f.write("]")
EOF
[ "$(stat -c %s "$D/overflow.npy")" -le 100 ] && ok "overflow.npy is $(stat -c %s "$D/overflow.npy") bytes" || bad "overflow.npy size"

# ONNX: a Conv whose pads are 2^40.
"$python" - "$D" <<'EOF'
import sys, numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto
d = sys.argv[1]
w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[2**40] * 4, kernel_shape=[3, 3])
g = helper.make_graph([node], "bigpads", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "c", "h", "w"])], [w])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), f"{d}/bigpads.onnx")
EOF
# darknet: filters = 2^40, width = 2e9.
sed 's/^filters=16$/filters=1099511627776/' "$CFG" > "$D/filters.cfg"
grep -q '^filters=1099511627776' "$D/filters.cfg" || bad "filters.cfg not made"
sed 's/^width=416$/width=2000000000/' "$CFG" > "$D/width.cfg"
grep -q '^width=2000000000' "$D/width.cfg" || bad "width.cfg not made"

# ---- the CLI -----------------------------------------------------------------
refused "run --input overflow.npy" "elements" "$T" run "$CFG" --input-shape $SHAPE --input "$D/overflow.npy"
refused "run --input descr.npy" "descr" "$T" run "$CFG" --input-shape $SHAPE --input "$D/descr.npy"
refused "run --input-shape 1x3x100000x100000" "elements" "$T" run "$CFG" --input-shape 1x3x100000x100000
refused "plan --input-shape 1x3x100000x100000" "elements" "$T" plan "$CFG" --devices 2 --input-shape 1x3x100000x100000
refused "run ONNX pads 2^40" "elements" "$T" run "$D/bigpads.onnx"
refused "plan ONNX pads 2^40" "elements" "$T" plan "$D/bigpads.onnx" --devices 2
refused "run darknet filters=2^40" "filters" "$T" run "$D/filters.cfg"
refused "inspect darknet filters=2^40" "filters" "$T" inspect "$D/filters.cfg"
refused "run darknet width=2e9" "width" "$T" run "$D/width.cfg"
refused "gateway --http 0.0.0.0 without --insecure" "--insecure" \
  timeout 20 "$T" gateway --cluster /nonexistent.yaml --model "$CFG" --listen 127.0.0.1:0 --http 0.0.0.0:$(free_port)

# ---- real workers and a gateway ----------------------------------------------
start_loopback_workers 2 || exit 1
"$T" run "$CFG" --input-shape $SHAPE --input "$D/x.npy" --output "$D/ref.npy" >/dev/null || { echo "FAIL tessera run"; exit 1; }
GRPC=127.0.0.1:$(free_port); HTTP=127.0.0.1:$(free_port)
"$T" gateway --cluster "$D/cluster.yaml" --model "$CFG" --input-shape $SHAPE --listen $GRPC --http $HTTP \
  --http-max-connections 32 --http-idle-timeout-ms 2000 --data-dir "$D/gw" 2>"$D/gateway.log" &
GW=$!
up=0
for _ in $(seq 600); do curl -sf http://$HTTP/healthz >/dev/null && { up=1; break; }; kill -0 $GW 2>/dev/null || break; sleep 0.1; done
[ $up = 1 ] || { echo "FAIL gateway did not come up"; cat "$D/gateway.log"; exit 1; }

# post NAME FILE CONTENT-TYPE WANT-CODE PATTERN
post() {
  local code
  code=$(curl -s -o "$D/resp.txt" -w '%{http_code}' --data-binary @"$2" -H "Content-Type: $3" http://$HTTP/v1/infer)
  if [ "$code" = "$4" ] && grep -qiE -- "$5" "$D/resp.txt"; then ok "$1 -> $code $(head -c 160 "$D/resp.txt")"
  else bad "$1 -> $code (want $4 with /$5/): $(head -c 300 "$D/resp.txt")"; fi
  kill -0 $GW 2>/dev/null || { bad "gateway died after $1"; tail -5 "$D/gateway.log"; exit 1; }
}
post "HTTP overflow.npy" "$D/overflow.npy" application/x-npy 400 "elements"
post "HTTP descr.npy" "$D/descr.npy" application/x-npy 400 "descr"
post "HTTP JSON nested 60 000 deep" "$D/deep.json" application/json 400 "nested deeper"
post "HTTP 100 MB JSON" "$D/big.json" application/json 413 "exceeds"
peak=$(awk '/VmHWM/ {print $2}' /proc/$GW/status)
[ "${peak:-999999999}" -lt 400000 ] && ok "gateway peak RSS ${peak} KiB after the hostile bodies" ||
  bad "gateway peak RSS ${peak} KiB (>= 400 MB)"
refused "infer --input overflow.npy" "elements" "$T" infer --gateway $GRPC --input "$D/overflow.npy"
refused "infer --input descr.npy" "descr" "$T" infer --gateway $GRPC --input "$D/descr.npy"

# The cluster still answers, equal to tessera run.
"$T" infer --gateway $GRPC --input "$D/x.npy" --output "$D/y.npy" >/dev/null && compare "$D/y.npy" "$D/ref.npy" &&
  ok "infer after the hostile requests == run" || bad "infer after the hostile requests"

# ---- idle connections: cap, /healthz, gRPC unaffected, idle timeout ---------
"$python" - "$HTTP" "$GRPC" "$T" "$D" "$(cat "$D/w1.port")" <<'EOF' && ok "idle connections bounded" || bad "idle connections"
import socket, subprocess, sys, time
# Idle TCP connections to a worker's gRPC port: closed after the handshake
# timeout (util/limits.h kGrpcHandshakeTimeoutMs, 10 s; gRPC's default is 120 s).
whost, wport = sys.argv[5].rsplit(":", 1)
worker_held = [socket.create_connection((whost, int(wport))) for _ in range(50)]
worker_t0 = time.time()
def drained(sockets):  # how many of them the server closed (end-of-stream within 0.5 s each)
    n = 0
    for s in sockets:
        s.settimeout(0.5)
        try:
            while s.recv(65536): pass
            n += 1
        except ConnectionResetError:
            n += 1
        except socket.timeout:
            pass
    return n
host, port = sys.argv[1].rsplit(":", 1)
held = []
for _ in range(100):  # 3x the gateway's --http-max-connections 32
    s = socket.create_connection((host, int(port)))
    held.append(s)
time.sleep(0.3)
def get(path):
    s = socket.create_connection((host, int(port)), timeout=5)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    data = b""
    while True:
        b = s.recv(65536)
        if not b: break
        data += b
    return data.decode("latin1")
h = get("/healthz")
print("  /healthz while 100 idle connections are open:", h.splitlines()[0], "|", h.split("\r\n\r\n", 1)[-1].strip()[:120])
ok = " 503 " in h.splitlines()[0] and "connections" in h
# gRPC is a separate listener: it keeps serving.
t0 = time.time()
r = subprocess.run([sys.argv[3], "infer", "--gateway", sys.argv[2], "--input", f"{sys.argv[4]}/x.npy", "--deadline-ms", "10000"],
                   capture_output=True)
print("  gRPC infer while they are open: exit", r.returncode, "in %.1f s" % (time.time() - t0))
ok = ok and r.returncode == 0
# The server closes idle connections after --http-idle-timeout-ms (2 s).
time.sleep(3.5)
closed = drained(held)  # refused ones got a 503 first; every one must reach end-of-stream
print(f"  closed by the server after the idle timeout: {closed} of {len(held)}")
ok = ok and closed == len(held)
time.sleep(5.5)  # past the window in which /healthz reports the refusals
h = get("/healthz")
print("  /healthz afterwards:", h.splitlines()[0])
ok = ok and " 200 " in h.splitlines()[0]
time.sleep(max(0, worker_t0 + 13 - time.time()))
wclosed = drained(worker_held)
print(f"  idle connections to worker w1's gRPC port closed by it within 13 s: {wclosed} of {len(worker_held)}")
ok = ok and wclosed == len(worker_held)
sys.exit(0 if ok else 1)
EOF
curl -sf http://$HTTP/metrics | grep -E '^tessera_http_connections_(refused|timed_out)_total' | sed 's/^/  /'

for p in "${PIDS[@]}" $GW; do kill -0 $p 2>/dev/null || bad "process $p died"; done
stop_processes "${PIDS[@]}" $GW
GW=
echo "$( [ $fail = 0 ] && echo PASS || echo FAIL ) bad_input"
exit $fail
