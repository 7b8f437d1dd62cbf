"""The emulated Pi cluster of bench/cluster-emulated (issue 15): network
namespaces joined by a bridge, links shaped with tc, and one cgroup per
worker with a CPU quota and a memory limit.

Everything created is named ts-emu-* (namespaces, links, cgroups) and is
removed by Emulation.close(), which run.py calls on every exit path
(normal end, error, Ctrl-C, SIGTERM). Addresses: 10.78.0.0/24.
"""
import fcntl
import os
import subprocess
import time

PREFIX = "ts-emu"
SUBNET = "10.78.0"


LOCK = "/run/ts-emu.lock"
_lock_file = None


def claim():
    """Takes the machine's emulation lock for this process's lifetime, or
    raises naming the run that holds it. Every run uses the same names and
    subnet, and starting one removes any ts-emu-* leftovers: a second run
    beside the first would tear down the first one's cables and groups."""
    global _lock_file
    f = open(LOCK, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "?"
        f.close()
        raise RuntimeError("another bench/cluster-emulated run (pid %s) holds %s: its namespaces, cables and "
                           "cgroups have the names this run would use; wait for it to end" % (holder, LOCK))
    f.seek(0)
    f.truncate()
    f.write("%d\n" % os.getpid())
    f.flush()
    _lock_file = f


def sh(*cmd, check=True):
    """Runs a command; raises with its stderr when it fails and check is set."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(cmd), (r.stderr or r.stdout).strip()))
    return r


class Cgroups:
    """One worker's CPU quota and memory limit, on cgroup v1 or v2.

    v1 (what machines of this kind mount): cpu/<name>/cpu.cfs_quota_us and
    cpu.cfs_period_us, memory/<name>/memory.limit_in_bytes (and memsw when
    swap accounting is on). v2: <name>/cpu.max and memory.max. Either way a
    memory limit OOM-kills the worker when exceeded."""

    ROOT = "/sys/fs/cgroup"

    def __init__(self):
        self.v2 = os.path.exists(os.path.join(self.ROOT, "cgroup.controllers"))
        if not self.v2 and not (os.path.isdir(os.path.join(self.ROOT, "cpu")) and
                                os.path.isdir(os.path.join(self.ROOT, "memory"))):
            raise RuntimeError("no cgroup v1 cpu+memory controllers or cgroup v2 under " + self.ROOT)
        if self.v2:
            # Child groups get the controllers only when the parent enables them.
            with open(os.path.join(self.ROOT, "cgroup.subtree_control"), "a") as f:
                try:
                    f.write("+cpu +memory")
                except OSError:
                    pass
        self.created = []
        # CPUs every process that joins a group is pinned to (join); None: any.
        self.cpus = None

    @property
    def version(self):
        return "v2" if self.v2 else "v1"

    def _dirs(self, name):
        if self.v2:
            return [os.path.join(self.ROOT, name)]
        dirs = [os.path.join(self.ROOT, "cpu", name), os.path.join(self.ROOT, "memory", name)]
        # The CPU a group used, in ns and with its exited threads, is counted
        # by the cpuacct controller; v1 machines of this kind mount it apart
        # from cpu (when they mount it beside cpu, the cpu dir has it).
        acct = os.path.join(self.ROOT, "cpuacct")
        if os.path.isdir(acct) and not os.path.samefile(acct, os.path.join(self.ROOT, "cpu")):
            dirs.append(os.path.join(acct, name))
        return dirs

    @staticmethod
    def _write(path, value):
        with open(path, "w") as f:
            f.write(str(value))

    def create(self, name, cpu_fraction, period_us, memory_bytes):
        """A group allowing cpu_fraction of one CPU (quota/period) and
        memory_bytes (None = no limit)."""
        for d in self._dirs(name):
            os.makedirs(d, exist_ok=True)
            self.created.append(d)
        quota = max(1000, int(round(cpu_fraction * period_us))) if cpu_fraction else -1
        if self.v2:
            d = self._dirs(name)[0]
            self._write(os.path.join(d, "cpu.max"), "%s %d" % ("max" if quota < 0 else quota, period_us))
            if memory_bytes:
                self._write(os.path.join(d, "memory.max"), memory_bytes)
                if os.path.exists(os.path.join(d, "memory.swap.max")):
                    self._write(os.path.join(d, "memory.swap.max"), 0)
        else:
            cpu, mem = self._dirs(name)[:2]
            self._write(os.path.join(cpu, "cpu.cfs_period_us"), period_us)
            self._write(os.path.join(cpu, "cpu.cfs_quota_us"), quota)
            if memory_bytes:
                self._write(os.path.join(mem, "memory.limit_in_bytes"), memory_bytes)
                memsw = os.path.join(mem, "memory.memsw.limit_in_bytes")
                if os.path.exists(memsw):
                    try:
                        self._write(memsw, memory_bytes)
                    except OSError:
                        pass
        return quota

    def free_threads(self, pid, prefixes):
        """Moves the threads of `pid` whose name starts with one of `prefixes` to the
        root CPU group (no quota); returns how many. The process's other
        threads keep their group. v2 moves only whole processes between
        domain groups: there this does nothing and returns 0."""
        if self.v2:
            return 0
        moved = 0
        for tid in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                    if not f.read().startswith(tuple(prefixes)):
                        continue
                for d in ("cpu", "cpuacct"):
                    path = os.path.join(self.ROOT, d, "tasks")
                    if os.path.exists(path):
                        self._write(path, tid)
                moved += 1
            except OSError:
                pass
        return moved

    def join(self, name, pid):
        for d in self._dirs(name):
            self._write(os.path.join(d, "cgroup.procs"), pid)
        if self.cpus:
            os.sched_setaffinity(pid, self.cpus)

    def _read(self, name, v1_file, v2_file):
        path = os.path.join(self._dirs(name)[0 if self.v2 else 1], v2_file if self.v2 else v1_file)
        try:
            with open(path) as f:
                return f.read()
        except OSError:
            return ""

    def peak_memory(self, name):
        """Peak memory charged to the group (bytes; 0 when the kernel keeps none)."""
        text = self._read(name, "memory.max_usage_in_bytes", "memory.peak")
        return int(text) if text.strip().isdigit() else 0

    def oom_kills(self, name):
        text = self._read(name, "memory.oom_control", "memory.events")
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def cpu_ns(self, name):
        """CPU time the group's tasks used since it was made, in ns (all
        threads, also those that exited; None when the kernel counts none):
        cpuacct.usage on v1, cpu.stat usage_usec on v2. Finer than a
        process's utime+stime, which is counted in 10 ms ticks."""
        try:
            if self.v2:
                with open(os.path.join(self._dirs(name)[0], "cpu.stat")) as f:
                    for line in f:
                        k, _, v = line.partition(" ")
                        if k == "usage_usec":
                            return int(v) * 1000
                return None
            for d in self._dirs(name):
                path = os.path.join(d, "cpuacct.usage")
                if os.path.exists(path):
                    with open(path) as f:
                        return int(f.read())
        except (OSError, ValueError):
            pass
        return None

    def throttled(self, name):
        """(periods throttled, total periods) of the CPU quota."""
        path = os.path.join(self._dirs(name)[0], "cpu.stat")
        stats = {}
        try:
            with open(path) as f:
                for line in f:
                    k, _, v = line.partition(" ")
                    stats[k] = int(v)
        except OSError:
            pass
        return stats.get("nr_throttled", 0), stats.get("nr_periods", 0)

    def remove(self, name):
        for d in self._dirs(name):
            self._destroy(d)

    def close(self):
        for d in list(reversed(self.created)):
            self._destroy(d)

    def _destroy(self, d):
        """Kills what is left in the group, then removes it (the kernel
        refuses while a killed member is still exiting: retried for 5 s)."""
        self._kill_members(d)
        for _ in range(50):
            try:
                os.rmdir(d)
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)
        if d in self.created:
            self.created.remove(d)

    @staticmethod
    def _kill_members(d):
        try:
            with open(os.path.join(d, "cgroup.procs")) as f:
                pids = [int(p) for p in f.read().split()]
        except OSError:
            return
        for p in pids:
            try:
                os.kill(p, 9)
            except OSError:
                pass

