"""Open Inference Protocol v2 client checks for tests/integration/gateway_oip.sh.

Drives a real `tessera gateway` the way v2 clients do: REST with nothing but
http.client (JSON tensors flat and nested, the binary tensor data extension
both ways), gRPC through stubs generated from proto/oip.proto at run time
(grpc_tools.protoc, Debian's python3-grpc-tools). Answers are compared with
`tessera run` (ref.npy): max|a-b| / max|b| <= 1e-5. Every error case is
checked for its documented status and a message naming what is wrong.

  gateway_oip.py serve    HTTP GRPC TOKEN DIR PROTO   every route and RPC, with a token
  gateway_oip.py protect  HTTP GRPC TOKEN DIR PROTO   --protect-metrics: probes need the token
  gateway_oip.py notready HTTP GRPC TOKEN DIR PROTO   a worker is down: ready is false
Prints PASS/FAIL lines; exits 1 if any check failed.
"""
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile

import numpy as np

failed = 0


def check(cond, what, detail=""):
    global failed
    if cond:
        print("PASS " + what)
    else:
        failed = 1
        print("FAIL " + what + ((": " + str(detail)[:400]) if detail != "" else ""))


def rel_diff(got, ref):
    got = np.asarray(got, dtype=np.float32).reshape(-1)
    ref = ref.reshape(-1)
    if got.shape != ref.shape:
        return float("inf")
    return float(np.abs(got - ref).max() / np.abs(ref).max())


class Rest:
    def __init__(self, address, token):
        host, port = address.rsplit(":", 1)
        self.host, self.port, self.token = host, int(port), token

    def call(self, method, path, body=None, headers=None, token=True):
        """-> (status, headers dict (lower-case names), body bytes)"""
        h = dict(headers or {})
        if token and self.token:
            h["Authorization"] = "Bearer " + self.token
        c = http.client.HTTPConnection(self.host, self.port, timeout=60)
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        out = (r.status, {k.lower(): v for k, v in r.getheaders()}, data)
        c.close()
        return out

    def infer_json(self, model, request, headers=None):
        return self.call("POST", "/v2/models/%s/infer" % model, json.dumps(request).encode(),
                         dict({"Content-Type": "application/json"}, **(headers or {})))


def error_of(status_body):
    try:
        return json.loads(status_body.decode())["error"]
    except Exception as e:  # noqa: BLE001 - reported as a failed check
        return "no JSON error object (%s): %r" % (e, status_body[:200])


def expect_error(rest, what, want_status, want_text, method, path, body=None, headers=None, token=True):
    status, _, data = rest.call(method, path, body, headers, token)
    message = error_of(data)
    check(status == want_status and want_text in message,
          "%s -> %d naming %r" % (what, want_status, want_text), "%d %s" % (status, message))


