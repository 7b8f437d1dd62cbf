#!/usr/bin/env bash
# MCU worker end to end under QEMU (issue 6): boots the Cortex-M4 firmware on
# qemu-system-arm's mps2-an386 with its UART0 on a pseudo-terminal, then
# tessera_mcu_check drives it through the real UartLink serial-port path:
# STATUS, PROGRAM upload of the keyword-spotting CNN (~0.85 M MACs), input,
# output compared with the host executor (max rel <= 1e-5), a tensor of
# another plan refused; the DS-CNN keyword spotter whose depthwise and
# pointwise convs run in place (firmware ConvInPlace); then the same over a relay injecting byte faults,
# where the firmware's selective-repeat receiver must have kept frames past a
# gap (STATUS held_frames > 0, checked by tessera_mcu_check --faults).
# Args: <tessera binary> <build dir>. Exit 77 (a failure) only without qemu-system-arm.
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

WORK=$(mktemp -d)
QEMU_PID=
cleanup() {
  if [[ -n $QEMU_PID ]]; then kill "$QEMU_PID" 2>/dev/null || true; wait "$QEMU_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

boot() {  # starts QEMU, sets QEMU_PID and PTY
  qemu-system-arm -M mps2-an386 -nodefaults -display none -monitor none -serial pty \
    -kernel "$FW" >"$WORK/qemu.log" 2>&1 &
  QEMU_PID=$!
  PTY=
  for _ in $(seq 100); do
    PTY=$(grep -o '/dev/pts/[0-9]*' "$WORK/qemu.log" | head -1 || true)
    [[ -n $PTY ]] && break
    sleep 0.05
  done
  [[ -n $PTY ]] || { echo "FAIL: QEMU did not report its serial pty"; cat "$WORK/qemu.log"; exit 1; }
  echo "qemu pid $QEMU_PID, UART0 on $PTY"
}
halt() { kill "$QEMU_PID" 2>/dev/null || true; wait "$QEMU_PID" 2>/dev/null || true; QEMU_PID=; }

echo "== clean line, 115200 baud"
boot
"$CHECK" --model kws --serial "$PTY" --baud 115200 --runs 2
halt

echo "== depthwise-separable KWS whose convs write over their input (segments, issue 17 item 5)"
boot
"$CHECK" --model dscnn --serial "$PTY" --baud 921600 --runs 1 | tee "$WORK/dscnn.txt"
grep -q 'in_place_layers=2' "$WORK/dscnn.txt" || { echo "FAIL: the DS-CNN program has no in-place layers"; exit 1; }
halt

echo "== noisy line: corrupt/drop/duplicate 5e-5 per byte each way"
boot
"$CHECK" --model kws --serial "$PTY" --baud 921600 --runs 2 --faults 5e-5
halt
echo "PASS"
