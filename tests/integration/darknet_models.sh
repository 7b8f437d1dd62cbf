#!/usr/bin/env bash
# darknet cfgs (issue 2, "Proof"): the Debian darknet cfgs import, inspect
# with darknet's layer count (one layer per [section] after [net]) and run
# with seeded random weights to outputs that are all finite; softmax-headed
# classifiers must also produce a distribution (sum 1 within 1e-3).
#
#   darknet_models.sh TESSERA BUILD_DIR
# Exit 0 all pass, 1 any failure, 77 when the cfgs are not installed.
set -u
tessera=${1:?usage: darknet_models.sh TESSERA BUILD_DIR}
build=${2:?usage: darknet_models.sh TESSERA BUILD_DIR}
build=$(mkdir -p "$build" && cd "$build" && pwd) || exit 1
repo=$(cd "$(dirname "$0")/../.." && pwd)
oracle_src=$repo/tests/oracle
python=/usr/bin/python3
cfgdir=${DARKNET_CFG_DIR:-/usr/share/darknet/cfg}
work=$build/darknet
# cfg | expected layers | softmax head
cases=(
  "yolov2-tiny|16|no"
  "yolov2|32|no"
  "alexnet|14|yes"
  "vgg-16|25|yes"
  "extraction|27|yes"
  "yolov1-tiny|16|no"
)

[[ -d $cfgdir ]] || { echo "FAIL: missing dependency: $cfgdir missing (Debian package darknet)"; exit 77; }
[[ -x $tessera ]] || { echo "FAIL: tessera binary '$tessera' not found"; exit 1; }
mkdir -p "$work"

passed=0 failed=0
for c in "${cases[@]}"; do
  IFS='|' read -r name layers softmax <<<"$c"
  cfg=$cfgdir/$name.cfg
  if ! timeout 120 "$tessera" inspect "$cfg" --json >"$work/$name.inspect.json" 2>"$work/$name.inspect.err"; then
    echo "FAIL $name: tessera inspect exited non-zero:"; tail -5 "$work/$name.inspect.err" | sed 's/^/    /'
    failed=$((failed + 1)); continue
  fi
  if ! inspect=$("$python" "$oracle_src/tessera_json.py" "$work/$name.inspect.json" layers "$layers"); then
    echo "FAIL $name: inspect: $inspect"; failed=$((failed + 1)); continue
  fi
  rm -f "$work/$name.out.npy"
  start=$EPOCHREALTIME
  if ! timeout 600 "$tessera" run "$cfg" --threads 2 --json --output "$work/$name.out.npy" \
       >"$work/$name.run.json" 2>"$work/$name.run.err"; then
    echo "FAIL $name: tessera run exited non-zero:"; tail -5 "$work/$name.run.err" | sed 's/^/    /'
    failed=$((failed + 1)); continue
  fi
  secs=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')
  if ! run=$("$python" "$oracle_src/tessera_json.py" "$work/$name.run.json" finite); then
    echo "FAIL $name: run: $run"; failed=$((failed + 1)); continue
  fi
  if ! values=$("$python" - "$work/$name.out.npy" "$softmax" <<'PY'
import sys
import numpy as np
y = np.load(sys.argv[1])
bad = np.count_nonzero(~np.isfinite(y))
msg = f"output {list(y.shape)} min={np.nanmin(y):.4g} max={np.nanmax(y):.4g} non-finite={bad}"
ok = bad == 0 and y.size > 0
if sys.argv[2] == "yes":
    s = float(y.astype(np.float64).sum())
    msg += f" softmax-sum={s:.6f}"
    ok = ok and abs(s - 1.0) <= 1e-3
print(msg)
sys.exit(0 if ok else 1)
PY
  ); then
    echo "FAIL $name: $values"; failed=$((failed + 1)); continue
  fi
  echo "PASS $name: $inspect | $values (run ${secs}s)"
  passed=$((passed + 1))
done
echo "$passed passed, $failed failed"
[[ $failed == 0 ]]
