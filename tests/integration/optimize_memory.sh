#!/usr/bin/env bash
# Issue 17 item 3: `tessera optimize-memory` on darknet models and a
# torchvision export. For each, the
# printed arena + weights as stored must shrink (the tiles of a stack keep
# each weight once), stay within the MAC budget, and be exactly the
# arena `tessera run MODEL --plan OUT` allocates for the transformed program,
# whose answers must equal the unsplit run (max rel diff <= 1e-5, measured 0:
# tiles sum in the order of the whole convs). Bad options are clear errors.
# Args: path to tessera, build dir.
set -u
T=${1:?tessera binary}
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cfg=/usr/share/darknet/cfg
fail=0

check() {  # name cfg shape budget
  local name=$1 model=$2 shape=$3 budget=$4
  if ! "$T" optimize-memory "$model" --input-shape "$shape" --max-mac-overhead "$budget" --json --quiet \
       --out "$tmp/$name.pb" > "$tmp/$name.opt.json" 2> "$tmp/$name.err"; then
    echo "FAIL $name: optimize-memory exited non-zero: $(cat "$tmp/$name.err")"; fail=1; return
  fi
  if ! "$T" run "$model" --input-shape "$shape" --plan "$tmp/$name.pb" --json > "$tmp/$name.run.json" 2> "$tmp/$name.err"; then
    echo "FAIL $name: run --plan exited non-zero: $(cat "$tmp/$name.err")"; fail=1; return
  fi
  "$py" - "$tmp/$name.opt.json" "$tmp/$name.run.json" "$name" "$budget" <<'EOF' || fail=1
import json, sys
o = json.load(open(sys.argv[1])); r = json.load(open(sys.argv[2])); name = sys.argv[3]
b = sys.argv[4]
budget = float("inf") if b == "none" else float(b.rstrip("%")) / (100 if b.endswith("%") else 1)
bad = 0
def say(ok, text):
    global bad
    bad |= not ok
    print("%s %s: %s" % ("PASS" if ok else "FAIL", name, text))
need0 = o["arena_before_bytes"] + o["weight_before_bytes"]
need1 = o["arena_after_bytes"] + o["weight_after_bytes"]
say(need1 < need0 and o["arena_after_bytes"] < o["arena_before_bytes"],
    "arena %d -> %d bytes (%.3fx), weights as stored %d -> %d, arena + weights %.3fx, %d path(s), "
    "%.2f %% MACs recomputed, %d programs sized in %.2f s" % (
        o["arena_before_bytes"], o["arena_after_bytes"], o["arena_after_bytes"] / o["arena_before_bytes"],
        o["weight_before_bytes"], o["weight_after_bytes"], need1 / need0,
        len(o["paths"]), 100 * o["mac_overhead"], o["candidates"], o["seconds"]))
say(o["mac_overhead"] <= budget + 1e-12, "MAC overhead %.4f within the budget %.4f" % (o["mac_overhead"], budget))
say(r["devices"] == 1 and r["device_memory_bytes"] == [o["arena_after_bytes"]],
    "run --plan allocates %s bytes, printed %d" % (r["device_memory_bytes"], o["arena_after_bytes"]))
say(r["halo_mac_overhead"] == o["halo_macs"], "halo MACs of the run %d, printed %d" % (r["halo_mac_overhead"], o["halo_macs"]))
say(r["max_rel_diff"] <= 1e-5, "answers against the unsplit run: max rel diff %.3g (<= 1e-5)" % r["max_rel_diff"])
sys.exit(bad)
EOF
}

check yolov2-tiny "$cfg/yolov2-tiny.cfg" 1x3x416x416 10%
check yolov2-tiny-free "$cfg/yolov2-tiny.cfg" 1x3x224x224 none
check yolov2 "$cfg/yolov2.cfg" 1x3x320x320 5%
# A 1x1 conv and a pool tiled 5x5: no halo, no MACs recomputed.
check extraction "$cfg/extraction.cfg" 1x3x224x224 0.1
# A torchvision export (random weights; Debian's python3-torch): inverted
# residuals, ReLU6 (Clip), residual Adds.
if "$py" -c '
import torch, torchvision, sys
m = torchvision.models.mobilenet_v2(weights=None).eval()
torch.onnx.export(m, torch.randn(1, 3, 224, 224), sys.argv[1], opset_version=13)' "$tmp/mobilenet_v2.onnx" 2> "$tmp/export.err"; then
  check mobilenet_v2 "$tmp/mobilenet_v2.onnx" 1x3x224x224 10%
else
  echo "FAIL could not export mobilenet_v2: $(tail -3 "$tmp/export.err")"; fail=1
fi

# Clear errors, exit 1.
for bad in "abc" "-5%" "10%%"; do
  if out=$("$T" optimize-memory "$cfg/yolov2-tiny.cfg" --max-mac-overhead "$bad" 2>&1); then
    echo "FAIL --max-mac-overhead '$bad' was accepted"; fail=1
  elif ! grep -q "max-mac-overhead" <<<"$out"; then
    echo "FAIL --max-mac-overhead '$bad': the error does not name the option: $out"; fail=1
  else
    echo "PASS --max-mac-overhead '$bad' refused: $out"
  fi
done
if out=$("$T" optimize-memory "$tmp/missing.cfg" 2>&1); then
  echo "FAIL a missing model was accepted"; fail=1
else
  echo "PASS a missing model: $out"
fi
exit $fail
