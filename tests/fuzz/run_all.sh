#!/bin/bash
# Runs every libFuzzer target of a -DTESSERA_FUZZ=ON build, one after the
# other, and reports executions, speed and findings per target.
#
#   tests/fuzz/run_all.sh BUILD_DIR SECONDS [RUNS]
#
# SECONDS caps each target's time (0 = no cap); RUNS, when given, stops a
# target after that many executions (-runs). README.md "Fuzzing":
#   tests/fuzz/run_all.sh build-fuzz 30            # what ctest -L fuzz does
#   tests/fuzz/run_all.sh build-fuzz 0 1000000     # >= 1 M executions each
# Corpora as in tests/fuzz/CMakeLists.txt: new inputs go to
# BUILD_DIR/fuzz/corpus/<name>, crashes to BUILD_DIR/fuzz/artifacts/<name>.
# TARGETS="npy frame" (environment) runs only those targets.
# Exit status 1 when any target found something.
set -uo pipefail
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
if [ $# -lt 2 ]; then
  echo "usage: $0 BUILD_DIR SECONDS [RUNS]" >&2
  exit 2
fi
build=$(cd "$1" && pwd) || { echo "run_all.sh: no build directory $1" >&2; exit 2; }
seconds=$2
runs=${3:-}
src=$(cd "$(dirname "$0")" && pwd)
# TARGETS="npy http" runs only those.
read -r -a targets <<< "${TARGETS:-onnx darknet cluster npy http program frame mcu_program}"

extra_corpus() {
  case $1 in
    onnx) echo "$build/fuzz/seeds/onnx" ;;
    darknet) echo /usr/share/darknet/cfg ;;
    cluster) echo "$src/../../configs" ;;
  esac
}

status=0
printf '%-8s %12s %9s %10s %8s  %s\n' target executions seconds execs/s corpus findings
for t in "${targets[@]}"; do
  bin=$build/tests/fuzz/fuzz_$t
  if [ ! -x "$bin" ]; then
    echo "run_all.sh: $bin missing: cmake --build $1 --target tessera_fuzz" >&2
    exit 2
  fi
  work=$build/fuzz/corpus/$t
  artifacts=$build/fuzz/artifacts/$t
  mkdir -p "$work" "$artifacts"
  before=$(ls "$artifacts" | wc -l)
  args=(-timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/")
  [ "$seconds" != 0 ] && args+=(-max_total_time="$seconds")
  [ -n "$runs" ] && args+=(-runs="$runs")
  dirs=("$work" "$src/corpus/$t")
  extra=$(extra_corpus "$t")
  [ -n "$extra" ] && [ -d "$extra" ] && dirs+=("$extra")
  log=$build/fuzz/$t.log
  start=$(date +%s.%N)
  "$bin" "${args[@]}" "${dirs[@]}" > "$log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  execs=${execs:-0}
  elapsed=$(echo "$end - $start" | bc)
  rate=$(echo "scale=0; $execs / $elapsed" | bc)
  after=$(ls "$artifacts" | wc -l)
  findings="none"
  if [ "$rc" -ne 0 ] || [ "$after" -gt "$before" ]; then
    findings="exit $rc, $((after - before)) new artifact(s) in $artifacts (log: $log)"
    status=1
  fi
  printf '%-8s %12s %9.1f %10s %8s  %s\n' "$t" "$execs" "$elapsed" "$rate" "$(ls "$work" | wc -l)" "$findings"
done
exit $status
