#!/usr/bin/env bash
# Issue 18 item 2: requests in flight in a pipeline share each device's
# working memory and keep only their pipeline buffers — measured on real
# worker processes, against the numbers tessera prints.
#
# yolov2-tiny 416², throughput objective (a 2-stage pipeline) on 2 loopback
# workers, planned with --in-flight 4 and served by a gateway with
# --max-in-flight 4 (bench/memory/measure.py): 2 sequential requests, then 4
# clients x 6 requests at once over keep-alive HTTP. Checked:
#  * every answer equals the sequential answer bit for bit (same plan, same
#    kernels: tolerance 0) and no request fails;
#  * the requests overlapped: every worker made >= 2 runners (one per
#    request it ran at once) and reports peak in flight >= 2;
#  * a worker whose plan shares working memory made exactly 1 (the default
#    --compute-slots), one that does not made 0;
#  * the figures the worker reports at deploy (working memory, pipeline
#    buffers per request) are the ones `tessera plan --json` printed;
#  * VmHWM growth while the 4 clients ran, over the VmHWM after the
#    sequential requests (one runner): <= (runners - 1) x (pipeline buffers +
#    request I/O) + 16 MiB (gRPC buffers, thread stacks, allocator slack).
#    Before issue 18 item 2 each runner had a whole device arena: that
#    build needs (runners - 1) x (arena + I/O); the test prints both, and
#    requires the source's plan to share its working memory with the bound
#    below the old need (built with sharing off, this fails: the source
#    grew 57.6 MiB against 15.3 MiB with it on);
#  * VmHWM <= 1.15 x the promise (worker RAM with 4 in flight) + 40 MiB.
# Args: path to tessera, build dir.
set -u
T=${1:?tessera binary}
repo=$(cd "$(dirname "$0")/../.." && pwd)
py=/usr/bin/python3
out=$("$py" "$repo/bench/memory/measure.py" "$T" /usr/share/darknet/cfg/yolov2-tiny.cfg --devices 2 \
  --objective throughput --in-flight 4 --concurrent 6 --requests 2) || { echo "FAIL measure.py"; exit 1; }
echo "$out" | "$py" -c '
import json, re, sys
j = json.load(sys.stdin)
MiB = 2.0 ** 20
bad = 0
def say(ok, text):
    global bad
    bad |= not ok
    print("%s %s" % ("PASS" if ok else "FAIL", text))
c = j["concurrent"]
say(c["answered"] == c["requests"] and not c["errors"],
    "%d of %d concurrent requests answered, errors %s" % (c["answered"], c["requests"], c["errors"]))
say(c["distinct_answers"] == 1 and c["max_abs_vs_sequential"] == 0.0,
    "%d distinct answer(s), max |concurrent - sequential| = %s" % (c["distinct_answers"], c["max_abs_vs_sequential"]))
report = "\n".join(j["deploy"]["report"])
source_discriminates = False
for d in j["device_memory"]:
    n = d["name"]
    x = d["exchange"]
    runners, peak, memories = x.get("runners", 0), x.get("peak_in_flight", 0), x.get("working_memories", -1)
    say(runners >= 2 and peak >= 2, "%s ran requests at once: %d runners, peak in flight %d" % (n, runners, peak))
    shares = d["working_bytes"] > 0
    say(memories == (1 if shares else 0),
        "%s made %d working memories (plan: working memory %.2f MiB, %s)" % (
            n, memories, d["working_bytes"] / MiB, "shared" if shares else "none: whole arena per request"))
    m = re.search(r"%s\s.*working memory\s+([0-9.]+) MiB, pipeline buffers\s+([0-9.]+) MiB per request" % n, report)
    say(m is not None and abs(float(m.group(1)) - d["working_bytes"] / MiB) < 0.006 and
        abs(float(m.group(2)) - d["buffer_bytes"] / MiB) < 0.006,
        "%s reports %s at deploy; the plan printed working memory %.2f, pipeline buffers %.2f MiB" % (
            n, m.group(0) if m else "nothing", d["working_bytes"] / MiB, d["buffer_bytes"] / MiB))
    grew = c["peak_rss_after_bytes"][n] - c["peak_rss_before_bytes"][n]
    each = d["buffer_bytes"] + d["io_bytes"]
    bound = (runners - 1) * each + 16 * MiB
    old = (runners - 1) * (d["arena_bytes"] + d["io_bytes"])
    if d["io_bytes"] > 0:  # the source: its stage holds the largest feature maps
        source_discriminates = shares and bound < old
    say(grew <= bound,
        "%s VmHWM grew %.1f MiB with %d requests at once: <= %d x (pipeline buffers %.2f + request I/O %.2f) + 16 = "
        "%.1f MiB (a whole arena per request would need %.1f MiB)" % (
            n, grew / MiB, runners, runners - 1, d["buffer_bytes"] / MiB, d["io_bytes"] / MiB, bound / MiB, old / MiB))
    limit = 1.15 * d["promised_bytes"] + 40 * MiB
    say(d["peak_rss_bytes"] <= limit, "%s VmHWM %.1f MiB <= 1.15 x promise %.1f (in flight %d) + 40 = %.1f MiB" % (
        n, d["peak_rss_bytes"] / MiB, d["promised_bytes"] / MiB, d["in_flight"], limit / MiB))
say(source_discriminates, "the source (first stage) shares its working memory, and the growth bound asserted on it is "
    "below what a whole arena per request needs")
sys.exit(bad)'
