#!/usr/bin/env bash
# Mixed Linux + MCU cluster end to end (issue 6, "Mixed cluster"):
# `tessera demo --mcu 2 --json` starts 2 worker processes on loopback and 2
# QEMU mps2-an386 MCUs running the firmware (UART on ptys), each MCU owned
# and bridged by one worker; plans the keyword-spotting CNN with the latency
# objective on the STM32 presets, deploys (MCU programs over the UART), sends
# requests through the gateway and compares every answer with the
# single-device run; with --mcu-chain the two MCUs are also joined
# UART-to-UART. Args: <tessera binary> <build dir>.
# Exit 77 (a failure) only without qemu-system-arm.
# ctest label: slow (takes 30 s or more; tests/CMakeLists.txt)
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
    assert d["reported_flash_bytes"] == d["promised_flash_bytes"] <= d["program_flash_bytes_available"], d
    assert d["reported_ram_bytes"] == d["promised_ram_bytes"] <= d["program_ram_bytes_available"], d
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
# single-device run of the QDQ model. The MCUs hold the conv and dense
# weights as int8 codes (mcu_program.h kWeightsInt8) and the outputs of
# QuantizeDequantize steps as int8 codes in RAM (program format 5).
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
assert all(d["int8_weight_layers"] >= 1 for d in mcus), mcus  # FDTI slices of its convs, as int8
print("PASS: quantized KWS CNN --force fdti on 2 workers + 2 MCUs: %d requests, max rel %.3g, %.0f ms; "
      "MCU flash/RAM as promised: %s" % (j["requests"], j["max_rel_diff"], j["latency_ms"],
      ", ".join("%s %d/%d B" % (d["device"], d["promised_flash_bytes"], d["promised_ram_bytes"]) for d in mcus)))
PY

# The demo's JSON for the Pad + Softmax CNNs below: every answer equal, MCU
# memory as promised, and where the layers went. `reflect`: the Pad (a real
# node) on a worker and both MCUs computing; `zero`: the Pad folded away and
# every layer, the Softmax included, on the MCUs.
check_pad_softmax() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, sys
j, kind = json.load(open(sys.argv[1])), sys.argv[2]
assert j["all_match"] is True and j["answered"] == j["requests"] == 2, j
assert j["max_rel_diff"] <= 1e-5, j["max_rel_diff"]
assert j["mcu_memory_as_promised"] is True, j
placed = dict(p.rsplit("@", 1) for p in j["placement"].split(", "))
pads = [d for n, d in placed.items() if n.endswith("Pad")]
if kind == "reflect":
    assert pads and all(d.startswith("w") for d in pads), j["placement"]
    # each MCU computes: not only an alias (a Flatten alone was once all mcu2 got)
    for mcu in ("mcu1", "mcu2"):
        assert any(d == mcu and not n.endswith(("Flatten", "Reshape")) for n, d in placed.items()), (mcu, j["placement"])
    what = "KWS with a reflection Pad on 2 workers + 2 MCUs"
else:
    assert not pads, j["placement"]  # folded into the conv
    soft = [d for n, d in placed.items() if n.endswith("Softmax")]
    assert soft and all(d.startswith("mcu") for d in placed.values()), j["placement"]
    what = "KWS with a zero Pad (folded) and a Softmax, every layer on 2 MCUs"
print("PASS: %s: %d requests equal (max rel %.3g); %s" % (what, j["requests"], j["max_rel_diff"], j["placement"]))
PY
}

