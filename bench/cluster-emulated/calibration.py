"""The transport calibration's estimator (bench/cluster-emulated, issue 15).

A calibration point is one split plan served for a few requests: for each
device its CPU at quota per request (cgroup counter), the compute the planner
predicted for it (which holds its network CPU at the figure the point was
priced with) and the bytes it sent and received. What each device spent
beyond its predicted layers is

    excess_i = cpu_i - (predicted_compute_i - predicted_network_i)

and the transport's CPU per byte is what relates excess to bytes.

Two estimators:

* "slope" (since 2026-12-07, nineteenth session): the least-squares slope of
  excess_i against bytes_i over the devices of a plan with a hub (3 or more
  devices; FDT plans gather partial sums on device 0 and broadcast from it, so
  it moves 3-5x the bytes of the others). A bias the devices share (the
  planner's compute off by a few per cent for every slice, the host running
  slower than at calibration) moves the intercept, not the slope. YOLOv2 608²
  on 4 devices at 1 Gbit/s: excess 1.85 / 0.18 / 0.32 / 0.22 s for 91.7 / 32 /
  32 / 32 MB, slope 26.9 ms a MB, 54 MACs a byte of a 2 GMAC/s device; the
  6-device plan of the same run 51; MobileNetV2, ResNet-50 and VGG-16 plans at
  1 Gbit/s 33-94 (README "cluster-emulated").
* "sum" (the fallback; the only estimator before): the devices' excess summed
  over their bytes summed. On 2 devices both move the same bytes, so a slope
  does not exist. It takes any compute bias for transport: YOLOv2's 2-device
  memory plan (8 s of compute, 60 MB a device) gave 9.2 and 59.7 MACs a byte
  in two runs, a 4% bias in the compute being worth 0.3 s.
"""
import sys


def transport_seconds_per_byte(cpu, predicted_compute, predicted_network, link_bytes, source_extra=0.0,
                               min_spread=1.5):
    """Seconds of device time per byte sent or received, from one calibration
    point. cpu, predicted_compute, predicted_network (seconds of device time
    per request) and link_bytes (bytes per request) are per device, device 0
    first; source_extra: device 0's CPU per request for serving the request
    itself (request_total), not the transport's. Returns (seconds_per_byte,
    method, intercept_s): method "slope" where at least 3 devices' bytes span
    min_spread x and the slope is positive, else "sum" (intercept None)."""
    n = len(cpu)
    if n == 0 or not (len(predicted_compute) == len(predicted_network) == len(link_bytes) == n):
        raise ValueError("calibration point: %d devices' CPU, %d predicted computes, %d network CPUs, %d byte counts"
                         % (n, len(predicted_compute), len(predicted_network), len(link_bytes)))
    if any(b < 0 for b in link_bytes) or sum(link_bytes) <= 0:
        raise ValueError("calibration point: the devices moved no bytes (%s)" % list(link_bytes))
    excess = [c - (pc - nc) for c, pc, nc in zip(cpu, predicted_compute, predicted_network)]
    excess[0] -= max(0.0, source_extra)
    lo, hi = min(link_bytes), max(link_bytes)
    if n >= 3 and lo > 0 and hi >= min_spread * lo:
        mb = sum(link_bytes) / n
        me = sum(excess) / n
        sxx = sum((b - mb) ** 2 for b in link_bytes)
        sxy = sum((b - mb) * (e - me) for b, e in zip(link_bytes, excess))
        slope = sxy / sxx
        if slope > 0:
            return slope, "slope", me - slope * mb
    return sum(max(0.0, e) for e in excess) / sum(link_bytes), "sum", None


def _self_test():
    """Checks the estimator on figures whose answer is known; exits non-zero on a failure."""
    failures = []

    def check(what, got, want, tol=1e-9):
        if abs(got - want) > tol * max(1.0, abs(want)):
            failures.append("%s: %r, expected %r" % (what, got, want))

    # A hub and three others, 25 ns a byte, every device's compute predicted
    # 0.4 s too high (a shared bias): the slope recovers 25 ns, the sum does not.
    per_byte, bias = 25e-9, -0.4
    link = [91.7e6, 32e6, 32e6, 31e6]
    compute = [4.0, 3.9, 3.9, 3.9]
    net = [0.1, 0.03, 0.03, 0.03]
    cpu = [pc - nc + bias + per_byte * b for pc, nc, b in zip(compute, net, link)]
    s, method, intercept = transport_seconds_per_byte(cpu, compute, net, link)
    check("slope method", method == "slope", True)
    check("slope", s, per_byte)
    check("intercept", intercept, bias)
    two = [link[1], link[1]]
    cpu_two = [pc - nc + per_byte * b for pc, nc, b in zip(compute[:2], net[:2], two)]
    s_sum, method_sum, _ = transport_seconds_per_byte(cpu_two, compute[:2], net[:2], two)
    check("2 devices fall back to the sum", method_sum == "sum", True)
    check("the sum without a bias", s_sum, per_byte)
    # The source's request CPU is taken out of device 0's excess.
    cpu2 = list(cpu)
    cpu2[0] += 0.25
    s2, _, _ = transport_seconds_per_byte(cpu2, compute, net, link, source_extra=0.25)
    check("source_extra", s2, per_byte)
    # Bytes too even for a slope: the sum of the positive excess over the bytes.
    even = [10e6, 10e6, 11e6]
    s3, m3, _ = transport_seconds_per_byte([1.2, 1.1, 1.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0], even)
    check("even bytes use the sum", m3 == "sum", True)
    check("sum", s3, (0.2 + 0.1 + 0.0) / sum(even))
    # A negative slope (noise larger than the bytes' cost) falls back too.
    _, m4, _ = transport_seconds_per_byte([1.0, 1.5, 1.5], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [30e6, 10e6, 10e6])
    check("negative slope uses the sum", m4 == "sum", True)
    # Malformed points are refused, naming what is wrong.
    for bad in (([1.0], [1.0, 2.0], [0.0], [1.0]), ([1.0, 1.0], [1.0, 1.0], [0.0, 0.0], [0, 0])):
        try:
            transport_seconds_per_byte(*bad)
            failures.append("malformed point %r accepted" % (bad,))
        except ValueError:
            pass
    for f in failures:
        print("FAIL", f)
    print("calibration self-test: %d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(_self_test())
    print("usage: calibration.py --self-test", file=sys.stderr)
    sys.exit(2)
