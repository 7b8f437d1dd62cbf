# Shared by the cluster integration scripts (source it): a scratch directory
# whose processes are stopped at exit, PASS/FAIL lines that set `fail`, a free
# loopback port, and the answer check used everywhere: max|a-b| / max|b| <=
# 1e-5 between two .npy files (issue 5's tolerance).
python=${python:-/usr/bin/python3}
fail=${fail:-0}
ok() { echo "PASS $1"; }
bad() { echo "FAIL $1"; fail=1; }
free_port() { "$python" -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
compare() {  # got.npy reference.npy
  "$python" -c "
import numpy as np,sys; a=np.load('$1'); b=np.load('$2')
if a.shape!=b.shape: print('  shape', a.shape, 'vs', b.shape); sys.exit(1)
r=np.abs(a-b).max()/np.abs(b).max(); print('  max rel diff %.3g' % r); sys.exit(0 if r<=1e-5 else 1)"
}
# Stops processes with SIGTERM; any still running after 5 s is a FAIL (a
# daemon must shut down cleanly, e.g. with streams to dead peers) and is
# SIGKILLed.
stop_processes() {  # pid...
  local p left
  for p in "$@"; do kill "$p" 2>/dev/null; done
  for _ in $(seq 50); do
    left=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && left=1; done
    [ $left = 0 ] && break
    sleep 0.1
  done
  for p in "$@"; do
    if kill -0 "$p" 2>/dev/null; then bad "process $p ($(tr '\0' ' ' </proc/$p/cmdline 2>/dev/null | cut -c1-60)) ignored SIGTERM for 5 s"; kill -9 "$p"; fi
  done
  wait "$@" 2>/dev/null
}

# Makes the scratch directory $D (/tmp/PREFIX-XXXXXX) and an EXIT trap that
# stops ${PIDS[@]} and $GW and removes $D (kept with KEEP=1, for debugging).
start_scratch() {  # prefix
  D=$(mktemp -d "/tmp/$1-XXXXXX")
  PIDS=()
  GW=
  trap 'for p in "${PIDS[@]}" $GW; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; [[ ${KEEP:-0} = 1 ]] || rm -rf "$D"' EXIT
}

# Starts N `tessera worker` processes on loopback ports (pids in PIDS[1..N],
# logs in $D/wI.log) and writes $D/cluster.yaml naming them w1..wN. Extra
# args go to every worker, with %n replaced by its name (--tls-dir "$D/%n").
#   requires: $T, $D (start_scratch)
start_loopback_workers() {  # N [worker args...]
  local i n=$1
  shift
  { echo "devices:"
    for i in $(seq "$n"); do
      "$T" worker --listen 127.0.0.1:0 --name w$i --port-file "$D/w$i.port" "${@//%n/w$i}" 2>>"$D/w$i.log" &
      PIDS[$i]=$!
      for _ in $(seq 200); do [ -f "$D/w$i.port" ] && break; sleep 0.05; done
      [ -f "$D/w$i.port" ] || { echo "FAIL worker w$i did not start" >&2; return 1; }
      echo "  - { name: w$i, kind: linux, address: $(cat $D/w$i.port), ram: 1GiB, flash: 4GiB, cpu_hz: 1.5e9, cycles_per_mac: 0.4 }"
    done
    echo "links:"; echo "  default: { bandwidth: 1Gbit/s, latency: 0.2ms }"; } > "$D/cluster.yaml"
}

# Starts `tessera gateway --cluster $D/cluster.yaml ARGS...` on free ports
# ($GRPC, $HTTP; pid $GW, log $D/gateway.log) and waits up to `seconds` for
# /healthz. Non-zero (log tail printed) if it does not come up.
start_gateway() {  # seconds args...
  local seconds=$1 up=0
  shift
  GRPC=127.0.0.1:$(free_port); HTTP=127.0.0.1:$(free_port)
  "$T" gateway --cluster "$D/cluster.yaml" "$@" --listen $GRPC --http $HTTP --data-dir "$D/gw" 2>"$D/gateway.log" &
  GW=$!
  for _ in $(seq $((seconds * 10))); do
    curl -sf http://$HTTP/healthz >/dev/null && { up=1; break; }
    kill -0 $GW 2>/dev/null || break
    sleep 0.1
  done
  [ $up = 1 ] || { echo "FAIL gateway did not become healthy"; tail -20 "$D/gateway.log"; return 1; }
}

# ---- kill and rejoin under load (gateway_rejoin*.sh) -------------------------
# Workers in the served plan (/metrics), and milliseconds since the epoch.
#   requires: $HTTP (start_gateway)
plan_workers() { curl -sf http://$HTTP/metrics | grep -c '^tessera_worker_up{'; }
ms() { date +%s%3N; }

# bench/soak's gRPC client sending $D/x.npy back to back, each answer checked
# against $D/ref.npy, until $D/stop exists (at most `seconds`); pid in CL,
# every request in $D/requests.csv.
#   requires: $CLIENT, $GRPC, $D
start_clients() {  # clients seconds deadline_ms
  "$CLIENT" --gateway $GRPC --input "$D/x.npy" --reference "$D/ref.npy" --clients "$1" --duration-s "$2" \
    --until-file "$D/stop" --deadline-ms "$3" --grace-ms 3000 --log "$D/requests.csv" >"$D/summary.json" 2>"$D/client.err" &
  CL=$!
}

# SIGKILLs worker wI and waits (up to `tenths` x 0.1 s) until the plan spans
# `left` workers: sets t_kill, t_failed_over (ms) and port_killed.
kill_worker() {  # i left tenths
  port_killed=$(cat "$D/w$1.port")
  t_kill=$(ms)
  kill -9 ${PIDS[$1]}; wait ${PIDS[$1]} 2>/dev/null
  for _ in $(seq "$3"); do [ "$(plan_workers)" = "$2" ] && break; sleep 0.1; done
  t_failed_over=$(ms)
  [ "$(plan_workers)" = "$2" ] && ok "w$1 killed: $2 worker(s) serve (failover)" ||
    bad "after killing w$1 the plan spans $(plan_workers) workers"
}

# Starts wI again with the same name, port and data dir and waits (up to
# `tenths` x 0.1 s) until the plan spans `all` workers: sets t_restart,
# t_back (ms) and back (1 when it did).
restart_worker() {  # i all tenths
  rm -f "$D/w$1.port"
  "$T" worker --listen $port_killed --name w$1 --port-file "$D/w$1.port" --data-dir "$D/w$1.data" 2>>"$D/w$1.log" &
  PIDS[$1]=$!
  t_restart=$(ms)
  back=0
  for _ in $(seq "$3"); do
    [ "$(plan_workers)" = "$2" ] && { back=1; break; }
    sleep 0.1
  done
  t_back=$(ms)
  local secs
  secs=$(awk "BEGIN{printf \"%.1f\", ($t_back-$t_restart)/1000}")
  [ $back = 1 ] && ok "w$1 restarted (same name, port, data dir): the plan spans $2 workers again after $secs s" ||
    { bad "w$1 restarted: after $secs s the plan spans $(plan_workers) workers"; tail -30 "$D/gateway.log"; }
}

# Every request of $D/requests.csv by outcome and by phase (request_phases.py);
# fails the test on a wrong or lost answer or an error after the failover.
check_request_phases() {
  "$python" "$(dirname "${BASH_SOURCE[0]}")/request_phases.py" "$D/requests.csv" "$t_kill" "$t_failed_over" \
    "$t_restart" "$t_back" || { fail=1; tail -30 "$D/gateway.log"; }
}

# The emulated MCUs (issue 6, issue 16): sets FW to the firmware ELF, building
# it when missing. Exit 77 (a failure: README's tests need it) without
# qemu-system-arm, 1 when the firmware cannot be built.
require_qemu_firmware() {  # build dir
  if ! command -v qemu-system-arm >/dev/null 2>&1; then
    echo "FAIL: missing dependency: qemu-system-arm is not installed (deploy/install-deps.sh installs it)"
    exit 77
  fi
  FW=$1/firmware/tessera_mcu_worker.elf
  [[ -f $FW ]] || cmake --build "$1" --target tessera_firmware -j2 >/dev/null
  [[ -f $FW ]] || { echo "FAIL: $FW was not built (is gcc-arm-none-eabi installed?)"; exit 1; }
}

# Boots QEMU mps2-an386 number I running $FW in the background (pid in
# $D/qemuI.pid: callers run it in a subshell) and prints the pty of its
# UART0. UART1 and UART2 get the given -serial specs (default: none).
#   requires: $FW (require_qemu_firmware), $D (start_scratch)
boot_mcu() {  # i [uart1 uart2]
  local extra=()
  [[ $# -ge 3 ]] && extra=(-serial "$2" -serial "$3")
  qemu-system-arm -M mps2-an386 -nodefaults -display none -monitor none -serial pty "${extra[@]}" -kernel "$FW" \
    >"$D/qemu$1.log" 2>&1 &
  echo $! >"$D/qemu$1.pid"
  local pty
  for _ in $(seq 200); do
    pty=$(grep -o '/dev/pts/[0-9]*' "$D/qemu$1.log" | head -1)
    [[ -n $pty ]] && { echo "$pty"; return 0; }
    sleep 0.05
  done
  return 1
}

# Waits until the gateway at HTTP address $1 has pulled its workers' status
# twice more (tessera_gateway_status_pulls_total), so the link/UART counters in
# /metrics include every request that finished before the call; then writes
# /metrics to file $2. Fails after 15 s.
fresh_metrics() {  # http-address file
  local pulls start
  _status_pulls() { curl -sf "http://$1/metrics" | sed -n 's/^tessera_gateway_status_pulls_total //p'; }
  start=$(_status_pulls "$1")
  for _ in $(seq 150); do
    [[ -n $start && $(_status_pulls "$1") -ge $((start + 2)) ]] && { curl -sf "http://$1/metrics" >"$2"; return; }
    sleep 0.1
  done
  echo "  no two status pulls by the gateway at $1 within 15 s (from ${start:-none})"
  return 1
}
