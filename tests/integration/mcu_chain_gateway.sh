#!/usr/bin/env bash
# Two MCUs joined UART-to-UART behind a real gateway (issue 16 item 4): two
# QEMU mps2-an386 boards whose UART1 (mcu1) and UART2 (mcu2) are one Unix
# socket, both owned by one `tessera worker` (their UART0 on ptys), and a
# cluster file with the pair `{ between: [mcu1, mcu2], bandwidth: 115200baud,
# ports: [1, 2] }`. The MCUs have 64 KiB of flash each, so the gateway's
# latency plan (w1 declared slow) splits the keyword-spotting CNN over both;
# the tensor from mcu1 to mcu2 must take the direct link: answers equal
# `tessera run` (1e-5 relative), the firmware's per-UART counters in
# /metrics show the bytes on UART1 of mcu1 and UART2 of mcu2, equal both
# ways, and no worker link carries mcu1 -> mcu2.
# Args: <tessera binary> <build dir>. Exit 77 (a failure) only without qemu-system-arm.
set -u
T=${1:?tessera binary}
BUILD=${2:?build dir}
repo=$(cd "$(dirname "$0")/../.." && pwd)
python=/usr/bin/python3
MODEL=$repo/firmware/models/kws_cnn.cfg

fail=0
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/../oracle" && pwd)/cluster_helpers.sh"
start_scratch tessera-mcu-chain
require_qemu_firmware "$BUILD"

SOCK=$D/mcu1-mcu2.sock
pty1=$(boot_mcu 1 "unix:$SOCK,server=on,wait=off" null)
PIDS+=($(cat "$D/qemu1.pid"))
for _ in $(seq 200); do [[ -S $SOCK ]] && break; sleep 0.05; done
[[ -n $pty1 && -S $SOCK ]] || { echo "FAIL QEMU 1 did not start (pty, UART1 socket)"; cat "$D/qemu1.log"; exit 1; }
pty2=$(boot_mcu 2 null "unix:$SOCK")
PIDS+=($(cat "$D/qemu2.pid"))
[[ -n $pty2 ]] || { echo "FAIL QEMU 2 did not start"; cat "$D/qemu2.log"; exit 1; }
A1=127.0.0.1:$(free_port); A2=127.0.0.1:$(free_port)
"$T" worker --listen 127.0.0.1:0 --name w1 --port-file "$D/w1.port" \
  --mcu "mcu1=$pty1@115200,listen=$A1" --mcu "mcu2=$pty2@115200,listen=$A2" 2>>"$D/w1.log" &
PIDS+=($!)
for _ in $(seq 200); do [[ -f $D/w1.port ]] && [[ $(wc -l <"$D/w1.port") -ge 3 ]] && break; sleep 0.05; done
[[ -f $D/w1.port ]] || { echo "FAIL worker w1 did not start"; cat "$D/w1.log"; exit 1; }
W1=$(head -1 "$D/w1.port")
cat >"$D/cluster.yaml" <<YAML
devices:
  - { name: w1, kind: linux, address: $W1, ram: 1GiB, flash: 4GiB, macs_per_s: 2e4 }
  - { name: mcu1, kind: mcu, ram: 64KiB, flash: 64KiB, macs_per_s: 1e7, serial: $pty1, baud: 115200, via: w1, address: $A1 }
  - { name: mcu2, kind: mcu, ram: 64KiB, flash: 64KiB, macs_per_s: 1e7, serial: $pty2, baud: 115200, via: w1, address: $A2 }
links:
  default: { bandwidth: 1Gbit/s, latency: 0.2ms }
  pairs:
    - { between: [mcu1, mcu2], bandwidth: 115200baud, ports: [1, 2] }
YAML

"$python" -c "import numpy as np; np.save('$D/x.npy', np.random.default_rng(11).standard_normal((1,1,49,10)).astype(np.float32))"
"$T" run "$MODEL" --input "$D/x.npy" --output "$D/ref.npy" >/dev/null || { echo "FAIL tessera run"; exit 1; }

GRPC=127.0.0.1:$(free_port); HTTP=127.0.0.1:$(free_port)
"$T" --log-level info gateway --cluster "$D/cluster.yaml" --model "$MODEL" --objective latency --listen $GRPC --http $HTTP \
  --data-dir "$D/gw" 2>"$D/gateway.log" &
GW=$!
up=0
for _ in $(seq 900); do curl -sf http://$HTTP/healthz >/dev/null && { up=1; break; }; kill -0 $GW 2>/dev/null || break; sleep 0.1; done
if [[ $up != 1 ]]; then echo "FAIL gateway did not become healthy"; tail -30 "$D/gateway.log"; exit 1; fi
grep -E "whole +mcu1" "$D/gateway.log" >/dev/null && grep -E "whole +mcu2" "$D/gateway.log" >/dev/null &&
  ok "the latency plan splits the CNN over mcu1 and mcu2" || { bad "the plan does not use both MCUs"; head -30 "$D/gateway.log"; }
grep -q "transfer steps go over direct MCU<->MCU UARTs" "$D/gateway.log" && ok "the gateway marks the direct link's steps" ||
  bad "no transfer marked for the direct link"
requests=3
for r in $(seq $requests); do
  "$T" infer --gateway $GRPC --deadline-ms 30000 --input "$D/x.npy" --output "$D/y$r.npy" >/dev/null 2>"$D/infer.err" &&
    compare "$D/y$r.npy" "$D/ref.npy" && ok "infer #$r over mcu1 -> mcu2 == run" || { bad "infer #$r"; cat "$D/infer.err"; }
done
fresh_metrics $HTTP "$D/metrics.txt"  # counters come from Worker.GetStatus
"$python" - "$D/metrics.txt" "$requests" >"$D/direct.txt" 2>&1 <<'PY'
import re, sys
text, requests = open(sys.argv[1]).read(), int(sys.argv[2])
def port(device, k, direction):
    m = re.search(r'tessera_mcu_port_payload_bytes_total\{device="%s",port="%d",direction="%s"\} (\d+)'
                  % (device, k, direction), text)
    assert m, (device, k, direction)
    return int(m.group(1))
sent, received = port("mcu1", 1, "sent"), port("mcu2", 2, "received")
assert sent == received > 0 and sent % requests == 0, (sent, received)
assert port("mcu1", 2, "sent") == port("mcu2", 1, "received") == 0
# mcu1 -> mcu2 over gRPC (devices 1 -> 2): nothing.
m = re.search(r'tessera_link_payload_bytes_total\{from="1",to="2"\} (\d+)', text)
assert not m or int(m.group(1)) == 0, m.group(0)
print("  mcu1 UART1 -> mcu2 UART2: %d payload bytes (%d per request)" % (sent, sent // requests))
PY
if [[ $? -eq 0 ]]; then
  ok "/metrics: the direct link carried the tensor, both MCUs agree"; cat "$D/direct.txt"
else
  bad "/metrics: direct link counters"; cat "$D/direct.txt"; grep -E "mcu_port|link_payload" "$D/metrics.txt"
fi
for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null || bad "process $p died"; done
exit $fail
