#!/usr/bin/env bash
# Issue 11 item 3: `tessera plan` and `tessera inspect` read ONNX models'
# shapes only. On the torchvision exports the tests build
# (tests/oracle/export_torchvision.py, seeded random weights), counts, not
# times:
#  * `tessera plan` and `tessera inspect` peak (VmHWM, from wait4) <= 150 MiB;
#  * the shapes-only plan is the plan made with every weight loaded
#    (`tessera plan --with-weights`), for the memory and latency objectives
#    on 4 devices (JSON compared, solver timings left out);
#  * the weights are really not held: the shapes-only plan peaks lower than
#    the weighted one by at least half the model file's size.
# Args: path to tessera, build dir.
set -u
T=${1:?tessera binary}
build=${2:?build dir}
repo=$(cd "$(dirname "$0")/../.." && pwd)
python=/usr/bin/python3
models=(mobilenet_v2 resnet18 squeezenet1_0 googlenet mnasnet1_0)
source "$repo/tests/oracle/ensure_models.sh"
[ -x /usr/bin/time ] || { echo "FAIL: /usr/bin/time missing (Debian package time)"; exit 1; }
fail=0
LIMIT_KIB=$((150 * 1024))
D=$(mktemp -d /tmp/tessera-plan-memory-XXXXXX)
trap 'rm -rf "$D"' EXIT

peak_kib() {  # command... : runs it, stdout to $D/out, prints its peak RSS in KiB
  /usr/bin/time -f "%M" -o "$D/peak" "$@" >"$D/out" 2>"$D/err" || { echo "command failed: $*" >&2; cat "$D/err" >&2; echo 0; return 1; }
  cat "$D/peak"
}
same_plan() {  # a.json b.json
  "$python" - "$1" "$2" <<'EOF'
import json, sys
def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if k != "seconds"}
    if isinstance(x, list):
        return [strip(v) for v in x]
    return x
a, b = (strip(json.load(open(p))) for p in sys.argv[1:3])
sys.exit(0 if a == b else 1)
EOF
}

for m in "${models[@]}"; do
  M=$out/$m.onnx
  size_kib=$(( $(stat -c %s "$M") / 1024 ))
  ins=$(peak_kib "$T" inspect "$M") || { echo "FAIL $m: tessera inspect failed"; fail=1; continue; }
  [ "$ins" -le $LIMIT_KIB ] && echo "PASS $m: inspect peak $((ins / 1024)) MiB <= 150 MiB" ||
    { echo "FAIL $m: inspect peak $((ins / 1024)) MiB > 150 MiB"; fail=1; }
  for objective in memory latency; do
    shapes=$(peak_kib "$T" plan "$M" --devices 4 --objective $objective --json) || { echo "FAIL $m: plan failed"; fail=1; continue; }
    cp "$D/out" "$D/shapes.json"
    weights=$(peak_kib "$T" plan "$M" --devices 4 --objective $objective --json --with-weights) ||
      { echo "FAIL $m: plan --with-weights failed"; fail=1; continue; }
    cp "$D/out" "$D/weights.json"
    [ "$shapes" -le $LIMIT_KIB ] && echo "PASS $m $objective: plan peak $((shapes / 1024)) MiB <= 150 MiB" ||
      { echo "FAIL $m $objective: plan peak $((shapes / 1024)) MiB > 150 MiB"; fail=1; }
    same_plan "$D/shapes.json" "$D/weights.json" && echo "PASS $m $objective: same plan as with every weight loaded" ||
      { echo "FAIL $m $objective: the shapes-only plan differs from the weighted one"; diff "$D/shapes.json" "$D/weights.json" | head -20; fail=1; }
    if [ $((weights - shapes)) -ge $((size_kib / 2)) ]; then
      echo "PASS $m $objective: shapes only peaks $(((weights - shapes) / 1024)) MiB below the weighted plan (file $((size_kib / 1024)) MiB)"
    else
      echo "FAIL $m $objective: shapes only $((shapes / 1024)) MiB vs weighted $((weights / 1024)) MiB: weights still held? (file $((size_kib / 1024)) MiB)"
      fail=1
    fi
  done
done
[ $fail = 0 ] && echo "PASS memory_plan_torchvision" || echo "FAIL memory_plan_torchvision"
exit $fail
