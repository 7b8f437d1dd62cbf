#!/usr/bin/env bash
# Soak under faults, the CI version (issue 14 item 5; the full one is
# bench/soak/run.sh: 32 clients, 60 s, a kill every 10 s). 4 loopback
# workers and `tessera gateway --failover`; 8 clients (gRPC, 10 s deadline
# each) for 15 s while a worker is SIGKILLed every 5 s and restarted 2 s
# later with the same name, port and data dir (so each kill is a failover
# and each restart a rejoin). Passes when no request is lost (every one is
# answered or gets an error before deadline + 2 s) and none is wrong (==
# `tessera run`, relative <= 1e-5), the plan is back on all 4 workers, and
# the VmRSS of the gateway and of each worker after the run is within
# 24 MiB of its value after the warm-up (both under 5 s of the same
# fault-free load; the 60 s bench grows by <= 8 MiB).
# Args: path to tessera, build dir. Exit 77 = a dependency is missing (a failure: install-deps.sh installs every one).
# ctest label: slow (takes 30 s or more; tests/CMakeLists.txt)
set -u
T=${1:?tessera binary}
B=${2:?build dir}
CFG=/usr/share/darknet/cfg/yolov2-tiny.cfg
[ -f "$CFG" ] || { echo "FAIL: $CFG missing (Debian package darknet) (deploy/install-deps.sh installs it)"; exit 77; }
[ -x "$B/bench/tessera_soak_client" ] || { echo "FAIL: $B/bench/tessera_soak_client missing (cmake --build builds it)"; exit 77; }
/usr/bin/python3 -c "import numpy" 2>/dev/null || { echo "FAIL: python3-numpy missing (deploy/install-deps.sh installs it)"; exit 77; }
exec /usr/bin/python3 "$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/bench/soak/soak.py" \
  --tessera "$T" --client "$B/bench/tessera_soak_client" --model "$CFG" \
  --duration 15 --clients 8 --kill-every 5 --restart-after 2 --rss-bound-mib 24
