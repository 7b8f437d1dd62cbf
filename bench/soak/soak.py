#!/usr/bin/python3
"""Soak under faults (issue 14 item 5), loopback only and bounded.

Starts N `tessera worker` processes (each with a --data-dir) and
`tessera gateway --failover` on 127.0.0.1, then keeps C clients
(tessera_soak_client, gRPC, one deadline per request) busy for D seconds
while a worker is SIGKILLed every K seconds and started again R seconds
later with the same name, port and data dir. Every request is sorted into
correct (== `tessera run`, relative <= 1e-5), wrong, errored (a clear error
before deadline + grace) or lost (neither). Reported: the counts, p50/p99
latency of the answered requests, the extra latency of requests in flight at
a kill (the failover) and at a rejoin's swap, and VmRSS of the gateway and
the workers after a warm-up vs after the run (each measured under the same
fault-free load). Exit 1 when a request was lost or wrong, when the plan is
not back on every worker at the end, or when RSS grew past the bound.

Only the Python standard library and numpy (Debian python3-numpy).
"""
import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import numpy as np

MiB = 1 << 20


def vm_rss(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return -1


def percentile(values, p):
    if not values:
        return 0.0
    return float(np.percentile(np.asarray(values), p))


class Cluster:
    """The workers and the gateway, in scratch directory `d`."""

    def __init__(self, args, d):
        self.args, self.d = args, d
        self.workers = {}  # name -> Popen
        self.addresses = {}  # name -> host:port
        self.gateway = None
        self.grpc = self.http = None

    def start_worker(self, name, listen="127.0.0.1:0"):
        port_file = os.path.join(self.d, name + ".port")
        if os.path.exists(port_file):
            os.unlink(port_file)
        log = open(os.path.join(self.d, name + ".log"), "a")
        p = subprocess.Popen([self.args.tessera, "worker", "--listen", listen, "--name", name,
                              "--port-file", port_file, "--data-dir", os.path.join(self.d, name + ".data")],
                             stdout=subprocess.DEVNULL, stderr=log)
        for _ in range(200):
            if os.path.exists(port_file) and open(port_file).read().strip():
                break
            time.sleep(0.05)
        else:
            raise RuntimeError("worker %s did not start (see %s.log)" % (name, name))
        self.workers[name] = p
        self.addresses[name] = open(port_file).read().split()[0]
        return p

    def start(self):
        for i in range(1, self.args.workers + 1):
            self.start_worker("w%d" % i)
        with open(os.path.join(self.d, "cluster.yaml"), "w") as f:
            f.write("devices:\n")
            for name, address in self.addresses.items():
                f.write("  - { name: %s, kind: linux, address: %s, ram: 1GiB, flash: 4GiB, cpu_hz: 1.5e9, "
                        "cycles_per_mac: 0.4 }\n" % (name, address))
            f.write("links:\n  default: { bandwidth: 1Gbit/s, latency: 0.2ms }\n")
        self.grpc = "127.0.0.1:%d" % free_port()
        self.http = "127.0.0.1:%d" % free_port()
        log = open(os.path.join(self.d, "gateway.log"), "w")
        self.gateway = subprocess.Popen(
            [self.args.tessera, "gateway", "--cluster", os.path.join(self.d, "cluster.yaml"),
             "--model", self.args.model, "--input-shape", self.args.shape, "--failover",
             "--listen", self.grpc, "--http", self.http, "--data-dir", os.path.join(self.d, "gw"),
             "--queue", str(max(64, 2 * self.args.clients))],
            stdout=subprocess.DEVNULL, stderr=log)
        for _ in range(600):
            if self.healthz()[0] == 200:
                return
            if self.gateway.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError("the gateway did not become healthy (see gateway.log)")

    def healthz(self):
        try:
            with urllib.request.urlopen("http://%s/healthz" % self.http, timeout=2) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError as e:
            return -1, str(e)

    def metrics(self):
        try:
            with urllib.request.urlopen("http://%s/metrics" % self.http, timeout=2) as r:
                text = r.read().decode()
        except OSError:
            return {}
        out = {"plan_workers": 0}
        for line in text.splitlines():
            if line.startswith("tessera_worker_up{"):
                out["plan_workers"] += 1
            elif line.startswith("tessera_gateway_replans_total{reason=\"rejoin\"}"):
                out["rejoins"] = int(float(line.split()[-1]))
            elif line.startswith("tessera_gateway_replans_total{reason=\"failover\"}"):
                out["failovers"] = int(float(line.split()[-1]))
            elif line.startswith("tessera_gateway_replan_failures_total{reason=\"rejoin\"}"):
                out["rejoin_failures"] = int(float(line.split()[-1]))
        return out

    def rss(self):
        out = {"gateway": vm_rss(self.gateway.pid)}
        for name, p in self.workers.items():
            out[name] = vm_rss(p.pid)
        return out

    def stop(self):
        procs = [p for p in list(self.workers.values()) + [self.gateway] if p and p.poll() is None]
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run_client(args, cluster, d, seconds, log_name):
    cmd = [args.client, "--gateway", cluster.grpc, "--input", os.path.join(d, "x.npy"),
           "--reference", os.path.join(d, "ref.npy"), "--clients", str(args.clients),
           "--duration-s", str(seconds), "--deadline-ms", str(args.deadline_ms), "--grace-ms", str(args.grace_ms),
           "--log", os.path.join(d, log_name)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(os.path.join(d, "client.err"), "a"), text=True)


def wait_for_plan(cluster, n, seconds):
    until = time.time() + seconds
    while time.time() < until:
        if cluster.metrics().get("plan_workers") == n:
            return True
        time.sleep(0.2)
    return False


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessera", default=os.path.join(root, "build", "tessera"))
    ap.add_argument("--client", default=os.path.join(root, "build", "bench", "tessera_soak_client"))
    ap.add_argument("--model", default="/usr/share/darknet/cfg/yolov2-tiny.cfg")
    ap.add_argument("--shape", default="1x3x128x128")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--duration", type=float, default=60, help="seconds of load under faults")
    ap.add_argument("--kill-every", type=float, default=10)
    ap.add_argument("--restart-after", type=float, default=3)
    ap.add_argument("--deadline-ms", type=int, default=10000)
    ap.add_argument("--grace-ms", type=int, default=2000)
    ap.add_argument("--settle", type=float, default=5, help="seconds of fault-free load before each RSS reading")
    ap.add_argument("--rss-bound-mib", type=float, default=32,
                    help="largest VmRSS growth allowed per process (gateway, each worker)")
    ap.add_argument("--json", help="write the report here too")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = ap.parse_args()
    for path in (args.tessera, args.client, args.model):
        if not os.path.exists(path):
            print("FAIL: %s missing (build it: cmake --build build)" % path)
            return 2

    d = tempfile.mkdtemp(prefix="tessera-soak-")
    cluster = Cluster(args, d)
    try:
        return soak(args, cluster, d)
    finally:
        cluster.stop()
        if args.keep:
            print("scratch directory kept: %s" % d)
        else:
            subprocess.run(["rm", "-rf", d])


def soak(args, cluster, d):
    shape = tuple(int(x) for x in args.shape.split("x"))
    np.save(os.path.join(d, "x.npy"), np.random.default_rng(5).standard_normal(shape).astype(np.float32))
    subprocess.run([args.tessera, "run", args.model, "--input-shape", args.shape, "--input", os.path.join(d, "x.npy"),
                    "--output", os.path.join(d, "ref.npy")], check=True, stdout=subprocess.DEVNULL)
    cluster.start()
    n = args.workers
    print("soak: %d workers, %d clients, %.0f s, SIGKILL a worker every %.0f s, restart after %.0f s; "
          "deadline %d ms + grace %d ms; %s at %s" % (n, args.clients, args.duration, args.kill_every,
                                                      args.restart_after, args.deadline_ms, args.grace_ms,
                                                      os.path.basename(args.model), args.shape), flush=True)

    # Warm-up under load, then the baseline RSS.
    warm = run_client(args, cluster, d, args.settle, "warmup.csv")
    warm.communicate()
    rss_start = cluster.rss()

    # Faults while the clients run; the gateway's plan sampled all along.
    events = []  # (unix_ms, kind, worker)
    timeline = []  # (unix_ms, metrics)
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            timeline.append((int(time.time() * 1000), cluster.metrics(), cluster.rss()))
            time.sleep(0.2)

    def faults(t0):
        k = 0
        while True:
            k += 1
            t_kill = t0 + k * args.kill_every
            if t_kill >= t0 + args.duration or stop.wait(max(0, t_kill - time.time())):
                return
            name = "w%d" % ((k - 1) % n + 1)
            listen = cluster.addresses[name]
            cluster.workers[name].send_signal(signal.SIGKILL)
            cluster.workers[name].wait()
            events.append((int(time.time() * 1000), "kill", name))
            print("  +%5.1f s  SIGKILL %s" % (time.time() - t0, name), flush=True)
            if stop.wait(args.restart_after):
                pass  # restarted anyway: the run ends with every worker up
            cluster.start_worker(name, listen)
            events.append((int(time.time() * 1000), "restart", name))
            print("  +%5.1f s  restarted %s (same name, port, data dir)" % (time.time() - t0, name), flush=True)

    sampler = threading.Thread(target=sample)
    sampler.start()
    t0 = time.time()
    client = run_client(args, cluster, d, args.duration, "requests.csv")
    fault_thread = threading.Thread(target=faults, args=(t0,))
    fault_thread.start()
    out, _ = client.communicate()
    stop.set()
    fault_thread.join()
    summary = json.loads(out.strip().splitlines()[-1])

    # Back on every worker, then the same fault-free load as the warm-up.
    back = wait_for_plan(cluster, n, 30)
    settle = run_client(args, cluster, d, args.settle, "settle.csv")
    settle_out, _ = settle.communicate()
    settle_summary = json.loads(settle_out.strip().splitlines()[-1])
    time.sleep(1.5)  # the health loop retires the old plan once idle
    rss_end = cluster.rss()
    sampler.join()
    final = cluster.metrics()

    rows = list(csv.DictReader(open(os.path.join(d, "requests.csv"))))
    by = {o: sum(1 for r in rows if r["outcome"] == o) for o in ("correct", "wrong", "errored", "lost")}
    correct_ms = [float(r["latency_ms"]) for r in rows if r["outcome"] == "correct"]
    p50 = percentile(correct_ms, 50)
    kills = [t for t, kind, _ in events if kind == "kill"]
    # Swaps: when the sampled rejoin counter went up (±200 ms).
    # and VmRSS right after each (the trend across fault cycles).
    swaps, last, rss_at_swap = [], 0, []
    for t, m, rss in timeline:
        if m.get("rejoins", 0) > last:
            swaps.append(t)
            last = m["rejoins"]
            rss_at_swap.append(rss)

    def spanning(times):
        return [float(r["latency_ms"]) for r in rows
                if r["outcome"] == "correct" and any(int(r["start_unix_ms"]) <= t <= int(r["end_unix_ms"])
                                                      for t in times)]

    at_kill, at_swap = spanning(kills), spanning(swaps)
    errored_by_code = {}
    for r in rows:
        if r["outcome"] == "errored":
            errored_by_code[r["grpc_code"]] = errored_by_code.get(r["grpc_code"], 0) + 1
    report = {
        "workers": n, "clients": args.clients, "seconds": summary["seconds"], "requests": len(rows), **by,
        "errored_by_grpc_code": errored_by_code,
        "errored_after_deadline": summary["errored_after_deadline"],
        "throughput_per_s": by["correct"] / max(1e-9, summary["seconds"]),
        "p50_ms": p50, "p99_ms": percentile(correct_ms, 99),
        "kills": len(kills), "rejoins": final.get("rejoins", 0), "failovers": final.get("failovers", 0),
        "rejoin_failures": final.get("rejoin_failures", 0),
        "answered_in_flight_at_kill": len(at_kill),
        "failover_added_p50_ms": percentile(at_kill, 50) - p50 if at_kill else None,
        "failover_added_max_ms": max(at_kill) - p50 if at_kill else None,
        "answered_in_flight_at_swap": len(at_swap),
        "rejoin_added_p50_ms": percentile(at_swap, 50) - p50 if at_swap else None,
        "plan_back_on_all_workers": back,
        "settle": settle_summary,
        "rss_start_mib": {k: round(v / MiB, 1) for k, v in rss_start.items()},
        "rss_end_mib": {k: round(v / MiB, 1) for k, v in rss_end.items()},
        "rss_bound_mib": args.rss_bound_mib,
    }
    growth = {k: (rss_end[k] - rss_start[k]) / MiB for k in rss_start if rss_start[k] > 0 and rss_end.get(k, -1) > 0}
    report["rss_growth_mib"] = {k: round(v, 1) for k, v in growth.items()}
    report["rss_after_each_rejoin_mib"] = {
        k: [round(r.get(k, -1) / MiB, 1) for r in rss_at_swap] for k in rss_start}

    print("requests %d: correct %d, wrong %d, errored %d (%s), lost %d; %.1f answered/s" % (
        len(rows), by["correct"], by["wrong"], by["errored"],
        ", ".join("grpc %s: %d" % kv for kv in sorted(errored_by_code.items())) or "-", by["lost"],
        report["throughput_per_s"]))
    print("latency of answered requests: p50 %.1f ms, p99 %.1f ms" % (report["p50_ms"], report["p99_ms"]))
    if at_kill:
        print("in flight at a kill and answered: %d, +%.0f ms at p50, +%.0f ms at worst (the failover)" % (
            len(at_kill), report["failover_added_p50_ms"], report["failover_added_max_ms"]))
    if at_swap:
        print("in flight at a rejoin swap and answered: %d, +%.0f ms at p50" % (len(at_swap),
                                                                               report["rejoin_added_p50_ms"]))
    print("kills %d, failovers %d, rejoins %d (failed attempts %d); plan back on all %d workers: %s" % (
        len(kills), report["failovers"], report["rejoins"], report["rejoin_failures"], n, back))
    print("VmRSS MiB, after warm-up -> after the run: " + ", ".join(
        "%s %.1f -> %.1f" % (k, rss_start[k] / MiB, rss_end[k] / MiB) for k in rss_start))
    if rss_at_swap:
        print("VmRSS MiB right after each rejoin: " + "; ".join(
            "%s %s" % (k, " ".join("%.1f" % v for v in vs)) for k, vs in report["rss_after_each_rejoin_mib"].items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)

    failures = []
    if by["lost"]:
        failures.append("%d request(s) lost" % by["lost"])
    if by["wrong"]:
        failures.append("%d wrong answer(s)" % by["wrong"])
    if not back:
        failures.append("the plan is not back on all %d workers 30 s after the last restart" % n)
    grown = {k: v for k, v in growth.items() if v > args.rss_bound_mib}
    if grown:
        failures.append("VmRSS grew past %.0f MiB: %s" % (
            args.rss_bound_mib, ", ".join("%s +%.1f MiB" % kv for kv in grown.items())))
    for r in rows:
        if r["outcome"] in ("lost", "wrong"):
            print("  %s request sent at +%.1f s: %s" % (r["outcome"], int(r["start_unix_ms"]) / 1000 - t0,
                                                       r["message"]))
    print(("FAIL soak: " + "; ".join(failures)) if failures else
          "PASS soak: 0 lost, 0 wrong, RSS within %.0f MiB" % args.rss_bound_mib)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
