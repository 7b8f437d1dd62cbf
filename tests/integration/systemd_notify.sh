#!/usr/bin/env bash
# The sd_notify protocol of real `tessera worker` and `tessera gateway`
# processes (daemon/cluster/service_notify.h, deploy/systemd/ Type=notify),
# without systemd: NOTIFY_SOCKET points at a datagram socket this test binds
# (tests/oracle/notify_listener.py), WATCHDOG_USEC=2000000 asks for a ping
# every second. Checked: READY=1 with STATUS= once listening ("no program";
# after a restart from --data-dir "serving plan P as device D"), WATCHDOG=1
# about every second and never 2 s apart, STATUS= again when the gateway
# sees a worker go down, STOPPING=1 on SIGTERM; without NOTIFY_SOCKET nothing.
# Args: path to tessera, build dir.
set -u
T=${1:?tessera binary}
CFG=/usr/share/darknet/cfg/yolov2-tiny.cfg
[ -f "$CFG" ] || { echo "FAIL $CFG missing (deploy/install-deps.sh installs darknet)"; exit 1; }
. "$(dirname "$0")/../oracle/cluster_helpers.sh"
start_scratch tessera-notify
SHAPE=1x3x96x96
"$python" "$(dirname "$0")/../oracle/notify_listener.py" "$D/notify.sock" "$D/notify.log" &
LISTENER=$!
PIDS+=($LISTENER)
for _ in $(seq 50); do [ -S "$D/notify.sock" ] && break; sleep 0.1; done
[ -S "$D/notify.sock" ] || { echo "FAIL notify listener did not start"; exit 1; }

# Messages of one daemon: its lines of the log from line $1 on.
since() { tail -n +"$1" "$D/notify.log"; }
wait_for() {  # first-line pattern seconds
  for _ in $(seq $(($3 * 10))); do since "$1" | grep -q -- "$2" && return 0; sleep 0.1; done
  return 1
}
# WATCHDOG=1 pings after line $1: at least $2 of them, consecutive ones
# between 0.7 s and 1.9 s apart (half of WATCHDOG_USEC; systemd's limit 2 s).
check_pings() {  # first-line min-count what
  since "$1" | awk -v min="$2" -v what="$3" '
    $2 == "WATCHDOG=1" { n++; if (n > 1) { g = $1 - last; if (g < lo || n == 2) lo = g; if (g > hi) hi = g } last = $1 }
    END { if (n >= min && lo >= 0.7 && hi < 1.9) { printf "PASS %s: %d WATCHDOG=1 pings, %.2f-%.2f s apart\n", what, n, lo, hi; exit 0 }
          printf "FAIL %s: %d WATCHDOG=1 pings (want >= %d), %.2f-%.2f s apart (want 0.7-1.9)\n", what, n, min, lo, hi; exit 1 }' ||
    fail=1
}
# The environment systemd gives a Type=notify daemon (an array, not a shell
# function: `$!` of a backgrounded function is a subshell, not the daemon).
NOTIFIED=(env NOTIFY_SOCKET="$D/notify.sock" WATCHDOG_USEC=2000000)

# 1. A worker with nothing to resume.
mark=$(($(wc -l <"$D/notify.log") + 1))
"${NOTIFIED[@]}" "$T" worker --listen 127.0.0.1:0 --name solo --data-dir "$D/solo" --port-file "$D/solo.port" 2>"$D/solo.log" &
SOLO=$!
PIDS+=($SOLO)
wait_for $mark 'READY=1' 20 || { bad "worker sent no READY=1"; cat "$D/solo.log"; exit 1; }
[ -f "$D/solo.port" ] && ok "worker READY=1 after it listens ($(cat "$D/solo.port"))" || bad "READY=1 before the port file"
since $mark | grep -q '^[0-9.]* READY=1|STATUS=no program$' && ok "worker READY=1 with STATUS=no program" ||
  { bad "worker READY line"; since $mark; }
