#!/usr/bin/env bash
# `tessera quantize` on the MLPerf-Tiny models (issue 16 items 1 and 2):
# DS-CNN keyword spotting, MobileNetV1-0.25 visual wake words, ResNet-8 CIFAR
# and the FC autoencoder, built by tests/oracle/export_mlperf_tiny.py (PyTorch,
# seeded weights). For each model:
#   1. `tessera run` of the float model equals PyTorch (rel <= 1e-4);
#   2. `tessera quantize --calibration DIR --weight-bits 7` (8 seeded N(0,1)
#      inputs) writes a QDQ model; the max |quantized - float| it prints is
#      re-measured with onnxruntime-node (float model vs QDQ model at
#      optimisation level disabled, the reference QDQ semantics) on the same
#      inputs: equal to 1e-3 relative (tessera's and onnxruntime's float runs
#      differ by ~1e-6);
#   3. `tessera run` of the QDQ model against onnxruntime at level all (its
#      int8 kernels: QLinearConv, QGemm, QLinearAdd, ...) and at level
#      disabled, per op on the same inputs (tests/oracle/qdq_ops.py): at most
#      1 step of the op's output grid apart (measured: 1 value of VWW's
#      264 117 on a neighbouring code, the others all equal); end to end
#      equal when no op differs, else reported (VWW: that one code widens to
#      6 steps at the output through 20 layers). 7-bit weights:
#      onnxruntime's int8 kernels overflow 16-bit pair sums with 8-bit
#      weights on x86 without VNNI (tests/integration/qdq_oracle.sh);
#   4. the QDQ model split over devices (`tessera run --force fdti|fdto|ffmt
#      --devices 2`) answers within 1 output step of the unsplit run
#      (measured: 0 on all four): a conv or dense layer on codes sums in
#      int32, FDTI merges its partial sums as int32 and rounds once, so
#      every split computes the same sums (a float layer's FDTI adds float
#      partial sums in another order, which may cross a rounding tie);
#   5. an 8-bit (default) quantization of DS-CNN runs the same in tessera as
#      onnxruntime's reference semantics (0 steps), and a model below opset 13
#      is refused by name;
#   6. int8 tiles over gRPC: the QDQ VWW model on 3 worker processes
#      (`tessera demo --force fdto|ffmt`) answers like `tessera run`, every
#      link carries exactly the bytes its programs say, and the tensors on an
#      8-bit grid travel as codes: at most 0.3 x what the float model sends
#      under the same scheme.
#
#   quantize_mlperf_tiny.sh TESSERA BUILD_DIR
# Exit 0 all pass, 1 any failure, 77 skipped (no torch/onnx or onnxruntime-node).
# ctest label: slow (takes 30 s or more; tests/CMakeLists.txt)
set -u
tessera=${1:?usage: quantize_mlperf_tiny.sh TESSERA BUILD_DIR}
build=${2:?usage: quantize_mlperf_tiny.sh TESSERA BUILD_DIR}
build=$(mkdir -p "$build" && cd "$build" && pwd) || exit 1
repo=$(cd "$(dirname "$0")/../.." && pwd)
oracle=$repo/tests/oracle
python=/usr/bin/python3
out=$build/mlperf_tiny
models=(ds_cnn_kws mobilenet_v1_025_vww resnet8_cifar fc_autoencoder)

if ! "$python" -c "import torch, numpy, onnx" 2>/dev/null; then
  echo "SKIP: $python lacks torch/numpy/onnx (deploy/install-deps.sh installs them)"
  exit 77
fi
node_path=$("$oracle/install_ort.sh" "$build/npm")
rc=$?
if [[ $rc == 77 ]]; then echo "SKIP: onnxruntime-node unavailable"; exit 77; fi
[[ $rc == 0 ]] || { echo "FAIL: install_ort.sh exited $rc"; exit 1; }
export NODE_PATH=$node_path
ort() { node "$oracle/ort_run.js" "$@" >/dev/null; }

mkdir -p "$out"
stamp=$(sha256sum "$oracle/export_mlperf_tiny.py" | cut -d' ' -f1)
have=1
for m in "${models[@]}"; do [[ -f $out/$m.onnx ]] || have=0; done
if [[ $have == 1 && -f $out/.stamp && $(cat "$out/.stamp") == "$stamp" ]]; then
  echo "using cached models in $out"
