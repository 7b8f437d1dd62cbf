#!/usr/bin/env bash
# Soak under faults (issue 14 item 5): loopback only, bounded. Defaults: 4
# workers, 32 clients, 60 s, a worker SIGKILLed every 10 s and restarted 3 s
# later. Options: bench/soak/soak.py --help. Exit 1 when a request was lost
# or wrong, the plan did not come back on every worker, or RSS grew past
# the bound.
#   bench/soak/run.sh [--duration 60] [--clients 32] [--json report.json] ...
exec /usr/bin/python3 "$(dirname "$0")/soak.py" "$@"