def tc_rate(rate):
    """'1gbit' / '100mbit' / '10mbit' -> bits per second."""
    units = {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3}
    for u, m in units.items():
        if rate.endswith(u):
            return float(rate[: -len(u)]) * m
    raise ValueError("rate must end in gbit, mbit or kbit: " + rate)


def yaml_rate(rate):
    bits = tc_rate(rate)
    return "%gGbit/s" % (bits / 1e9) if bits >= 1e9 else "%gMbit/s" % (bits / 1e6)


class Network:
    """A bridge in the root namespace and one namespace per worker, each
    joined by a veth pair whose both ends are shaped: tbf at `rate` (the
    cable) then netem `delay` (the one-way latency)."""

    def __init__(self):
        self.bridge = PREFIX + "-br"
        self.namespaces = []
        self.links = []
        self.up = False
        self.netem = None  # whether the kernel has sch_netem (checked on first use)

    def start(self):
        self.close()  # leftovers of an interrupted run
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        self.links.append(self.bridge)
        sh("ip", "addr", "add", SUBNET + ".1/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        self.up = True

    def shape(self, ns, dev, rate, delay_ms):
        """tbf (rate, a 1 ms burst) with a netem child for the delay
        when the kernel has netem (some container kernels do not: then the
        cable has its rate but no added delay, and run.py says so)."""
        prefix = ["ip", "netns", "exec", ns] if ns else []
        # The bucket: 1 ms of bytes at the rate, at least 4 KiB (a few
        # frames). A real cable has no burst: each byte leaves at line rate.
        # The old bucket (32 KiB or a 4 ms tick, whichever larger) refilled
        # while a device computed or received, so each of a split plan's
        # ~60 steps a request sent its first 32 KiB for free: MobileNetV2's
        # memory plan on 2 devices at 10 Mbit/s ran 3.76 s against 4.42 s
        # with this bucket (4.24 predicted), and two flows in opposite
        # directions at 10 Mbit/s got 5.9 and 9.6 Mbit/s instead of 8.8 and
        # 9.4 (cable_duplex.py). The rate holds: 9.4 Mbit/s of TCP payload
        # at 10mbit, 88 at 100mbit, 813 at 1gbit. TS_EMU_BURST=BYTES sets
        # another bucket (to compare, e.g. 32768 for the old one).
        burst = int(os.environ.get("TS_EMU_BURST", "0")) or max(4096, int(tc_rate(rate) / 8 / 1000))
        sh(*prefix, "tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "tbf", "rate", rate,
           "burst", str(burst), "latency", "200ms")
        if delay_ms > 0 and self.netem is not False:
            r = sh(*prefix, "tc", "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", "netem",
                   "delay", "%gms" % delay_ms, "limit", "100000", check=False)
            if r.returncode != 0 and "unknown" in r.stderr:
                self.netem = False
            elif r.returncode != 0:
                raise RuntimeError("tc netem on %s: %s" % (dev, r.stderr.strip()))
            else:
                self.netem = True

    def add_host(self, index, rate, delay_ms):
        """Namespace ts-emu-wINDEX at 10.78.0.(10+INDEX); returns its address."""
        ns = "%s-w%d" % (PREFIX, index)
        veth = "%s-v%d" % (PREFIX, index)
        addr = "%s.%d" % (SUBNET, 10 + index)
        sh("ip", "netns", "add", ns)
        self.namespaces.append(ns)
        sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        self.links.append(veth)
        sh("ip", "link", "set", veth, "master", self.bridge, "up")
        sh("ip", "-n", ns, "addr", "add", addr + "/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        # Both directions of the device's cable: its egress in the namespace,
        # its ingress as the bridge port's egress.
        self.shape(ns, "eth0", rate, delay_ms)
        self.shape(None, veth, rate, delay_ms)
        return ns, addr

    def close(self):
        r = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True)
        names = set(self.links)
        for line in r.stdout.splitlines():
            parts = line.split(":")
            if len(parts) > 1:
                n = parts[1].strip().split("@")[0]
                if n.startswith(PREFIX):
                    names.add(n)
        for n in sorted(names, key=lambda x: x == self.bridge):
            sh("ip", "link", "del", n, check=False)
        r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
        spaces = set(self.namespaces)
        for line in r.stdout.splitlines():
            n = line.split()[0] if line.split() else ""
            if n.startswith(PREFIX):
                spaces.add(n)
        for ns in spaces:
            sh("ip", "netns", "del", ns, check=False)
        self.links, self.namespaces, self.up = [], [], False


def run_in_quotas(cgroups, argv, copies, cpu_fraction, period_us, procs=None):
    """Runs `copies` copies of the command argv at once, each in its own group
    with the same CPU quota (and the CPUs cgroups.cpus pins groups to);
    returns their stdouts, or None if one exited non-zero. `procs`, a list,
    holds the running copies meanwhile (a caller's cleanup can kill them)."""
    groups = ["%s-copy%d" % (PREFIX, i) for i in range(copies)]
    started = []
    try:
        for g in groups:
            cgroups.create(g, cpu_fraction, period_us, None)
            p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 preexec_fn=lambda g=g: cgroups.join(g, os.getpid()))
            started.append(p)
            if procs is not None:
                procs.append(p)
        outs = [p.communicate()[0] for p in started]
    finally:
        for p in started:
            if p.poll() is None:
                p.kill()
                p.wait()
            if procs is not None:
                procs.remove(p)
        for g in groups[:len(started)]:
            cgroups.remove(g)
    return None if any(p.returncode != 0 for p in started) else outs
