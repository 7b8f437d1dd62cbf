# Sourced by the optimize-memory tests: check NAME MODEL SHAPE BUDGET [EXPECT [OPTIONS...]] runs
# `tessera optimize-memory --json --out` and `tessera run --plan --json` of
# the written plan, and checks (PASS/FAIL lines; sets fail=1 on a FAIL):
# arena + weights as stored and the arena shrink (EXPECT shrinks, the
# default) or arena + weights do not grow (no-worse), the MAC budget holds,
# the run allocates exactly the printed arena, its halo MACs are the printed
# ones, and its answers equal the unsplit run (max rel. diff <= 1e-5).
#   requires: $T (tessera binary), $tmp (scratch dir), $py, $fail
check() {  # NAME MODEL SHAPE BUDGET [EXPECT [optimize-memory options...]]
  local name=$1 model=$2 shape=$3 budget=$4 expect=${5:-shrinks}
  shift $(($# < 5 ? $# : 5))
  if ! "$T" optimize-memory "$model" --input-shape "$shape" --max-mac-overhead "$budget" --json --quiet \
       --out "$tmp/$name.pb" "$@" > "$tmp/$name.opt.json" 2> "$tmp/$name.err"; then
    echo "FAIL $name: optimize-memory exited non-zero: $(cat "$tmp/$name.err")"; fail=1; return
  fi
  if ! "$T" run "$model" --input-shape "$shape" --plan "$tmp/$name.pb" --json > "$tmp/$name.run.json" 2> "$tmp/$name.err"; then
    echo "FAIL $name: run --plan exited non-zero: $(cat "$tmp/$name.err")"; fail=1; return
  fi
  "$py" - "$tmp/$name.opt.json" "$tmp/$name.run.json" "$name" "$budget" "$expect" <<'EOF' || fail=1
import json, sys
o = json.load(open(sys.argv[1])); r = json.load(open(sys.argv[2])); name = sys.argv[3]
b = sys.argv[4]
budget = float("inf") if b == "none" else float(b.rstrip("%")) / (100 if b.endswith("%") else 1)
bad = 0
def say(ok, text):
    global bad
    bad |= not ok
    print("%s %s: %s" % ("PASS" if ok else "FAIL", name, text))
need0 = o["arena_before_bytes"] + o["weight_before_bytes"]
need1 = o["arena_after_bytes"] + o["weight_after_bytes"]
shrinks = sys.argv[5] == "shrinks"
say(need1 < need0 and o["arena_after_bytes"] < o["arena_before_bytes"] if shrinks else need1 <= need0,
    "arena %d -> %d bytes (%.3fx), weights as stored %d -> %d, arena + weights %.3fx, %d path(s), "
    "%.2f %% MACs recomputed, %d programs sized in %.2f s" % (
        o["arena_before_bytes"], o["arena_after_bytes"], o["arena_after_bytes"] / o["arena_before_bytes"],
        o["weight_before_bytes"], o["weight_after_bytes"], need1 / need0,
        len(o["paths"]), 100 * o["mac_overhead"], o["candidates"], o["seconds"]))
say(o["mac_overhead"] <= budget + 1e-12, "MAC overhead %.4f within the budget %.4f" % (o["mac_overhead"], budget))
say(r["devices"] == 1 and r["device_memory_bytes"] == [o["arena_after_bytes"]],
    "run --plan allocates %s bytes, printed %d" % (r["device_memory_bytes"], o["arena_after_bytes"]))
say(r["halo_mac_overhead"] == o["halo_macs"], "halo MACs of the run %d, printed %d" % (r["halo_mac_overhead"], o["halo_macs"]))
say(r["max_rel_diff"] <= 1e-5, "answers against the unsplit run: max rel diff %.3g (<= 1e-5)" % r["max_rel_diff"])
sys.exit(bad)
EOF
}
