#!/usr/bin/env bash
# Quantized (QDQ) ONNX oracle: single-op int8/uint8 models
# (tests/oracle/make_qdq_ops.py: Conv in six forms, Gemm, MatMul, Add, pools,
# Concat, QLinearConv, QLinearMatMul) run by `tessera run` and by
# onnxruntime-node (tests/oracle/ort_run.js), compared in steps of the output
# grid:
#
#   d = |tessera - ort| / OUTPUT_SCALE      (LSBs of the model's output grid)
#
# Pass: equal shapes, tessera all finite, max d <= 1 + 1e-3 (one LSB).
# Why one LSB and not zero: with optimisation level all, onnxruntime fuses each
# DequantizeLinear -> op -> QuantizeLinear into an int8 kernel (QLinearConv,
# QGemm, QLinearAdd, ...) that accumulates in int32 and requantises the
# accumulator with a float multiplier (x_scale * w_scale / y_scale, in its own
# order and precision, sometimes fixed-point), while tessera computes the op in
# float32 on the dequantized values and quantizes that. Both results are
# correct to within rounding, but a value that lands on or next to a rounding
# tie of the output grid can go one step apart; two steps would be a real
# error. Each op is
# also compared with onnxruntime at --opt disabled (the reference QDQ semantics,
# the op itself in float) where the same bound must hold; an INFO line shows
# how far onnxruntime's two levels differ from each other. The weights use 7
# bits (|q| <= 63, onnxruntime's reduce_range): with full 8-bit weights
# onnxruntime's u8s8 kernels saturate on x86 CPUs without VNNI (int16 pair sums
# in VPMADDUBSW) and missed their own reference by up to 80 LSB on an AVX2
# machine (make_qdq_ops.py).
#
#   qdq_oracle.sh TESSERA BUILD_DIR
# Models are generated into BUILD_DIR/qdq (again only when make_qdq_ops.py
# changes); onnxruntime-node comes from install_ort.sh BUILD_DIR/npm.
# Exit 0 all pass, 1 any failure, 77 skipped (no node/onnxruntime-node, numpy
# or onnx).
set -u
tessera=${1:?usage: qdq_oracle.sh TESSERA BUILD_DIR}
build=${2:?usage: qdq_oracle.sh TESSERA BUILD_DIR}
build=$(mkdir -p "$build" && cd "$build" && pwd) || exit 1
repo=$(cd "$(dirname "$0")/../.." && pwd)
oracle_src=$repo/tests/oracle
python=/usr/bin/python3
out=$build/qdq
tol=1.001  # LSBs: 1 + 1e-3
script_start=$EPOCHREALTIME

if ! "$python" -c "import numpy, onnx" 2>/dev/null; then
  echo "FAIL: missing dependency: $python lacks numpy/onnx (python3-numpy, python3-onnx)"
  exit 77
fi
[[ -x $tessera ]] || { echo "FAIL: tessera binary '$tessera' not found"; exit 1; }
node_path=$("$oracle_src/install_ort.sh" "$build/npm")
rc=$?
if [[ $rc == 77 ]]; then
  echo "SKIP: onnxruntime-node unavailable (install_ort.sh exited 77)"
  exit 77
elif [[ $rc != 0 ]]; then
  echo "FAIL: install_ort.sh exited $rc"
  exit 1
fi

mkdir -p "$out"
stamp=$(sha256sum "$oracle_src/make_qdq_ops.py" | cut -d' ' -f1)
if [[ -f $out/manifest.txt && -f $out/.stamp && $(cat "$out/.stamp") == "$stamp" ]]; then
  echo "using cached models in $out"
else
  echo "generating models into $out"
  rm -f "$out/.stamp" "$out/manifest.txt"
  if ! "$python" "$oracle_src/make_qdq_ops.py" "$out"; then
    echo "FAIL: make_qdq_ops.py failed"
    exit 1
  fi
  echo "$stamp" >"$out/.stamp"
fi

