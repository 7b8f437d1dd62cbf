#!/usr/bin/env bash
# Issue 17 item 6 (label `large`, run by .ci/run after the default suite):
# `tessera optimize-memory` on every darknet cfg and torchvision export the
# tests build. Each transformed model (tiles computed in turn on one device)
# must run in exactly the printed arena with the unsplit run's answers
# (max rel. diff <= 1e-5), within its MAC budget, and never need more than
# the untiled model (arena + weights as stored); where no path pays, it is
# left as it is. tests/oracle/optimize_memory_check.sh does the checking.
#   optimize_memory_zoo.sh TESSERA BUILD_DIR
set -u
T=${1:?tessera binary}
build=${2:?build dir}
repo=$(cd "$(dirname "$0")/../../.." && pwd)
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cfg=/usr/share/darknet/cfg
fail=0
source "$repo/tests/oracle/optimize_memory_check.sh"

for spec in yolov2-tiny:1x3x160x160 yolov2:1x3x160x160 yolov1-tiny:1x3x448x448 alexnet:1x3x227x227 \
            vgg-16:1x3x224x224 extraction:1x3x128x128 darknet19:1x3x224x224 resnet18:1x3x224x224 \
            resnet50:1x3x160x160 densenet201:1x3x128x128; do
  name=${spec%%:*}
  check "darknet-$name" "$cfg/$name.cfg" "${spec#*:}" 10% no-worse
done

# Every architecture tests/oracle/export_torchvision.py builds (as in
# plan_property_zoo.sh).
models=(mobilenet_v2 resnet18 squeezenet1_0 googlenet mnasnet1_0 resnet50 efficientnet_b0 mobilenet_v3_small
        regnet_y_400mf resnext50_32x4d shufflenet_v2_x0_5 densenet121 inception_v3 convnext_tiny
        lraspp_mobilenet_v3_large ops_decoder)
source "$repo/tests/oracle/ensure_models.sh"
for m in "${models[@]}"; do
  case $m in  # export_torchvision.py's INPUT_SIZE
    convnext_tiny) shape=1x3x64x64 ;;
    lraspp_mobilenet_v3_large) shape=1x3x128x128 ;;
    ops_decoder) shape=1x3x40x40 ;;
    *) shape=1x3x224x224 ;;
  esac
  check "torchvision-$m" "$out/$m.onnx" "$shape" 10% no-worse
done
exit $fail
