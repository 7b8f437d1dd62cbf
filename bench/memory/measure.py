#!/usr/bin/python3
"""Promised vs measured memory of a tessera cluster on loopback (issue 11).

For one model, input shape and worker count N this starts N real
`tessera worker` processes, plans with `tessera plan --cluster ... --json`
(the promise: device_summary[].worker_ram.promised_bytes, what each
worker will hold by its own code), deploys with `tessera deploy`, serves the plan with
`tessera gateway --plan`, sends R requests with `tessera infer`, and then
reads every process's VmHWM (peak resident set) and VmRSS from
/proc/PID/status. It also measures `tessera run` (single device) and
`tessera plan` as whole processes (ru_maxrss of the finished child).

Prints one JSON document on stdout (progress on stderr). Used by
bench/memory/run (the table over models x N) and by the memory tests.

With --soak N (after the R requests): N more requests over one keep-alive
HTTP connection to the gateway (POST /v1/infer), recording every worker's
and the gateway's VmRSS after --warmup of them and at the end (issue 11:
RSS must stay flat).

Usage: measure.py TESSERA MODEL [--input-shape 1x3x608x608] [--devices 4]
                  [--objective memory] [--requests 3] [--seed 1] [--ram 56MiB]
                  [--soak 2000 --warmup 200]
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def proc_status(pid):
    """VmHWM and VmRSS of a live process, in bytes."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                out[key] = int(rest.split()[0]) * 1024
    return out


def smaps_rollup(pid):
    """Where a live process's resident pages are now: anonymous (heap,
    stacks, arenas) and file-backed (the binary's and libraries' pages it
    has touched), in bytes, from /proc/PID/smaps_rollup."""
    out = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("Rss", "Anonymous"):
                    out[key] = int(rest.split()[0]) * 1024
    except OSError:
        return {}
    return {"rss_anon_bytes": out.get("Anonymous", 0), "rss_file_bytes": out.get("Rss", 0) - out.get("Anonymous", 0)}


