#!/usr/bin/env bash
# Issue 12 item 3: `tessera plan` on arm64 (under qemu-aarch64 with the
# Debian 12 arm64 sysroot: arm64 CBC, Clp, yaml-cpp, protobuf) gives the
# same plan as the build machine's amd64 `tessera plan` for darknet cfgs on
# the repo's cluster files and objectives:
#   * the Plan protobufs (--out) are equal field by field (decoded with the
#     build machine's protoc) except solver.seconds, the time the solve took;
#     so the plan ids (content hashes) are equal too;
#   * the --json reports are equal except their "seconds" keys.
#
#   plan_vs_host.sh ARM64_TESSERA SYSROOT HOST_TESSERA BUILD_DIR
# Exit 0 all pass, 1 any failure.
set -u
arm=${1:?usage: plan_vs_host.sh ARM64_TESSERA SYSROOT HOST_TESSERA BUILD_DIR}
sysroot=${2:?sysroot}
host=${3:?host tessera}
build=${4:?build dir}
build=$(mkdir -p "$build" && cd "$build" && pwd) || exit 1
repo=$(cd "$(dirname "$0")/../.." && pwd)
python=/usr/bin/python3
cfgdir=/usr/share/darknet/cfg
qemu=(qemu-aarch64 -L "$sysroot")

for tool in qemu-aarch64 protoc; do
  command -v $tool >/dev/null || { echo "FAIL: $tool missing (deploy/install-deps.sh)"; exit 1; }
done
[[ -x $arm ]] || { echo "FAIL: arm64 tessera '$arm' not built"; exit 1; }
[[ -x $host ]] || {
  echo "FAIL: no host tessera at '$host': build it first (cmake -S . -B build -G Ninja && ninja -C build tessera)" \
    "or configure this build with -DTESSERA_HOST_TESSERA=<path>"
  exit 1
}
[[ -d $cfgdir ]] || { echo "FAIL: $cfgdir missing (Debian package darknet, deploy/install-deps.sh)"; exit 1; }
package=$(sed -n 's/^package \([a-z_.]*\);.*/\1/p' "$repo/proto/tessera.proto")
work=$build/arm64-plan
mkdir -p "$work"
cd "$repo" || exit 1

# model | tessera plan arguments
cases=(
  "yolov2-tiny|--cluster configs/pi-cluster.yaml --objective memory"
  "yolov2|--cluster configs/pi-cluster.yaml --objective memory"
  "yolov2|--cluster configs/pi-cluster.yaml --objective latency"
  "extraction|--cluster configs/local-4.yaml --objective communication"
  "yolov2-tiny|--cluster configs/pi-mcu-mixed.yaml --objective memory"
  "alexnet|--devices 3 --objective throughput"
)
passed=0 failed=0
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
i=0
for c in "${cases[@]}"; do
  IFS='|' read -r name args <<<"$c"
  i=$((i + 1))
  label="$name $args"
  # shellcheck disable=SC2086
  if ! timeout 600 "${qemu[@]}" "$arm" plan "$cfgdir/$name.cfg" $args --json --out "$work/$i.arm64.pb" \
       >"$work/$i.arm64.json" 2>"$work/$i.arm64.err"; then
    fail "$label: arm64 tessera plan exited non-zero: $(tail -3 "$work/$i.arm64.err")"; continue
  fi
  # shellcheck disable=SC2086
  if ! timeout 600 "$host" plan "$cfgdir/$name.cfg" $args --json --out "$work/$i.host.pb" \
       >"$work/$i.host.json" 2>"$work/$i.host.err"; then
    fail "$label: amd64 tessera plan exited non-zero: $(tail -3 "$work/$i.host.err")"; continue
  fi
  for side in arm64 host; do
    protoc -I"$repo/proto" --decode="$package.Plan" "$repo/proto/tessera.proto" <"$work/$i.$side.pb" |
      grep -v '^  seconds: ' >"$work/$i.$side.txt"
  done
  if ! [[ -s $work/$i.host.txt ]] || ! grep -q '^layers {' "$work/$i.host.txt"; then
    fail "$label: the amd64 plan has no layers ($work/$i.host.txt)"; continue
  fi
  if ! d=$(diff "$work/$i.arm64.txt" "$work/$i.host.txt"); then
    fail "$label: the Plan protobufs differ (< arm64, > amd64):"; echo "$d" | head -20 | sed 's/^/    /'; continue
  fi
  if ! v=$("$python" - "$work/$i.arm64.json" "$work/$i.host.json" <<'PY'
import json, sys

def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if k != "seconds"}
    if isinstance(x, list):
        return [strip(v) for v in x]
    return x

a, h = (strip(json.load(open(p))) for p in sys.argv[1:3])
if a != h:
    diff = [k for k in sorted(set(a) | set(h)) if a.get(k) != h.get(k)]
    print("the --json reports differ in " + ", ".join(diff))
    sys.exit(1)
print(f"{len(h['layers'])} layers, switch_layer {h.get('switch_layer')}, "
      f"plan footprint {h.get('footprint_plan_bytes')} B, latency {h.get('latency_s'):.4g} s")
PY
  ); then
    fail "$label: $v"; continue
  fi
  id=$(sed -n 's/^id: //p' "$work/$i.host.txt")
  echo "PASS $label: same plan (id $id): $v"
  passed=$((passed + 1))
done
echo "$passed passed, $failed failed"
[[ $failed == 0 && $passed -gt 0 ]]
