#!/usr/bin/env bash
# Issue 18 item 4: `tessera optimize-memory --parts-search genetic` chooses
# which layers process in parts (a genetic search over one bit per layer,
# objectives arena + weights and time) within --ram and at --min-fps. On
# yolov2-tiny at 224²:
#  * no limit: the least-memory point of the front is chosen and run;
#  * a limit halfway between that and the unsplit need: the chosen point
#    fits it, its plan (--out) runs in exactly the printed arena under
#    `tessera run --plan`, and answers equal the unsplit run (rel <= 1e-5);
#  * a target of half the unsplit fps (measured in the same command): the
#    chosen point's measured fps reaches it;
#  * a limit below every choice, an unreachable target, a bad --ram: exit 1
#    with an error naming what is wrong;
#  * `tessera plan --parts-search genetic`: mobilenet_v2 on one device whose
#    ram: (50 MiB) is below its need (52.8 MiB): the device's layers go in
#    parts, the promise fits the ram:, and the plan runs under `tessera run
#    --plan` in the promised arena with the unsplit run's answers.
# Args: path to tessera, build dir.
# ctest label: slow (takes 30 s or more; tests/CMakeLists.txt)
set -u
T=${1:?tessera binary}
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cfg=/usr/share/darknet/cfg/yolov2-tiny.cfg
shape=1x3x224x224
fail=0
search() { "$T" optimize-memory "$cfg" --input-shape $shape --parts-search genetic --repeat 3 --quiet --json "$@"; }

if ! search > "$tmp/free.json" 2> "$tmp/free.err"; then
  echo "FAIL no limit: $(tail -3 "$tmp/free.err")"; exit 1
fi
read -r least unsplit unsplit_s < <("$py" - "$tmp/free.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["chosen"] == 0, j["chosen"]
front = j["front"]
needs = [p["need_bytes"] for p in front]
assert needs == sorted(needs), needs
times = [p["predicted_seconds"] for p in front]
assert all(a > b for a, b in zip(times, times[1:])), "front not non-dominated"
c = front[0]
assert c["measured_seconds"] and c["max_rel_diff"] <= 1e-5, c
print(c["need_bytes"], j["unsplit"]["need_bytes"], j["unsplit"]["measured_seconds"])
PY
) || { echo "FAIL no limit: bad result"; fail=1; }
echo "no limit: least $least bytes, unsplit $unsplit bytes, unsplit $unsplit_s s"
if [ "${least:-0}" -ge "${unsplit:-0}" ]; then echo "FAIL parts do not shrink yolov2-tiny"; fail=1; fi

ram=$(( (least + unsplit) / 2 ))
if search --ram "$ram" --out "$tmp/plan.pb" > "$tmp/ram.json" 2> "$tmp/ram.err"; then
  "$T" run "$cfg" --input-shape $shape --plan "$tmp/plan.pb" --json > "$tmp/run.json" 2> "$tmp/run.err" ||
    { echo "FAIL run --plan: $(tail -3 "$tmp/run.err")"; fail=1; }
  "$py" - "$tmp/ram.json" "$tmp/run.json" "$ram" <<'PY' || fail=1
import json, sys
j = json.load(open(sys.argv[1])); run = json.load(open(sys.argv[2])); ram = int(sys.argv[3])
c = j["front"][j["chosen"]]
bad = 0
def check(ok, what):
    global bad
    print(("ok   " if ok else "FAIL ") + what)
    bad |= not ok
check(c["need_bytes"] <= ram, f"--ram {ram}: chosen needs {c['need_bytes']} bytes (arena {c['arena_bytes']} + weights {c['weight_bytes']})")
check(c["layers_in_parts"] > 0 and c["bands"] >= 2, f"{c['layers_in_parts']} layer(s) in {c['bands']} bands")
check(run["device_memory_bytes"][0] == c["arena_bytes"], f"tessera run --plan arena {run['device_memory_bytes'][0]} == printed {c['arena_bytes']}")
check(run["max_rel_diff"] <= 1e-5 and c["max_rel_diff"] <= 1e-5, f"answers: run --plan rel {run['max_rel_diff']:.2g}, search rel {c['max_rel_diff']:.2g} (<= 1e-5)")
check(run["halo_mac_overhead"] == 0, "no MAC recomputed")
sys.exit(bad)
PY
else
  echo "FAIL --ram $ram: $(tail -3 "$tmp/ram.err")"; fail=1