else
  rm -f "$out/.stamp"
  "$python" "$oracle/export_mlperf_tiny.py" "$out" || { echo "FAIL: export_mlperf_tiny.py"; exit 1; }
  echo "$stamp" >"$out/.stamp"
fi

failed=0
fail() { echo "FAIL $*"; failed=$((failed + 1)); }

for m in "${models[@]}"; do
  f=$out/$m.onnx q=$out/$m.int8.onnx cal=$out/$m.calibration
  # 1. float model against PyTorch.
  if ! "$tessera" run "$f" --input "$out/$m.input.npy" --output "$out/$m.tessera.npy" >/dev/null 2>"$out/$m.log"; then
    fail "$m: tessera run (float): $(tail -1 "$out/$m.log")"; continue
  fi
  line=$("$python" "$oracle/compare_npy.py" "$out/$m.tessera.npy" "$out/$m.output.npy" --tol 1e-4) ||
    { fail "$m float vs torch: $line"; continue; }
  echo "PASS $m float vs PyTorch: $line"
  # 2. quantize on 8 given inputs; re-measure its printed cost with onnxruntime.
  rm -rf "$cal" && mkdir -p "$cal"
  "$python" - "$f" "$cal" <<'PY' || { fail "$m: making calibration inputs"; continue; }
import sys, numpy as np, onnx
m = onnx.load(sys.argv[1])
shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
rng = np.random.default_rng(20240601)
for i in range(8):
    np.save(f"{sys.argv[2]}/sample{i}.npy", rng.standard_normal(shape).astype(np.float32))