def rest_checks(rest, x, ref):
    check(rest.call("GET", "/v2/health/live", token=False)[0] == 200, "GET /v2/health/live without a token -> 200")
    status, _, body = rest.call("GET", "/v2/health/ready", token=False)
    check(status == 200 and body == b"", "GET /v2/health/ready without a token -> 200, empty body", status)

    expect_error(rest, "GET /v2 without a token", 401, "bearer token", "GET", "/v2", token=False)
    status, headers, body = rest.call("GET", "/v2")
    meta = json.loads(body)
    check(status == 200 and meta["name"] == "tessera" and "binary_tensor_data" in meta["extensions"] and meta["version"],
          "GET /v2: server metadata with binary_tensor_data", meta)

    expect_error(rest, "model metadata without a token", 401, "bearer token", "GET", "/v2/models/yolov2-tiny",
                 token=False)
    status, _, body = rest.call("GET", "/v2/models/yolov2-tiny")
    model = json.loads(body)
    check(status == 200 and model["name"] == "yolov2-tiny" and model["versions"] == ["1"] and
          model["inputs"][0]["datatype"] == "FP32" and model["inputs"][0]["shape"] == list(x.shape) and
          model["outputs"][0]["shape"] == list(ref.shape) and model["outputs"][0]["datatype"] == "FP32",
          "GET /v2/models/yolov2-tiny: inputs and outputs, FP32, shapes of x and of tessera run's output", model)
    status, _, body = rest.call("GET", "/v2/models/yolov2-tiny/versions/1")
    check(status == 200 and json.loads(body) == model, "GET /v2/models/yolov2-tiny/versions/1 == without version")
    check(rest.call("GET", "/v2/models/yolov2-tiny/ready")[0] == 200, "GET /v2/models/yolov2-tiny/ready -> 200")
    check(rest.call("GET", "/v2/models/yolov2-tiny/versions/1/ready")[0] == 200, "model ready with version -> 200")
    input_name, output_name = model["inputs"][0]["name"], model["outputs"][0]["name"]

    def tensor(data, **kw):
        t = {"name": input_name, "shape": list(x.shape), "datatype": "FP32", "data": data}
        t.update(kw)
        return t

    # JSON, flat data.
    status, headers, body = rest.infer_json("yolov2-tiny", {"id": "req-1", "inputs": [tensor(x.reshape(-1).tolist())]})
    answer = json.loads(body) if status == 200 else {}
    out = answer.get("outputs", [{}])[0]
    check(status == 200 and answer["model_name"] == "yolov2-tiny" and answer["id"] == "req-1" and
          headers["content-type"].startswith("application/json") and out["name"] == output_name and
          out["datatype"] == "FP32" and out["shape"] == list(ref.shape) and rel_diff(out["data"], ref) <= 1e-5,
          "POST infer, JSON flat data: id echoed, output == tessera run (rel %.3g)" %
          rel_diff(out.get("data", []), ref), body[:300])

    # JSON, nested data, with the version in the path and the output asked for by name.
    status, _, body = rest.call("POST", "/v2/models/yolov2-tiny/versions/1/infer",
                                json.dumps({"inputs": [tensor(x.tolist())], "outputs": [{"name": output_name}]}).encode())
    out = json.loads(body)["outputs"][0] if status == 200 else {}
    check(status == 200 and rel_diff(out.get("data", []), ref) <= 1e-5,
          "POST infer, JSON nested data, /versions/1 == tessera run (rel %.3g)" % rel_diff(out.get("data", []), ref),
          body[:300])

    # Binary tensor data both ways: the input after the JSON, every output as binary.
    head = json.dumps({"id": "bin", "inputs": [{"name": input_name, "shape": list(x.shape), "datatype": "FP32",
                                                "parameters": {"binary_data_size": x.nbytes}}],
                       "parameters": {"binary_data_output": True}}).encode()
    status, headers, body = rest.call("POST", "/v2/models/yolov2-tiny/infer", head + x.tobytes(),
                                      {"Content-Type": "application/octet-stream",
                                       "Inference-Header-Content-Length": str(len(head))})
    ok = status == 200 and "inference-header-content-length" in headers
    if ok:
        n = int(headers["inference-header-content-length"])
        answer = json.loads(body[:n])
        out = answer["outputs"][0]
        size = out["parameters"]["binary_data_size"]
        got = np.frombuffer(body[n:n + size], dtype="<f4")
        ok = answer["id"] == "bin" and "data" not in out and size == ref.nbytes and len(body) == n + size
        check(ok and out["shape"] == list(ref.shape) and rel_diff(got, ref) <= 1e-5,
              "POST infer, binary input + binary_data_output: Inference-Header-Content-Length, bytes == tessera run "
              "(rel %.3g)" % rel_diff(got, ref), answer)
    else:
        check(False, "POST infer with binary tensor data", "%d %r" % (status, body[:300]))

    # JSON input, one output as binary by its own parameter.
    status, headers, body = rest.infer_json(
        "yolov2-tiny", {"inputs": [tensor(x.reshape(-1).tolist())],
                        "outputs": [{"name": output_name, "parameters": {"binary_data": True}}]})
    n = int(headers.get("inference-header-content-length", "0"))
    got = np.frombuffer(body[n:], dtype="<f4") if status == 200 and n else []
    check(status == 200 and n > 0 and rel_diff(got, ref) <= 1e-5,
          "POST infer, JSON input, output with binary_data: true == tessera run", "%d %r" % (status, body[:200]))

    # Errors: status and a message naming what is wrong.
    good = json.dumps({"inputs": [tensor(x.reshape(-1).tolist())]}).encode()
    # (a small body: one over 64 KiB is not read before the 401, README "Gateway tokens")
    expect_error(rest, "infer without a token", 401, "bearer token", "POST", "/v2/models/yolov2-tiny/infer",
                 b'{"inputs": []}', token=False)
    expect_error(rest, "unknown model", 404, "unknown model 'resnet'", "POST", "/v2/models/resnet/infer", good)
    expect_error(rest, "metadata of an unknown model", 404, "unknown model 'resnet'", "GET", "/v2/models/resnet")
    expect_error(rest, "ready of an unknown model", 404, "unknown model", "GET", "/v2/models/resnet/ready")
    expect_error(rest, "unknown version", 404, "no version '7'", "POST", "/v2/models/yolov2-tiny/versions/7/infer",
                 good)
    expect_error(rest, "GET on infer", 405, "use POST", "GET", "/v2/models/yolov2-tiny/infer")
    expect_error(rest, "unknown v2 route", 404, "no such v2 endpoint", "GET", "/v2/models/yolov2-tiny/explain")
    small = x[:, :, :48, :]
    expect_error(rest, "wrong shape", 400, "has shape [1,3,48,96], the model expects [1,3,96,96]", "POST",
                 "/v2/models/yolov2-tiny/infer",
                 json.dumps({"inputs": [{"name": input_name, "shape": list(small.shape), "datatype": "FP32",
                                         "data": small.reshape(-1).tolist()}]}).encode())
    expect_error(rest, "datatype INT64", 400, "datatype 'INT64'; tessera serves FP32 tensors only", "POST",
                 "/v2/models/yolov2-tiny/infer",
                 json.dumps({"inputs": [tensor([0] * x.size, datatype="INT64")]}).encode())
    expect_error(rest, "fewer values than the shape", 400, "values, its shape [1,3,96,96] holds %d" % x.size, "POST",
                 "/v2/models/yolov2-tiny/infer", json.dumps({"inputs": [tensor([1.0, 2.0])]}).encode())
    expect_error(rest, "more values than the model holds", 400, "more than %d numbers" % x.size, "POST",
                 "/v2/models/yolov2-tiny/infer", json.dumps({"inputs": [tensor([0.5] * (x.size + 1))]}).encode())
    expect_error(rest, "ragged nested data", 400, "ragged", "POST", "/v2/models/yolov2-tiny/infer",
                 json.dumps({"inputs": [tensor([[1.0, 2.0], [3.0]])]}).encode())
    expect_error(rest, "malformed JSON", 400, "not valid JSON", "POST", "/v2/models/yolov2-tiny/infer",
                 b'{"inputs": [ {"name": ')
    expect_error(rest, "unknown input", 400, "has no input 'nope'", "POST", "/v2/models/yolov2-tiny/infer",
                 json.dumps({"inputs": [tensor(x.reshape(-1).tolist(), name="nope")]}).encode())
    expect_error(rest, "unknown output", 400, "has no output 'nope'", "POST", "/v2/models/yolov2-tiny/infer",
                 json.dumps({"inputs": [tensor(x.reshape(-1).tolist())], "outputs": [{"name": "nope"}]}).encode())
    expect_error(rest, "overflowing shape", 400, "elements", "POST", "/v2/models/yolov2-tiny/infer",
                 json.dumps({"inputs": [tensor([1.0], shape=[2 ** 40, 2 ** 40])]}).encode())
    expect_error(rest, "binary data shorter than its binary_data_size", 400, "only", "POST",
                 "/v2/models/yolov2-tiny/infer", head + x.tobytes()[:-4],
                 {"Inference-Header-Content-Length": str(len(head))})
    short = json.dumps({"inputs": [{"name": input_name, "shape": list(x.shape), "datatype": "FP32",
                                    "parameters": {"binary_data_size": x.nbytes - 4}}]}).encode()
    expect_error(rest, "binary_data_size not the shape's bytes", 400,
                 "%d bytes of binary data, its shape [1,3,96,96] of FP32 needs %d" % (x.nbytes - 4, x.nbytes),
                 "POST", "/v2/models/yolov2-tiny/infer", short + x.tobytes()[:-4],
                 {"Inference-Header-Content-Length": str(len(short))})
    expect_error(rest, "binary data without Inference-Header-Content-Length", 400, "Inference-Header-Content-Length",
                 "POST", "/v2/models/yolov2-tiny/infer", head + x.tobytes())
    expect_error(rest, "Inference-Header-Content-Length beyond the body", 400, "exceeds the body", "POST",
                 "/v2/models/yolov2-tiny/infer", head + x.tobytes(),
                 {"Inference-Header-Content-Length": str(len(head) + x.nbytes + 1)})
    # The gateway's --max-body-bytes holds for /v2 too: 413 on the header alone,
    # before any of the body is sent (a raw socket: http.client would send it all).
    with socket.create_connection((rest.host, rest.port), timeout=30) as s:
        s.sendall(("POST /v2/models/yolov2-tiny/infer HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                   "Content-Length: %d\r\n\r\n" % (rest.token, 3 << 20)).encode())
        answer = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            answer += chunk
    check(answer.startswith(b"HTTP/1.1 413") and b"max-body-bytes" in answer,
          "a body over --max-body-bytes -> 413 before it is sent", answer[:200])
    # The gateway still answers after all of it.
    status, _, body = rest.infer_json("yolov2-tiny", {"inputs": [tensor(x.reshape(-1).tolist())]})
    check(status == 200 and rel_diff(json.loads(body)["outputs"][0]["data"], ref) <= 1e-5,
          "a good request after the bad ones == tessera run")
    return input_name, output_name


def grpc_stubs(proto):
    """Generates Python stubs from proto/oip.proto into a temp dir; -> (pb2, pb2_grpc, grpc)."""
    out = tempfile.mkdtemp(prefix="oip-stubs-")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", os.path.dirname(proto), "--python_out", out,
                    "--grpc_python_out", out, os.path.basename(proto)], check=True)
    sys.path.insert(0, out)
    import grpc  # noqa: E402
    import oip_pb2  # noqa: E402
    import oip_pb2_grpc  # noqa: E402
    return oip_pb2, oip_pb2_grpc, grpc