fi

target=$("$py" -c "print(0.5 / float('$unsplit_s'))")
if search --min-fps "$target" > "$tmp/fps.json" 2> "$tmp/fps.err"; then
  "$py" - "$tmp/fps.json" "$target" <<'PY' || fail=1
import json, sys
j = json.load(open(sys.argv[1])); target = float(sys.argv[2])
c = j["front"][j["chosen"]]
fps = 1 / c["measured_seconds"]
ok = fps >= target
print(("ok   " if ok else "FAIL ") + f"--min-fps {target:.2f}: chosen measured {fps:.2f} fps, {c['need_bytes']} bytes")
sys.exit(not ok)
PY
else
  echo "FAIL --min-fps $target: $(tail -3 "$tmp/fps.err")"; fail=1
fi

expect_error() {  # name, exit code, text, args...
  local name=$1 code=$2 text=$3; shift 3
  "$T" optimize-memory "$cfg" --input-shape $shape --parts-search genetic --repeat 1 --quiet "$@" > "$tmp/e.out" 2> "$tmp/e.err"
  local rc=$?
  if [ "$rc" -eq "$code" ] && grep -q -- "$text" "$tmp/e.err"; then echo "ok   $name: $(tail -1 "$tmp/e.err")"
  else echo "FAIL $name: exit $rc, stderr: $(tail -2 "$tmp/e.err")"; fail=1; fi
}
expect_error "below every choice" 1 "no choice of parts fits" --ram 1MiB
expect_error "unreachable target" 1 "fps" --min-fps 1000000
expect_error "bad --ram" 1 "\-\-ram" --ram 12apples

build=${2:?build dir}
models=(mobilenet_v2)
repo=$(cd "$(dirname "$0")/../.." && pwd)
source "$repo/tests/oracle/ensure_models.sh"
mv2=$build/oracle/mobilenet_v2.onnx
cat > "$tmp/one.yaml" <<'YAML'
devices:
  - { name: a, kind: linux, address: 127.0.0.1:7071, ram: 50MiB, flash: 4GiB, cpu_hz: 1.5e9, cycles_per_mac: 0.4 }
YAML
if "$T" plan "$mv2" --cluster "$tmp/one.yaml" --objective latency --parts-search genetic --json --out "$tmp/mv2.pb" \
     > "$tmp/plan.json" 2> "$tmp/plan.err"; then
  "$T" run "$mv2" --plan "$tmp/mv2.pb" --json > "$tmp/mv2run.json" 2> "$tmp/mv2run.err" ||
    { echo "FAIL run --plan mobilenet_v2: $(tail -3 "$tmp/mv2run.err")"; fail=1; }
  "$py" - "$tmp/plan.json" "$tmp/mv2run.json" <<'PY' || fail=1
import json, sys
plan = json.load(open(sys.argv[1])); run = json.load(open(sys.argv[2]))
d = plan["device_summary"][0]["worker_ram"]
bad = 0
def check(ok, what):
    global bad
    print(("ok   " if ok else "FAIL ") + what)
    bad |= not ok
check(d["parts_layers"] > 0 and d["parts_bands"] >= 2 and d["tiled_halo_macs"] == 0,
      f"plan: {d['parts_layers']} layer(s) in {d['parts_bands']} bands, {d['tiled_halo_macs']} MACs recomputed, +{d['parts_s']:.4f} s")
check(d["promised_bytes"] <= d["ram_bytes"], f"promised {d['promised_bytes']} <= ram: {d['ram_bytes']}")
check(run["device_memory_bytes"][0] == d["arena_bytes"], f"tessera run --plan arena {run['device_memory_bytes'][0]} == promised {d['arena_bytes']}")
check(run["max_rel_diff"] <= 1e-5, f"answers: rel {run['max_rel_diff']:.2g} (<= 1e-5)")
sys.exit(bad)
PY
else
  echo "FAIL plan --parts-search genetic: $(tail -3 "$tmp/plan.err")"; fail=1
fi
exit $fail
