#!/usr/bin/env bash
# Mixed cluster the way a user runs it (issue 6: "the gateway sees them as
# devices"): two QEMU mps2-an386 MCUs on ptys, two `tessera worker`
# processes each owning one (`--mcu NAME=PTY@115200,listen=ADDR`), a cluster
# file whose mcu devices carry those bridge addresses, and `tessera gateway`
# planning for the live devices itself (latency objective) and deploying.
# The Linux devices are declared slow (macs_per_s) so the latency plan puts
# the model on an MCU; answers from `tessera infer` and HTTP must equal
# `tessera run` (max|a-b|/max|b| <= 1e-5) and /metrics must show the MCUs up.
# mcu1's cable is noisy: tessera_serial_relay corrupts, drops and duplicates
# bytes (2e-5 per byte each way) between w1 and QEMU; the
# answers must still be exact and /metrics must count the damage.
# Args: <tessera binary> <build dir>. Exit 77 (a failure) only without qemu-system-arm.
set -u
T=${1:?tessera binary}
BUILD=${2:?build dir}
repo=$(cd "$(dirname "$0")/../.." && pwd)
python=/usr/bin/python3
MODEL=$repo/firmware/models/kws_cnn.cfg

fail=0
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/../oracle" && pwd)/cluster_helpers.sh"
start_scratch tessera-mixed-gw
require_qemu_firmware "$BUILD"

declare -A ADDR BAUD
RELAY=$BUILD/firmware/tessera_serial_relay
[[ -x $RELAY ]] || cmake --build "$BUILD" --target tessera_serial_relay -j2 >/dev/null
[[ -x $RELAY ]] || { echo "FAIL: $RELAY was not built"; exit 1; }
for i in 1 2; do
  pty=$(boot_mcu $i)
  PIDS+=($(cat "$D/qemu$i.pid"))
  [[ -n $pty ]] || { echo "FAIL QEMU $i did not report its pty"; cat "$D/qemu$i.log"; exit 1; }
  BAUD[$i]=115200
  if [[ $i = 1 ]]; then  # the noisy cable
    "$RELAY" --port "$pty" --pty-file "$D/relay1.pty" --faults 2e-5 --seed 3 >"$D/relay1.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 100); do [[ -f $D/relay1.pty ]] && break; sleep 0.05; done
    [[ -f $D/relay1.pty ]] || { echo "FAIL relay did not start"; cat "$D/relay1.log"; exit 1; }
    pty=$(cat "$D/relay1.pty")
  fi
  ADDR[mcu$i]=127.0.0.1:$(free_port)
  "$T" worker --listen 127.0.0.1:0 --name w$i --port-file "$D/w$i.port" \
    --mcu "mcu$i=$pty@${BAUD[$i]},listen=${ADDR[mcu$i]}" 2>>"$D/w$i.log" &
  PIDS+=($!)
  for _ in $(seq 200); do [[ -f $D/w$i.port ]] && break; sleep 0.05; done
  [[ -f $D/w$i.port ]] || { echo "FAIL worker w$i did not start"; cat "$D/w$i.log"; exit 1; }
  ADDR[w$i]=$(head -1 "$D/w$i.port")
  grep -q "^mcu$i=${ADDR[mcu$i]}$" "$D/w$i.port" && ok "w$i serves mcu$i ($pty) on ${ADDR[mcu$i]}" ||
    { bad "w$i port file lacks mcu$i=${ADDR[mcu$i]}"; cat "$D/w$i.port"; }
done
cat >"$D/cluster.yaml" <<EOF
devices:
  - { name: w1, kind: linux, address: ${ADDR[w1]}, ram: 1GiB, flash: 4GiB, macs_per_s: 2e5 }
  - { name: w2, kind: linux, address: ${ADDR[w2]}, ram: 1GiB, flash: 4GiB, macs_per_s: 2e5 }
  - { name: mcu1, kind: mcu, preset: STM32H743ZI, serial: /dev/ttyS1, baud: ${BAUD[1]}, via: w1, address: ${ADDR[mcu1]} }
  - { name: mcu2, kind: mcu, preset: STM32F446RE, serial: /dev/ttyS1, baud: 115200, via: w2, address: ${ADDR[mcu2]} }
