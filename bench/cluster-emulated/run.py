#!/usr/bin/python3
"""bench/cluster-emulated (issue 15): tessera on an emulated Pi cluster.

Every worker runs in its own network namespace and its own cgroup: a CPU
quota gives it a Pi-like compute budget (calibrated per model, see below)
and a memory limit its `ram:` from the cluster file (exceeding it
OOM-kills the worker, as on a board). Every cable is shaped with tc (tbf at
the bandwidth, netem for the one-way delay) in both directions. The gateway
runs in the root namespace and reaches the workers over a bridge.

Experiments (--experiment, default all):
  fits     a model that does not fit one device: the planner refuses one
           device (naming the shortfall), `tessera run` in the same memory
           limit is OOM-killed, and on N >= 4 devices every answer equals
           `tessera run` (unconstrained, this machine).
  speedup  models x devices x bandwidths x objectives: measured latency and
           throughput vs one device, and vs the planner's prediction.
--smoke: two devices, a small model, two objectives, <= 60 s; exits
non-zero on any mismatch (CI: tests/integration/cluster_emulated_smoke.sh).

Calibration. The planner's device speed is `macs_per_s` in the cluster
file (--device-macs, default 2e9 = one Cortex-A72 core of a Pi 4: 1.5 GHz x
8 fp32 MAC/cycle (two 128-bit FMA pipes) = 12 GMAC/s peak, of which fp32
convolution kernels reach roughly a sixth on that core). For each model
the bench measures this machine's single-thread rate (`tessera run
--threads 1`) and sets each worker's quota to device_macs / host_rate of
one CPU; it then runs the model once inside such a cgroup and reports the
MAC rate the quota really yields.

Needs root (ip netns, tc, cgroups). Everything it creates is named ts-emu-*
and is removed on exit, also on Ctrl-C. Results: --out DIR (default
bench/cluster-emulated/results): results.json, a table on stdout, and PNG
plots (matplotlib) when --plots.
"""
import argparse
import json
import math
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import calibration  # noqa: E402
import emulation  # noqa: E402

PY = "/usr/bin/python3"
# The transport calibration's plan (transport_cost): the model's memory plan on
# this many devices, whose hub (device 0) moves 3-5x the others' bytes.
TRANSPORT_DEVICES = 4
# network_cost's two ends: the receiver counts bytes until EOF, the sender
# writes `total` bytes; each prints its own CPU seconds around the transfer.
NET_RECEIVER = """
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((sys.argv[1], 7071)); s.listen(1)
print("ready", flush=True)
c, _ = s.accept(); buf = bytearray(1 << 18); n = 0; t0 = time.process_time()
while True:
    k = c.recv_into(buf)
    if not k: break
    n += k
t = time.process_time() - t0; c.sendall(b"k"); c.close(); print(n, t)
"""
NET_SENDER = """
import socket, sys, time
c = socket.create_connection((sys.argv[1], 7071), timeout=60); total = int(sys.argv[2]); chunk = bytes(1 << 18)
t0 = time.process_time(); left = total
while left > 0:
    c.sendall(chunk[:min(left, len(chunk))]); left -= min(left, len(chunk))
c.shutdown(socket.SHUT_WR); c.recv(1); print(time.process_time() - t0)
"""