# compare ACTUAL.npy REFERENCE.npy OUTPUT_SCALE LABEL [info]: one line; exit 0
# pass, 1 fail. With "info" the line starts with INFO and always exits 0.
compare_py='
import sys
import numpy as np
tol, actual, reference, scale, label = float(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5]
info = len(sys.argv) > 6
tag = lambda ok: "INFO" if info else ("PASS" if ok else "FAIL")
try:
    a, b = np.load(actual).astype(np.float64), np.load(reference).astype(np.float64)
except (OSError, ValueError) as e:
    print(f"{tag(False)} {label}: cannot read: {e}")
    sys.exit(0 if info else 1)
if a.shape != b.shape:
    print(f"{tag(False)} {label}: shape {list(a.shape)} vs {list(b.shape)}")
    sys.exit(0 if info else 1)
bad = int(np.count_nonzero(~np.isfinite(a)))
if bad:
    print(f"{tag(False)} {label}: {bad} of {a.size} values are not finite")
    sys.exit(0 if info else 1)
d = np.abs(a - b) / scale
dmax = float(d.max()) if d.size else 0.0
differ = int(np.count_nonzero(d >= 0.5))  # on another code of the grid
ok = dmax <= tol
print(f"{tag(ok)} {label}: max {dmax:.0f} LSB, {differ} of {d.size} elements differ (exact {dmax:.6g})")
sys.exit(0 if ok or info else 1)
'
compare() { "$python" -c "$compare_py" "$tol" "$@"; }

# run_step LOG LABEL CMD...: runs CMD with a timeout, output into LOG; on
# failure prints a FAIL line for LABEL and the log's tail.
run_step() {
  local log=$1 label=$2
  shift 2
  if timeout 300 "$@" >"$log" 2>&1; then return 0; fi
  echo "FAIL $label: exited non-zero (log $log):"
  tail -5 "$log" | sed 's/^/    /'
  return 1
}

passed=0 failed=0 ops=0
while read -r name scale files; do
  [[ -z $name || $name == \#* ]] && continue
  ops=$((ops + 1))
  model=$out/$name.onnx
  inputs=()
  for f in $files; do inputs+=(--input "$out/$f"); done
  rm -f "$out/$name".{tessera,ort,ort_ref}.npy
  all="$name [opt all]" ref="$name [opt disabled]"

  ok_t=1 ok_all=1 ok_ref=1
  run_step "$out/$name.tessera.log" "$name (tessera run)" \
    "$tessera" run "$model" "${inputs[@]}" --output "$out/$name.tessera.npy" --threads 1 || ok_t=0
  run_step "$out/$name.ort.log" "$name (onnxruntime opt all)" env NODE_PATH="$node_path" \
    node "$oracle_src/ort_run.js" "$model" "${inputs[@]}" --output "$out/$name.ort.npy" --opt all || ok_all=0
  run_step "$out/$name.ort_ref.log" "$name (onnxruntime opt disabled)" env NODE_PATH="$node_path" \
    node "$oracle_src/ort_run.js" "$model" "${inputs[@]}" --output "$out/$name.ort_ref.npy" --opt disabled || ok_ref=0

  if [[ $ok_t == 1 && $ok_all == 1 ]]; then
    if compare "$out/$name.tessera.npy" "$out/$name.ort.npy" "$scale" "$all"; then
      passed=$((passed + 1))
    else
      failed=$((failed + 1))
    fi
  else
    failed=$((failed + 1))
  fi
  if [[ $ok_t == 1 && $ok_ref == 1 ]]; then
    if compare "$out/$name.tessera.npy" "$out/$name.ort_ref.npy" "$scale" "$ref"; then
      passed=$((passed + 1))
    else
      failed=$((failed + 1))
    fi
  else
    failed=$((failed + 1))
  fi
  if [[ $ok_all == 1 && $ok_ref == 1 ]]; then
    compare "$out/$name.ort.npy" "$out/$name.ort_ref.npy" "$scale" "$name: onnxruntime opt all vs disabled" info
  fi
done <"$out/manifest.txt"

secs=$(awk -v a="$script_start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
if [[ $ops == 0 ]]; then
  echo "FAIL: $out/manifest.txt lists no models"
  exit 1
fi
echo "$ops ops: $passed comparisons passed, $failed failed (tolerance 1 LSB; ${secs}s)"
[[ $failed == 0 ]]