def grpc_checks(address, token, proto, x, ref, input_name, output_name):
    pb, pb_grpc, grpc = grpc_stubs(proto)
    check(True, "python stubs generated from proto/oip.proto (grpc_tools.protoc)")
    stub = pb_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(address))
    auth = [("authorization", "Bearer " + token)]

    def code_of(call, *args, **kw):
        try:
            call(*args, timeout=60, **kw)
            return grpc.StatusCode.OK, ""
        except grpc.RpcError as e:
            return e.code(), e.details()

    check(stub.ServerLive(pb.ServerLiveRequest(), timeout=10).live, "gRPC ServerLive without a token: live")
    check(stub.ServerReady(pb.ServerReadyRequest(), timeout=10).ready, "gRPC ServerReady without a token: ready")
    code, _ = code_of(stub.ServerMetadata, pb.ServerMetadataRequest())
    check(code == grpc.StatusCode.UNAUTHENTICATED, "gRPC ServerMetadata without a token -> UNAUTHENTICATED", code)
    meta = stub.ServerMetadata(pb.ServerMetadataRequest(), metadata=auth, timeout=10)
    check(meta.name == "tessera" and "binary_tensor_data" in meta.extensions, "gRPC ServerMetadata", meta)
    model = stub.ModelMetadata(pb.ModelMetadataRequest(name="yolov2-tiny"), metadata=auth, timeout=10)
    check(model.name == "yolov2-tiny" and list(model.versions) == ["1"] and model.inputs[0].name == input_name and
          list(model.inputs[0].shape) == list(x.shape) and model.inputs[0].datatype == "FP32" and
          model.outputs[0].name == output_name and list(model.outputs[0].shape) == list(ref.shape),
          "gRPC ModelMetadata: the REST metadata's inputs and outputs", model)
    check(stub.ModelReady(pb.ModelReadyRequest(name="yolov2-tiny"), metadata=auth, timeout=10).ready,
          "gRPC ModelReady")
    code, details = code_of(stub.ModelReady, pb.ModelReadyRequest(name="resnet"), metadata=auth)
    check(code == grpc.StatusCode.NOT_FOUND and "unknown model 'resnet'" in details,
          "gRPC ModelReady of an unknown model -> NOT_FOUND", details)

    def request(**kw):
        r = pb.ModelInferRequest(model_name="yolov2-tiny", id=kw.pop("id", ""))
        t = r.inputs.add(name=kw.pop("name", input_name), datatype=kw.pop("datatype", "FP32"),
                         shape=kw.pop("shape", list(x.shape)))
        if kw.pop("raw", False):
            r.raw_input_contents.append(kw.pop("raw_bytes", x.tobytes()))
        else:
            t.contents.fp32_contents.extend(kw.pop("values", x.reshape(-1).tolist()))
        for o in kw.pop("outputs", []):
            r.outputs.add(name=o)
        return r

    reply = stub.ModelInfer(request(id="g-1"), metadata=auth, timeout=60)
    got = np.frombuffer(reply.raw_output_contents[0], dtype="<f4")
    check(reply.model_name == "yolov2-tiny" and reply.id == "g-1" and reply.outputs[0].name == output_name and
          reply.outputs[0].datatype == "FP32" and list(reply.outputs[0].shape) == list(ref.shape) and
          rel_diff(got, ref) <= 1e-5,
          "gRPC ModelInfer, fp32_contents -> raw_output_contents == tessera run (rel %.3g)" % rel_diff(got, ref))
    reply = stub.ModelInfer(request(raw=True, outputs=[output_name]), metadata=auth, timeout=60)
    got = np.frombuffer(reply.raw_output_contents[0], dtype="<f4")
    check(len(reply.outputs) == 1 and rel_diff(got, ref) <= 1e-5,
          "gRPC ModelInfer, raw_input_contents == tessera run (rel %.3g)" % rel_diff(got, ref))

    for what, req, want, text in [
        ("without a token", None, grpc.StatusCode.UNAUTHENTICATED, "bearer token"),
        ("unknown model", pb.ModelInferRequest(model_name="resnet"), grpc.StatusCode.NOT_FOUND, "unknown model"),
        ("wrong shape", request(shape=[1, 3, 48, 96], values=[0.0] * (3 * 48 * 96)),
         grpc.StatusCode.INVALID_ARGUMENT, "the model expects [1,3,96,96]"),
        ("datatype INT64", request(datatype="INT64"), grpc.StatusCode.INVALID_ARGUMENT, "FP32 tensors only"),
        ("fewer values", request(values=[1.0, 2.0]), grpc.StatusCode.INVALID_ARGUMENT, "holds %d" % x.size),
        ("raw bytes short", request(raw=True, raw_bytes=x.tobytes()[:-4]), grpc.StatusCode.INVALID_ARGUMENT,
         "bytes of binary data"),
        ("unknown input", request(name="nope"), grpc.StatusCode.INVALID_ARGUMENT, "has no input 'nope'"),
        ("unknown output", request(outputs=["nope"]), grpc.StatusCode.INVALID_ARGUMENT, "has no output 'nope'"),
    ]:
        if req is None:
            code, details = code_of(stub.ModelInfer, request())
        else:
            code, details = code_of(stub.ModelInfer, req, metadata=auth)
        check(code == want and text in details, "gRPC ModelInfer %s -> %s naming %r" % (what, want.name, text),
              "%s %s" % (code, details))


