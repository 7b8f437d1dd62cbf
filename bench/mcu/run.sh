#!/usr/bin/env bash
# bench/mcu/run.sh [BUILD] [--shift S] [--models mlperf-dscnn,mlperf-dscnn-int8w,mlperf-dscnn-int8,dscnn,kws]
#
# Compute time of the MCU firmware's kernels (issue 16 item 5): boots the
# Cortex-M4 firmware on qemu-system-arm's mps2-an386 with `-icount shift=S`
# (one guest instruction advances the virtual clock by 2^S ns), runs each
# model once through the real UART path (tessera_mcu_check: answers checked
# against the host executor), reads the per-layer SysTick counts from STATUS
# and prints instructions per layer and per MAC, then the whole run next to
# the published MLPerf Tiny v0.5 anchors for DS-CNN on a 120 MHz Cortex-M4F.
# NAME-int8w is the model with int8-grid weights, which its program keeps as
# int8 codes in flash (the kernels multiply code by scale as they go);
# NAME-int8 its QDQ form besides (a QuantizeDequantize after the input and
# every layer), whose activations the program keeps as int8 codes in RAM.
#
# What the count is: QEMU counts guest *instructions*; it models no
# pipeline, flash wait states or FPU latencies, so an instruction is not a
# Cortex-M4 cycle (a float MAC on the M4 is VLDR/VLDR/VFMA/loop overhead:
# several cycles). The anchors are cycles on silicon; compare with care.
set -euo pipefail
BUILD=build
SHIFT=0
MODELS=mlperf-dscnn,mlperf-dscnn-int8w,mlperf-dscnn-int8,dscnn,kws
while [[ $# -gt 0 ]]; do
  case $1 in
    --shift) SHIFT=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    -h|--help) sed -n 2,19p "$0"; exit 0 ;;
    *) BUILD=$1; shift ;;
  esac
done
command -v qemu-system-arm >/dev/null || { echo "qemu-system-arm is missing (deploy/install-deps.sh installs it)"; exit 1; }
cmake --build "$BUILD" --target tessera_firmware tessera_mcu_check -j2 >/dev/null
FW=$BUILD/firmware/tessera_mcu_worker.elf
CHECK=$BUILD/firmware/tessera_mcu_check
WORK=$(mktemp -d)
# shellcheck source=../../firmware/host/qemu_mcu.sh
source "$(dirname "$0")/../../firmware/host/qemu_mcu.sh"
ICOUNT="-icount shift=$SHIFT"
cleanup() {
  mcu_halt
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

for model in ${MODELS//,/ }; do
  mcu_boot >/dev/null
  "$CHECK" --model "$model" --serial "$PTY" --baud 921600 --runs 1 --icount-shift "$SHIFT" >"$WORK/$model.txt"
  mcu_halt
  echo "== $model (QEMU -icount shift=$SHIFT)"
  grep -E '^(model|mcu_layer_|mcu_run|mcu_inference)' "$WORK/$model.txt"
  if [[ $model == mlperf-dscnn* ]]; then
    python3 - "$WORK/$model.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
run = re.search(r"mcu_run: .* macs=(\d+) instructions=(\d+)", text)
macs, ins = int(run.group(1)), int(run.group(2))
print(f"DS-CNN (MLPerf Tiny KWS): {macs/1e6:.2f} M MACs")
print(f"  tessera firmware, QEMU    {ins/1e6:6.2f} M instructions ({ins/macs:.2f} per MAC; not cycles)")
print(f"  TFLM reference, M4F 120MHz {21.8:6.2f} M cycles (181.9 ms, MLPerf Tiny v0.5)  ours/TFLM {ins/21.8e6:.2f}")
print(f"  vendor code generator      {8.7:6.2f} M cycles (72.7 ms)                     ours/vendor {ins/8.7e6:.2f}")
PY
  fi
done
