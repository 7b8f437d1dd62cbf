"""PNG plots of bench/cluster-emulated's results.json (matplotlib, Agg).

  speedup.png         latency speed-up vs devices, one line per model and
                      bandwidth (latency objective; 1 = one device)
  memory.png          per-device memory vs devices: promised and measured
                      peak (VmHWM), largest device of each point
  predicted.png       measured vs predicted latency, every point (the
                      diagonal is a perfect network + compute model)
  link_bytes.png      bytes on the wire per request vs devices per objective

Usage: plots.py results.json [outdir]   (run.py --plots calls write_all).
"""
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _served(points):
    return [p for p in points if "latency_s" in p and not math.isnan(p["latency_s"])]


def speedup(points, path):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    series = {}
    for p in _served(points):
        series.setdefault((p["model"], p["bandwidth"]), {}).setdefault(p["objective"], {})[p["devices"]] = p
    for (model, bw), by_objective in sorted(series.items()):
        one = None
        for objective in by_objective.values():
            if 1 in objective:
                one = objective[1]["latency_s"]
        if one is None:
            continue
        line = by_objective.get("latency", {})
        ns = sorted(n for n in line if n > 1)
        if not ns:
            continue
        ax.plot([1] + ns, [1] + [one / line[n]["latency_s"] for n in ns], marker="o", label="%s %s" % (model, bw))
    ax.set_xlabel("devices")
    ax.set_ylabel("speed-up vs one device (latency objective)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def memory(points, path):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    series = {}
    for p in _served(points):
        if p.get("peak_rss_bytes") and p.get("promised_bytes"):
            key = (p["model"], p["objective"])
            series.setdefault(key, []).append((p["devices"], max(p["promised_bytes"]) / 2**20,
                                               max(p["peak_rss_bytes"]) / 2**20))
    for (model, objective), rows in sorted(series.items()):
        rows.sort()
        line, = ax.plot([r[0] for r in rows], [r[1] for r in rows], marker="o", linestyle="--",
                        label="%s %s promised" % (model, objective))
        ax.plot([r[0] for r in rows], [r[2] for r in rows], marker="x", color=line.get_color(),
                label="%s %s measured" % (model, objective))
    ax.set_xlabel("devices")
    ax.set_ylabel("largest device's memory (MiB)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def predicted(points, path):
    fig, ax = plt.subplots(figsize=(5.5, 5))
    xs, ys = [], []
    for p in _served(points):
        if p.get("predicted_latency_s", 0) > 0:
            xs.append(p["predicted_latency_s"])
            ys.append(p["latency_s"])
            ax.scatter([xs[-1]], [ys[-1]], s=14)
            runs = [r["latency_s"] for r in p.get("repeats") or [] if "latency_s" in r]
            if len(runs) > 1:  # --point-repeats: the runs' range under the median run
                ax.plot([xs[-1], xs[-1]], [min(runs), max(runs)], color="black", linewidth=0.6)
    if xs:
        hi = max(xs + ys) * 1.1
        ax.plot([0, hi], [0, hi], color="gray", linewidth=1)
        ax.plot([0, hi], [0, hi * 1.15], color="gray", linewidth=0.5, linestyle=":")
        ax.plot([0, hi], [0, hi / 1.15], color="gray", linewidth=0.5, linestyle=":")
    ax.set_xlabel("predicted latency (s)")
    ax.set_ylabel("measured latency (s)")
    ax.set_title("dotted: +-15 %; a bar: the range of a point's repeated runs")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def link_bytes(points, path):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    series = {}
    for p in _served(points):
        series.setdefault((p["model"], p["objective"]), {})[p["devices"]] = p.get("link_bytes_per_request", 0) / 2**20
    for (model, objective), by_n in sorted(series.items()):
        ns = sorted(by_n)
        ax.plot(ns, [by_n[n] for n in ns], marker="o", label="%s %s" % (model, objective))
    ax.set_xlabel("devices")
    ax.set_ylabel("MiB on the wire per request")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_all(results, outdir):
    points = list(results.get("speedup", []))
    for c in results.get("fits", {}).get("clusters", []):
        points.append(c)
    speedup(points, os.path.join(outdir, "speedup.png"))
    memory(points, os.path.join(outdir, "memory.png"))
    predicted(points, os.path.join(outdir, "predicted.png"))
    link_bytes(points, os.path.join(outdir, "link_bytes.png"))


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        res = json.load(f)
    write_all(res, sys.argv[2] if len(sys.argv) > 2 else os.path.dirname(os.path.abspath(sys.argv[1])))
