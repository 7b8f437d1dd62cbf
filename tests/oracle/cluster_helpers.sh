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