def main():
    mode, http_address, grpc_address, token, d, proto = sys.argv[1:7]
    x = np.load(os.path.join(d, "x.npy"))
    ref = np.load(os.path.join(d, "ref.npy"))
    rest = Rest(http_address, token)
    if mode == "serve":
        input_name, output_name = rest_checks(rest, x, ref)
        grpc_checks(grpc_address, token, proto, x, ref, input_name, output_name)
    elif mode == "protect":
        pb, pb_grpc, grpc = grpc_stubs(proto)
        stub = pb_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(grpc_address))
        for path in ["/v2/health/live", "/v2/health/ready"]:
            check(rest.call("GET", path, token=False)[0] == 401, "--protect-metrics: %s without a token -> 401" % path)
            check(rest.call("GET", path)[0] == 200, "--protect-metrics: %s with a token -> 200" % path)
        try:
            stub.ServerLive(pb.ServerLiveRequest(), timeout=10)
            check(False, "--protect-metrics: gRPC ServerLive without a token refused")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.UNAUTHENTICATED,
                  "--protect-metrics: gRPC ServerLive without a token -> UNAUTHENTICATED", e.code())
        check(stub.ServerLive(pb.ServerLiveRequest(), metadata=[("authorization", "Bearer " + token)], timeout=10).live,
              "--protect-metrics: gRPC ServerLive with a token")
    elif mode == "notready":
        pb, pb_grpc, grpc = grpc_stubs(proto)
        stub = pb_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(grpc_address))
        auth = [("authorization", "Bearer " + token)]
        status, _, body = rest.call("GET", "/v2/health/ready")
        check(status == 400 and "down" in error_of(body), "a worker down: /v2/health/ready -> 400 naming it",
              "%d %r" % (status, body))
        check(rest.call("GET", "/v2/models/yolov2-tiny/ready")[0] == 400, "a worker down: model ready -> 400")
        check(rest.call("GET", "/v2/health/live")[0] == 200, "a worker down: /v2/health/live still 200")
        check(not stub.ServerReady(pb.ServerReadyRequest(), metadata=auth, timeout=10).ready,
              "a worker down: gRPC ServerReady false")
        check(not stub.ModelReady(pb.ModelReadyRequest(name="yolov2-tiny"), metadata=auth, timeout=10).ready,
              "a worker down: gRPC ModelReady false")
        check(stub.ServerLive(pb.ServerLiveRequest(), metadata=auth, timeout=10).live,
              "a worker down: gRPC ServerLive true")
    sys.exit(failed)


if __name__ == "__main__":
    main()
