#!/usr/bin/env bash
# Issue 15 item 2 (label `large`, ~3 min): YOLOv2 at 608² with a 128 MiB
# memory limit per device, on the emulated Pi cluster of
# bench/cluster-emulated (namespaces, tc-shaped 1 Gbit/s cables, cgroups
# with a CPU quota of 2 GMAC/s and memory.limit 128 MiB): `tessera plan`
# refuses one device naming the shortfall, `tessera run` in a 128 MiB cgroup
# is OOM-killed, and on 4 devices (compact weights where Winograd would not
# fit) every answer equals `tessera run` (max |a-b| <= 1e-4 max |ref|) with
# no worker OOM-killed. Needs root. Args: path to tessera, build dir.
# --mac-only: memory and answers are what this checks, so none of the
# bench's timing calibrations (layer and compact profiles, the transport's
# per-byte cost on a 4-device plan) run: 282 s in a CI-like run before, 134 s
# after on a quiet machine (194 s on 2 busy cores).
set -u
T=${1:?tessera binary}
repo=$(cd "$(dirname "$0")/../../.." && pwd)
[ "$(id -u)" = 0 ] || { echo "FAIL needs root (ip netns, tc, cgroups)"; exit 1; }
out=$(mktemp -d /tmp/tessera-emu-fits-XXXXXX)
trap 'rm -rf "$out"' EXIT
/usr/bin/python3 "$repo/bench/cluster-emulated/run.py" --tessera "$T" --experiment fits --models yolov2 \
  --fit-model yolov2 --fit-ram 128MiB --fit-devices 4 --fit-requests 1 --mac-only --out "$out"
rc=$?
/usr/bin/python3 - "$out/results.json" <<'PY' || rc=1
import json, sys
r = json.load(open(sys.argv[1]))["fits"]
c = r["clusters"][0]
print("one device: plan exit %d; forced run exit %d, oom_kill %d" % (r["one_device_plan_exit"], r["forced_run_exit"], r["forced_run_oom_kills"]))
rel = c.get("relative_error", float("inf"))
print("4 devices: rel.err %.3g, promised %s MiB, peak RSS %s MiB, oom kills %s, warm-up errors %d" % (
    rel, [round(b / 2**20) for b in c.get("promised_bytes", [])],
    [round(b / 2**20) for b in c.get("peak_rss_bytes", [])], c.get("oom_kills"), len(c.get("warmup_errors", []))))
ok = r["one_device_plan_exit"] != 0 and r["forced_run_oom_kills"] >= 1 and rel <= 1e-4 \
    and c.get("oom_kills") is not None and not any(c["oom_kills"]) \
    and all(p <= 128 << 20 for p in c.get("promised_bytes", [1 << 40]))
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
exit $rc
