#!/usr/bin/env bash
# Issue 15, prediction: `tessera run --force halo --profile --json` times each
# device's row tile of every layer (tile_profile), and `tessera plan
# --tile-profile` prices the tiled plan's tiles from it. Checks, on
# yolov2-tiny at 160x160 cut over 3 devices in one process:
#  - every device has a tile of every tileable layer, the tiles of a layer
#    cover its rows, and a device's tile times add up to no more than its
#    thread's CPU per run (they are part of it) and to most of it;
#  - the planner reads the file back (--solver tiled): its time model names
#    the tile profile and the prediction follows the measured factors;
#  - the memory plan's FDT channel slices are timed too (entries with an
#    axis), and the planner prices that plan from them;
#  - a profile measured at another input shape is refused, naming it.
#   tile_profile.sh TESSERA BUILD_DIR
set -u
T=${1:?tessera binary}
py=/usr/bin/python3
cfg=/usr/share/darknet/cfg/yolov2-tiny.cfg
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail=0

"$T" run "$cfg" --input-shape 1x3x160x160 --force halo --grid 3x1 --devices 3 --threads 1 --repeat 3 --warmup 1 \
  --profile --json >"$d/tiles.json" 2>"$d/run.err" || { echo "FAIL tessera run --force halo --profile"; cat "$d/run.err"; exit 1; }
"$py" - "$d/tiles.json" <<'EOF' || fail=1
import collections, json, sys
j = json.load(open(sys.argv[1]))
t = j.get("tile_profile", [])
bad = 0
devices = sorted({e["device"] for e in t})
print("tile_profile: %d tiles on devices %s" % (len(t), devices))
if len(devices) != 3:
    print("FAIL expected tiles of 3 devices"); bad = 1
rows = collections.defaultdict(int)
for e in t:
    rows[(e["index"], e["layer_rows"])] += e["rows"]
for (index, layer_rows), got in sorted(rows.items()):
    if got != layer_rows:
        print("FAIL layer %d: tiles cover %d of its %d rows" % (index, got, layer_rows)); bad = 1
for k, dev in enumerate(devices):
    ms = sum(e["ms"] for e in t if e["device"] == dev)
    cpu = j["device_cpu_seconds"][k] * 1e3
    ok = 0.5 * cpu <= ms <= 1.2 * cpu + 0.5
    print("%s %s: tiles %.2f ms of its thread's %.2f ms CPU per run" % ("PASS" if ok else "FAIL", dev, ms, cpu))
    bad |= not ok
if any(e["layer_ms"] <= 0 for e in t if e["op"] == "Conv"):
    print("FAIL a conv layer without its unsplit time"); bad = 1
sys.exit(bad)
EOF

plain=$("$T" plan "$cfg" --input-shape 1x3x160x160 --devices 3 --objective latency --solver tiled --json) ||
  { echo "FAIL plan --solver tiled"; exit 1; }
priced=$("$T" plan "$cfg" --input-shape 1x3x160x160 --devices 3 --objective latency --solver tiled --json \
  --tile-profile "$d/tiles.json") || { echo "FAIL plan --tile-profile"; exit 1; }
"$py" - "$d/tiles.json" <<EOF || fail=1
import json, sys
plain, priced = json.loads('''$plain'''), json.loads('''$priced''')
t = json.load(open(sys.argv[1]))["tile_profile"]
bad = 0
tm = priced.get("time_model", "")
print("time model: " + tm)
if "tile profile" not in tm:
    print("FAIL the plan's time model does not name the tile profile"); bad = 1
# The factors the profile measured, weighted by each tile's share of the
# model's time, bound how far the prediction may move.
f = [e["ms"] / (e["layer_ms"] * e["rows"] / e["layer_rows"]) for e in t if e["layer_ms"] >= 0.1 and e["rows"] < e["layer_rows"]]
lo, hi = min(f), max(f)
a, b = plain["latency_s"], priced["latency_s"]
ok = a * min(lo, 1.0) * 0.95 <= b <= a * max(hi, 1.0) * 1.05 and b != a
print("%s predicted latency %.6f s -> %.6f s with the tile profile (factors %.2f..%.2f)" % ("PASS" if ok else "FAIL", a, b, lo, hi))
bad |= not ok
sys.exit(bad)
EOF

# FDT channel slices: the memory plan on 3 devices splits weight layers by
# channels; each compute step of such a slice is an entry with an axis, its
# channels within the layer's, and the planner prices the plan from them.
"$T" plan "$cfg" --input-shape 1x3x160x160 --devices 3 --objective memory --out "$d/mem.pb" >/dev/null 2>"$d/plan.err" ||
  { echo "FAIL plan --objective memory"; cat "$d/plan.err"; exit 1; }
"$T" run "$cfg" --input-shape 1x3x160x160 --plan "$d/mem.pb" --threads 1 --repeat 3 --warmup 1 --profile --json \
  >"$d/slices.json" 2>"$d/run.err" || { echo "FAIL tessera run --plan --profile"; cat "$d/run.err"; exit 1; }
"$py" - "$d/slices.json" <<'EOF' || fail=1
import json, sys
t = [e for e in json.load(open(sys.argv[1]))["tile_profile"] if "axis" in e]
axes = sorted({e["axis"] for e in t})
ok = len(t) > 0 and all(0 < e["channels"] < e["layer_channels"] and e["ms"] >= 0 for e in t)
print("%s the memory plan's FDT slices: %d entries, axes %s" % ("PASS" if ok else "FAIL", len(t), axes))
sys.exit(0 if ok else 1)
EOF
mem_plain=$("$T" plan "$cfg" --input-shape 1x3x160x160 --devices 3 --objective memory --json) ||
  { echo "FAIL plan --objective memory --json"; exit 1; }
mem_priced=$("$T" plan "$cfg" --input-shape 1x3x160x160 --devices 3 --objective memory --json \
  --tile-profile "$d/slices.json") || { echo "FAIL plan --objective memory --tile-profile"; exit 1; }
"$py" - <<EOF || fail=1
import json
plain, priced = json.loads('''$mem_plain'''), json.loads('''$mem_priced''')
tm = priced.get("time_model", "")
a = sum(d["compute_s"] for d in plain["device_summary"])
b = sum(d["compute_s"] for d in priced["device_summary"])
ok = "FDT channel slices" in tm and b != a
print("%s the memory plan's compute %.6f s -> %.6f s with its slices (%s)" % ("PASS" if ok else "FAIL", a, b, tm))
raise SystemExit(0 if ok else 1)
EOF

if out=$("$T" plan "$cfg" --input-shape 1x3x96x96 --devices 3 --objective latency --tile-profile "$d/tiles.json" 2>&1); then
  echo "FAIL a tile profile of 160x160 was taken for 96x96"; fail=1
elif [[ $out == *"input shape"* ]]; then
  echo "PASS another input shape is refused: ${out##*$'\n'}"
else
  echo "FAIL refused without naming the input shape: $out"; fail=1
fi
exit $fail
