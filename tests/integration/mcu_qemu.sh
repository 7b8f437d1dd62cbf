#!/usr/bin/env bash
# MCU worker end to end under QEMU (issue 6): boots the Cortex-M4 firmware on
# qemu-system-arm's mps2-an386 with its UART0 on a pseudo-terminal, then
# tessera_mcu_check drives it through the real UartLink serial-port path:
# STATUS, PROGRAM upload of the keyword-spotting CNN (~0.85 M MACs), input,
# output compared with the host executor (max rel <= 1e-5), a tensor of
# another plan refused; the DS-CNN keyword spotter whose depthwise and
# pointwise convs run in place (firmware ConvInPlace); under -icount, the
# per-layer ticks of MLPerf's DS-CNN in STATUS and `tessera calibrate --mcu`
# writing instructions per MAC per op kind; then the same over a relay
# injecting byte faults, where the firmware's selective-repeat receiver must
# have kept frames past a gap (STATUS held_frames > 0, checked by
# tessera_mcu_check --faults).
# Args: <tessera binary> <build dir>. Exit 77 (a failure) only without qemu-system-arm.
# ctest label: slow (takes 30 s or more; tests/CMakeLists.txt)
set -euo pipefail
BUILD=${2:-build}
if ! command -v qemu-system-arm >/dev/null 2>&1; then
  echo "FAIL: missing dependency: qemu-system-arm is not installed (deploy/install-deps.sh installs it)"
  exit 77
fi
FW=$BUILD/firmware/tessera_mcu_worker.elf
CHECK=$BUILD/firmware/tessera_mcu_check
if [[ ! -f $FW || ! -x $CHECK ]]; then
  cmake --build "$BUILD" --target tessera_firmware tessera_mcu_check -j2 >/dev/null
fi
[[ -f $FW ]] || { echo "FAIL: $FW was not built (is gcc-arm-none-eabi installed?)"; exit 1; }

TESSERA=${1:-build/tessera}
WORK=$(mktemp -d)
# shellcheck source=../../firmware/host/qemu_mcu.sh
source "$(dirname "$0")/../../firmware/host/qemu_mcu.sh"
cleanup() {
  mcu_halt
  rm -rf "$WORK"
}
trap cleanup EXIT
boot() { mcu_boot; }
halt() { mcu_halt; }

echo "== clean line, 115200 baud"
boot
"$CHECK" --model kws --serial "$PTY" --baud 115200 --runs 2 | tee "$WORK/kws.txt"
halt
# The firmware's code within the flash the planner leaves it on every MCU
# (mcu_program.h kFirmwareFlashBytes; its RAM and stack are checked by
# tessera_mcu_check from STATUS): vectors, code, constants, initialised data.
budget=$(grep -o 'flash_budget=[0-9]*' "$WORK/kws.txt" | cut -d= -f2)
code=$(arm-none-eabi-size -A "$FW" | awk '$1 ~ /^\.(vectors|text|ARM.exidx|init_array|data)$/ {n += $2} END {print n}')
[[ -n $budget && -n $code && $code -gt 0 && $code -le $budget ]] ||
  { echo "FAIL: the firmware image's code is ${code:-?} B, its flash budget ${budget:-?} B"; exit 1; }
echo "firmware image: $code B of code and constants, budget $budget B"

echo "== depthwise-separable KWS whose convs write over their input (segments, issue 17 item 5)"
boot
"$CHECK" --model dscnn --serial "$PTY" --baud 921600 --runs 1 | tee "$WORK/dscnn.txt"
grep -q 'in_place_layers=2' "$WORK/dscnn.txt" || { echo "FAIL: the DS-CNN program has no in-place layers"; exit 1; }
halt