links:
  default: { bandwidth: 1Gbit/s, latency: 0.2ms }
EOF

"$python" -c "import numpy as np; np.save('$D/x.npy', np.random.default_rng(7).standard_normal((1,1,49,10)).astype(np.float32))"
"$T" run "$MODEL" --input "$D/x.npy" --output "$D/ref.npy" >/dev/null || { echo "FAIL tessera run"; exit 1; }

GRPC=127.0.0.1:$(free_port); HTTP=127.0.0.1:$(free_port)
"$T" gateway --cluster "$D/cluster.yaml" --model "$MODEL" --objective latency --listen $GRPC --http $HTTP \
  --data-dir "$D/gw" 2>"$D/gateway.log" &
GW=$!
PIDS+=($GW)
up=0
for _ in $(seq 600); do curl -sf http://$HTTP/healthz >/dev/null && { up=1; break; }; kill -0 $GW 2>/dev/null || break; sleep 0.1; done
if [[ $up != 1 ]]; then echo "FAIL gateway did not become healthy"; tail -30 "$D/gateway.log"; exit 1; fi
grep -E "^ +[0-9]+ .*whole +mcu[12]" "$D/gateway.log" >/dev/null && ok "the gateway's latency plan places layers on an MCU" ||
  { bad "no layer planned on an MCU"; head -20 "$D/gateway.log"; }
for r in 1 2; do
  "$T" infer --gateway $GRPC --deadline-ms 30000 --input "$D/x.npy" --output "$D/y$r.npy" >/dev/null 2>"$D/infer.err" &&
    compare "$D/y$r.npy" "$D/ref.npy" && ok "infer #$r through the MCU == run" || { bad "infer #$r"; cat "$D/infer.err"; }
done
curl -sf -H 'Accept: application/x-npy' -H 'Content-Type: application/x-npy' --data-binary @"$D/x.npy" \
  http://$HTTP/v1/infer -o "$D/yh.npy" && compare "$D/yh.npy" "$D/ref.npy" && ok "HTTP .npy through the MCU == run" ||
  bad "HTTP .npy"
curl -sf http://$HTTP/metrics >"$D/metrics.txt"
for m in mcu1 mcu2; do
  grep -q "tessera_worker_up{worker=\"$m\",device=\"[0-9]*\"} 1" "$D/metrics.txt" && ok "/metrics: $m up" ||
    { bad "/metrics: $m not up"; grep worker_up "$D/metrics.txt"; }
done
# The UART counters of the MCU that ran the model: wire bytes both ways,
# and every bad-frame reason exported (zero on a clean pty).
fresh_metrics $HTTP "$D/metrics.txt"  # counters come from Worker.GetStatus
"$python" - "$D/metrics.txt" <<'PY' && ok "/metrics: UART counters of the MCUs" || { bad "/metrics: UART counters"; grep uart "$D/metrics.txt"; }
import re, sys
text = open(sys.argv[1]).read()
def value(name, device):
    m = re.search(name + r'\{device="' + device + r'"\} (\d+)', text)
    return int(m.group(1)) if m else None
def bad_frames(device):
    return sum(int(n) for n in re.findall(r'tessera_uart_bad_frames_total\{device="' + device + r'",reason="\w+"\} (\d+)', text))
used = [d for d in ("mcu1", "mcu2") if (value("tessera_uart_wire_bytes_received_total", d) or 0) > 0]
assert used, "no MCU received-bytes counter above zero"
for d in ("mcu1", "mcu2"):
    reasons = set(re.findall(r'tessera_uart_bad_frames_total\{device="' + d + r'",reason="(\w+)"\} \d+', text))
    assert {"crc", "cobs", "length", "type"} <= reasons, (d, reasons)
    print("  %s: sent %s B, received %s B, retransmissions %s, bad frames %s" % (
        d, value("tessera_uart_wire_bytes_sent_total", d), value("tessera_uart_wire_bytes_received_total", d),
        value("tessera_uart_retransmissions_total", d), bad_frames(d)))
# mcu1's noisy cable: the damage shows as dropped frames and/or resends.
assert bad_frames("mcu1") + value("tessera_uart_retransmissions_total", "mcu1") > 0, "no fault seen on mcu1's cable"
PY
for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null || bad "process $p died"; done
exit $fail