sleep 4.5
check_pings $mark 3 "worker"
kill -TERM $SOLO
wait $SOLO
rc=$?
[ $rc = 0 ] && ok "worker exits 0 on SIGTERM" || bad "worker exit code $rc on SIGTERM"
since $mark | tail -1 | grep -q 'STOPPING=1' && ok "worker STOPPING=1 last on SIGTERM" || { bad "worker STOPPING=1"; since $mark | tail -3; }

# 2. Without NOTIFY_SOCKET (but with WATCHDOG_USEC): silent, and no watchdog.
mark=$(($(wc -l <"$D/notify.log") + 1))
env -u NOTIFY_SOCKET WATCHDOG_USEC=2000000 "$T" worker --listen 127.0.0.1:0 --name plain --port-file "$D/plain.port" 2>"$D/plain.log" &
PLAIN=$!
for _ in $(seq 100); do [ -f "$D/plain.port" ] && break; sleep 0.1; done
sleep 2.5
stop_processes $PLAIN
[ -f "$D/plain.port" ] && [ -z "$(since $mark)" ] && ! grep -q "watchdog" "$D/plain.log" &&
  ok "worker without NOTIFY_SOCKET sends nothing and runs no watchdog" || { bad "worker without NOTIFY_SOCKET"; since $mark; }

# 3. A gateway over two workers (it deploys to them; they keep it in --data-dir).
start_loopback_workers 2 --data-dir "$D/%n" || exit 1
mark=$(($(wc -l <"$D/notify.log") + 1))
export NOTIFY_SOCKET="$D/notify.sock" WATCHDOG_USEC=2000000
printf 'probe-token-1\n' > "$D/tokens"
start_gateway 90 --model "$CFG" --input-shape $SHAPE --token-file "$D/tokens" || exit 1
unset NOTIFY_SOCKET WATCHDOG_USEC
wait_for $mark 'READY=1' 10 || bad "gateway sent no READY=1"
plan=$(since $mark | grep -o 'READY=1|STATUS=serving plan [^ ]* on 2 workers' | sed 's/.*serving plan \([^ ]*\) .*/\1/')
[ -n "$plan" ] && ok "gateway READY=1 with STATUS=serving plan $plan on 2 workers" || { bad "gateway READY line"; since $mark; }
sleep 3.5
check_pings $mark 3 "gateway (with --token-file)"
curl -s http://$HTTP/metrics | grep -q '^tessera_gateway_unauthenticated_total 0$' &&
  ok "the gateway's own health probes are not counted as unauthenticated calls" ||
  { bad "unauthenticated count"; curl -s http://$HTTP/metrics | grep unauth; }

# 4. A worker restarted from --data-dir: READY=1 comes with the resumed plan.
stop_processes ${PIDS[1]}
mark=$(($(wc -l <"$D/notify.log") + 1))
"${NOTIFIED[@]}" "$T" worker --listen "$(cat "$D/w1.port")" --name w1 --data-dir "$D/w1" 2>>"$D/w1.log" &
PIDS[1]=$!
wait_for $mark 'READY=1' 20 || bad "restarted worker sent no READY=1"
since $mark | grep -q "READY=1|STATUS=serving plan $plan as device [0-9]" &&
  ok "worker resumed from --data-dir: $(since $mark | grep -o 'STATUS=[^|]*' | head -1)" || { bad "resumed worker READY line"; since $mark; }
stop_processes ${PIDS[1]}

# 5. The gateway reports a worker down in STATUS= (its health loop).
mark=$(($(wc -l <"$D/notify.log") + 1))
stop_processes ${PIDS[2]}
wait_for $mark 'STATUS=serving plan .* a worker is down' 20 &&
  ok "gateway STATUS= follows the workers: $(since $mark | grep -o 'STATUS=[^|]*down' | head -1)" ||
  { bad "gateway STATUS after two workers went down"; since $mark | grep -v WATCHDOG; }

mark=$(($(wc -l <"$D/notify.log") + 1))
kill -TERM $GW
wait $GW
GW=
wait_for $mark 'STOPPING=1' 5 && ok "gateway STOPPING=1 on SIGTERM" || { bad "gateway STOPPING=1"; since $mark; }
exit $fail
