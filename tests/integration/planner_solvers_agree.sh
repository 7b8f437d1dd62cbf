#!/usr/bin/env bash
# Issue 3 proof on the torchvision exports: for N = 2…16 the CBC ILPs and the
# exact enumeration / DP give the same optimum — METHODS §3 (switch layer's
# footprint) and §4 (communication of the weight-partitioned layers).
#
#   planner_solvers_agree.sh TESSERA BUILD_DIR
# Models come from tests/oracle/export_torchvision.py (cached in BUILD_DIR/oracle).
set -u
tessera=${1:?usage: planner_solvers_agree.sh TESSERA BUILD_DIR}
build=${2:?usage: planner_solvers_agree.sh TESSERA BUILD_DIR}
build=$(mkdir -p "$build" && cd "$build" && pwd) || exit 1
repo=$(cd "$(dirname "$0")/../.." && pwd)
models=(mobilenet_v2 resnet18 squeezenet1_0 googlenet mnasnet1_0)

source "$repo/tests/oracle/ensure_models.sh"

passed=0 failed=0
for m in "${models[@]}"; do
  for objective in memory communication; do
    for n in 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do
      a=$("$tessera" plan "$out/$m.onnx" --devices $n --objective $objective --solver cbc --json 2>&1) || { echo "FAIL $m $objective N=$n cbc: ${a##*$'\n'}"; failed=$((failed+1)); continue; }
      b=$("$tessera" plan "$out/$m.onnx" --devices $n --objective $objective --solver exact --json 2>&1) || { echo "FAIL $m $objective N=$n exact: ${b##*$'\n'}"; failed=$((failed+1)); continue; }
      if verdict=$("$python" - "$objective" <<PY
import json, sys
a, b = json.loads('''$a'''), json.loads('''$b''')
key = sys.argv[1]
if key == "memory":
    x, y = a["footprint_per_device_bytes"], b["footprint_per_device_bytes"]
else:
    x, y = a["communication"]["plan_values"], b["communication"]["plan_values"]
ok = abs(x - y) <= 1e-6 * max(1.0, abs(y)) and a["solver"]["optimal"] and b["solver"]["optimal"]
print(("agree" if ok else "DIFFER") + f" cbc={x} exact={y} ({a['solver']['name']} vs {b['solver']['name']})")
sys.exit(0 if ok else 1)
PY
); then
        passed=$((passed + 1))
      else
        echo "FAIL $m $objective N=$n: $verdict"
        failed=$((failed + 1))
      fi
    done
  done
  echo "$m: checked memory and communication for N=2..16"
done
echo "$passed passed, $failed failed"
[[ $failed == 0 ]]
