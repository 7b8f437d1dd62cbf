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
