#!/usr/bin/env bash
# Issue 13 property: every plan the planner emits runs. For each model,
# `tessera run` must match PyTorch (max|a − b| / max|b| ≤ 1e-4), and for every
# objective × N ∈ {2, 3, 4, 6} identical devices, `tessera plan` must succeed
# and `tessera run --plan` (plan → compile → run in one process over
# in-process links) must equal the unsplit run with max|a − b| / max|b| ≤ 1e-5;
# and the throughput plan of the genetic search (--solver ga) at N = 3.
#
#   plan_property.sh TESSERA BUILD_DIR
# Models: seeded torchvision exports (tests/oracle/export_torchvision.py),
# cached in BUILD_DIR/oracle. The default run takes two modern edge models
# (squeeze-and-excitation + hard-swish; channel split + shuffle);
# tests/integration/large/plan_property_zoo.sh runs the whole zoo by setting
# PLAN_PROPERTY_MODELS. Darknet cfgs (PLAN_PROPERTY_DARKNET, CFG:SHAPE; default
# yolov2-tiny at 160²) get the same plan loop.
# ctest label: slow (takes 30 s or more; tests/CMakeLists.txt)
set -u
tessera=${1:?usage: plan_property.sh TESSERA BUILD_DIR}
build=${2:?usage: plan_property.sh TESSERA BUILD_DIR}
build=$(mkdir -p "$build" && cd "$build" && pwd) || exit 1
repo=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck disable=SC2206 # a space- or newline-separated list
models=(${PLAN_PROPERTY_MODELS:-mobilenet_v3_small shufflenet_v2_x0_5})
# Darknet cfgs Debian ships, as CFG:SHAPE (their single-device reference is
# libdarknet itself: darknet_oracle_test).
# shellcheck disable=SC2206
darknet=(${PLAN_PROPERTY_DARKNET:-yolov2-tiny.cfg:1x3x160x160})
cfgdir=${DARKNET_CFG_DIR:-/usr/share/darknet/cfg}
tol=1e-5

source "$repo/tests/oracle/ensure_models.sh"

passed=0 failed=0
verdict() {  # label, json of `tessera run --plan --json`
  local v
  v=$(printf '%s' "$2" | "$python" -c "
import json, sys
j = json.load(sys.stdin)
ok = j['max_rel_diff'] <= $tol
print(('PASS' if ok else 'FAIL') + ' max_rel_diff=%.3g bytes=%d' % (j['max_rel_diff'], j['total_bytes']))
") || v="FAIL unreadable output: ${2##*$'\n'}"
  echo "${v%% *} $1: ${v#* }"
  if [[ $v == PASS* ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
}

# Every objective x N: plan, then `tessera run --plan` against the unsplit run.
every_plan() {  # label, model, extra args for plan and run
  local m=$1 model=$2 objective n plan label json how
  shift 2
  # throughput-ga: the genetic search (issue 18 item 6), whose assignments
  # need not be pipelines (a device may run two separate ranges of layers).
  for objective in memory communication latency throughput throughput-ga; do
    for n in 2 3 4 6; do
      [[ $objective == throughput-ga && $n != 3 ]] && continue
      plan=$build/oracle/$m.$objective.$n.pb
      label="$m $objective N=$n"
      how=(--objective "$objective")
      [[ $objective == throughput-ga ]] && how=(--objective throughput --solver ga)
      if ! "$tessera" plan "$model" "$@" --devices $n "${how[@]}" --out "$plan" >/dev/null 2>"$plan.log"; then
        echo "FAIL $label: the planner gave up: $(tail -1 "$plan.log")"
        failed=$((failed + 1))
        continue
      fi
      if ! json=$("$tessera" run "$model" "$@" --plan "$plan" --json 2>&1); then
        echo "FAIL $label: the plan does not run: ${json##*$'\n'}"
        failed=$((failed + 1))
        continue
      fi
      verdict "$label" "$json"
    done
  done
}

for m in "${models[@]}"; do
  model=$out/$m.onnx
  # The single-device reference against PyTorch first: a plan equal to a wrong run proves nothing.
  if "$tessera" run "$model" --input "$out/$m.input.npy" --output "$build/oracle/$m.property.npy" >/dev/null 2>&1 &&
    "$python" "$repo/tests/oracle/compare_npy.py" "$build/oracle/$m.property.npy" "$out/$m.output.npy" --tol 1e-4 \
      --label "$m tessera run vs PyTorch"; then
    passed=$((passed + 1))
  else
    echo "FAIL $m: tessera run does not match PyTorch"
    failed=$((failed + 1))
    continue
  fi
  every_plan "$m" "$model"
done
for entry in "${darknet[@]}"; do
  cfg=${entry%%:*} shape=${entry#*:}
  [[ -f $cfgdir/$cfg ]] || { echo "FAIL $cfg: missing dependency: $cfgdir/$cfg (Debian package darknet)"; failed=$((failed + 1)); continue; }
  every_plan "${cfg%.cfg}-$shape" "$cfgdir/$cfg" --input-shape "$shape"
done
echo "$passed passed, $failed failed"
[[ $failed == 0 && $passed -gt 0 ]]
