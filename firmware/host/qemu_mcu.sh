# Sourced by scripts that boot the MCU firmware on QEMU's mps2-an386
# (tests/integration/mcu_qemu.sh, bench/mcu/run.sh). Needs FW (the .elf)
# and WORK (a scratch directory); ICOUNT may hold extra QEMU options
# (e.g. "-icount shift=0"). mcu_boot sets QEMU_PID and PTY (UART0's
# pseudo-terminal); mcu_halt stops it. The caller's exit trap should call
# mcu_halt too.
QEMU_PID=
ICOUNT=${ICOUNT:-}
mcu_boot() {
  # shellcheck disable=SC2086
  qemu-system-arm -M mps2-an386 -nodefaults -display none -monitor none -serial pty $ICOUNT \
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
mcu_halt() {
  if [[ -n $QEMU_PID ]]; then kill "$QEMU_PID" 2>/dev/null || true; wait "$QEMU_PID" 2>/dev/null || true; fi
  QEMU_PID=
}