# Ops the firmware lacks (issue 16: MCU op support in placement): a KWS CNN
# exported with a ReflectionPad2d before its first conv (a Pad node: the
# firmware has no Pad) and a Softmax after its dense layer. The mixed search
# asks McuCanRun of every layer (the MCU program builder's own checks) and
# keeps the Pad on a Linux device; the MCUs get layers they run; every
# answer equals the single-device run. --mcu-only is refused, naming the op.
# The same CNN with a ZeroPad2d instead, as MLPerf's DS-CNN and VWW exports
# have: the importer folds the zero Pad into the conv's padding
# (FoldPadsIntoWindows) and the firmware runs the Softmax (kOpSoftmax), so
# --mcu-only runs every layer on the two MCUs.
/usr/bin/python3 - "$QDIR" <<'PY'
import sys, torch, torch.nn as nn
for name, pad in (("kws_reflect_softmax", nn.ReflectionPad2d(1)), ("kws_pad_softmax", nn.ZeroPad2d((1, 0, 2, 1)))):
    torch.manual_seed(20241129)
    m = nn.Sequential(pad, nn.Conv2d(1, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1),
                      nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.LazyLinear(10), nn.Softmax(dim=1)).eval()
    x = torch.randn(1, 1, 49, 10)
    m(x)
    torch.onnx.export(m, x, sys.argv[1] + "/" + name + ".onnx", opset_version=13,
                      input_names=["input"], output_names=["output"])
PY
rc=0
run_demo 180 --mcu 2 --model "$QDIR/kws_reflect_softmax.onnx" --requests 2 --json || rc=$?
if [[ $rc -ne 0 ]]; then cat "$OUT"; echo "FAIL: tessera demo --mcu 2 --model kws_reflect_softmax.onnx exited $rc"; exit 1; fi
check_pad_softmax "$OUT" reflect
rc=0
run_demo 60 --mcu 2 --mcu-only --model "$QDIR/kws_reflect_softmax.onnx" --requests 1 --json || rc=$?
if [[ $rc -eq 0 ]] || ! grep -q "(Pad) cannot run on an MCU: .*the op is not supported on an MCU" "$ERR"; then
  cat "$OUT" "$ERR"; echo "FAIL: --mcu-only should refuse the Pad layer by name (exit $rc)"; exit 1
fi
echo "PASS: --mcu-only refuses it: $(grep -o 'layer [0-9]* [^:]*(Pad) cannot run on an MCU' "$ERR" | head -1)"
rc=0
run_demo 180 --mcu 2 --mcu-only --model "$QDIR/kws_pad_softmax.onnx" --requests 2 --json || rc=$?
if [[ $rc -ne 0 ]]; then cat "$OUT" "$ERR"; echo "FAIL: --mcu-only with a zero Pad and a Softmax exited $rc"; exit 1; fi
check_pad_softmax "$OUT" zero

# Direct MCU<->MCU UART links (issue 16 items 4 and 7): --mcu-chain joins
# UART1 of mcu1 to UART2 of mcu2 (a Unix socket between the two QEMUs, no
# Linux board in between) and writes the pair into the cluster file. The
# quantized KWS CNN, (a) placed by the planner, which prices the direct link
# as one UART hop, and (b) forced FDTO over all four devices, so the MCUs
# exchange their output-channel slices directly. Every answer equals the
# single-device run; every direct link carried exactly the payload bytes
# the programs send over it (counted by both MCUs' firmware, per UART, in
# STATUS); the bridges relayed none of it over gRPC. A QuantizeDequantize's
# output crosses as int8 codes: 1 byte a value, not 4.
for scheme in - fdto; do
  args=(--mcu 2 --mcu-chain --model "$QDIR/kws.int8.onnx")
  [[ $scheme != - ]] && args+=(--force "$scheme")
  rc=0
  # 4 requests: an MCU that reset its send session under a frame still
  # waiting for its acknowledgement stalled 12.5 s and counted a direct
  # link at half its bytes in 1 demo of 2-4 on a loaded machine (firmware
  # OnFrame, fixed 2026-12-07); the more requests, the likelier it shows.
  run_demo 180 "${args[@]}" --requests 4 --json || rc=$?
  if [[ $rc -ne 0 ]]; then cat "$OUT"; echo "FAIL: tessera demo ${args[*]} exited $rc"; exit 1; fi
  /usr/bin/python3 - "$OUT" "$scheme" <<'PY'
