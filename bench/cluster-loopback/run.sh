#!/usr/bin/env bash
# Loopback cluster benchmark (issue 5): for 1..6 local worker processes,
# latency and throughput of yolov2-tiny through the gateway against the
# single-device run measured in the same `tessera demo` run, and the bytes
# exchanged vs expected (the programs' Send steps) and the planner's figure.
# NOTE: loopback has no bandwidth limit and every worker shares this
# machine's cores, so this measures runtime overhead, not a real cluster.
# Usage: bench/cluster-loopback/run.sh [tessera] [input shape] [requests] [clients]
T=${1:-build/tessera}; SHAPE=${2:-1x3x416x416}; REQ=${3:-40}; CLIENTS=${4:-4}
printf "%-8s %12s %12s %12s %12s %14s %14s %10s %s\n" devices lat_ms single_ms thr/s single/s payload_B expected_B wire/exp match
for n in 1 2 3 4 5 6; do
  "$T" demo --devices $n --input-shape $SHAPE --requests $REQ --clients $CLIENTS --json | /usr/bin/python3 -c '
import json,sys; j=json.load(sys.stdin)
print("%-8d %12.2f %12.2f %12.2f %12.2f %14d %14d %10.5f %s" % (j["devices"], j["latency_ms"], j["single_device_latency_ms"],
  j["throughput_per_s"], j["single_device_throughput_per_s"], j["measured_payload_bytes"], j["expected_payload_bytes"],
  j["measured_wire_bytes"]/max(1,j["expected_payload_bytes"]), j["all_match"]))'
done