echo "== cycles (issue 16 item 5): QEMU -icount shift=0, per-layer ticks in STATUS"
ICOUNT="-icount shift=0"
boot
# MLPerf Tiny's DS-CNN: the per-layer ticks must add up to the run's (checked by tessera_mcu_check)
"$CHECK" --model mlperf-dscnn --serial "$PTY" --baud 921600 --runs 1 --icount-shift 0 | tee "$WORK/cycles.txt"
grep -q '^mcu_layer_8: kind=pointwise' "$WORK/cycles.txt" || { echo "FAIL: no per-layer counts"; exit 1; }
halt
boot
# The same DS-CNN with int8-grid weights: its program keeps them as int8 codes in
# flash (answers checked against the host executor as above); what the decoding costs.
"$CHECK" --model mlperf-dscnn-int8w --serial "$PTY" --baud 921600 --runs 1 --icount-shift 0 | tee "$WORK/cycles_int8w.txt"
halt
boot
# Its QDQ form (a QuantizeDequantize after the input and every layer): the
# activations are int8 codes in RAM too (mcu_program.h version 5), the
# answer equal to the host executor's (tolerance 0: bit for bit).
"$CHECK" --model mlperf-dscnn-int8 --serial "$PTY" --baud 921600 --runs 1 --icount-shift 0 --tolerance 0 |
  tee "$WORK/cycles_int8.txt"
halt
/usr/bin/python3 - "$WORK/cycles.txt" "$WORK/cycles_int8w.txt" "$WORK/cycles_int8.txt" <<'PY'
import re, sys
def figures(path):
    t = open(path).read()
    return (int(re.search(r"flash_bytes=(\d+)", t).group(1)), int(re.search(r"int8_weight_layers=(\d+)", t).group(1)),
            int(re.search(r"mcu_run: .* instructions=(\d+)", t).group(1)), int(re.search(r"ram_bytes=(\d+)", t).group(1)),
            int(re.search(r"int8_activation_tensors=(\d+)", t).group(1)))
(f_flash, f_layers, f_ins, f_ram, f_codes), (q_flash, q_layers, q_ins, q_ram, q_codes), (a_flash, a_layers, a_ins, a_ram, a_codes) = (
    figures(sys.argv[1]), figures(sys.argv[2]), figures(sys.argv[3]))
assert f_layers == 0 and q_layers == 10 and a_layers == 10, (f_layers, q_layers, a_layers)
assert q_flash * 3 < f_flash, (q_flash, f_flash)
assert f_codes == q_codes == 0 and a_codes > 0 and q_ram == f_ram and a_ram * 3 < f_ram, (f_ram, q_ram, a_ram, a_codes)
print("PASS: MLPerf DS-CNN with int8 weights in flash: %d B instead of %d (%.2fx), %.2f M instructions instead of %.2f (%.2fx)"
      % (q_flash, f_flash, q_flash / f_flash, q_ins / 1e6, f_ins / 1e6, q_ins / f_ins))
print("PASS: MLPerf DS-CNN with int8 activations in RAM: %d B instead of %d (%.2fx), %.2f M instructions (%.2fx the float run)"
      % (a_ram, f_ram, a_ram / f_ram, a_ins / 1e6, a_ins / f_ins))
PY
boot
# tessera calibrate --mcu: instructions per MAC per op kind into a device file the planner reads
"$TESSERA" calibrate firmware/models/kws_cnn.cfg --mcu "$PTY" --baud 921600 --icount-shift 0 \
  --ram 256KiB --flash 1MiB --name qemu-m4 --out "$WORK/mcu.yaml" --json | tee "$WORK/calibrate.json"
halt
python3 - "$WORK/calibrate.json" "$WORK/mcu.yaml" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["unit"] == "instructions", j
# A float MAC is at least a load, a load and a multiply-add on the M4; the
# plain loops of the firmware spend more on indexing, but not 100 per MAC.
assert 3 <= j["per_mac"] <= 100, j["per_mac"]
assert "conv" in j["kinds"] and "dense" in j["kinds"], j["kinds"]
text = open(sys.argv[2]).read()
assert "cycles_per_mac" in text and "macs_per_s_by_kind" in text and "INSTRUCTIONS" in text, text
print("calibrate --mcu: %.2f instructions per MAC" % j["per_mac"])
PY
ICOUNT=

echo "== noisy line: corrupt/drop/duplicate 5e-5 per byte each way"
boot
"$CHECK" --model kws --serial "$PTY" --baud 921600 --runs 2 --faults 5e-5
halt
echo "PASS"
