#!/usr/bin/env bash
# Issue 15 item 5: the short version of bench/cluster-emulated, so the bench
# cannot rot. Two workers, each in its own network namespace (tc-shaped
# 100 Mbit/s cables) and its own cgroup (CPU quota calibrated to a device
# rate, memory limit): the quota must yield the device rate within 0.5-2x,
# memory and latency plans must answer like `tessera run` (max |a-b| <=
# 1e-4 max |ref|), every worker must sit in its cgroup, the memory plan must
# move bytes between the devices, nothing may be OOM-killed, and the printed
# latency (0.5-3.0x) and 1/period (0.5-1.5x) must hold against the measured
# ones, and no worker's peak RSS may exceed the worker RAM its plan promises
# (bench/cluster-emulated/run.py check_latency, check_memory, smoke). Needs root
# (CI runs as root). Args: path to tessera, build dir.
# ctest label: slow (takes 30 s or more; tests/CMakeLists.txt)
set -u
T=${1:?tessera binary}
repo=$(cd "$(dirname "$0")/../.." && pwd)
[ "$(id -u)" = 0 ] || { echo "FAIL needs root (ip netns, tc, cgroups)"; exit 1; }
command -v tc >/dev/null || { echo "FAIL tc missing (deploy/install-deps.sh installs iproute2)"; exit 1; }
out=$(mktemp -d /tmp/tessera-emu-smoke-XXXXXX)
trap 'rm -rf "$out"' EXIT
start=$(date +%s)
/usr/bin/python3 "$repo/bench/cluster-emulated/run.py" --tessera "$T" --smoke --out "$out"
rc=$?
echo "cluster-emulated --smoke: exit $rc in $(( $(date +%s) - start )) s"
# Nothing left behind: namespaces, links, cgroups, processes.
leftovers() {
  echo $(( $( (ip netns list; ip -o link show; ls /sys/fs/cgroup/cpu /sys/fs/cgroup/memory /sys/fs/cgroup 2>/dev/null) |
              grep -c "ts-emu") + $(pgrep -fc -- "--data-dir $out_int|tessera-emu-" || true) ))
}
out_int=/nonexistent
[ "$(leftovers)" = 0 ] || { echo "FAIL ts-emu-* objects left behind after the run"; rc=1; }
# Ctrl-C in the middle (workers and gateway up): everything is removed too.
/usr/bin/python3 "$repo/bench/cluster-emulated/run.py" --tessera "$T" --smoke --out "$out/int" >"$out/int.log" 2>&1 &
pid=$!
for _ in $(seq 300); do ip netns list | grep -q ts-emu-w2 && break; sleep 0.1; done
sleep 2
kill -INT $pid; wait $pid; irc=$?
[ $irc = 130 ] && grep -q "interrupted: cleaning up" "$out/int.log" && echo "PASS interrupted run exits 130" ||
  { echo "FAIL interrupted run: exit $irc"; tail -5 "$out/int.log"; rc=1; }
[ "$(leftovers)" = 0 ] && echo "PASS nothing left behind after Ctrl-C" || { echo "FAIL ts-emu-* objects left after Ctrl-C"; rc=1; }
exit $rc
