#!/usr/bin/python3
"""Extract the JSON document from `tessera ... --json` output and check it.

  tessera_json.py FILE layers N        totals.layers == N and N rows in "layers"
  tessera_json.py FILE finite          every output checksum is a finite number
  tessera_json.py FILE field KEY       print a top-level field (e.g. median_ms)

Tolerates log lines around the JSON (spdlog may share stdout). Prints one
summary line; exit 0 ok, 1 check failed, 2 no JSON found.
"""
import json
import math
import sys


def load(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    dec = json.JSONDecoder()
    pos = text.find("{")
    while pos != -1:
        try:
            doc, _ = dec.raw_decode(text, pos)
            if isinstance(doc, dict):
                return doc
        except json.JSONDecodeError:
            pass
        pos = text.find("{", pos + 1)
    return None


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    doc = load(sys.argv[1])
    if doc is None:
        print(f"no JSON object in {sys.argv[1]}")
        return 2
    what = sys.argv[2]
    if what == "layers":
        want = int(sys.argv[3])
        totals = doc.get("totals", {})
        rows = doc.get("layers", [])
        got = totals.get("layers")
        ok = got == want and len(rows) == want
        print(f"layers={got} rows={len(rows)} expected={want} weights={totals.get('weights')} "
              f"macs={totals.get('macs')} max_io={totals.get('max_io')}")
        return 0 if ok else 1
    if what == "finite":
        outs = doc.get("outputs", [])
        bad = [o.get("name") for o in outs
               if not isinstance(o.get("checksum"), (int, float)) or not math.isfinite(o["checksum"])]
        desc = ", ".join(f"{o.get('name')}{o.get('shape')} checksum={o.get('checksum')}" for o in outs)
        print(f"{desc} arena_bytes={doc.get('arena_bytes')} seconds={doc.get('seconds')}")
        # tessera also reports "finite" over every output value.
        return 0 if outs and not bad and doc.get("finite", True) is not False else 1
    if what == "field":
        v = doc.get(sys.argv[3])
        if v is None:
            return 1
        print(v)
        return 0
    print(f"unknown check {what}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
