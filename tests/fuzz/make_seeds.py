#!/usr/bin/python3
"""Writes the hand-made seed inputs of tests/fuzz/corpus/ (npy, http, cluster).

Run from the repository root: /usr/bin/python3 tests/fuzz/make_seeds.py. The frame and
program seeds are written by make_seeds.sh (they need the C++ codec / protoc).
"""
import io
import json
import os

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def write(target, name, data):
    os.makedirs(os.path.join(ROOT, target), exist_ok=True)
    with open(os.path.join(ROOT, target, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def npy(array, version=None):
    buf = io.BytesIO()
    if version is None:
        np.save(buf, array)
    else:
        np.lib.format.write_array(buf, array, version=version)
    return buf.getvalue()


rng = np.random.default_rng(1)
write("npy", "f32_1x3x4x4.npy", npy(rng.standard_normal((1, 3, 4, 4)).astype(np.float32)))
write("npy", "f64_2x3.npy", npy(rng.standard_normal((2, 3))))
write("npy", "i32_5.npy", npy(np.arange(5, dtype=np.int32)))
write("npy", "i64_scalar.npy", npy(np.array(7, dtype=np.int64)))
write("npy", "u8_2x2.npy", npy(np.array([[1, 2], [3, 4]], dtype=np.uint8)))
write("npy", "f32_v2.npy", npy(np.ones((2, 2), dtype=np.float32), version=(2, 0)))
write("npy", "f32_v3.npy", npy(np.ones((3,), dtype=np.float32), version=(3, 0)))
write("npy", "f32_empty.npy", npy(np.zeros((0, 4), dtype=np.float32)))
write("npy", "fortran.npy", npy(np.asfortranarray(np.ones((2, 3), dtype=np.float32))))

body_npy = npy(np.ones((1, 3, 8, 8), dtype=np.float32))
json_body = "[" + ",".join(["0.5"] * 192) + "]"
write("http", "healthz.http", "GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
write("http", "metrics_token.http", "GET /metrics HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer abc\r\n\r\n")
write("http", "infer_json.http", "POST /v1/infer HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
      f"Content-Length: {len(json_body)}\r\n\r\n{json_body}")
write("http", "infer_json_object.http", 'POST /v1/infer HTTP/1.1\r\nContent-Type: application/json\r\n'
      'Content-Length: 27\r\n\r\n{"inputs": [[1, 2], [3, 4]]}')
write("http", "infer_npy.http", b"POST /v1/infer HTTP/1.1\r\nHost: gw\r\nContent-Type: application/x-npy\r\n"
      + f"Content-Length: {len(body_npy)}\r\n\r\n".encode() + body_npy)
chunk = json_body.encode()
write("http", "infer_chunked.http", b"POST /v1/infer HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
      b"Expect: 100-continue\r\n\r\n" + f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n0\r\n\r\n")
write("http", "http10.http", "GET /v2/health/live HTTP/1.0\r\n\r\n")
# Open Inference Protocol v2: JSON (nested data) and the binary tensor data extension.
v2_json = json.dumps({"id": "1", "inputs": [{"name": "x", "shape": [1, 3, 8, 8], "datatype": "FP32",
                                             "data": np.full((1, 3, 8, 8), 0.5).tolist()}],
                      "outputs": [{"name": "y", "parameters": {"binary_data": True}}]})
write("http", "v2_infer_json.http", "POST /v2/models/m/versions/1/infer HTTP/1.1\r\nContent-Type: application/json\r\n"
      f"Content-Length: {len(v2_json)}\r\n\r\n{v2_json}")
v2_head = ('{"inputs": [{"name": "x", "shape": [1, 3, 8, 8], "datatype": "FP32", "parameters": {"binary_data_size": 768}}],'
           ' "parameters": {"binary_data_output": true}}').encode()
v2_body = v2_head + np.ones(192, dtype="<f4").tobytes()
write("http", "v2_infer_binary.http", b"POST /v2/models/m/infer HTTP/1.1\r\nContent-Type: application/octet-stream\r\n"
      + f"Inference-Header-Content-Length: {len(v2_head)}\r\nContent-Length: {len(v2_body)}\r\n\r\n".encode()
      + v2_body)
write("http", "v2_model_ready.http", "GET /v2/models/m/versions/1/ready HTTP/1.1\r\nHost: gw\r\n\r\n")

write("cluster", "two_linux.yaml", """devices:
  - { name: a, address: 127.0.0.1:7000, ram: 1GiB, flash: 8GiB, cpu_hz: 1.5e9, cycles_per_mac: 0.4 }
  - { name: b, address: 127.0.0.1:7001, ram: 512MiB, macs_per_s: 2e9 }
links:
  default: { bandwidth: 1Gbit/s, latency: 0.2ms }
""")
write("cluster", "mcu_via.yaml", """devices:
  - name: pi1
    kind: linux
    address: 10.0.0.11:7070
    ram: 4GiB
    cpu_hz: 1.5e9
    cycles_per_mac: 0.4
  - name: mcu1
    kind: mcu
    serial: /dev/ttyUSB0
    baud: 115200
    via: pi1
    ram: 128KiB
    flash: 512KiB
    cpu_hz: 180e6
    cycles_per_mac: 2
links:
  pairs:
    - { between: [pi1, mcu1], bandwidth: 11520B/s, latency: 1ms }
""")
write("cluster", "by_kind.yaml", """devices:
  - { name: a, address: 127.0.0.1:1, ram: 1GiB, flash: 8GiB, macs_per_s: 2e9,
      macs_per_s_by_kind: { conv: 9e9, conv1x1: 7e9, depthwise: 1.5e9, grouped_conv: 3e9, dense: 4e9, pool: 2e9,
                            elementwise: 1e9 } }
  - { name: b, address: 127.0.0.1:2, ram: 1GiB, flash: 8GiB, macs_per_s: 1e9, macs_per_s_by_kind: { conv: 3e9 } }
links:
  default: { bandwidth: 1Gbit/s, latency: 0.2ms }
""")
write("cluster", "anchors.yaml", """devices:
  - &pi { name: p1, address: 127.0.0.1:1, ram: 1GiB, macs_per_s: 1e9 }
  - { name: p2, address: 127.0.0.1:2, ram: 1GiB, macs_per_s: 1e9 }
links:
  default: &l { bandwidth: 100Mbit/s, latency: 1ms }
  pairs:
    - { between: [p1, p2], bandwidth: 1Gbit/s, latency: 0.1ms }
""")
