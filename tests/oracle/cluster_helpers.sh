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

# Starts worker processes w1..wN on free loopback ports (logs $D/wI.log, pids
# in PIDS[I]) and writes $D/cluster.yaml listing them (identical 1 GiB Linux
# devices, 1 Gbit/s links). Returns 1 when a worker does not start.
start_workers() {  # tessera N
  local i
  { echo "devices:"
    for i in $(seq "$2"); do
      "$1" worker --listen 127.0.0.1:0 --name w$i --port-file "$D/w$i.port" 2>>"$D/w$i.log" &
      PIDS[$i]=$!
      for _ in $(seq 200); do [ -f "$D/w$i.port" ] && break; sleep 0.05; done
      [ -f "$D/w$i.port" ] || { echo "FAIL worker w$i did not start" >&2; return 1; }
      echo "  - { name: w$i, kind: linux, address: $(cat "$D/w$i.port"), ram: 1GiB, flash: 4GiB, cpu_hz: 1.5e9, cycles_per_mac: 0.4 }"
    done
    echo "links:"; echo "  default: { bandwidth: 1Gbit/s, latency: 0.2ms }"; } > "$D/cluster.yaml"
}
