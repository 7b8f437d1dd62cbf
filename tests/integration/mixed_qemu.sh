#!/usr/bin/env bash
# Mixed Linux + MCU cluster end to end (issue 6, "Mixed cluster"):
# `tessera demo --mcu 2 --json` starts 2 worker processes on loopback and 2
# QEMU mps2-an386 MCUs running the firmware (UART on ptys), each MCU owned
# and bridged by one worker; plans the keyword-spotting CNN with the latency
# objective on the STM32 presets, deploys (MCU programs over the UART), sends
# requests through the gateway and compares every answer with the
# single-device run. Args: <tessera binary> <build dir>.
# Exit 77 (a failure) only without qemu-system-arm.
set -euo pipefail
TESSERA=${1:-build/tessera}
BUILD=${2:-$(dirname "$TESSERA")}
if ! command -v qemu-system-arm >/dev/null 2>&1; then
  echo "FAIL: missing dependency: qemu-system-arm is not installed (deploy/install-deps.sh installs it)"
  exit 77
fi
FW=$BUILD/firmware/tessera_mcu_worker.elf
if [[ ! -f $FW ]]; then
  cmake --build "$BUILD" --target tessera_firmware -j2 >/dev/null || true
fi
[[ -f $FW ]] || { echo "FAIL: $FW was not built (is gcc-arm-none-eabi installed?)"; exit 1; }

OUT=$(mktemp)
ERR=$(mktemp)
trap 'rm -f "$OUT" "$ERR"' EXIT
# run_demo SECONDS ARGS...: `tessera demo ARGS --json` into $OUT. A program
# upload the emulated MCU stops acknowledging ("uploading N program bytes:
# ... not acknowledged") is an open bug, root cause not found yet (upload
# timeouts were seen in integration.mixed_gateway in earlier sessions; on
# 2026-11-27 about 1 demo in 5-10 stalled so; see issue 16's note): such a
# run is retried once and says RETRY. Any other failure, and every answer
# and figure, is checked as it comes.
run_demo() {
  local seconds=$1 rc=0
  shift
  TESSERA_MCU_FIRMWARE=$FW timeout "$seconds" "$TESSERA" --log-level warn demo "$@" >"$OUT" 2>"$ERR" || rc=$?
  if [[ $rc -ne 0 ]] && grep -q "program bytes: .*not acknowledged" "$ERR"; then
    echo "RETRY: demo $*: $(grep -o 'MCU [^,]*, uploading [0-9]* program bytes: .*not acknowledged[^[]*' "$ERR" | head -1)"
    rc=0
    TESSERA_MCU_FIRMWARE=$FW timeout "$seconds" "$TESSERA" --log-level warn demo "$@" >"$OUT" 2>"$ERR" || rc=$?
  fi
  [[ $rc -eq 0 ]] || cat "$ERR" >&2
  return $rc
}
rc=0
run_demo 120 --mcu 2 --requests 4 --json || rc=$?
cat "$OUT"
if [[ $rc -ne 0 ]]; then echo "FAIL: tessera demo --mcu 2 exited $rc"; exit 1; fi
/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["all_match"] is True, "answers differ from the single-device run"
assert j["answered"] == j["requests"], j
assert j["max_rel_diff"] <= 1e-5, j["max_rel_diff"]
mcus = [d for d in j["device_memory"] if d["kind"] == "mcu"]
assert len(mcus) == 2, mcus
for d in mcus:
    assert d.get("mcu_status_present"), d
    assert 0 < d["mcu_free_ram_bytes"] < d["mcu_arena_bytes"], d
    # weights in flash, activations in RAM (issue 16 item 3): the program
    # written to flash holds at least the device's weights
    assert 0 < d["mcu_flash_free_bytes"] < d["mcu_flash_bytes"], d
    assert d["mcu_flash_bytes"] - d["mcu_flash_free_bytes"] >= d["weight_bytes"], d
    assert d["mcu_runs"] >= j["requests"], d
print("PASS: %d requests, max rel %.3g, latency %.1f ms (predicted %.1f ms)"
      % (j["requests"], j["max_rel_diff"], j["latency_ms"], j["predicted_latency_ms"]))
PY

# --model: the depthwise-separable KWS cfg (issue 16 item 6, issue 17 item 5):
# its depthwise and pointwise convs run in place on an MCU, answers checked.
rc=0
run_demo 120 --mcu 2 --model firmware/models/ds_cnn.cfg --requests 3 --json || rc=$?
if [[ $rc -ne 0 ]]; then cat "$OUT"; echo "FAIL: tessera demo --mcu 2 --model ds_cnn.cfg exited $rc"; exit 1; fi
/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["all_match"] is True and j["answered"] == j["requests"], j
mcus = [d for d in j["device_memory"] if d["kind"] == "mcu"]
assert all(d["mcu_runs"] >= j["requests"] for d in mcus), mcus
print("PASS: ds_cnn.cfg on 2 MCUs: %d requests, max rel %.3g" % (j["requests"], j["max_rel_diff"]))
PY

