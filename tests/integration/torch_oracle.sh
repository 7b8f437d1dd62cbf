#!/usr/bin/env bash
# PyTorch oracle (issue 2, "Proof"): torchvision CNNs with seeded random
# weights, exported to ONNX by PyTorch; `tessera run` must reproduce PyTorch's
# output with rel = max|tessera - torch| / max|torch| <= 1e-4
# (tests/oracle/compare_npy.py). Issue 13's ops (GELU, LayerNorm, bilinear
# Resize, ConvTranspose, Split) are covered by ops_decoder, convnext_tiny
# (64x64) and lraspp_mobilenet_v3_large (128x128).
#
#   torch_oracle.sh TESSERA BUILD_DIR
# Models are generated into BUILD_DIR/oracle (regenerated only when
# export_torchvision.py changes). Exit 0 all pass, 1 any failure, 77 skipped.
set -u
tessera=${1:?usage: torch_oracle.sh TESSERA BUILD_DIR}
build=${2:?usage: torch_oracle.sh TESSERA BUILD_DIR}
build=$(mkdir -p "$build" && cd "$build" && pwd) || exit 1
repo=$(cd "$(dirname "$0")/../.." && pwd)
oracle_src=$repo/tests/oracle
python=/usr/bin/python3
out=$build/oracle
models=(mobilenet_v2 resnet18 squeezenet1_0 googlenet mnasnet1_0 ops_decoder convnext_tiny lraspp_mobilenet_v3_large)
tol=1e-4

if ! "$python" -c "import torch, torchvision, numpy" 2>/dev/null; then
  echo "FAIL: missing dependency: $python lacks torch/torchvision/numpy (deploy/install-deps.sh installs python3-torch, python3-torchvision)"
  exit 77
fi
[[ -x $tessera ]] || { echo "FAIL: tessera binary '$tessera' not found"; exit 1; }

mkdir -p "$out"
stamp=$(sha256sum "$oracle_src/export_torchvision.py" | cut -d' ' -f1)
have_all=1
for m in "${models[@]}"; do [[ -f $out/$m.onnx ]] || have_all=0; done
if [[ $have_all == 1 && -f $out/.stamp && $(cat "$out/.stamp") == "$stamp" ]]; then
  echo "using cached models in $out"
else
  echo "exporting models into $out"
  rm -f "$out/.stamp"
  if ! "$python" "$oracle_src/export_torchvision.py" "$out" --models "${models[@]}"; then
    echo "FAIL: export_torchvision.py failed"
    exit 1
  fi
  echo "$stamp" >"$out/.stamp"
fi

passed=0 failed=0
for m in "${models[@]}"; do
  rm -f "$out/$m.tessera.npy"
  start=$EPOCHREALTIME
  if ! timeout 600 "$tessera" run "$out/$m.onnx" --input "$out/$m.input.npy" --output "$out/$m.tessera.npy" \
       --threads 2 >"$out/$m.tessera.log" 2>&1; then
    echo "FAIL $m: tessera run exited non-zero:"
    tail -5 "$out/$m.tessera.log" | sed 's/^/    /'
    failed=$((failed + 1))
    continue
  fi
  secs=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')
  if line=$("$python" "$oracle_src/compare_npy.py" "$out/$m.tessera.npy" "$out/$m.output.npy" --tol "$tol"); then
    echo "PASS $m: $line (${secs}s)"
    passed=$((passed + 1))
  else
    echo "FAIL $m: $line"
    failed=$((failed + 1))
  fi
done
echo "$passed passed, $failed failed"
[[ $failed == 0 ]]
