#!/usr/bin/env bash
# Issue 17 item 3: `tessera optimize-memory` on darknet models and a
# torchvision export (all kinds of path, and channel paths alone). For each, the
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

repo=$(cd "$(dirname "$0")/../.." && pwd)
source "$repo/tests/oracle/optimize_memory_check.sh"

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
  # Channel paths only (issue 17 item 3): inverted residuals in channel
  # slices (expand FDTO -> depthwise PART -> project FDTI on one device),
  # no MAC recomputed.
  check mobilenet_v2-channels "$tmp/mobilenet_v2.onnx" 1x3x224x224 0% shrinks --paths channels
  "$py" - "$tmp/mobilenet_v2-channels.opt.json" <<'EOF2' || fail=1
import json, sys
o = json.load(open(sys.argv[1]))
paths = o["paths"]
ok = paths and all(p["channel_slices"] >= 2 for p in paths) and o["halo_macs"] == 0
print("%s mobilenet_v2-channels: %d channel path(s), %d MACs recomputed: %s" % (
    "PASS" if ok else "FAIL", len(paths), o["halo_macs"], "; ".join(p["description"] for p in paths)))
sys.exit(0 if ok else 1)
EOF2
else
  echo "FAIL could not export mobilenet_v2: $(tail -3 "$tmp/export.err")"; fail=1
fi

# The printed figures against a real worker (issue 11: a printed number is
# a promise): yolov2-tiny's 10 % plan deployed to one `tessera worker`. The
# worker reports the weights and arena it holds (deploy's lines, 2 decimals
# of MiB): they must be the printed weights as stored and arena after the
# flow. Its peak must grow by at most what the flow says a worker holds
# while it loads and then runs, max(weights held while loading, weights +
# arena), plus 24 MiB (gRPC buffers, allocator slack, as in
# cluster_worker_limits_test), and by at least the weights it keeps.
source "$repo/tests/oracle/cluster_helpers.sh"
start_scratch tessera-optmem
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$D" "$tmp"' EXIT
start_loopback_workers 1 --data-dir "$D/w1.data"
sed -i 's/name: w1,/name: device,/' "$D/cluster.yaml"  # the device a one-device plan names
hwm() { awk '/^VmHWM/ {print $2 * 1024}' "/proc/$1/status"; }
before=$(hwm "${PIDS[1]}")
if "$T" deploy --cluster "$D/cluster.yaml" --plan "$tmp/yolov2-tiny.pb" --model "$cfg/yolov2-tiny.cfg"      --input-shape 1x3x416x416 > "$tmp/deploy.out" 2> "$tmp/deploy.err"; then
  after=$(hwm "${PIDS[1]}")
  "$py" - "$tmp/yolov2-tiny.opt.json" "$tmp/deploy.out" "$before" "$after" <<'EOF2' || fail=1
import json, re, sys
o = json.load(open(sys.argv[1])); out = open(sys.argv[2]).read()
before, after = int(sys.argv[3]), int(sys.argv[4])
m = re.search(r"weights\s+([0-9.]+) MiB, working memory\s+([0-9.]+) MiB", out)
MiB = 1048576.0
bad = 0
def say(ok, text):
    global bad
    bad |= not ok
    print("%s optimize-memory vs a worker: %s" % ("PASS" if ok else "FAIL", text))
if not m:
    say(False, "no weights/working memory line in the deploy output: " + out)
    sys.exit(1)
w, a = float(m.group(1)), float(m.group(2))
say(abs(w - o["weight_after_bytes"] / MiB) < 0.006,
    "the worker keeps %.2f MiB of weights, printed %.2f" % (w, o["weight_after_bytes"] / MiB))
say(abs(a - o["arena_after_bytes"] / MiB) < 0.006,
    "the worker's arena %.2f MiB, printed %.2f" % (a, o["arena_after_bytes"] / MiB))
need = max(o["load_peak_after_bytes"], o["weight_after_bytes"] + o["arena_after_bytes"])
grew = after - before
say(o["weight_after_bytes"] <= grew <= need + 24 * MiB,
    "worker VmHWM grew %.1f MiB loading and holding the plan: between the weights %.1f MiB and "
    "max(load peak %.1f, weights + arena %.1f) + 24 MiB" % (
        grew / MiB, o["weight_after_bytes"] / MiB, o["load_peak_after_bytes"] / MiB,
        (o["weight_after_bytes"] + o["arena_after_bytes"]) / MiB))
sys.exit(bad)
EOF2
else
  echo "FAIL deploying the optimize-memory plan: $(tail -3 "$tmp/deploy.err")"; fail=1
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
