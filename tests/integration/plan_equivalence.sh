#!/usr/bin/env bash
# Issue 4 proof on torchvision exports: every forced scheme and the planner's
# default plan, N = 2, 3, 4, 6 devices, run in one process over in-process
# links (`tessera run --force/--plan`), must equal the unsplit run with
# max|a − b| / max|b| ≤ 1e-5; and processing in parts (--force parts, row
# bands on one device) with no recomputed MAC.
#
#   plan_equivalence.sh TESSERA BUILD_DIR
# Models come from tests/oracle/export_torchvision.py (cached in
# BUILD_DIR/oracle, shared with torch_oracle.sh). Exit 0 pass, 1 fail, 77 missing dependency (also a failure).
# ctest label: slow (takes 30 s or more; tests/CMakeLists.txt)
set -u
tessera=${1:?usage: plan_equivalence.sh TESSERA BUILD_DIR}
build=${2:?usage: plan_equivalence.sh TESSERA BUILD_DIR}
build=$(mkdir -p "$build" && cd "$build" && pwd) || exit 1
repo=$(cd "$(dirname "$0")/../.." && pwd)
models=(mobilenet_v2 resnet18 googlenet)
tol=1e-5

source "$repo/tests/oracle/ensure_models.sh"

passed=0 failed=0
check() {  # label, then tessera run arguments
  local label=$1
  shift
  local json
  if ! json=$("$tessera" run "$@" --json 2>&1); then
    echo "FAIL $label: ${json##*$'\n'}"
    failed=$((failed + 1))
    return
  fi
  local verdict
  verdict=$(printf '%s' "$json" | "$python" -c "
import json, sys
j = json.load(sys.stdin)
ok = j['max_rel_diff'] <= $tol
print(('PASS' if ok else 'FAIL') + ' max_rel_diff=%.3g bytes=%d halo_macs=%d' % (j['max_rel_diff'], j['total_bytes'], j['halo_mac_overhead']))
")
  echo "${verdict%% *} $label: ${verdict#* }"
  if [[ $verdict == PASS* ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
}

for m in "${models[@]}"; do
  model=$out/$m.onnx
  for n in 2 3 4 6; do
    check "$m ffmt 2x2 N=$n" "$model" --force ffmt --grid 2x2 --devices $n
    check "$m ffmt 3x3 N=$n" "$model" --force ffmt --grid 3x3 --devices $n
    check "$m ffmt 3x1 N=$n" "$model" --force ffmt --grid 3x1 --devices $n
    for s in fdto fdti pairs pipeline; do check "$m $s N=$n" "$model" --force $s --devices $n; done
    plan=$build/oracle/$m.plan$n.pb
    if "$tessera" plan "$model" --devices $n --objective memory --out "$plan" >/dev/null 2>"$plan.log"; then
      check "$m default plan N=$n" "$model" --plan "$plan"
    else
      echo "FAIL $m default plan N=$n: $(tail -1 "$plan.log")"
      failed=$((failed + 1))
    fi
  done
done
# Processing in parts (issue 18 item 3): every tileable stretch on one
# device in row bands, overlaps kept between bands: equal to the unsplit run
# and not one MAC computed twice.
for m in "${models[@]}" darknet:yolov2-tiny; do
  model=$out/$m.onnx
  [[ $m == darknet:* ]] && model=/usr/share/darknet/cfg/${m#darknet:}.cfg
  for grid in 2x1 4x1 7x1; do
    if ! json=$("$tessera" run "$model" --force parts --grid $grid --devices 1 --json 2>&1); then
      echo "FAIL $m parts $grid: ${json##*$'\n'}"; failed=$((failed + 1)); continue
    fi
    verdict=$(printf '%s' "$json" | "$python" -c "
import json, sys
j = json.load(sys.stdin)
ok = j['max_rel_diff'] <= $tol and j['halo_mac_overhead'] == 0
print(('PASS' if ok else 'FAIL') + ' max_rel_diff=%.3g halo_macs=%d arena=%d' % (j['max_rel_diff'], j['halo_mac_overhead'], j['device_memory_bytes'][0]))
")
    echo "${verdict%% *} $m parts $grid: ${verdict#* }"
    if [[ $verdict == PASS* ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
  done
done
# Halo exchange (issue 15, --force halo): every tileable layer a stack of its
# own over N row tiles, halo rows sent between neighbours: equal to the
# unsplit run, no MAC computed twice; and the latency objective's plan
# (which picks it when it predicts best) with the bytes it promised.
for m in "${models[@]}" darknet:yolov2-tiny; do
  model=$out/$m.onnx
  [[ $m == darknet:* ]] && model=/usr/share/darknet/cfg/${m#darknet:}.cfg
  for n in 3 4; do
    if ! json=$("$tessera" run "$model" --force halo --grid ${n}x1 --devices $n --json 2>&1); then
      echo "FAIL $m halo N=$n: ${json##*$'\n'}"; failed=$((failed + 1)); continue
    fi
    verdict=$(printf '%s' "$json" | "$python" -c "
import json, sys
j = json.load(sys.stdin)
ok = j['max_rel_diff'] <= $tol and j['halo_mac_overhead'] == 0 and j['total_bytes'] > 0
print(('PASS' if ok else 'FAIL') + ' max_rel_diff=%.3g halo_macs=%d bytes=%d' % (j['max_rel_diff'], j['halo_mac_overhead'], j['total_bytes']))
")
    echo "${verdict%% *} $m halo N=$n: ${verdict#* }"
    if [[ $verdict == PASS* ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
  done
  plan=$build/oracle/${m#darknet:}.latency4.pb
  if ! "$tessera" plan "$model" --devices 4 --objective latency --out "$plan" --json >"$plan.json" 2>"$plan.log"; then
    echo "FAIL $m latency plan N=4: $(tail -1 "$plan.log")"; failed=$((failed + 1)); continue
  fi
  if ! json=$("$tessera" run "$model" --plan "$plan" --json 2>&1); then
    echo "FAIL $m latency plan N=4: ${json##*$'\n'}"; failed=$((failed + 1)); continue
  fi
  verdict=$(printf '%s' "$json" | "$python" -c "
import json, sys
j = json.load(sys.stdin)
p = json.load(open('$plan.json'))
promised = p['communication']['plan_bytes']
ok = j['max_rel_diff'] <= $tol and (j['total_bytes'] == promised or p['solver']['name'] != 'tiled')
print(('PASS' if ok else 'FAIL') + ' max_rel_diff=%.3g plan %s, bytes %d (promised %d)' % (j['max_rel_diff'], p['solver']['name'], j['total_bytes'], promised))
")
  echo "${verdict%% *} $m latency plan N=4: ${verdict#* }"
  if [[ $verdict == PASS* ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done
echo "$passed passed, $failed failed"
[[ $failed == 0 ]]