MODELS = {
    # name: (model file, input shape)
    "yolov2": ("/usr/share/darknet/cfg/yolov2.cfg", "1x3x608x608"),
    "yolov2-tiny": ("/usr/share/darknet/cfg/yolov2-tiny.cfg", "1x3x416x416"),
    "yolov2-tiny-160": ("/usr/share/darknet/cfg/yolov2-tiny.cfg", "1x3x160x160"),
    "vgg-16": ("/usr/share/darknet/cfg/vgg-16.cfg", "1x3x224x224"),
    "resnet50": ("/usr/share/darknet/cfg/resnet50.cfg", "1x3x224x224"),
    # torchvision's architecture with random weights, exported on first use
    # (tests/oracle/export_torchvision.py; python3-torch from Debian).
    "mobilenet_v2": ("torchvision:mobilenet_v2", "1x3x224x224"),
}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def parse_bytes(text):
    m = re.fullmatch(r"\s*([0-9.]+)\s*(B|KiB|MiB|GiB)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError("size like 128MiB: " + text)
    return int(float(m.group(1)) * {None: 1, "B": 1, "KiB": 1024, "MiB": 1 << 20, "GiB": 1 << 30}[m.group(2)])


def proc_status(pid, key):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def smaps_rollup(pid):
    """Where a process's resident memory is now (kB fields of /proc/PID/smaps_rollup, in bytes):
    Rss, Anonymous (heap, stacks, gRPC's buffers) and the file-backed rest (the binary, libraries,
    a program file read through a mapping)."""
    out = {}
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[2] == "kB" and parts[0].rstrip(":") in ("Rss", "Anonymous", "Pss_File",
                                                                                      "Pss_Anon", "Swap"):
                    out[parts[0].rstrip(":")] = int(parts[1]) * 1024
    except OSError:
        pass
    return out


def cpu_seconds(pid):
    """utime + stime of a process (all its threads), in seconds."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def load_npy(path):
    import numpy as np
    return np.load(path)


def relative_error(a, b):
    import numpy as np
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return math.inf
    return float(np.max(np.abs(a - b)) / max(1e-30, float(np.max(np.abs(b)))))


class Bench:
    def __init__(self, args):
        self.args = args
        self.tessera = os.path.realpath(args.tessera)
        self.dir = tempfile.mkdtemp(prefix="tessera-emu-")
        self.cgroups = emulation.Cgroups()
        # Every device (and every calibration run in a device's quota) on the
        # same CPU: the two vCPUs of a shared host are not equally fast at
        # all times (2026-12-07: one ran an L2-resident loop 1.35-1.5x
        # slower than the other for minutes, then both alike), so a device
        # would compute at whichever speed the CPU it landed on had, and
        # the calibration at another. The gateway, the clients and this
        # script stay on the others. --device-cpus all: no pinning.
        if args.device_cpus != "all":
            self.cgroups.cpus = {int(c) for c in args.device_cpus.split(",")}
        self.pinned_cpus = self.cgroups.cpus  # pin_for() narrows or widens it per device count
        self.unpinned = set()  # (model, n) whose devices did not fit on pinned_cpus (logged once)
        self.net = emulation.Network()
        self.procs = []
        self.host_rate = {}  # model name -> this machine's single-thread MAC/s
        self.host_ms = {}  # model name -> calibrate's single-thread time of one run (ms)
        self.fraction = {}  # model name -> a device's share of one CPU
        self.macs = {}
        self.net_cost = {}  # (model name, cable rate) -> net_macs_per_byte (raw TCP)
        self.transport = {}  # (model name, cable rate) -> net_macs_per_byte (tessera's transport)
        self.transport_points = []  # the 2-device points each transport cost was measured on
        self.request = {}  # (model name, cable rate) -> request_macs (the source's CPU per request served)
        self.request_s = {}  # (model name, cable rate) -> request_total: that CPU in seconds, bytes included
        self.request_bytes = {}  # model name -> the request's bytes in and out (the plan's request.bytes)
        self.request_points = []  # the 1-device points each request cost was measured on
        self.device_rate = {}  # model name -> MAC/s measured inside a device's quota
        self.tenant_rate = {}  # (model name, devices) -> MAC/s of each while that many share the host
        self.failures = []

    # ---- lifetime -------------------------------------------------------
    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.procs = []
        self.cgroups.close()
        self.net.close()
        subprocess.run(["rm", "-rf", self.dir])

    def fail(self, what):
        log("MISMATCH: " + what)
        self.failures.append(what)

    # ---- pieces ---------------------------------------------------------
    def model(self, name):
        """(model file, input shape) of a MODELS entry; a torchvision one is exported once."""
        model, shape = MODELS[name]
        if model.startswith("torchvision:"):
            arch = model.split(":", 1)[1]
            path = os.path.join(self.dir, arch + ".onnx")
            if not os.path.exists(path):
                repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
                subprocess.run(["/usr/bin/python3", os.path.join(repo, "tests/oracle/export_torchvision.py"), self.dir,
                                "--models", arch], check=True, capture_output=True)
            model = path
        return model, shape

    def model_totals(self, name):
        """`tessera inspect --json`'s totals: macs, weights (values), layers."""
        if name not in self.macs:
            model, shape = self.model(name)
            out = subprocess.run([self.tessera, "inspect", model, "--input-shape", shape, "--json"],
                                 capture_output=True, text=True, check=True).stdout
            self.macs[name] = json.loads(out)["totals"]
        return self.macs[name]

    def model_macs(self, name):
        return self.model_totals(name)["macs"]

    def deploy_timeout(self, name, n, rate):
        """--deploy-timeout, or (0, the default) long enough for the slowest
        deploy the plan can make: the gateway sends one device after the other,
        and a tiled plan gives each of the n devices every float32 weight, so
        n x the weights over one cable, 1.5x that plus 5 minutes for the
        devices to decode and pack at their quota; at least 10 minutes. YOLOv2
        on 4 devices at 10 Mbit/s: 21 minutes (the deploy itself ~11)."""
        if self.args.deploy_timeout > 0:
            return self.args.deploy_timeout
        seconds = n * 4 * self.model_totals(name)["weights"] * 8 / emulation.tc_rate(rate)
        return max(600, int(1.5 * seconds) + 300)

    def input_and_reference(self, name):
        """Seeded input .npy and `tessera run`'s outputs for it (this machine, unconstrained)."""
        import numpy as np
        model, shape = self.model(name)
        x = os.path.join(self.dir, name + ".x.npy")
        ref = os.path.join(self.dir, name + ".ref.npy")
        if not os.path.exists(ref):
            dims = [int(v) for v in shape.split("x")]
            np.save(x, np.random.default_rng(7).standard_normal(dims).astype(np.float32))
            subprocess.run([self.tessera, "--log-level", "warn", "run", model, "--input-shape", shape, "--input", x,
                            "--output", ref, "--threads", "2"], check=True, capture_output=True)
        return x, ref

    def calibrate(self, name):
        """This machine's single-thread rate on the model, and the quota for a device."""
        if name in self.host_rate:
            return self.host_rate[name]
        model, shape = self.model(name)
        out = subprocess.run([self.tessera, "--log-level", "warn", "run", model, "--input-shape", shape, "--threads",
                              "1", "--repeat", "5", "--warmup", "1", "--profile", "--json"], capture_output=True,
                             text=True, check=True).stdout
        ms = json.loads(out)["median_ms"]
        self.host_ms[name] = ms
        # The same run's per-layer times: the planner prices each layer by its
        # measured share (tessera plan --layer-profile) unless --mac-only.
        with open(self.layer_profile(name), "w") as f:
            f.write(out)
        self.host_rate[name] = self.model_macs(name) / (ms / 1000.0)
        log("calibration: %s on this machine, 1 thread: %.1f ms = %.3g MAC/s" % (name, ms, self.host_rate[name]))
        return self.host_rate[name]

    def host_slowdown(self, name):
        """The model's single-thread run on this machine now, outside any quota, against calibrate's
        (which set the devices' quotas): > 1 when the shared host runs slower than it did then. A device
        is a fixed share of the host's CPU time, so its compute slows with the host (issue 15: the same
        plan measured 1.00-1.54x of its prediction minutes apart; the probe accounts for part of such a
        spread, not all of it: README "cluster-emulated")."""
        self.calibrate(name)
        model, shape = self.model(name)
        out = subprocess.run([self.tessera, "--log-level", "warn", "run", model, "--input-shape", shape, "--threads",
                              "1", "--repeat", "3", "--warmup", "1", "--json"], capture_output=True, text=True,
                             check=True).stdout
        return json.loads(out)["median_ms"] / self.host_ms[name]

    def layer_profile(self, name):
        return os.path.join(self.dir, name + ".profile.json")

    def compact_profile(self, name):
        return os.path.join(self.dir, name + ".compact.json")

    def profile_args(self, name, n=1):
        """--layer-profile for tessera plan / gateway (the host's per-layer times of the model), with
        n > 1 --tile-profile (the times of the row tiles the tiled plan cuts on n devices), and
        --compact-profile once measured (the convs' times without Winograd, in a device's quota)."""
        if self.args.mac_only:
            return []
        self.calibrate(name)
        return ["--layer-profile", self.layer_profile(name)] + (
            ["--tile-profile", self.tile_profile(name, n)] if n > 1 else []) + (
            ["--compact-profile", self.compact_profile(name)] if os.path.exists(self.compact_profile(name)) else [])

    def tile_profile(self, name, n):
        """The model cut into the tiled plan's row tiles on n equal devices (tessera run --force halo, in
        one process on this machine, the bench's ISA), each device's time per tile against the unsplit
        layer's: the planner prices a tile a few rows high from this instead of its share of the rows
        (narrow tiles run their GEMMs on fewer columns and round rows up to the kernel's blocks)."""
        path = os.path.join(self.dir, "%s.tiles%d.json" % (name, n))
        if not os.path.exists(path):
            model, shape = self.model(name)
            out = subprocess.run([self.tessera, "--log-level", "warn", "run", model, "--input-shape", shape,
                                  "--force", "halo", "--grid", "%dx1" % n, "--devices", str(n), "--threads", "1",
                                  "--repeat", "3", "--warmup", "1", "--profile", "--json"], capture_output=True,
                                 text=True, check=True).stdout
            profile = json.loads(out)
            profile["tile_profile"] = profile.get("tile_profile", []) + self.slice_profile(name, n)
            with open(path, "w") as f:
                json.dump(profile, f)
            tiles = [e for e in profile["tile_profile"] if "rows" in e]
            slow = [e for e in tiles if e["rows"] < e["layer_rows"] and e["layer_ms"] > 0]
            worst = max(slow, key=lambda e: e["ms"] / (e["layer_ms"] * e["rows"] / e["layer_rows"]), default=None)
            log("tile profile: %s on %d devices, %d tiles%s" % (
                name, n, len(tiles), "" if worst is None else "; slowest for its rows: %d of %d rows of '%s' at "
                "%.2fx" % (worst["rows"], worst["layer_rows"], worst["node"],
                           worst["ms"] / (worst["layer_ms"] * worst["rows"] / worst["layer_rows"]))))
        return path

    def slice_profile(self, name, n):
        """The FDT channel slices of the model's memory plan on n equal devices, as
        `tessera run --plan P --profile --json` times them in one process (its
        tile_profile entries with an axis): a fan-out slice of a Winograd conv
        still transforms the whole input and a fan-in slice the whole output,
        so a slice costs more than its share (VGG-16, 4 devices: each device's
        CPU 1.17-1.31x its priced share). The planner prices slices by them
        (tessera plan --tile-profile) as it prices row tiles."""
        model, shape = self.model(name)
        cluster = self.cluster_file(n, None, "1gbit", 0.2, self.args.ram, 0.0, self.device_rate.get(name),
                                    path=os.path.join(self.dir, "slices-%d.yaml" % n))
        plan = os.path.join(self.dir, "%s.slices%d.pb" % (name, n))
        r = subprocess.run([self.tessera, "--log-level", "warn", "plan", model, "--input-shape", shape, "--cluster",
                            cluster, "--objective", "memory", "--layer-profile", self.layer_profile(name), "--out",
                            plan], capture_output=True, text=True)
        if r.returncode != 0:
            log("slice profile: %s on %d devices: no memory plan (%s)" % (name, n, r.stderr.strip()[-200:]))
            return []
        r = subprocess.run([self.tessera, "--log-level", "warn", "run", model, "--input-shape", shape, "--plan", plan,
                            "--threads", "1", "--repeat", "3", "--warmup", "1", "--profile", "--json"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            self.fail("slice profile: %s's memory plan on %d devices did not run: %s" %
                      (name, n, r.stderr.strip()[-200:]))
            return []
        slices = [e for e in json.loads(r.stdout).get("tile_profile", []) if "axis" in e]
        factors = sorted(e["ms"] / (e["layer_ms"] * e["channels"] / e["layer_channels"]) for e in slices
                         if e["layer_ms"] >= 0.1 and e["channels"] < e["layer_channels"])
        log("slice profile: %s on %d devices (memory plan), %d slices%s" % (
            name, n, len(slices), "" if not factors else "; their time over their share: median %.2f, %.2f-%.2f" % (
                factors[len(factors) // 2], factors[0], factors[-1])))
        return slices

    def quota(self, name):
        """(fraction of one CPU, CFS period in us) giving --device-macs on this model."""
        if name not in self.fraction:
            self.fraction[name] = self.args.device_macs / self.calibrate(name)
        fraction = self.fraction[name]
        if fraction > 1:
            log("note: --device-macs %.3g is faster than one CPU of this machine (%.3g); capped at one CPU" %
                (self.args.device_macs, self.calibrate(name)))
            fraction = self.fraction[name] = 1.0
        # The kernel's smallest quota is 1 ms: stretch the period so that a
        # small fraction still gets a quota >= 1 ms, at most 1 s.
        period = int(min(1_000_000, max(10_000, math.ceil(1000 / fraction))))
        if self.args.period_us:  # --period-us: how the quota's period moves the stalls between devices
            period = max(int(math.ceil(1000 / fraction)), self.args.period_us)
        return fraction, period

    def measured_device_rate(self, name, tries=3):
        """Runs the model inside a device's CPU quota: the MAC/s it really
        gets. The first quota comes from this machine's wall-clock rate,
        which other load on the machine makes look slower than it is; the
        quota is corrected by target/measured until within 15 % (or tries)."""
        model, shape = self.model(name)
        group = "%s-calib" % emulation.PREFIX
        rate = 0.0
        for attempt in range(tries):
            fraction, period = self.quota(name)
            self.cgroups.create(group, fraction, period, None)
            # Short runs are repeated (median of 3): one run of a small model
            # spans a few quota periods and other load on the machine moves it.
            expected_s = self.model_macs(name) / self.args.device_macs
            # --profile: the per-layer times the planner is given come from a
            # device's quota too (memory-bound layers lose more to a cold
            # cache there than in a hot loop on this machine); a throttle
            # pause lands in whichever layer runs, i.e. in proportion to
            # their CPU time, so the shares average out over the repeats.
            # Always after a warm-up run: `tessera run` times its first run
            # by default, which pays the arena's first touch and cold caches
            # in the first layers (YOLOv2 608² at --isa baseline: 1764-1816
            # ms cold against 1559-1569 after a warm-up, VGG-16 675-693
            # against 594-618). Until 2026-12-07 a model of 2 s or more in
            # the quota (YOLOv2, VGG-16, ResNet-50) was calibrated from that
            # one cold run: its devices' MAC rate ~13 % low, and its layer
            # profile put the cold start on the first layers (a 4-device
            # YOLOv2 pipeline's first stage measured at 0.75 of its priced
            # share, the others 1.03-1.14, in one process without a quota;
            # after a warm-up and 5 runs 0.97-1.04).
            repeat = ["--repeat", "9", "--warmup", "1"] if expected_s < 0.5 else (
                ["--repeat", "3", "--warmup", "1"] if expected_s < 2 else ["--warmup", "1"])
            p = subprocess.Popen([self.tessera, "--log-level", "warn", "run", model, "--input-shape", shape,
                                  "--threads", "1", "--profile", "--json"] + repeat, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, preexec_fn=lambda: self.cgroups.join(group, os.getpid()))
            out, _ = p.communicate()
            self.cgroups.remove(group)
            rate = self.model_macs(name) / (json.loads(out)["median_ms"] / 1000.0)
            with open(self.layer_profile(name), "wb") as f:
                f.write(out)
            log("calibration: %s in %.2f%% of a CPU (period %d us): %.3g MAC/s, target %.3g" %
                (name, 100 * fraction, period, rate, self.args.device_macs))
            if abs(rate / self.args.device_macs - 1) <= 0.15 or fraction >= 1.0:
                break
            self.fraction[name] = min(1.0, fraction * self.args.device_macs / rate)
        self.device_rate[name] = rate
        # The same runs with compact weights (no Winograd), in the same quota:
        # what a device the planner gives compact weights to fit its RAM
        # spends on each conv (tessera plan --compact-profile).
        if not self.args.mac_only:
            fraction, period = self.quota(name)
            self.cgroups.create(group, fraction, period, None)
            p = subprocess.Popen([self.tessera, "--log-level", "warn", "run", model, "--input-shape", shape,
                                  "--threads", "1", "--profile", "--json", "--compact-weights"] + repeat,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 preexec_fn=lambda: self.cgroups.join(group, os.getpid()))
            out, _ = p.communicate()
            self.cgroups.remove(group)
            with open(self.compact_profile(name), "wb") as f:
                f.write(out)
            log("compact profile: %s in the same quota without Winograd: %.3g s a run (%.3g s with it)" % (
                name, json.loads(out)["median_ms"] / 1000.0, self.model_macs(name) / rate))
        return rate

    def run_rate(self, name, tenants=1):
        """The devices' MAC rate now: `tenants` runs of the model at once, each in its
        own device quota (the quota calibrated once, by measured_device_rate)
        after a warm-up run, as that calibration runs it, without writing any
        profile; the median of their times."""
        model, shape = self.model(name)
        fraction, period = self.quota(name)
        expected_s = self.model_macs(name) / (self.device_rate.get(name) or self.args.device_macs)
        repeat = ["--repeat", "9"] if expected_s < 0.5 else (["--repeat", "3"] if expected_s < 2 else [])
        outs = emulation.run_in_quotas(self.cgroups, [self.tessera, "--log-level", "warn", "run", model,
                                                      "--input-shape", shape, "--threads", "1", "--warmup", "1",
                                                      "--json"] + repeat, tenants, fraction, period, self.procs)
        if outs is None:
            self.fail("%s: a run in a device's quota (the devices' rate, %d at once) failed" % (name, tenants))
            return self.device_rate.get(name) or self.args.device_macs
        return self.model_macs(name) / (statistics.median(json.loads(o)["median_ms"] for o in outs) / 1000.0)

    def device_rate_for(self, name, n):
        """The MAC rate each of n devices computes at while n share this host: n
        runs of the model at once, each in its own device quota (run_rate).
        The quota gives every device its CPU time, but the devices take it in
        turns on the same cores, and each turn starts in caches the others
        left: VGG-16 in 9.84 % of a CPU ran 6.5-6.7 s alone, 7.4-9.1 s with 4
        at once and 9.7-9.8 s with 6 (2026-12-07; emulated workers had
        computed 1.13-1.4x their prediction from the single-run calibration).
        Measured once per model and device count; one device: the calibration."""
        if n <= 1 or self.args.mac_only or self.args.alone_rate:
            return self.device_rate.get(name)
        key = (name, n)
        if key not in self.tenant_rate:
            self.pin_for(name, n)
            rate = self.run_rate(name, n)
            self.tenant_rate[key] = rate
            log("the devices' rate with %d sharing the host: %.3g MAC/s (%.2fx one alone)" % (
                n, rate, rate / (self.device_rate.get(name) or self.args.device_macs)))
        return self.tenant_rate[key]

    def network_cost(self, name, rate):
        """The CPU a device's network stack spends per byte it sends or
        receives, in MACs of the device (the cluster file's
        net_macs_per_byte): a sender and a receiver in two device namespaces
        and cgroups (the model's quota), one shaped cable each, move
        ~0.5 s of the cable's bytes over TCP; each measures its own CPU
        seconds (user + system) around the transfer. Under a quota the host's
        network stack is slowed like its compute, but unlike its compute it
        is not a Pi's x16: this is why the emulated devices pay far more per
        byte than a Pi does (README "cluster-emulated")."""
        key = (name, rate)
        if self.args.mac_only or self.args.no_net_cost:
            return 0.0
        if key in self.net_cost:
            return self.net_cost[key]
        fraction, period = self.quota(name)
        total = max(2 << 20, int(emulation.tc_rate(rate) / 8 * 0.5))
        self.net.start()
        try:
            (ns1, _), (ns2, addr2) = [self.net.add_host(i, rate, self.args.delay_ms) for i in (1, 2)]
            groups = []
            for i in (1, 2):
                groups.append("%s-net%d" % (emulation.PREFIX, i))
                self.cgroups.create(groups[-1], fraction, period, None)
            recv = subprocess.Popen(["ip", "netns", "exec", ns2, sys.executable, "-c", NET_RECEIVER, addr2],
                                    stdout=subprocess.PIPE, text=True,
                                    preexec_fn=lambda: self.cgroups.join(groups[1], os.getpid()))
            ready = recv.stdout.readline()
            send = subprocess.run(["ip", "netns", "exec", ns1, sys.executable, "-c", NET_SENDER, addr2, str(total)],
                                  capture_output=True, text=True, timeout=120,
                                  preexec_fn=lambda: self.cgroups.join(groups[0], os.getpid()))
            out, _ = recv.communicate(timeout=60)
            for g in groups:
                self.cgroups.remove(g)
            if not ready.startswith("ready") or send.returncode != 0 or recv.returncode != 0:
                raise RuntimeError("network cost measurement failed: %s %s" % (send.stderr.strip(), out.strip()))
            received, recv_cpu = out.split()
            if int(received) != total:
                raise RuntimeError("network cost: %s of %d bytes arrived" % (received, total))
            per_byte = (float(send.stdout.split()[0]) + float(recv_cpu)) / (2.0 * total)
        finally:
            self.net.close()
        # Seconds of device time per byte = per_byte / fraction; in MACs of
        # a device declared at device_macs MAC/s:
        cost = per_byte / fraction * self.args.device_macs
        log("network cost: %s cable, %s quota (%.2f%% of a CPU): %.3g CPU-ns per byte sent or received = "
            "%.3g MACs of the device (net_macs_per_byte)" % (rate, name, 100 * fraction, per_byte * 1e9, cost))
        self.net_cost[key] = cost
        return cost

    def transport_cost(self, name, rate):
        """The CPU per byte of tessera's own transport (gRPC exchange streams in
        64 KiB frames, their acks, the copies in and out of the arena), in
        MACs of the device: what the cluster file's net_macs_per_byte
        declares at every point of (model, rate). network_cost's raw TCP
        stream misses most of it: at 1 Gbit/s it measures ~3 MACs a byte,
        while MobileNetV2's workers spent 2-4x their predicted compute
        (issue 15, 'speedup_mobilenet_v2_messages').

        Measured once per model and cable rate on the model's memory plan
        on TRANSPORT_DEVICES devices (priced with the raw TCP figure): each
        device's CPU at quota per request beyond the compute its plan
        predicts, against the bytes it sent and received. The figure is the
        slope over the devices (calibration.py: the plan's hub, device 0,
        moves 3-5x the others' bytes; a bias every device shares does not
        move the slope); where there is none (2 devices, even bytes, a slope
        <= 0), the excess summed over the bytes summed, which took YOLOv2's
        compute bias for transport (9.2 and 59.7 MACs a byte in two runs,
        where the 4- and 6-device plans' slopes are 54 and 51). Every other
        point (other device counts, objectives) is then a prediction.
        --raw-net-cost keeps the raw TCP figure."""
        key = (name, rate)
        if self.args.mac_only or self.args.no_net_cost:
            return 0.0
        raw = self.network_cost(name, rate)
        if self.args.raw_net_cost or self.args.smoke:
            return raw
        if key in self.transport:
            return self.transport[key]
        # ~20 s of requests (3..12): the median over them is the figure.
        seconds = self.model_macs(name) / max(1.0, self.device_rate.get(name) or self.args.device_macs)
        requests = max(3, min(12, int(20 / max(0.05, seconds))))
        # The source's CPU for serving each request is not the transport's: it
        # is measured on one device first (request_total) and taken out of
        # device 0's excess below.
        request_s = self.request_total(name, rate)
        n = TRANSPORT_DEVICES
        p = self.serve_point(name, n, rate, "memory", self.args.ram, requests, 0, net_cost=raw, request_macs=0.0)
        p["transport_calibration"] = True
        self.transport_points.append(p)
        need = ("cpu_wall_s_per_request", "predicted_compute_s", "predicted_network_cpu_s", "predicted_link_bytes")
        if "refused" in p or not all(len(p.get(k) or []) == n for k in need) or sum(p["predicted_link_bytes"]) <= 0:
            log("transport cost: %s on %d devices at %s gave no figure; using the raw TCP one (%.3g MACs a byte)" %
                (name, n, rate, raw))
            self.transport[key] = raw
            return raw
        # Per request, the median over the requests (cgroup ns counters): a
        # request that met a throttled period or a cold cache does not move it.
        cpu = p.get("cpu_wall_s_per_request_median") or p["cpu_wall_s_per_request"]
        if any(math.isnan(c) for c in cpu):
            cpu = p["cpu_wall_s_per_request"]
        # Device 0's predicted compute already holds the request's bytes at
        # the raw figure; what it measured beyond that is request_total.
        source_extra = max(0.0, request_s - p.get("predicted_source_request_cpu_s", 0.0))
        per_byte_s, method, intercept = calibration.transport_seconds_per_byte(
            cpu, p["predicted_compute_s"], p["predicted_network_cpu_s"], p["predicted_link_bytes"], source_extra)
        macs = self.device_rate.get(name) or self.args.device_macs
        # The former estimator beside it, for the record.
        sum_s, _, _ = calibration.transport_seconds_per_byte(
            cpu, p["predicted_compute_s"], p["predicted_network_cpu_s"], p["predicted_link_bytes"], source_extra,
            min_spread=float("inf"))
        p["transport_sum_macs_per_byte"] = sum_s * macs
        cost = max(raw, per_byte_s * macs)
        p["transport_method"] = method
        p["transport_macs_per_byte"] = per_byte_s * macs
        p["transport_intercept_s"] = intercept
        log("transport cost: %s cable, %s on %d devices (memory plan, %d requests, %.2f MiB sent + received): "
            "%.3g MACs a byte by %s%s (raw TCP: %.3g)" %
            (rate, name, n, requests, sum(p["predicted_link_bytes"]) / 2**20, cost,
             "the slope over the devices" if method == "slope" else "the excess summed over the bytes",
             "; the devices' common excess %+.3g s a request" % intercept if intercept is not None else "", raw))
        self.transport[key] = cost
        return cost

    def request_total(self, name, rate):
        """Seconds of the source device's CPU (at its quota) per request
        beyond its layers: serving it (the gateway's call with the inputs,
        decoding them, the reply) and its bytes. Measured once per model and
        cable rate on one device serving a stream of 2 clients, with no
        network cost declared: its CPU at quota per request beyond its
        predicted compute. MobileNetV2 on one device spent 0.206-0.213 s a
        request in a stream against 0.162 s of layers (2026-12-07), and every
        multi-device stream's source 30-46 ms more than predicted at 1 Gbit/s.
        0 (not measured) where a request's compute exceeds 2 s, whose
        run-to-run spread is larger, and with --smoke, --mac-only,
        --no-net-cost or --raw-net-cost."""
        key = (name, rate)
        if self.args.mac_only or self.args.no_net_cost or self.args.smoke or self.args.raw_net_cost:
            return 0.0
        if key in self.request_s:
            return self.request_s[key]
        seconds = self.model_macs(name) / max(1.0, self.device_rate.get(name) or self.args.device_macs)
        self.request_s[key] = 0.0
        if seconds > 2.0:
            return 0.0
        p = self.serve_point(name, 1, rate, "latency", self.args.ram, 3, 2, net_cost=0.0, request_macs=0.0)
        p["request_calibration"] = True
        self.request_points.append(p)
        if "refused" in p or not p.get("stream_cpu_s_per_request") or not p.get("predicted_compute_s"):
            log("request cost: %s on 1 device at %s gave no figure; declaring 0" % (name, rate))
            return 0.0
        self.request_bytes[name] = p.get("request_bytes", 0)
        excess = max(0.0, p["stream_cpu_s_per_request"][0] - p["predicted_compute_s"][0])
        log("request cost: %s cable, %s on 1 device (a stream of 2 clients): %.3g s of device CPU per request "
            "beyond the predicted %.3g s" % (rate, name, excess, p["predicted_compute_s"][0]))
        self.request_s[key] = excess
        return excess

    def request_cost(self, name, rate):
        """The cluster file's request_macs at every point of (model, rate):
        request_total in MACs of the device, less what net_macs_per_byte
        (transport_cost) prices for the request's bytes, so that the planner's
        source CPU per request is request_total."""
        key = (name, rate)
        if key not in self.request:
            total = self.request_total(name, rate)
            macs = self.device_rate.get(name) or self.args.device_macs
            per_byte = self.transport_cost(name, rate) if total > 0 else 0.0
            self.request[key] = max(0.0, total * macs - per_byte * self.request_bytes.get(name, 0))
            if total > 0:
                log("request cost: %s cable, %s: request_macs %.3g (%.3g s a request, %.3g s of it the %.2f MiB at "
                    "%.3g MACs a byte)" % (rate, name, self.request[key], total,
                                           per_byte * self.request_bytes.get(name, 0) / macs,
                                           self.request_bytes.get(name, 0) / 2**20, per_byte))
        return self.request[key]

    def cluster_file(self, n, addresses, rate, delay_ms, ram, net_macs_per_byte=0.0, macs=None, request_macs=0.0,
                     path=None):
        """The cluster file of n emulated devices; `macs`: their MAC/s as measured in
        the quota (the planner's rate), default the target --device-macs."""
        path = path or os.path.join(self.dir, "cluster-%d.yaml" % n)
        with open(path, "w") as f:
            f.write("devices:\n")
            for i in range(n):
                f.write("  - { name: pi%d, kind: linux, address: %s:7070, ram: %dKiB, flash: 32GiB, macs_per_s: %g, "
                        "net_macs_per_byte: %g%s }\n" %
                        (i + 1, addresses[i] if addresses else "10.78.0.%d" % (11 + i), ram // 1024,
                         macs or self.args.device_macs, net_macs_per_byte,
                         ", request_macs: %g" % request_macs if request_macs > 0 else ""))
            f.write("links:\n  default: { bandwidth: %s, latency: %gms }\n" % (emulation.yaml_rate(rate), delay_ms))
        return path

    def pin_for(self, name, n):
        """Pins the next devices to --device-cpus when their quotas fit
        there, else leaves them on every CPU; the point records which
        (device_cpus). Fitting means the quotas sum to at most those CPUs:
        MobileNetV2 runs 2 GMAC/s in 18.6 % of a CPU, so 5 devices take 93 %
        of CPU 0 (the limit was 90 % before). 2026-12-07, 5 devices at
        1 Gbit/s, latency / memory / communication objective and stream
        rate: pinned 0.97 / 0.93 / 0.93 and 1.06, then unpinned 1.19 / 1.41 /
        1.65 and 0.64, then pinned again 1.01 / 0.79 / 0.82 and 1.22: pinned
        runs scatter around their prediction, the unpinned one lay above it."""
        fraction, _ = self.quota(name)
        fits = not self.pinned_cpus or n * fraction <= len(self.pinned_cpus)
        self.cgroups.cpus = self.pinned_cpus if fits else None
        if not fits and (name, n) not in self.unpinned:
            self.unpinned.add((name, n))
            log("note: %d devices at %.1f%% of a CPU each do not fit on CPU(s) %s (--device-cpus): "
                "they run unpinned" % (n, 100 * fraction, ",".join(map(str, sorted(self.pinned_cpus)))))
        return "all" if self.cgroups.cpus is None else ",".join(map(str, sorted(self.cgroups.cpus)))

    def start_cluster(self, name, n, rate, ram):
        """n workers, each in its namespace and cgroup; returns [(name, pid, addr, group)]."""
        fraction, period = self.quota(name)
        self.pin_for(name, n)
        self.net.start()
        workers = []
        for i in range(1, n + 1):
            ns, addr = self.net.add_host(i, rate, self.args.delay_ms)
            group = "%s-w%d" % (emulation.PREFIX, i)
            self.cgroups.create(group, fraction, period, ram)
            # A fresh data dir per point: a worker resumes the program it
            # finds there, and the previous point's would count in its peak.
            self.points_started = getattr(self, "points_started", 0) + (i == 1)
            data = os.path.join(self.dir, "p%d-w%d" % (self.points_started, i))
            os.makedirs(data, exist_ok=True)
            logf = open(os.path.join(self.dir, "w%d.log" % i), "ab")
            trace = []
            if self.args.step_trace:
                # One file per point and device: the steps of every request on one clock.
                os.makedirs(self.args.step_trace, exist_ok=True)
                trace = ["--step-trace", os.path.join(self.args.step_trace, "%s-N%d-%s-p%d-w%d.jsonl" % (
                    name, n, rate, self.points_started, i))]
            # nsenter --net, not `ip netns exec`: the latter remounts /sys,
            # which hides /sys/fs/cgroup, and the worker reads its CPU quota
            # there (worker --flush-sends auto, util/cpu_share.h).
            p = subprocess.Popen(["nsenter", "--net=/run/netns/" + ns, self.tessera, "--log-level", "warn", "worker",
                                  "--listen",
                                  addr + ":7070", "--name", "pi%d" % i, "--insecure", "--threads", "1",
                                  "--flush-sends", self.args.flush_sends, "--data-dir", data] + trace,
                                 stdout=logf, stderr=logf,
                                 preexec_fn=lambda g=group: self.cgroups.join(g, os.getpid()))
            self.procs.append(p)
            workers.append({"name": "pi%d" % i, "proc": p, "addr": addr, "group": group, "ns": ns})
        time.sleep(0.5)
        return workers

    def stop_cluster(self, workers):
        for w in workers:
            if w["proc"].poll() is None:
                w["proc"].kill()
            w["proc"].wait()
            self.procs.remove(w["proc"])
            self.cgroups.remove(w["group"])
        self.net.close()

    def start_gateway(self, name, cluster, objective, in_flight=1, n=1, rate="1gbit"):
        model, shape = self.model(name)
        port, http = free_port(), free_port()
        logpath = os.path.join(self.dir, "gw-%s.log" % objective)
        logf = open(logpath, "wb")
        p = subprocess.Popen([self.tessera, "gateway", "--cluster", cluster, "--model", model, "--input-shape", shape,
                              "--objective", objective, "--listen", "127.0.0.1:%d" % port, "--http",
                              "127.0.0.1:%d" % http, "--data-dir", os.path.join(self.dir, "gw-" + objective),
                              "--insecure", "--max-in-flight", str(in_flight), "--default-deadline-ms",
                              str(int(self.args.deadline_s * 1000))] + self.profile_args(name, n),
                             stdout=logf, stderr=logf)
        self.procs.append(p)
        timeout = self.deploy_timeout(name, n, rate)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if p.poll() is not None:
                raise RuntimeError("gateway exited: " + open(logpath).read()[-2000:])
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % http, timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            time.sleep(0.2)
        else:
            raise RuntimeError("gateway not healthy after %d s: %s" % (timeout,
                                                                       open(logpath).read()[-2000:]))
        text = open(logpath).read()
        m = re.search(r"predicted latency ([0-9.e+-]+) s, throughput ([0-9.e+-]+) /s", text)
        predicted = (float(m.group(1)), float(m.group(2))) if m else (math.nan, math.nan)
        return {"proc": p, "port": port, "http": http, "log": logpath, "predicted": predicted}

    def stop_gateway(self, gw):
        gw["proc"].terminate()
        try:
            gw["proc"].wait(timeout=20)
        except subprocess.TimeoutExpired:
            gw["proc"].kill()
            gw["proc"].wait()
        self.procs.remove(gw["proc"])

    def infer(self, gw, x, out):
        t0 = time.monotonic()
        r = subprocess.run([self.tessera, "infer", "--gateway", "127.0.0.1:%d" % gw["port"], "--input", x, "--output",
                            out, "--deadline-ms", str(int(self.args.deadline_s * 1000))], capture_output=True, text=True)
        return time.monotonic() - t0, r

    def fresh_metrics(self, gw, timeout=15.0):
        """/metrics once the gateway has pulled every worker's status twice more
        (tessera_gateway_status_pulls_total): the link counters then include
        every request that finished before the call."""
        start = self.metrics(gw)["status_pulls"]
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            m = self.metrics(gw)
            if m["status_pulls"] >= start + 2:
                return m
            time.sleep(0.1)
        raise RuntimeError("the gateway pulled no worker status twice in %.0f s" % timeout)

    def metrics(self, gw):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % gw["http"], timeout=5) as r:
            text = r.read().decode()
        link = sum(float(v) for v in re.findall(r"^tessera_link_payload_bytes_total\{[^}]*\} (\S+)$", text, re.M))
        # Messages each device sent + received (tessera_link_messages_total{from,to}).
        messages = {}
        for a, b, v in re.findall(r'^tessera_link_messages_total\{from="(\d+)",to="(\d+)"\} (\S+)$', text, re.M):
            for d in (int(a), int(b)):
                messages[d] = messages.get(d, 0.0) + float(v)

        def value(name):
            m = re.search(r"^" + re.escape(name) + r" (\S+)$", text, re.M)
            return float(m.group(1)) if m else 0.0
        # Each worker's --flush-sends as it resolved it (1/0), by device.
        flush = {int(d): int(float(v)) for d, v in
                 re.findall(r'^tessera_worker_flush_sends\{worker="[^"]*",device="(\d+)"\} (\S+)$', text, re.M)}
        return {"link_bytes": link, "link_messages": messages, "flush_sends": flush,
                "latency_sum": value("tessera_request_latency_seconds_sum"),
                "latency_count": value("tessera_request_latency_seconds_count"),
                "status_pulls": value("tessera_gateway_status_pulls_total")}

    def promised(self, name, cluster, objective, in_flight=1, n=1):
        """Each device's worker RAM with `in_flight` requests at once (the gateway's --max-in-flight)."""
        model, shape = self.model(name)
        r = subprocess.run([self.tessera, "--log-level", "warn", "plan", model, "--input-shape", shape, "--cluster",
                            cluster, "--objective", objective, "--in-flight", str(in_flight), "--json"] +
                           self.profile_args(name, n),
                           capture_output=True, text=True)
        if r.returncode != 0:
            return None, r.stderr.strip() or r.stdout.strip()
        j = json.loads(r.stdout)
        return [d.get("worker_ram", {}).get("promised_bytes", 0) for d in j["device_summary"]], j

    # ---- one point --------------------------------------------------------
    def serve_point(self, name, n, rate, objective, ram, requests, concurrency, net_cost=None, request_macs=None):
        """Workers + gateway for one (model, N, bandwidth, objective); returns the measurements.
        net_cost: the cluster file's net_macs_per_byte (default: transport_cost, also on one device:
        the source's network stack carries the request); request_macs: the source's CPU per request
        served (default: request_cost)."""
        x, ref = self.input_and_reference(name)
        reference = load_npy(ref)
        if request_macs is None:
            request_macs = self.request_cost(name, rate)
        if net_cost is None:
            net_cost = self.transport_cost(name, rate) if n > 1 or request_macs > 0 else 0.0
        workers = self.start_cluster(name, n, rate, ram)
        point = {"model": name, "devices": n, "bandwidth": rate, "objective": objective, "net_macs_per_byte": net_cost,
                 "request_macs": request_macs, "device_cpus": self.pin_for(name, n)}
        try:
            point["device_macs_per_s"] = self.device_rate_for(name, n)
            cluster = self.cluster_file(n, [w["addr"] for w in workers], rate, self.args.delay_ms, ram, net_cost,
                                        point["device_macs_per_s"], request_macs)
            # As many requests at once as clients send (one arena each on
            # every worker): the promise is asked for that many.
            in_flight = max(1, concurrency)
            promised, plan = self.promised(name, cluster, objective, in_flight, n)
            if promised is None:
                point["refused"] = plan
                return point
            point["in_flight"] = in_flight
            gw = self.start_gateway(name, cluster, objective, in_flight, n, rate)
            try:
                point["predicted_latency_s"], point["predicted_throughput_per_s"] = gw["predicted"]
                point["peak_rss_after_deploy_bytes"] = [proc_status(w["proc"].pid, "VmHWM") for w in workers]
                # Warm-up: the first request also opens the workers' channels
                # to each other; on 5 %-CPU devices that can fail once. Such a
                # failure is reported (point["warmup_retries"]), and only a
                # warm-up that keeps failing is a mismatch.
                for attempt in range(3):
                    warm_s, r = self.infer(gw, x, os.path.join(self.dir, "warm.npy"))
                    if r.returncode == 0:
                        break
                    point.setdefault("warmup_errors", []).append(r.stderr.strip()[-300:])
                    log("warm-up request %d failed: %s" % (attempt + 1, r.stderr.strip()[-300:]))
                    time.sleep(2)
                if r.returncode != 0:
                    self.fail("%s N=%d %s %s: warm-up request failed: %s" % (name, n, rate, objective, r.stderr.strip()))
                    return point
                if self.args.free_transport:
                    # tessera's link threads, and with --free-transport=grpc gRPC's own
                    # (event engine, executor, timers); gRPC's server threads also run
                    # the compute, so they stay.
                    prefixes = ["ts-link"] + (["event_engine", "default-exec", "grpc_global", "timer_manager",
                                               "resolver-exec"] if self.args.free_transport == "grpc" else [])
                    moved = [self.cgroups.free_threads(w["proc"].pid, prefixes) for w in workers]
                    log("--free-transport: moved %s threads out of the devices' CPU quota" % moved)
                before = self.fresh_metrics(gw)  # link counters are pulled by the gateway's 1 s health loop
                cpu_before = [self.worker_cpu(w) for w in workers]
                throttled_before = [self.cgroups.throttled(w["group"]) for w in workers]
                latencies, worst = [], 0.0
                samples = [[] for _ in workers]  # each device's CPU seconds in each request
                for k in range(requests):
                    out = os.path.join(self.dir, "out%d.npy" % k)
                    c0 = [self.worker_cpu(w) for w in workers]
                    s, r = self.infer(gw, x, out)
                    c1 = [self.worker_cpu(w) for w in workers]
                    if r.returncode != 0:
                        self.fail("%s N=%d %s %s: request %d failed: %s" % (name, n, rate, objective, k, r.stderr.strip()))
                        continue
                    for d, (a, b) in enumerate(zip(c0, c1)):
                        samples[d].append(b - a)
                    latencies.append(s)
                    worst = max(worst, relative_error(load_npy(out), reference))
                cpu_after = [self.worker_cpu(w) for w in workers]
                throttled_after = [self.cgroups.throttled(w["group"]) for w in workers]
                after = self.fresh_metrics(gw)
                # Where a device's time goes: its CPU seconds per request (at
                # its quota that is cpu / fraction of wall time) and how many
                # quota periods it was throttled in.
                fraction = self.quota(name)[0]
                point["cpu_s_per_request"] = [(b - a) / max(1, len(latencies)) for a, b in zip(cpu_before, cpu_after)]
                point["cpu_wall_s_per_request"] = [c / fraction for c in point["cpu_s_per_request"]]
                # The same per request (from the request's start to its
                # answer; the time between requests, where only the
                # gateway's health checks run, is left out): the median is
                # what one request costs a device, robust to a request that
                # met a cold cache or a throttled period.
                point["cpu_counter"] = "cgroup" if self.cgroups.cpu_ns(workers[0]["group"]) is not None else "ticks"
                point["cpu_s_request_samples"] = samples
                point["cpu_wall_s_per_request_median"] = [
                    statistics.median(v) / fraction if v else math.nan for v in samples]
                point["throttled_periods"] = [b[0] - a[0] for a, b in zip(throttled_before, throttled_after)]
                point["periods"] = [b[1] - a[1] for a, b in zip(throttled_before, throttled_after)]
                # The gateway's own clock (receipt to answer), as a user's
                # client sees it minus the `tessera infer` process start.
                served = after["latency_count"] - before["latency_count"]
                point["latency_s"] = ((after["latency_sum"] - before["latency_sum"]) / served) if served else math.nan
                point["client_latencies_s"] = latencies
                point["relative_error"] = worst
                point["flush_sends"] = self.args.flush_sends  # every worker's --flush-sends
                # ... and what each worker made of it (auto: from its cgroup's CPU quota).
                point["flush_sends_resolved"] = [after["flush_sends"].get(i) for i in range(n)]
                point["link_bytes_per_request"] = (after["link_bytes"] - before["link_bytes"]) / max(1, len(latencies))
                point["link_messages_per_request"] = [
                    (after["link_messages"].get(i, 0) - before["link_messages"].get(i, 0)) / max(1, len(latencies))
                    for i in range(n)]
                point["predicted_compute_s"] = [d.get("compute_s", 0) for d in plan.get("device_summary", [])]
                point["predicted_link_bytes"] = [d.get("sent_bytes", 0) + d.get("received_bytes", 0)
                                                 for d in plan.get("device_summary", [])]
                point["predicted_network_cpu_s"] = [d.get("network_cpu_s", 0) for d in plan.get("device_summary", [])]
                point["request_bytes"] = plan.get("request", {}).get("bytes", 0)
                point["predicted_source_request_cpu_s"] = plan.get("request", {}).get("source_cpu_s", 0)
                if worst > self.args.tolerance:
                    self.fail("%s N=%d %s %s: answer differs from tessera run by %.3g (tolerance %g)" %
                              (name, n, rate, objective, worst, self.args.tolerance))
                if concurrency > 1:
                    # Each device's busy share while the stream runs: CPU used
                    # over what its quota allows (1.0 = the device is the limit).
                    cpu0, t0 = [self.worker_cpu(w) for w in workers], time.monotonic()
                    point["throughput_per_s"], point["throughput_answers_timed"] = self.throughput(
                        gw, x, reference, concurrency, requests)
                    wall = time.monotonic() - t0
                    point["stream_device_busy"] = [(self.worker_cpu(w) - c) / (fraction * wall)
                                                   for w, c in zip(workers, cpu0)]
                    point["stream_cpu_s_per_request"] = [
                        (self.worker_cpu(w) - c) / fraction / max(1, requests_done)
                        for w, c, requests_done in zip(workers, cpu0, [max(requests, 6 * concurrency)] * len(workers))]
                point["promised_bytes"] = promised
                point["peak_rss_bytes"] = [proc_status(w["proc"].pid, "VmHWM") for w in workers]
                # Now (not at the peak): how much of each worker is anonymous memory and how much file-backed.
                point["smaps_rollup_end"] = [smaps_rollup(w["proc"].pid) for w in workers]
                point["cgroup_peak_bytes"] = [self.cgroups.peak_memory(w["group"]) for w in workers]
                point["oom_kills"] = [self.cgroups.oom_kills(w["group"]) for w in workers]
                point["in_cgroup"] = all(self.in_group(w) for w in workers)
                if not point["in_cgroup"]:
                    self.fail("%s N=%d: a worker is not in its cgroup" % (name, n))
                if any(point["oom_kills"]):
                    self.fail("%s N=%d %s %s: a worker was OOM-killed (%s)" % (name, n, rate, objective,
                                                                             point["oom_kills"]))
            finally:
                self.stop_gateway(gw)
        finally:
            self.stop_cluster(workers)
        return point

    def worker_cpu(self, w):
        """A worker's CPU seconds so far: its cgroup's ns counter (all its
        threads, also exited ones), else the process's utime+stime ticks."""
        ns = self.cgroups.cpu_ns(w["group"])
        return ns / 1e9 if ns is not None else cpu_seconds(w["proc"].pid)

    def in_group(self, w):
        try:
            with open("/proc/%d/cgroup" % w["proc"].pid) as f:
                return w["group"] in f.read()
        except OSError:
            return False

    def throughput(self, gw, x, reference, concurrency, requests):
        """Steady-state requests per second with `concurrency` clients.

        Each client keeps one HTTP connection to the gateway (POST /v1/infer,
        .npy in and out: no process start per request, which on this machine
        costs more than a pipeline period). At least 6 requests per client;
        the rate is taken between the `concurrency`-th and the last answer
        (the pipeline is full then), so filling it does not count.
        Returns (rate, answers timed)."""
        import http.client
        import io
        import numpy as np
        body = open(x, "rb").read()
        lock = threading.Lock()
        left = [max(requests, 6 * concurrency)]
        stamps = []

        def client(k):
            conn = http.client.HTTPConnection("127.0.0.1", gw["http"], timeout=self.args.deadline_s)
            try:
                while True:
                    with lock:
                        if left[0] == 0:
                            return
                        left[0] -= 1
                    try:
                        conn.request("POST", "/v1/infer", body=body, headers={
                            "Content-Type": "application/x-npy", "Accept": "application/x-npy"})
                        r = conn.getresponse()
                        data = r.read()
                    except (OSError, http.client.HTTPException) as e:
                        self.fail("throughput request failed: %s" % e)
                        conn.close()
                        conn = http.client.HTTPConnection("127.0.0.1", gw["http"], timeout=self.args.deadline_s)
                        continue
                    t = time.monotonic()
                    if r.status != 200:
                        self.fail("throughput request failed: HTTP %d %s" % (r.status, data[:300]))
                        continue
                    err = relative_error(np.load(io.BytesIO(data)), reference)
                    if err > self.args.tolerance:
                        self.fail("throughput answer differs from tessera run by %.3g" % err)
                        continue
                    with lock:
                        stamps.append(t)
            finally:
                conn.close()

        threads = [threading.Thread(target=client, args=(k,)) for k in range(concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stamps.sort()
        first = min(concurrency, len(stamps) - 2)
        if first < 0 or stamps[-1] <= stamps[first]:
            return math.nan, 0
        return (len(stamps) - 1 - first) / (stamps[-1] - stamps[first]), len(stamps) - 1 - first

    # ---- experiments ----------------------------------------------------
    def fits(self, name, ram, devices):
        """Item 2: refused on one device, OOM-killed when forced, equal answers on N."""
        model, shape = self.model(name)
        result = {"model": name, "ram_bytes": ram}
        one = self.cluster_file(1, None, "1gbit", self.args.delay_ms, ram)
        r = subprocess.run([self.tessera, "plan", model, "--input-shape", shape, "--cluster", one, "--objective",
                            "memory"], capture_output=True, text=True)
        result["one_device_plan_exit"] = r.returncode
        result["one_device_plan_error"] = (r.stderr.strip().splitlines() or [""])[-1]
        log("1 device, ram %d MiB: tessera plan exit %d: %s" % (ram >> 20, r.returncode, result["one_device_plan_error"]))
        if r.returncode == 0 or "short by" not in r.stderr:
            self.fail("%s: the planner did not refuse one device with %d MiB" % (name, ram >> 20))
        # Forced: the whole model in one process under the same memory limit.
        group = "%s-forced" % emulation.PREFIX
        self.cgroups.create(group, None, 100000, ram)
        x, ref = self.input_and_reference(name)
        p = subprocess.Popen([self.tessera, "--log-level", "warn", "run", model, "--input-shape", shape, "--input", x],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             preexec_fn=lambda: self.cgroups.join(group, os.getpid()))
        _, err = p.communicate()
        result["forced_run_exit"] = p.returncode
        result["forced_run_oom_kills"] = self.cgroups.oom_kills(group)
        self.cgroups.remove(group)
        log("1 device forced (tessera run in %d MiB): exit %d, oom_kill %d" % (ram >> 20, p.returncode,
                                                                               result["forced_run_oom_kills"]))
        if p.returncode != -signal.SIGKILL or result["forced_run_oom_kills"] < 1:
            self.fail("%s: tessera run in %d MiB was not OOM-killed (exit %d)" % (name, ram >> 20, p.returncode))
        result["clusters"] = []
        for n in devices:
            point = self.serve_point(name, n, "1gbit", "memory", ram, self.args.fit_requests, 1)
            log(format_point(point))
            if "refused" in point:
                self.fail("%s on %d devices of %d MiB: refused: %s" % (name, n, ram >> 20, point["refused"]))
            result["clusters"].append(point)
        return result

    def speedup(self, models, devices, rates, objectives):
        points = []
        for name in models:
            for rate in rates:
                for n in devices:
                    for objective in objectives:
                        if n == 1 and objective != objectives[0]:
                            continue  # one device: every objective is the same whole-model plan
                        # Requests per second with 2 x N clients: for the throughput
                        # objective and for one device (the baseline of both);
                        # --concurrency K measures it for every point.
                        clients = self.args.concurrency or (2 * n if objective == "throughput" or n == 1 else 0)
                        runs = []
                        # The host's speed just before and just after each run
                        # (host_slowdown), their mean recorded with the run.
                        before = self.host_slowdown(name)
                        calibrated = self.device_rate.get(name)
                        for k in range(max(1, self.args.point_repeats)):
                            now = None
                            if self.args.rate_each_run and calibrated:
                                # Diagnosis: this run's cluster file declares the devices' rate measured
                                # just before it (run_rate, as many at once as the point has devices, or
                                # one alone with --alone-rate); the transport and request costs stay in
                                # MACs. On 2026-12-07 this did not follow what the workers got: VGG-16's
                                # probes moved 0.90-1.23x of the calibration while the workers' CPU per
                                # request moved +-10 %, uncorrelated, and the ratios spread more.
                                self.tenant_rate.pop((name, n), None)
                                now = self.run_rate(name) if n == 1 or self.args.alone_rate else \
                                    self.device_rate_for(name, n)
                                if n == 1 or self.args.alone_rate:
                                    self.device_rate[name] = now
                                log("the devices' rate now: %.3g MAC/s (%.2fx the calibration's)" %
                                    (now, now / calibrated))
                            try:
                                runs.append(self.serve_point(name, n, rate, objective, self.args.ram,
                                                             self.args.requests, clients))
                            finally:
                                if calibrated:
                                    self.device_rate[name] = calibrated
                            if now is not None:
                                runs[-1]["device_macs_per_s_run"] = now
                                runs[-1]["device_macs_per_s_calibrated"] = calibrated
                            if "refused" in runs[-1]:
                                break
                            after = self.host_slowdown(name)
                            runs[-1]["host_slowdown"] = (before + after) / 2
                            runs[-1]["host_slowdown_before_after"] = [before, after]
                            before = after
                            if self.args.point_repeats > 1:
                                log("run %d of %d: %s" % (k + 1, self.args.point_repeats, format_point(runs[-1])))
                        point = median_run(runs)
                        log(format_point(point))
                        points.append(point)
        return points


def median_run(runs):
    """The run of one point (the same plan deployed afresh each time) whose
    latency is the median of the runs' (the lower middle one for an even
    count; by measured/predicted where each run was planned with the
    devices' rate of its moment), with every run's figures beside it under "repeats": the host's
    speed moves by 10-40 % over minutes (README "cluster-emulated"), so one
    run of a point can sit far from its prediction though the model holds."""
    timed = [r for r in runs if not math.isnan(r.get("latency_s", math.nan))]
    if len(runs) == 1 or not timed:
        return runs[-1]
    # Runs each planned with the devices' rate of their own moment (run_rate)
    # have predictions of their own: the middle one by measured/predicted.
    if all(r.get("device_macs_per_s_run") and r.get("predicted_latency_s") for r in timed):
        timed.sort(key=lambda r: r["latency_s"] / r["predicted_latency_s"])
    else:
        timed.sort(key=lambda r: r["latency_s"])
    point = dict(timed[(len(timed) - 1) // 2])
    keys = ("latency_s", "predicted_latency_s", "relative_error", "cpu_wall_s_per_request_median", "host_slowdown",
            "device_macs_per_s_run",
            "throughput_per_s", "predicted_throughput_per_s", "link_bytes_per_request", "peak_rss_bytes")
    point["repeats"] = [{k: r[k] for k in keys if k in r} for r in runs]
    return point


def format_point(p):
    if "refused" in p:
        return "%-12s N=%d %-8s %-13s refused: %s" % (p["model"], p["devices"], p["bandwidth"], p["objective"],
                                                       p["refused"][-200:])
    pred = p.get("predicted_latency_s", math.nan)
    lat = p.get("latency_s", math.nan)
    mem = ""
    if p.get("peak_rss_bytes"):
        mem = " peak RSS %s MiB (promised %s)" % (
            "/".join("%.0f" % (b / 2**20) for b in p["peak_rss_bytes"]),
            "/".join("%.0f" % (b / 2**20) for b in p.get("promised_bytes") or []))
    tp = ""
    if "throughput_per_s" in p:
        ptp = p.get("predicted_throughput_per_s", math.nan)
        tp = " %.3f req/s (predicted %.3f, ratio %.2f)" % (p["throughput_per_s"], ptp, p["throughput_per_s"] / ptp)
    if p.get("stream_device_busy"):
        tp += " [devices busy %s of their quota; CPU at quota per request %s s]" % (
            "/".join("%.2f" % b for b in p["stream_device_busy"]),
            "/".join("%.3f" % c for c in p["stream_cpu_s_per_request"]))
    elif p.get("cpu_wall_s_per_request"):
        tp += " [CPU at quota per request: %s s" % "/".join("%.2f" % c for c in p["cpu_wall_s_per_request"])
        if p.get("predicted_compute_s") and any(p.get("link_messages_per_request") or []):
            # Beside the CPU used: the plan's compute (with the transport's CPU
            # per byte) and the messages the device sent + received, the data
            # a per-message term would be fitted on (issue 15).
            tp += "; predicted %s s; %s messages" % (
                "/".join("%.2f" % c for c in p["predicted_compute_s"]),
                "/".join("%.0f" % m for m in p["link_messages_per_request"]))
        tp += "]"
    if p.get("host_slowdown"):
        tp += " [host %.2fx its calibration's time a run]" % p["host_slowdown"]
    if p.get("device_macs_per_s") and p.get("devices", 1) > 1:
        tp += " [devices declared at %.3g MAC/s, measured %d at once]" % (p["device_macs_per_s"], p["devices"])
    if p.get("device_macs_per_s_run"):
        tp += " [devices at %.3g MAC/s, %.2fx the calibration's]" % (
            p["device_macs_per_s_run"], p["device_macs_per_s_run"] / p["device_macs_per_s_calibrated"])
    if len(p.get("repeats") or []) > 1:
        tp += " [median of %d runs; their ratios %s]" % (len(p["repeats"]), "/".join(
            "%.2f" % (r["latency_s"] / r["predicted_latency_s"]) if r.get("predicted_latency_s") and "latency_s" in r
            else "-" for r in p["repeats"]))
        if all(r.get("host_slowdown") for r in p["repeats"]):
            tp = tp[:-1] + "; host %s]" % "/".join("%.2f" % r["host_slowdown"] for r in p["repeats"])
    return ("%-12s N=%d %-8s %-13s latency %.3f s (predicted %.3f, ratio %.2f)%s rel.err %.2g, %.1f MiB/req on links%s"
            % (p["model"], p["devices"], p["bandwidth"], p["objective"], lat, pred, lat / pred if pred else math.nan,
               tp, p.get("relative_error", math.nan), p.get("link_bytes_per_request", 0) / 2**20, mem))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tessera", default="build/tessera")
    ap.add_argument("--smoke", action="store_true", help="2 devices, small model, <= 60 s; non-zero exit on mismatch")
    ap.add_argument("--experiment", choices=["all", "fits", "speedup", "transport"], default="all",
                    help="transport: only the transport cost of each model and cable rate, "
                    "--transport-repeats times (how steady the figure is)")
    ap.add_argument("--transport-repeats", type=int, default=3)
    ap.add_argument("--models", default="yolov2,vgg-16,resnet50,mobilenet_v2")
    ap.add_argument("--fit-model", default="yolov2")
    ap.add_argument("--fit-ram", type=parse_bytes, default=parse_bytes("128MiB"))
    ap.add_argument("--fit-devices", default="4,6")
    ap.add_argument("--fit-requests", type=int, default=2)
    ap.add_argument("--devices", default="1,2,4,6")
    ap.add_argument("--bandwidths", default="1gbit,100mbit,10mbit")
    ap.add_argument("--objectives", default="latency,memory,communication,throughput")
    ap.add_argument("--device-macs", type=float, default=2e9, help="each device's MAC/s (default: a Pi 4 core)")
    ap.add_argument("--isa", default="baseline",
                    help="kernel level every tessera of the bench runs at (TESSERA_ISA): baseline = 128-bit vectors, "
                         "as a Pi's NEON; 'native' = this CPU's best. A device is a quota of this CPU calibrated "
                         "to --device-macs on these kernels")
    ap.add_argument("--period-us", type=int, default=0,
                    help="CFS period of the devices' quotas (0: 10 ms, or longer where the quota would be "
                    "under the kernel's 1 ms); a device that waits on a throttled peer waits up to the "
                    "period's throttled part, so this shows what the emulation's quotas add to a latency")
    ap.add_argument("--ram", type=parse_bytes, default=parse_bytes("1GiB"), help="each device's RAM (speed-up runs)")
    ap.add_argument("--delay-ms", type=float, default=0.2, help="one-way delay of every cable (netem)")
    ap.add_argument("--requests", type=int, default=3)
    ap.add_argument("--point-repeats", type=int, default=1,
                    help="deploy and measure every speed-up point this many times; the point reported is the "
                         "run with the median latency, every run's figures beside it (\"repeats\")")
    ap.add_argument("--flush-sends", choices=["auto", "on", "off"], default="auto",
                    help="every worker's --flush-sends (auto: on, since each device's compute takes its whole CPU "
                         "quota; off shows what a device's peers wait while its messages get the CPU only in turns "
                         "with its compute)")
    ap.add_argument("--free-transport", choices=["", "links", "grpc"], default="",
                    help="experiment (cgroup v1): after the warm-up request, move each worker's link threads "
                         "(ts-link-*; with 'grpc' also gRPC's event engine, executor and timer threads) out of its "
                         "CPU quota, as if the board had a spare core for its transport")
    ap.add_argument("--step-trace", default="",
                    help="directory: every worker writes its steps' timeline there (tessera worker --step-trace; "
                         "bench/cluster-emulated/steps.py reads it)")
    ap.add_argument("--concurrency", type=int, default=0,
                    help="clients for a throughput measurement at every point (default: 2 x devices, only for "
                         "the throughput objective and one device)")
    ap.add_argument("--mac-only", action="store_true",
                    help="plan with MAC counts alone (no measured per-layer times, tessera plan --layer-profile)")
    ap.add_argument("--no-net-cost", action="store_true",
                    help="declare no network-stack CPU per byte (net_macs_per_byte 0) instead of measuring it")
    ap.add_argument("--raw-net-cost", action="store_true",
                    help="declare the raw TCP stream's CPU per byte (network_cost) instead of measuring tessera's "
                         "transport on the model's 4-device memory plan (transport_cost; --smoke always uses raw)")
    ap.add_argument("--device-cpus", default="0",
                    help="CPUs every emulated device and every calibration in a device's quota run on (comma "
                         "list; 'all': any CPU); their quotas must fit in them")
    ap.add_argument("--rate-each-run", action="store_true",
                    help="diagnosis: plan each run of a speed-up point with the devices' rate measured in one "
                         "device's quota just before it (run_rate), recorded beside the run")
    ap.add_argument("--alone-rate", action="store_true",
                    help="declare every device's rate as measured alone in its quota (default: with as many "
                         "devices running at once as the point has, device_rate_for)")
    ap.add_argument("--tolerance", type=float, default=1e-4, help="max |a-b| / max |ref| against tessera run")
    ap.add_argument("--deadline-s", type=float, default=600)
    ap.add_argument("--deploy-timeout", type=int, default=0,
                    help="seconds a gateway may take to deploy and answer /healthz; 0: from the model's weights, "
                         "the devices and the bandwidth (at least 600)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--plots", action="store_true")
    args = ap.parse_args()
    if os.getuid() != 0:
        print("cluster-emulated: needs root (ip netns, tc, cgroups)", file=sys.stderr)
        return 2
    for tool in ("ip", "tc"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            print("cluster-emulated: %s missing (deploy/install-deps.sh installs iproute2)" % tool, file=sys.stderr)
            return 2

    if args.isa != "native":
        # Inherited by every tessera the bench starts: calibration, workers, reference.
        os.environ["TESSERA_ISA"] = args.isa
    try:
        emulation.claim()
    except RuntimeError as e:
        print("cluster-emulated: %s" % e, file=sys.stderr)
        return 2
    bench = Bench(args)

    def on_signal(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)  # also when started in the background (SIGINT ignored there)
    results = {"cgroups": bench.cgroups.version, "device_macs": args.device_macs}
    t0 = time.monotonic()
    try:
        if args.smoke:
            results.update(smoke(bench, args))
        else:
            models = args.models.split(",")
            for name in set(models + ([args.fit_model] if args.experiment in ("all", "fits") else [])):
                rate = bench.measured_device_rate(name)
                results.setdefault("calibration", {})[name] = {
                    "host_single_thread_macs_per_s": bench.calibrate(name), "quota": bench.quota(name),
                    "device_macs_per_s_measured": rate}
                log("calibration: %s in a device's quota (%.2f%% of a CPU, period %d us): %.3g MAC/s "
                    "(target %.3g)" % (name, 100 * bench.quota(name)[0], bench.quota(name)[1], rate, args.device_macs))
            if args.experiment in ("all", "fits"):
                results["fits"] = bench.fits(args.fit_model, args.fit_ram,
                                             [int(v) for v in args.fit_devices.split(",")])
            if args.experiment == "transport":
                figures = results.setdefault("transport_repeats", {})
                for name in models:
                    for rate in args.bandwidths.split(","):
                        for _ in range(args.transport_repeats):
                            bench.transport.pop((name, rate), None)
                            figures.setdefault("%s %s" % (name, rate), []).append(bench.transport_cost(name, rate))
                        v = figures["%s %s" % (name, rate)]
                        log("transport cost: %s at %s over %d measurements: %s MACs a byte (median %.3g)" % (
                            name, rate, len(v), ", ".join("%.3g" % c for c in v), statistics.median(v)))
            if args.experiment in ("all", "speedup"):
                results["speedup"] = bench.speedup(models, [int(v) for v in args.devices.split(",")],
                                                   args.bandwidths.split(","), args.objectives.split(","))
    except KeyboardInterrupt:
        log("interrupted: cleaning up")
        bench.close()
        return 130
    finally:
        bench.close()
    if bench.transport:
        results["transport_cost"] = {"%s %s" % k: v for k, v in bench.transport.items()}
        results["transport_calibration_points"] = bench.transport_points
    if bench.request_s:
        results["request_cost"] = {"%s %s" % k: {"request_macs": bench.request.get(k), "seconds": v}
                                   for k, v in bench.request_s.items()}
        results["request_calibration_points"] = bench.request_points
    results["failures"] = bench.failures
    results["delay_emulated"] = bench.net.netem is not False
    if bench.net.netem is False:
        log("note: this kernel has no sch_netem: cables have their rate but not the %g ms delay "
            "(the cluster file still declares it to the planner)" % args.delay_ms)
    results["seconds"] = time.monotonic() - t0
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "smoke.json" if args.smoke else "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    if args.plots and not args.smoke:
        import plots
        plots.write_all(results, args.out)
    log("%d mismatches, %.0f s" % (len(bench.failures), results["seconds"]))
    return 1 if bench.failures else 0


def check_latency(bench, objective, p):
    """The printed latency is a promise (issue 15 item 3). The model has
    compute (layer profile), the cables, and the network stack's CPU per byte
    (network_cost); it lacks the per-request CPU of the workers' gRPC
    transport under a quota (threads, wake-ups: README "cluster-emulated"),
    measured at 1.2-1.65x here and 2.3x on one CI run (a worker's CPU per
    request at 1.4x the other plan's on the same machine). Promise: 0.5-3.0x
    until that CPU is in the model (issue 15)."""
    ratio = p.get("latency_s", math.nan) / p.get("predicted_latency_s", math.nan)
    log("%s %s plan: latency %.3f s measured, %.3f s predicted: ratio %.2f (promise 0.5-3.0)" % (
        "PASS" if 0.5 <= ratio <= 3.0 else "FAIL", objective, p.get("latency_s", math.nan),
        p.get("predicted_latency_s", math.nan), ratio))
    if not 0.5 <= ratio <= 3.0:
        bench.fail("%s plan: latency %.3f s is %.2fx the predicted %.3f s" % (
            objective, p.get("latency_s", math.nan), ratio, p.get("predicted_latency_s", math.nan)))


def check_memory(bench, objective, p):
    """The worker RAM `plan` prints is a promise (issue 11): under a CPU quota
    too, no worker's peak RSS (VmHWM, deploy and requests) may exceed it.
    Before gRPC's BDP probing was turned off (ConfigureServer,
    transport/grpc/grpc_channel.h), throttled workers peaked up to 10 MiB
    over it on a deploy (up to 60 MiB with most of a model's weights)."""
    peaks, promised = p.get("peak_rss_bytes") or [], p.get("promised_bytes") or []
    for i, (peak, promise) in enumerate(zip(peaks, promised)):
        ok = peak <= promise
        log("%s %s plan: worker %d peak RSS %.1f MiB, promised %.1f MiB" % (
            "PASS" if ok else "FAIL", objective, i + 1, peak / 2**20, promise / 2**20))
        if not ok:
            bench.fail("%s plan: worker %d peaked at %.1f MiB, over its promised %.1f MiB" % (
                objective, i + 1, peak / 2**20, promise / 2**20))
    if not peaks or len(peaks) != len(promised):
        bench.fail("%s plan: no peak RSS or promise to compare (%d peaks, %d promises)" % (
            objective, len(peaks), len(promised)))


def check_flush(bench, args, p):
    """Each worker of one compute thread under a quota below one CPU resolves
    --flush-sends auto to on (util/cpu_share.h read inside its cgroup), as the
    gateway's /metrics reports it."""
    got = p.get("flush_sends_resolved") or []
    want = {"auto": 1, "on": 1, "off": 0}[args.flush_sends]
    ok = len(got) == p["devices"] and all(v == want for v in got)
    log("%s flush-sends %s: the workers resolved %s (want %d each)" % ("PASS" if ok else "FAIL", args.flush_sends, got,
                                                                     want))
    if not ok:
        bench.fail("workers resolved --flush-sends %s to %s, want %d each" % (args.flush_sends, got, want))


def smoke(bench, args):
    """Two devices, yolov2-tiny at 160², 100 Mbit/s: every answer equal, workers in their cgroups, shaped links."""
    name = "yolov2-tiny-160"
    # Its devices get up to half a CPU each (a short run on a small model):
    # two of them do not fit on one CPU, so they are not pinned (--device-cpus).
    bench.pinned_cpus = bench.cgroups.cpus = None
    args.device_macs = min(args.device_macs, 0.5 * bench.calibrate(name))
    rate = bench.measured_device_rate(name)
    log("smoke: device quota %.1f%% of a CPU gives %.3g MAC/s (target %.3g)" %
        (100 * bench.quota(name)[0], rate, args.device_macs))
    # The quota must hold the model near the device rate; a loaded machine
    # (other tests running) moves a short measurement, hence the margin.
    if not 0.5 * args.device_macs < rate < 2.0 * args.device_macs:
        bench.fail("the CPU quota gives %.3g MAC/s, target %.3g" % (rate, args.device_macs))
    points = []
    for objective in ("memory", "latency"):
        p = bench.serve_point(name, 2, "100mbit", objective, parse_bytes("512MiB"), 3, 1)
        log(format_point(p))
        if "refused" in p:
            bench.fail("smoke plan refused: " + p["refused"])
        elif objective == "memory" and p.get("link_bytes_per_request", 0) <= 0:
            bench.fail("the memory plan on 2 devices sent nothing between them")
        else:
            check_latency(bench, objective, p)
            check_memory(bench, objective, p)
            check_flush(bench, args, p)
        points.append(p)
    # A stream (issue 18): the throughput objective's pipeline on the same two
    # devices, two clients, every answer checked; requests per second against
    # the printed 1 / period (with the measured layer profile). Promise:
    # 0.5-1.5x — the devices' gRPC and copy work under a quota is not in the
    # planner's model yet (README "cluster-emulated" has the full sweep).
    p = bench.serve_point(name, 2, "100mbit", "throughput", parse_bytes("512MiB"), 2, 2)
    log(format_point(p))
    if "refused" in p:
        bench.fail("smoke throughput plan refused: " + p["refused"])
    else:
        ratio = p.get("throughput_per_s", math.nan) / p.get("predicted_throughput_per_s", math.nan)
        log("%s stream: %.2f req/s measured, %.2f predicted (1 / pipeline period): ratio %.2f (promise 0.5-1.5)" % (
            "PASS" if 0.5 <= ratio <= 1.5 else "FAIL", p.get("throughput_per_s", math.nan),
            p.get("predicted_throughput_per_s", math.nan), ratio))
        if not 0.5 <= ratio <= 1.5:
            bench.fail("throughput %.2f req/s is %.2fx the predicted %.2f" % (
                p.get("throughput_per_s", math.nan), ratio, p.get("predicted_throughput_per_s", math.nan)))
        check_latency(bench, "throughput", p)
        check_memory(bench, "throughput", p)
        points.append(p)
    # The host probe the speed-up runs record beside each run (host_slowdown):
    # the model's single-thread run now against the calibration's, minutes
    # apart on the same host; outside 0.2-5x the calibration itself is unsound.
    slowdown = bench.host_slowdown(name)
    log("smoke: host at %.2fx its calibration's time a run" % slowdown)
    if not 0.2 <= slowdown <= 5.0:
        bench.fail("the host's single-thread run took %.2fx the calibration's" % slowdown)
    return {"smoke": points, "device_macs_measured": rate, "host_slowdown": slowdown}


if __name__ == "__main__":
    sys.exit(main())
