"""Requests of a kill-and-rejoin test (bench/soak's client log) by outcome and phase.

Args: requests.csv t_kill t_failed_over t_restart t_back (ms since the epoch).
Errors are allowed only while the failover itself ran (until the plan served
without the killed worker); none from then on, so the rejoin (a swap, or a
drain) lost nothing. Exit 1 when a check fails.
"""
import csv
import sys

rows = list(csv.DictReader(open(sys.argv[1])))
t_kill, t_failed_over, t_restart, t_back = map(int, sys.argv[2:6])
by = {o: sum(1 for r in rows if r["outcome"] == o) for o in ("correct", "wrong", "errored", "lost")}
print("  %d requests: %s" % (len(rows), by))
for r in rows:
    if r["outcome"] != "correct":
        print("  %s, sent %+d ms after the kill: %s" % (r["outcome"], int(r["start_unix_ms"]) - t_kill,
                                                       r["message"][:200]))
ok = True


def check(cond, what):
    global ok
    print(("PASS " if cond else "FAIL ") + what)
    ok = ok and cond


check(by["wrong"] == 0, "no wrong answer (every answer == tessera run, rel <= 1e-5)")
check(by["lost"] == 0, "no request lost (each answered or given an error before deadline + grace)")
during = sum(1 for r in rows if r["outcome"] == "errored" and int(r["end_unix_ms"]) <= t_failed_over + 100)
later = sum(1 for r in rows if r["outcome"] == "errored" and int(r["end_unix_ms"]) > t_failed_over + 100)
print("  errors during the failover: %d" % during)
check(later == 0, "no request failed after the failover: the rejoin lost none (%d errored later)" % later)
spanning = [r for r in rows if int(r["start_unix_ms"]) < t_back and int(r["end_unix_ms"]) > t_restart]
check(len(spanning) > 0 and all(r["outcome"] == "correct" for r in spanning),
      "%d requests in flight during the rejoin (restart .. swap) all answered correctly" % len(spanning))
after = sum(1 for r in rows if int(r["start_unix_ms"]) > t_back and r["outcome"] == "correct")
check(after > 0, "%d requests answered on the rejoined plan" % after)
sys.exit(0 if ok else 1)