PY
  if ! "$tessera" quantize "$f" --calibration "$cal" --weight-bits 7 --out "$q" --json >"$out/$m.quantize.json" \
       2>"$out/$m.log"; then
    fail "$m: tessera quantize: $(tail -1 "$out/$m.log")"; continue
  fi
  measured=0
  for i in $(seq 0 7); do
    ort "$f" --input "$cal/sample$i.npy" --output "$cal/float$i.npy" &&
      ort "$q" --opt disabled --input "$cal/sample$i.npy" --output "$cal/qdq$i.npy" || { measured=-1; break; }
  done
  [[ $measured == 0 ]] || { fail "$m: onnxruntime could not run the float or QDQ model"; continue; }
  if ! line=$("$python" - "$out/$m.quantize.json" "$cal" <<'PY'
import json, sys, numpy as np
j = json.load(open(sys.argv[1]))
worst = max(float(np.abs(np.load(f"{sys.argv[2]}/qdq{i}.npy").astype(np.float64)
                         - np.load(f"{sys.argv[2]}/float{i}.npy")).max()) for i in range(8))
said = j["outputs"][0]["max_abs_diff_vs_float"]
ok = abs(said - worst) <= 1e-3 * worst + 1e-6 and j["weights_quantized"] > 0 and j["activations_quantized"] > 0 \
     and j["quantized_weight_bytes"] < j["float_weight_bytes"] / 3
print(f"printed max |int8 - float| {said:.6g}, onnxruntime's {worst:.6g}; {j['activations_quantized']} activations, "
      f"{j['weights_quantized']} weights, {j['float_weight_bytes']} -> {j['quantized_weight_bytes']} weight bytes")
sys.exit(0 if ok else 1)
PY
  ); then fail "$m quantize figures: $line"; continue; fi
  echo "PASS $m quantize: $line"
  # 3. the QDQ model against onnxruntime's int8 kernels and its reference.
  "$tessera" run "$q" --input "$out/$m.input.npy" --output "$out/$m.int8.tessera.npy" >/dev/null 2>"$out/$m.log" ||
    { fail "$m: tessera run (int8): $(tail -1 "$out/$m.log")"; continue; }
  for opt in all disabled; do
    ort "$q" --opt "$opt" --input "$out/$m.input.npy" --output "$out/$m.int8.ort-$opt.npy" ||
      { fail "$m: onnxruntime --opt $opt"; continue; }
    # Per op, on the same inputs: at most 1 LSB.
    if ops=$("$python" "$oracle/qdq_ops.py" "$q" "$out/$m.input.npy" "$tessera" "$oracle/ort_run.js" \
                  "$out/$m.ops-$opt" --opt "$opt"); then
      echo "PASS $m int8 per op vs onnxruntime (opt $opt): $(echo "$ops" | tail -1)"
      echo "$ops" | sed 's/^/     /'
    else
      fail "$m int8 per op vs onnxruntime (opt $opt):"$'\n'"$ops"
      continue
    fi
    # End to end: equal when no op landed on a neighbouring code (each op's
    # inputs are then onnxruntime's); else reported only (one code's
    # difference early in a deep model may widen in later layers).
    max_lsb=1000000
    [[ $ops == *"all ops: "*", 0 on a neighbouring code"* ]] && max_lsb=0
    if line=$("$python" "$oracle/qdq_lsb.py" "$q" "$out/$m.int8.tessera.npy" "$out/$m.int8.ort-$opt.npy" \
                  --max-lsb $max_lsb); then
      echo "PASS $m int8 end to end vs onnxruntime (opt $opt): $line"
    else
      fail "$m int8 end to end vs onnxruntime (opt $opt): $line (no op differs, so the model should not)"
    fi
  done
  # 4. split over devices: within one output step of the unsplit run.
  step=$("$python" -c "
import sys; sys.path.insert(0, '$oracle'); import onnx, qdq_lsb
m = onnx.load('$q'); print(qdq_lsb.output_step(m, m.graph.output[0].name))")
  for force in "fdti" "fdto" "ffmt --grid 2x1"; do
    j=$("$tessera" run "$q" --force $force --devices 2 --input "$out/$m.input.npy" --json 2>"$out/$m.log") ||
      { fail "$m --force $force: $(tail -1 "$out/$m.log")"; continue; }
    d=$(echo "$j" | "$python" -c "import json,sys; print(json.load(sys.stdin)['max_abs_diff'])")
    if "$python" -c "import sys; sys.exit(0 if $d <= $step * 1.001 else 1)"; then
      echo "PASS $m int8 --force $force on 2 devices: max |diff| $d vs unsplit (step $step)"
    else
      fail "$m int8 --force $force: max |diff| $d > one output step $step"
    fi
  done
done

# 5. 8-bit weights (the default) against onnxruntime's reference semantics, and errors.
m=ds_cnn_kws
if "$tessera" quantize "$out/$m.onnx" --random 4 --out "$out/$m.w8.onnx" >/dev/null 2>"$out/w8.log" &&
   "$tessera" run "$out/$m.w8.onnx" --input "$out/$m.input.npy" --output "$out/$m.w8.tessera.npy" >/dev/null 2>&1 &&
   ort "$out/$m.w8.onnx" --opt disabled --input "$out/$m.input.npy" --output "$out/$m.w8.ort.npy" &&
   line=$("$python" "$oracle/qdq_lsb.py" "$out/$m.w8.onnx" "$out/$m.w8.tessera.npy" "$out/$m.w8.ort.npy" --max-lsb 0); then
  echo "PASS $m 8-bit weights vs onnxruntime (opt disabled): $line"
else
  fail "$m 8-bit weights: ${line:-$(tail -1 "$out/w8.log")}"
fi
"$python" - "$out/$m.onnx" "$out/old_opset.onnx" <<'PY'
import sys, onnx
m = onnx.load(sys.argv[1])
for o in m.opset_import:
    if o.domain in ("", "ai.onnx"): o.version = 12
onnx.save(m, sys.argv[2])
PY
if err=$("$tessera" quantize "$out/old_opset.onnx" --random 2 --out "$out/never.onnx" 2>&1); then
  fail "quantize accepted an opset-12 model"
elif [[ $err == *"opset 12"*"opset 13"* && ! -e $out/never.onnx ]]; then
  echo "PASS opset 12 refused: ${err##*error: }"
else
  fail "opset-12 error unclear: $err"
fi
if err=$("$tessera" quantize "$out/$m.onnx" --out "$out/never.onnx" 2>&1); then
  fail "quantize ran without calibration inputs"
elif [[ $err == *"--random"*"--calibration"* ]]; then
  echo "PASS no calibration refused: ${err##*error: }"
else
  fail "no-calibration error unclear: $err"
fi

# 6. int8 tiles between worker processes.
m=mobilenet_v1_025_vww
for force in fdto ffmt; do
  payload=()
  for model in "$out/$m.int8.onnx" "$out/$m.onnx"; do
    j=$(timeout 300 "$tessera" demo --model "$model" --devices 3 --force $force --requests 2 --json 2>"$out/demo.log") ||
      { fail "$m demo --force $force ($model): $(tail -1 "$out/demo.log")"; continue 2; }
    line=$(echo "$j" | "$python" -c "
import json, sys
j = json.load(sys.stdin)
ok = j['all_match'] and all(l['payload_bytes'] == l['expected_payload_bytes'] for l in j['links'])
print(sum(l['payload_bytes'] for l in j['links']) if ok else 'answers or link bytes differ: ' + json.dumps(j['links']))
sys.exit(0 if ok else 1)") || { fail "$m demo --force $force ($model): $line"; continue 2; }
    payload+=("$line")
  done
  if "$python" -c "import sys; sys.exit(0 if ${payload[0]} <= 0.3 * ${payload[1]} else 1)"; then
    echo "PASS $m int8 tiles over gRPC (--force $force, 3 workers): ${payload[0]} payload bytes vs ${payload[1]} for the float model, answers match"
  else
    fail "$m int8 tiles over gRPC (--force $force): ${payload[0]} bytes, not under 0.3 x the float model's ${payload[1]}"
  fi
done

# 7. VWW on four STM32F401RB-class MCUs under QEMU (issue 16 item 4: a model
# that fits no single preset). Its weights (230 016 B as int8) need 3-4
# boards' flash, and its 48x48 layers (46-55 KB of input and output) more
# than a board's 38 KiB of RAM: --mcu-only tiles the stem in rows over 3
# MCUs and pipelines the rest, joined UART-to-UART. Every answer must equal
# `tessera run` (0 output steps), each MCU hold what it was promised.
fw=$build/firmware/tessera_mcu_worker.elf
if ! command -v qemu-system-arm >/dev/null 2>&1 || [[ ! -f $fw ]]; then
  fail "VWW on MCUs: qemu-system-arm or $fw missing (deploy/install-deps.sh, the tessera_firmware target)"
else
  vww_demo() {
    TESSERA_MCU_FIRMWARE=$fw timeout 600 "$tessera" demo --model "$out/$m.int8.onnx" --mcu 4 \
      --mcu-preset STM32F401RB --mcu-only --mcu-chain --requests 2 --json >"$out/vww_mcu.json" 2>"$out/vww_mcu.log"
  }
  rc=0
  vww_demo || rc=$?
  if [[ $rc -ne 0 ]] && grep -q "program bytes: .*not acknowledged" "$out/vww_mcu.log"; then
    echo "RETRY: VWW on MCUs: a program upload was not acknowledged (see integration.mixed_qemu)"
    rc=0
    vww_demo || rc=$?
  fi
  if [[ $rc -ne 0 ]]; then
    fail "VWW on 4 STM32F401RB exited $rc: $(grep -v '^\[' "$out/vww_mcu.log" | tail -2)"
  elif line=$("$python" - "$out/vww_mcu.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["all_match"] is True and j["answered"] == j["requests"] == 2, j
assert j["max_diff_output_steps"] == 0, j["max_diff_output_steps"]
assert j["mcu_only"] and j["mcu_memory_as_promised"] and j["direct_links_as_expected"], j
placed = [p.rsplit("@", 1) for p in j["placement"].split(", ")]
assert all(d.startswith("mcu") for _, d in placed), j["placement"]
tiled = [n for n, d in placed if ":ffmt" in n and "+" in d]
assert tiled and any("features.6/Conv" in n for n in tiled), j["placement"]  # the 55 296 B layer, in tiles
mcus = [d for d in j["device_memory"] if d["kind"] == "mcu"]
assert len(mcus) == 4 and all(d["promised_ram_bytes"] <= d["program_ram_bytes_available"] for d in mcus), mcus
flash = sum(d["promised_flash_bytes"] for d in mcus)
assert flash > mcus[0]["program_flash_bytes_available"], mcus  # fits no single board
print("%d requests equal (0 steps), %.0f ms each; %d layers in row tiles; flash %s B, RAM %s B of %d"
      % (j["requests"], j["latency_ms"], len(tiled), "/".join(str(d["promised_flash_bytes"]) for d in mcus),
         "/".join(str(d["promised_ram_bytes"]) for d in mcus), mcus[0]["program_ram_bytes_available"]))
PY
  ); then
    echo "PASS $m on 4 STM32F401RB (QEMU, --mcu-only --mcu-chain): $line"
  else
    fail "VWW on 4 STM32F401RB: $line"
  fi
fi

[[ $failed == 0 ]] && echo "all passed" && exit 0
echo "$failed failure(s)"
exit 1