# --force: weight slices on the MCUs (issue 16 item 4), and N MCUs of a
# chosen preset (item 6). FDTI splits every conv's input channels over the
# workers and the MCUs: each MCU receives its channel slice, sends its
# partial sum to w1, receives the merged map of the next layer and goes on
# (the program's phases). FDTO gathers output-channel slices into a part of
# a buffer and copies its own in (MCU <-> MCU through the bridges).
# --mcu-preset STM32F401RB (128 KiB flash, 64 KiB RAM): the planner's own
# placement within it. Every answer equals the single-device run, and every
# MCU's flash and RAM in STATUS equal what the demo promised (its program).
for run in "3 fdti -" "2 fdto -" "2 - STM32F401RB"; do
  read -r n scheme preset <<<"$run"
  args=(--mcu "$n")
  [[ $scheme != - ]] && args+=(--force "$scheme")
  [[ $preset != - ]] && args+=(--mcu-preset "$preset")
  rc=0
  run_demo 180 "${args[@]}" --requests 2 --json || rc=$?
  if [[ $rc -ne 0 ]]; then cat "$OUT"; echo "FAIL: tessera demo ${args[*]} exited $rc"; exit 1; fi
  /usr/bin/python3 - "$OUT" "$n" "$scheme" "$preset" <<'PY'
import json, sys
j, n, scheme, preset = json.load(open(sys.argv[1])), int(sys.argv[2]), sys.argv[3], sys.argv[4]
assert j["all_match"] is True and j["answered"] == j["requests"], j
assert j["max_rel_diff"] <= 1e-5, j["max_rel_diff"]
assert j["mcus"] == n and j["mcu_memory_as_promised"] is True, j
mcus = [d for d in j["device_memory"] if d["kind"] == "mcu"]
assert len(mcus) == n and all(d["mcu_runs"] >= j["requests"] for d in mcus), mcus
for d in mcus:
    assert d["reported_flash_bytes"] == d["promised_flash_bytes"] <= d["preset_flash_bytes"], d
    assert d["reported_ram_bytes"] == d["promised_ram_bytes"] <= d["preset_ram_bytes"], d
    if preset != "-":
        assert d["preset"] == preset, d
if scheme != "-":
    assert j["forced_scheme"] == scheme and j["predicted_latency_ms"] is None, j
    devices = "+".join(["w1", "w2"] + ["mcu%d" % (k + 1) for k in range(n)])
    assert "conv2:%s@%s" % (scheme, devices) in j["placement"], j["placement"]   # split over the MCUs too
print("PASS: --mcu %d --force %s --mcu-preset %s: %d requests, max rel %.3g, %.0f ms; MCU flash/RAM as promised: %s"
      % (n, scheme, preset, j["requests"], j["max_rel_diff"], j["latency_ms"],
         ", ".join("%s %d/%d B" % (d["device"], d["promised_flash_bytes"], d["promised_ram_bytes"]) for d in mcus)))
PY
done

# A quantized (QDQ) model on the MCUs (issue 16 item 1): a small KWS CNN
# exported by PyTorch (seeded), quantized by `tessera quantize`, split with
# FDTI over the 2 workers and 2 MCUs. The MCUs run its QuantizeDequantize
# steps (kOpQuantize, firmware/mcu_kernels.h, the host's rounding bit for
# bit; uart_mcu_program_test checks that): every answer equals the
# single-device run of the QDQ model. Storage is still float32 on the MCUs.
QDIR=$(mktemp -d)
trap 'rm -f "$OUT" "$ERR"; rm -rf "$QDIR"' EXIT
/usr/bin/python3 - "$QDIR" <<'PY'
import sys, torch, torch.nn as nn
torch.manual_seed(20240601)
m = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1),
                  nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16 * 12 * 2, 10)).eval()
torch.onnx.export(m, torch.randn(1, 1, 49, 10), sys.argv[1] + "/kws.onnx", opset_version=13,
                  input_names=["input"], output_names=["output"])
PY
"$TESSERA" quantize "$QDIR/kws.onnx" --random 8 --out "$QDIR/kws.int8.onnx" --json >"$QDIR/quantize.json" ||
  { echo "FAIL: tessera quantize of the KWS CNN"; exit 1; }
rc=0
run_demo 180 --mcu 2 --model "$QDIR/kws.int8.onnx" --force fdti --requests 2 --json || rc=$?
if [[ $rc -ne 0 ]]; then cat "$OUT"; echo "FAIL: tessera demo --mcu 2 --model kws.int8.onnx --force fdti exited $rc"; exit 1; fi
/usr/bin/python3 - "$OUT" "$QDIR/kws.int8.onnx" <<'PY'
import json, sys
import onnx
from onnx import numpy_helper
j = json.load(open(sys.argv[1]))
m = onnx.load(sys.argv[2])
assert sum(n.op_type == "QuantizeLinear" for n in m.graph.node) >= 5, "not a QDQ model"
assert j["all_match"] is True and j["answered"] == j["requests"] == 2, j
assert j["max_rel_diff"] <= 1e-5, j["max_rel_diff"]
assert j["mcu_memory_as_promised"] is True, j
mcus = [d for d in j["device_memory"] if d["kind"] == "mcu"]
assert len(mcus) == 2 and all(d["mcu_runs"] >= 2 for d in mcus), mcus
print("PASS: quantized KWS CNN --force fdti on 2 workers + 2 MCUs: %d requests, max rel %.3g, %.0f ms; "
      "MCU flash/RAM as promised: %s" % (j["requests"], j["max_rel_diff"], j["latency_ms"],
      ", ".join("%s %d/%d B" % (d["device"], d["promised_flash_bytes"], d["promised_ram_bytes"]) for d in mcus)))
PY
