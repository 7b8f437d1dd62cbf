#!/usr/bin/env bash
# Issue 13 property over the whole torchvision zoo (label `large`, run by
# .ci/run after the default suite): tests/integration/plan_property.sh with
# every architecture tests/oracle/export_torchvision.py builds — classic
# (ResNet-18/50, GoogLeNet, SqueezeNet, MNASNet, MobileNetV2) and modern
# edge models (EfficientNet, MobileNetV3, RegNetY, ResNeXt, ShuffleNetV2,
# DenseNet, Inception v3, ConvNeXt-T with GELU and LayerNorm, the LR-ASPP
# segmentation model with bilinear Resize, a ConvTranspose/GELU/Split decoder),
# and six darknet cfgs.
#   plan_property_zoo.sh TESSERA BUILD_DIR
here=$(cd "$(dirname "$0")" && pwd)
export PLAN_PROPERTY_MODELS="mobilenet_v2 resnet18 squeezenet1_0 googlenet mnasnet1_0 resnet50 efficientnet_b0
  mobilenet_v3_small regnet_y_400mf resnext50_32x4d shufflenet_v2_x0_5 densenet121 inception_v3 convnext_tiny
  lraspp_mobilenet_v3_large ops_decoder"
# The darknet cfgs the tests import (darknet_models.sh): route/reorg,
# [crop], [detection], dense heads.
export PLAN_PROPERTY_DARKNET="yolov2-tiny.cfg:1x3x160x160 yolov2.cfg:1x3x160x160 alexnet.cfg:1x3x227x227
  vgg-16.cfg:1x3x224x224 extraction.cfg:1x3x128x128 yolov1-tiny.cfg:1x3x448x448"
exec bash "$here/../plan_property.sh" "$@"
