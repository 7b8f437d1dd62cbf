#!/usr/bin/env bash
# Cluster benchmark over an emulated network (issue 5's "bandwidth emulation
# is a later step"): every worker runs in its own network namespace, joined
# to the others by a Linux bridge, and every link is shaped with tc (token
# bucket) to RATE in both directions. The gateway plans for the cluster file
# (whose default link says the same RATE) and serves; we report, per
# objective, the planner's predicted latency next to the measured mean
# latency from the gateway's /metrics, and `tessera run` on one device.
#
# Reading it: the prediction includes the request's trip between the
# gateway (root namespace) and the source over a shaped cable (the cluster
# file's default link carries it, README "Cluster files"). For split plans
# (memory, communication objectives) the planner takes, per layer, the
# slowest device's compute plus two transfer steps (before and after the
# compute), each as long as the busiest cable's larger direction (full
# duplex; METHODS §4-§5); a whole-model plan (latency objective) moves only
# the request and lands near 1.
#
# Needs root (ip netns, tc). Everything it creates is named ts-* and removed
# on exit; traffic stays inside this machine's namespaces (10.77.0.0/24).
# Usage: bench/cluster-netns/run.sh [tessera] [rate] [workers] [model] [input shape] [requests]
#   e.g. bench/cluster-netns/run.sh build/tessera 100mbit 2
# The devices are declared as fast as this machine runs the model on one
# thread (macs_per_s from `tessera run`), so the prediction's compute part
# matches the hardware and the difference is the network model. Note the
# workers share this machine's cores: with more workers than cores the
# measured compute cannot overlap as the plan assumes.
set -u
T=$(realpath "${1:-build/tessera}")
RATE=${2:-100mbit}; N=${3:-2}
MODEL=${4:-/usr/share/darknet/cfg/yolov2-tiny.cfg}; SHAPE=${5:-1x3x416x416}; REQ=${6:-12}
[ "$(id -u)" = 0 ] || { echo "cluster-netns: needs root (ip netns, tc)"; exit 1; }
command -v tc >/dev/null || { echo "cluster-netns: tc missing (apt-get install iproute2)"; exit 1; }
python=/usr/bin/python3
D=$(mktemp -d /tmp/tessera-netns-XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  for i in $(seq "$N"); do ip netns del ts-w$i 2>/dev/null; ip link del ts-v$i 2>/dev/null; done
  ip link del ts-br0 2>/dev/null
  rm -rf "$D"
}
trap cleanup EXIT
# tc rate units: kbit/mbit/gbit; the cluster file takes Mbit/s / Gbit/s.
case $RATE in
  *gbit) YAML_RATE="${RATE%gbit}Gbit/s" ;;
  *mbit) YAML_RATE="${RATE%mbit}Mbit/s" ;;
  *) echo "cluster-netns: rate must end in mbit or gbit"; exit 1 ;;
esac

ip link add ts-br0 type bridge && ip addr add 10.77.0.1/24 dev ts-br0 && ip link set ts-br0 up || exit 1
for i in $(seq "$N"); do
  ns=ts-w$i; addr=10.77.0.$((10 + i))
  ip netns add $ns
  ip link add ts-v$i type veth peer name eth0 netns $ns
  ip link set ts-v$i master ts-br0 up
  ip -n $ns addr add $addr/24 dev eth0
  ip -n $ns link set eth0 up
  ip -n $ns link set lo up
  # Shape both directions of the worker's cable.
  ip netns exec $ns tc qdisc add dev eth0 root tbf rate $RATE burst 256kb latency 100ms
  tc qdisc add dev ts-v$i root tbf rate $RATE burst 256kb latency 100ms
  ip netns exec $ns "$T" --log-level warn worker --listen $addr:7070 --name w$i --insecure 2>>"$D/w$i.log" &
  PIDS+=($!)
done
"$T" run "$MODEL" --input-shape $SHAPE --repeat 5 --warmup 1 --json >"$D/single.json" || exit 1
single=$("$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["median_ms"])' "$D/single.json")
macs=$("$T" inspect "$MODEL" --input-shape $SHAPE --json | "$python" -c 'import json,sys; print(json.load(sys.stdin)["totals"]["macs"])')
speed=$("$python" -c "print('%.4g' % ($macs / ($single / 1000.0)))")
{ echo "devices:"
  for i in $(seq "$N"); do
    echo "  - { name: w$i, kind: linux, address: 10.77.0.$((10 + i)):7070, ram: 4GiB, flash: 32GiB, macs_per_s: $speed }"
  done
  echo "links:"; echo "  default: { bandwidth: $YAML_RATE, latency: 0.2ms }"; } > "$D/cluster.yaml"
sleep 1
"$python" -c "import numpy as np; np.save('$D/x.npy', np.random.default_rng(1).standard_normal([int(v) for v in '$SHAPE'.split('x')]).astype(np.float32))"
printf "%s workers, links %s (tc tbf both ways), %s %s; one device (this machine, 1 thread): %.1f ms = %s MAC/s\n" \
  "$N" "$RATE" "$(basename "$MODEL")" "$SHAPE" "$single" "$speed"
printf "(predicted = the planner's latency, the request's trip between gateway and source included; ratio = measured / predicted)\n"
printf "%-14s %14s %14s %10s %10s\n" objective predicted_ms measured_ms ratio MiB/req
for objective in memory communication latency; do
  port=$("$python" -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
  http=$("$python" -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
  "$T" gateway --cluster "$D/cluster.yaml" --model "$MODEL" --input-shape $SHAPE --objective $objective \
    --listen 127.0.0.1:$port --http 127.0.0.1:$http --data-dir "$D/gw-$objective" --insecure 2>"$D/gw-$objective.log" &
  gw=$!
  for _ in $(seq 600); do curl -sf http://127.0.0.1:$http/healthz >/dev/null && break; sleep 0.1; done
  "$T" infer --gateway 127.0.0.1:$port --input "$D/x.npy" >/dev/null 2>&1  # warm-up
  sleep 1.2  # link counters are pulled by the gateway's 1 s health loop
  before=$(curl -sf http://127.0.0.1:$http/metrics)
  for r in $(seq "$REQ"); do "$T" infer --gateway 127.0.0.1:$port --deadline-ms 120000 --input "$D/x.npy" >/dev/null || echo "request $r failed"; done
  sleep 1.2
  after=$(curl -sf http://127.0.0.1:$http/metrics)
  predicted=$(sed -n 's/^predicted latency \([0-9.e-]*\) s.*/\1/p' "$D/gw-$objective.log" | head -1)
  "$python" - "$objective" "$predicted" "$REQ" <<PY
import re, sys
objective, predicted, req = sys.argv[1], float(sys.argv[2] or "nan"), int(sys.argv[3])
def val(text, name):
    m = re.search(r"^" + re.escape(name) + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0
def links(text):
    return sum(float(v) for v in re.findall(r'^tessera_link_payload_bytes_total\{[^}]*\} (\S+)$', text, re.M))
before, after = """$before""", """$after"""
s = val(after, "tessera_request_latency_seconds_sum") - val(before, "tessera_request_latency_seconds_sum")
n = val(after, "tessera_request_latency_seconds_count") - val(before, "tessera_request_latency_seconds_count")
measured = 1e3 * s / max(n, 1)
mib = (links(after) - links(before)) / max(n, 1) / 2**20
print("%-14s %14.1f %14.1f %10.2f %10.2f" % (objective, predicted * 1e3, measured, measured / (predicted * 1e3), mib))
PY
  kill $gw; wait $gw 2>/dev/null
done
