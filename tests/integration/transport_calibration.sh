#!/usr/bin/env bash
# bench/cluster-emulated's transport calibration (issue 15): the estimator of
# the transport's CPU per byte recovers a known per-byte cost under a bias
# every device shares (the slope over a plan's hub and its other devices),
# falls back to the summed excess where no slope exists, and refuses
# malformed points. Usage: transport_calibration.sh TESSERA BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
/usr/bin/python3 bench/cluster-emulated/calibration.py --self-test