import json, sys
j, scheme = json.load(open(sys.argv[1])), sys.argv[2]
assert j["all_match"] is True and j["answered"] == j["requests"] == 4, j
# A request is 0.3-0.8 s here; a frame no acknowledgement releases takes
# 50 retries of 250 ms (firmware SendMessage) before the MCU gives up.
assert j["latency_ms"] < 8000, "a direct link stalled: %.0f ms a request" % j["latency_ms"]
assert j["max_rel_diff"] <= 1e-5, j["max_rel_diff"]
assert j["mcu_chain"] is True and j["mcu_memory_as_promised"] is True, j
direct = j["direct_links"]
assert direct, "no tensor took the direct MCU link: %s" % j["placement"]
assert j["direct_links_as_expected"] is True, direct
for l in direct:
    assert {l["from"], l["to"]} == {"mcu1", "mcu2"}, l
    assert l["expected_payload_bytes"] > 0, l
    # int8 codes for a QuantizeDequantize's output (FDTO's slices are); the
    # planner's pipeline sends the Gemm's float output (its QDQ on mcu2).
    assert l["expected_payload_bytes"] == (l["values"] if scheme != "-" else 4 * l["values"]), l
    assert l["sent_payload_bytes"] == l["received_payload_bytes"] == l["expected_payload_bytes"], l
    assert l["from_uart"] == (1 if l["from"] == "mcu1" else 2) and l["to_uart"] == (2 if l["to"] == "mcu2" else 1), l
# nothing between the two MCUs went through a worker
for l in j["links"]:
    if {l["from"], l["to"]} == {"mcu1", "mcu2"}:
        assert l["expected_payload_bytes"] == 0, l
if scheme != "-":
    assert "Conv:%s@w1+w2+mcu1+mcu2" % scheme in j["placement"], j["placement"]
print("PASS: quantized KWS, --mcu-chain%s: %d requests equal, max rel %.3g, %.0f ms; direct UART: %s"
      % ("" if scheme == "-" else " --force " + scheme, j["requests"], j["max_rel_diff"], j["latency_ms"],
         ", ".join("%s->%s %d B" % (l["from"], l["to"], l["sent_payload_bytes"]) for l in direct)))
PY
done

# An all-MCU chain that no single MCU could run (issue 16 items 3 and 4): a
# quantized CNN of 140 860 weights on STM32F401RB-class boards (128 KiB
# flash, 64 KiB RAM each, of which the firmware itself takes 22 KiB and
# 26 KiB). The MCU programs hold its conv and dense weights as int8 codes
# with a scale per output channel (143 KB in all; 563 KB as float32, more
# than three such boards hold). One such MCU alone is refused before
# anything is deployed, naming the shortfall; so is the float model on
# three; three joined UART-to-UART run every layer of the quantized one
# (--mcu-only: w1 only sends the input and takes the answer), answers
# equal to the host run within one step of the output's int8 grid.
/usr/bin/python3 - "$QDIR" <<'PY'
import sys, torch, torch.nn as nn
torch.manual_seed(20241128)
m = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                  nn.Conv2d(8, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                  nn.Conv2d(32, 96, 3, padding=1), nn.ReLU(), nn.Conv2d(96, 96, 3, padding=1), nn.ReLU(),
                  nn.Flatten(), nn.Linear(96 * 12 * 2, 12)).eval()
assert sum(p.numel() for p in m.parameters()) == 140860
torch.onnx.export(m, torch.randn(1, 1, 49, 10), sys.argv[1] + "/wide.onnx", opset_version=13,
                  input_names=["input"], output_names=["output"])
PY
"$TESSERA" quantize "$QDIR/wide.onnx" --random 8 --out "$QDIR/wide.int8.onnx" --json >/dev/null ||
  { echo "FAIL: tessera quantize of the wide CNN"; exit 1; }
rc=0
run_demo 120 --mcu 3 --mcu-chain --mcu-only --mcu-preset STM32F401RB --model "$QDIR/wide.onnx" --requests 1 --json ||
  rc=$?
if [[ $rc -eq 0 ]] || ! grep -q "the layers' weights are 563440 B (int8 where exact, else float32)" "$ERR"; then
  cat "$OUT" "$ERR"; echo "FAIL: three STM32F401RB should refuse the float wide CNN, naming why (exit $rc)"; exit 1