def peak_of(cmd, env=None):
    """Runs cmd; returns (returncode, stdout, stderr, peak RSS bytes) from wait4."""
    r, w = os.pipe()
    er, ew = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.dup2(w, 1)
        os.dup2(ew, 2)
        os.close(r)
        os.close(er)
        try:
            os.execvpe(cmd[0], cmd, env or os.environ)
        finally:
            os._exit(127)
    os.close(w)
    os.close(ew)
    out = b""
    err = b""
    # Read both pipes without deadlock: stderr is small, read it after stdout.
    with os.fdopen(r, "rb") as fo, os.fdopen(er, "rb") as fe:
        import selectors
        sel = selectors.DefaultSelector()
        sel.register(fo, selectors.EVENT_READ)
        sel.register(fe, selectors.EVENT_READ)
        open_count = 2
        while open_count:
            for key, _ in sel.select():
                chunk = key.fileobj.read1(65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    open_count -= 1
                elif key.fileobj is fo:
                    out += chunk
                else:
                    err += chunk
    _, status, usage = os.wait4(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode(), err.decode(), usage.ru_maxrss * 1024


def last_json(text):
    dec = json.JSONDecoder()
    found, pos = None, text.find("{")
    while pos != -1:
        try:
            doc, end = dec.raw_decode(text, pos)
            if isinstance(doc, dict):
                found = doc
                pos = text.find("{", end)
                continue
        except json.JSONDecodeError:
            pass
        pos = text.find("{", pos + 1)
    return found


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_for(path, proc, what, seconds=30):
    t0 = time.time()
    while time.time() - t0 < seconds:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            return
        if proc.poll() is not None:
            sys.exit(f"measure: {what} exited with {proc.returncode}")
        time.sleep(0.05)
    sys.exit(f"measure: {what} did not start within {seconds} s")


def concurrent(args, http_addr, npy_path, workers):
    """--concurrent: --in-flight clients at once, each with its own keep-alive
    connection, --concurrent requests each; every answer must equal the
    first. Each worker's VmHWM before and after (issue 18 item 2: requests
    in flight share a device's working memory, each keeps its pipeline
    buffers)."""
    import http.client
    import threading
    body = open(npy_path, "rb").read()
    host, port = http_addr.rsplit(":", 1)
    names = [f"w{i + 1}" for i in range(len(workers))]
    before = {n: proc_status(p.pid)["VmHWM"] for n, p in zip(names, workers)}
    answers, errors = [], []
    lock = threading.Lock()
    start = threading.Barrier(args.in_flight)

    def client():
        conn = http.client.HTTPConnection(host, int(port), timeout=300)
        start.wait()
        for _ in range(args.concurrent):
            conn.request("POST", "/v1/infer", body, {"Content-Type": "application/x-npy", "Accept": "application/x-npy"})
            resp = conn.getresponse()
            data = resp.read()
            with lock:
                (answers if resp.status == 200 else errors).append(data if resp.status == 200 else resp.status)
        conn.close()

    t0 = time.time()
    threads = [threading.Thread(target=client) for _ in range(args.in_flight)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after = {n: proc_status(p.pid)["VmHWM"] for n, p in zip(names, workers)}
    distinct = len(set(answers))
    # Against the answer of the sequential requests (tessera infer --output).
    import io
    import numpy as np
    first = os.path.join(os.path.dirname(npy_path), "y.npy")
    diff = None
    if answers and os.path.exists(first):
        diff = float(np.max(np.abs(np.load(io.BytesIO(answers[0])) - np.load(first))))
    log(f"concurrent: {args.in_flight} clients x {args.concurrent} requests in {time.time() - t0:.1f} s, "
        f"{len(answers)} answered ({distinct} distinct), {len(errors)} errors")
    return {"clients": args.in_flight, "requests": args.in_flight * args.concurrent, "answered": len(answers),
            "distinct_answers": distinct, "max_abs_vs_sequential": diff, "errors": [str(e) for e in errors[:5]],
            "peak_rss_before_bytes": before, "peak_rss_after_bytes": after}


def soak(args, http_addr, npy_path, workers, gw):
    """--soak: requests over one keep-alive connection; VmRSS after the
    warm-up and at the end, per worker and for the gateway."""
    import http.client
    body = open(npy_path, "rb").read()
    host, port = http_addr.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    names = [f"w{i + 1}" for i in range(len(workers))] + ["gateway"]
    pids = [p.pid for p in workers] + [gw.pid]
    warm, errors, t0 = None, 0, time.time()
    failures = []  # the first few refused requests: what the gateway said, and how long it took
    for r in range(args.soak):
        t_req = time.time()
        conn.request("POST", "/v1/infer", body, {"Content-Type": "application/x-npy"})
        resp = conn.getresponse()
        answer = resp.read()
        if resp.status != 200:
            errors += 1
            if len(failures) < 5:
                failures.append({"request": r, "status": resp.status, "seconds": round(time.time() - t_req, 3),
                                 "body": answer[:1000].decode("utf-8", "replace")})
                log(f"soak: request {r} answered {resp.status} after {time.time() - t_req:.1f} s: "
                    f"{answer[:1000].decode('utf-8', 'replace')}")
        if r + 1 == min(args.warmup, args.soak):
            warm = {n: proc_status(pid)["VmRSS"] for n, pid in zip(names, pids)}
        if (r + 1) % 500 == 0:
            log(f"soak: {r + 1}/{args.soak} requests, {errors} errors, {time.time() - t0:.1f} s")
    conn.close()
    end = {n: proc_status(pid)["VmRSS"] for n, pid in zip(names, pids)}
    return {"requests": args.soak, "warmup": args.warmup, "errors": errors, "failures": failures,
            "seconds": time.time() - t0,
            "rss_after_warmup_bytes": warm, "rss_at_end_bytes": end}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tessera")
    ap.add_argument("model")
    ap.add_argument("--input-shape", default=None)
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--objective", default="memory")
    ap.add_argument("--requests", type=int, default=3)
    ap.add_argument("--seed", default="1")
    ap.add_argument("--preset", default="RPi4-4GB", help="device preset of every worker in the cluster file")
    ap.add_argument("--ram", default="", help="ram: of every worker in the cluster file (e.g. 56MiB)")
    ap.add_argument("--soak", type=int, default=0, help="requests over keep-alive HTTP after --requests")
    ap.add_argument("--warmup", type=int, default=200, help="soak requests before the first RSS reading")
    ap.add_argument("--threads", type=int, default=1,
                    help="each worker's --threads (and `tessera run`'s); the plan is sized for it")
    ap.add_argument("--in-flight", type=int, default=1,
                    help="requests at once: tessera plan --in-flight and tessera gateway --max-in-flight")
    ap.add_argument("--concurrent", type=int, default=0,
                    help="after --requests: this many requests per client from --in-flight clients at once, over "
                         "keep-alive HTTP; every answer must equal the first; each worker's VmHWM before and after")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--worker-wrapper", default="", help="prefix of worker w1's command (e.g. heaptrack -o FILE)")
    args = ap.parse_args()
    T = os.path.abspath(args.tessera)
    # `run`, `plan` and `inspect` take the model as a positional argument;
    # `deploy` and `gateway` as --model.
    opts = ["--seed", args.seed] + (["--input-shape", args.input_shape] if args.input_shape else [])
    model_args = [args.model, *opts]
    model_opt = ["--model", args.model, *opts]

    d = tempfile.mkdtemp(prefix="tessera-memory-")
    procs = []
    result = {"model": os.path.basename(args.model), "input_shape": args.input_shape, "devices": args.devices,
              "objective": args.objective, "requests": args.requests, "threads": args.threads}
    try:
        # Single device: tessera run (whole process peak) and its own account.
        rc, out, err, peak = peak_of([T, "run", *model_args, "--json", "--threads", str(args.threads)])
        if rc != 0:
            sys.exit(f"measure: tessera run failed: {err[-2000:]}")
        rj = last_json(out)
        result["run"] = {"peak_rss_bytes": peak, "arena_bytes": rj.get("arena_bytes"),
                         "weight_bytes": rj.get("weight_bytes"), "load_peak_bytes": rj.get("load_peak_bytes")}
        log(f"run: peak {peak / 2**20:.1f} MiB, arena {rj.get('arena_bytes', 0) / 2**20:.1f} MiB")

        # Workers.
        lines = ["devices:"]
        for i in range(1, args.devices + 1):
            port_file = os.path.join(d, f"w{i}.port")
            logf = open(os.path.join(d, f"w{i}.log"), "w")
            wrapper = args.worker_wrapper.split() if i == 1 else []
            p = subprocess.Popen([*wrapper, T, "--log-level", "info", "worker", "--listen", "127.0.0.1:0", "--name", f"w{i}", "--port-file", port_file,
                                  "--data-dir", os.path.join(d, f"w{i}.data"), "--threads", str(args.threads)],
                                 stdout=logf, stderr=logf)
            procs.append(p)
            wait_for(port_file, p, f"worker w{i}")
            addr = open(port_file).read().strip()
            ram = f", ram: {args.ram}" if args.ram else ""
            lines.append(f"  - {{ name: w{i}, kind: linux, address: {addr}, preset: {args.preset}{ram} }}")
        lines += ["links:", "  default: { bandwidth: 1Gbit/s, latency: 0.2ms }"]
        cluster = os.path.join(d, "cluster.yaml")
        with open(cluster, "w") as f:
            f.write("\n".join(lines) + "\n")
        workers = procs[:]

        plan = os.path.join(d, "plan.pb")
        in_flight = ["--in-flight", str(args.in_flight)] if args.in_flight > 1 else []
        rc, out, err, peak = peak_of([T, "plan", *model_args, "--cluster", cluster, "--objective", args.objective,
                                      "--json", "--out", plan, *in_flight, "--threads", str(args.threads)])
        if rc != 0:
            sys.exit(f"measure: tessera plan failed: {err[-2000:]}")
        pj = last_json(out)
        result["plan"] = {"peak_rss_bytes": peak}
        log(f"plan: peak {peak / 2**20:.1f} MiB")
        promised = {}
        for dev in pj["device_summary"]:
            # The planner's per-device RAM, sized by the worker's own code
            # (weights as stored + arena + baseline, plan_fit.h).
            promised[dev["name"]] = dev["worker_ram"]

        rc, out, err, peak = peak_of([T, "deploy", *model_opt, "--cluster", cluster, "--plan", plan,
                                      "--worker-threads", str(args.threads)])
        if rc != 0:
            sys.exit(f"measure: tessera deploy failed: {err[-2000:]}{out[-2000:]}")
        result["deploy"] = {"peak_rss_bytes": peak,
                            "report": [l.strip() for l in out.splitlines() if "working memory" in l]}
        after_deploy = {f"w{i + 1}": proc_status(p.pid) for i, p in enumerate(workers)}

        grpc_addr = f"127.0.0.1:{free_port()}"
        http_addr = f"127.0.0.1:{free_port()}"
        glog = open(os.path.join(d, "gateway.log"), "w")
        gw = subprocess.Popen([T, "--log-level", "info", "gateway", *model_opt, "--cluster", cluster, "--plan", plan, "--listen", grpc_addr,
                               "--http", http_addr, "--data-dir", os.path.join(d, "gw"),
                               "--max-in-flight", str(max(args.in_flight, 1)),
                               "--worker-threads", str(args.threads)], stdout=glog, stderr=glog)
        procs.append(gw)
        x = os.path.join(d, "x.npy")
        t0 = time.time()
        answered = 0
        while answered < args.requests and time.time() - t0 < 120:
            if gw.poll() is not None:
                sys.exit("measure: gateway exited; see " + os.path.join(d, "gateway.log"))
            if not os.path.exists(x):
                import numpy as np
                shape = [int(s) for s in pj_input_shape(T, model_args).split("x")]
                np.save(x, np.random.default_rng(0).standard_normal(shape).astype(np.float32))
            rc, out, err, _ = peak_of([T, "infer", "--gateway", grpc_addr, "--input", x,
                                       "--output", os.path.join(d, "y.npy")])
            if rc == 0:
                answered += 1
            else:
                time.sleep(0.2)
        if answered < args.requests:
            sys.exit(f"measure: only {answered} of {args.requests} requests answered: {err[-1000:]}")
        if args.concurrent:
            result["concurrent"] = concurrent(args, http_addr, x, workers)
        if args.soak:
            result["soak"] = soak(args, http_addr, x, workers, gw)
        # What the gateway's /metrics says (workers polled by its health
        # loop), read before /proc so the reported peak cannot be the newer.
        # The loop refreshes every second: wait for one refresh after the
        # last answer, or a peak reached in that request is not in /metrics
        # yet (seen: w1 60.8 MiB in /metrics vs 68.3 MiB VmHWM in a CI run).
        time.sleep(1.5)
        metrics_peak, exchange = {}, {}
        t0 = time.time()
        while time.time() - t0 < 10 and len(metrics_peak) < len(workers):
            time.sleep(0.5)
            try:
                import urllib.request
                text = urllib.request.urlopen(f"http://{http_addr}/metrics", timeout=5).read().decode()
            except OSError:
                continue
            for line in text.splitlines():
                for metric in ("tessera_worker_peak_in_flight", "tessera_worker_runners",
                               "tessera_worker_working_memories"):
                    if line.startswith(metric + "{"):
                        name = line.split('worker="', 1)[1].split('"', 1)[0]
                        exchange.setdefault(name, {})[metric[len("tessera_worker_"):]] = int(float(line.rsplit(" ", 1)[1]))
                if line.startswith("tessera_worker_peak_rss_bytes{"):
                    name = line.split('worker="', 1)[1].split('"', 1)[0]
                    metrics_peak[name] = int(float(line.rsplit(" ", 1)[1]))
                # Where messages sat: sent from the arena or a copy, received bytes held outside it.
                for metric, key in (("tessera_worker_exchange_heap_peak_bytes{", "heap_peak_bytes"),
                                    ('tessera_worker_exchange_sent_messages_total{', None)):
                    if line.startswith(metric):
                        name = line.split('worker="', 1)[1].split('"', 1)[0]
                        if key is None:
                            key = "sent_from_" + line.split('from="', 1)[1].split('"', 1)[0]
                        exchange.setdefault(name, {})[key] = int(float(line.rsplit(" ", 1)[1]))
        devices = []
        for i, p in enumerate(workers):
            name = f"w{i + 1}"
            st = proc_status(p.pid)
            devices.append({"name": name, "promised_bytes": promised[name]["promised_bytes"],
                            "promised_baseline_bytes": promised[name]["baseline_bytes"],
                            "tiled_paths": promised[name].get("tiled_paths", 0),
                            "compact_weights": promised[name].get("compact_weights", False),
                            "peak_rss_bytes": st["VmHWM"], "rss_bytes": st["VmRSS"],
                            "peak_rss_after_deploy_bytes": after_deploy[name]["VmHWM"],
                            "metrics_peak_rss_bytes": metrics_peak.get(name),
                            "working_bytes": promised[name].get("working_bytes"),
                            "buffer_bytes": promised[name].get("buffer_bytes"),
                            "io_bytes": promised[name].get("io_bytes"),
                            "link_bytes": promised[name].get("link_bytes"),
                            "arena_bytes": promised[name].get("arena_bytes"),
                            "in_flight": promised[name].get("in_flight"),
                            "exchange": exchange.get(name, {}), **smaps_rollup(p.pid)})
        result["device_memory"] = devices
        gst = proc_status(gw.pid)
        result["gateway"] = {"peak_rss_bytes": gst["VmHWM"], "rss_bytes": gst["VmRSS"]}
        for dev in devices:
            ratio = dev["peak_rss_bytes"] / dev["promised_bytes"] if dev["promised_bytes"] else float("nan")
            x = dev["exchange"]
            log(f"{dev['name']}: promised {dev['promised_bytes'] / 2**20:.1f} MiB, "
                f"peak {dev['peak_rss_bytes'] / 2**20:.1f} MiB ({ratio:.2f}x); messages sent from the arena "
                f"{x.get('sent_from_arena', '?')}, from copies {x.get('sent_from_copy', '?')}, received bytes held "
                f"outside the arena at most {x.get('heap_peak_bytes', 0) / 2**20:.2f} MiB")
        log(f"gateway: peak {gst['VmHWM'] / 2**20:.1f} MiB")
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
        if result.get("soak", {}).get("errors") or result.get("concurrent", {}).get("errors"):
            # A refused request: the end of every process's log, so a rare
            # failure in CI is diagnosable from its output alone.
            for name in sorted(os.listdir(d)):
                if not name.endswith(".log"):
                    continue
                with open(os.path.join(d, name), errors="replace") as f:
                    lines = [l.rstrip() for l in f]
                for l in lines[-25:]:
                    log(f"{name}: {l}")
        if not args.keep:
            shutil.rmtree(d, ignore_errors=True)
        else:
            log("kept " + d)
    print(json.dumps(result, indent=1))
    return 0


def pj_input_shape(T, model_args):
    """The model's first input shape as 1x3xHxW, from tessera inspect --json."""
    rc, out, err, _ = peak_of([T, "inspect", *model_args, "--json"])
    j = last_json(out)
    return "x".join(str(v) for v in j["layers"][0]["input_shape"])


if __name__ == "__main__":
    sys.exit(main())