fi
echo "PASS: three STM32F401RB refuse the float32 wide CNN: $(grep -o 'the layers. weights are[^;]*' "$ERR" | head -1)"
rc=0
run_demo 120 --mcu 1 --mcu-only --mcu-preset STM32F401RB --model "$QDIR/wide.int8.onnx" --requests 1 --json || rc=$?
if [[ $rc -eq 0 ]] || ! grep -q "over the 1 MCUs alone fits" "$ERR"; then
  cat "$OUT" "$ERR"; echo "FAIL: one STM32F401RB should refuse the wide CNN, naming why (exit $rc)"; exit 1
fi
echo "PASS: one STM32F401RB refuses the wide CNN: $(grep -o 'no contiguous pipeline[^(]*' "$ERR" | head -1)"
rc=0
run_demo 240 --mcu 3 --mcu-chain --mcu-only --mcu-preset STM32F401RB --model "$QDIR/wide.int8.onnx" --requests 2 \
  --json || rc=$?
if [[ $rc -ne 0 ]]; then cat "$OUT"; echo "FAIL: the wide CNN on a chain of 3 STM32F401RB exited $rc"; exit 1; fi
/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["all_match"] is True and j["answered"] == j["requests"] == 2, j
# A QDQ model's outputs are on an int8 grid. Its convs and dense layer sum
# in int32 on the MCUs as on the host (int8 weights on codes), and MaxPool
# only selects: the answers are the host's bit for bit (0 steps).
assert j["max_diff_output_steps"] == 0, j["max_diff_output_steps"]
assert j["mcu_only"] is True and j["mcu_chain"] is True and j["mcu_memory_as_promised"] is True, j
assert all(not p.endswith("@w1") and not p.endswith("@w2") for p in j["placement"].split(", ")), j["placement"]
mcus = [d for d in j["device_memory"] if d["kind"] == "mcu"]
assert len(mcus) == 3 and all(d["mcu_runs"] >= 2 for d in mcus), mcus
# The firmware's own RAM, measured on each MCU (STATUS), within what the planner reserved for it.
assert all(d["firmware_within_budget"] and 0 < d["mcu_stack_peak_bytes"] <= d["firmware_ram_bytes"] - 24576 == 2048
           and 0 < d["mcu_firmware_ram_bytes"] <= 24576 for d in mcus), mcus
# The 5 conv / dense layers' weights are int8 in flash: under a third of float32's 563 440 B.
assert sum(d["int8_weight_layers"] for d in mcus) == 5, mcus
assert sum(d["promised_flash_bytes"] for d in mcus) < 563440 / 3, mcus
assert sum(d["promised_flash_bytes"] for d in mcus) > mcus[0]["program_flash_bytes_available"], mcus  # fits no single one
# Each program within what the firmware leaves of the board (planner/cluster.cc).
assert all(d["promised_flash_bytes"] <= d["program_flash_bytes_available"] == d["preset_flash_bytes"] - d["firmware_flash_bytes"]
           and d["promised_ram_bytes"] <= d["program_ram_bytes_available"] == d["preset_ram_bytes"] - d["firmware_ram_bytes"]
           for d in mcus), mcus
assert mcus[0]["preset_flash_bytes"] == 128 * 1024 and mcus[0]["preset_ram_bytes"] == 64 * 1024, mcus
assert j["direct_links"] and j["direct_links_as_expected"] is True, j["direct_links"]
# Its activations are int8 codes in RAM and on the direct UARTs (mcu_program.h version 5).
assert all(d["int8_activation_tensors"] > 0 for d in mcus), mcus
assert all(l["expected_payload_bytes"] == l["values"] for l in j["direct_links"]), j["direct_links"]
print("PASS: wide CNN on 3 STM32F401RB joined UART-to-UART: %d requests equal (max %.3g output steps), %.0f ms; "
      "flash %s B (int8 weights), RAM %s B (int8 activations); direct UART %s" % (j["requests"], j["max_diff_output_steps"], j["latency_ms"], "/".join(str(d["promised_flash_bytes"]) for d in mcus),
         "/".join(str(d["promised_ram_bytes"]) for d in mcus),
         ", ".join("%s->%s %d B" % (l["from"], l["to"], l["sent_payload_bytes"]) for l in j["direct_links"])))
PY
