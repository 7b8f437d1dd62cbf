"""Stands in for systemd's notify socket (sd_notify(3)): binds a unix
datagram socket at PATH and appends every message it receives to LOG as one
line "SECONDS MESSAGE" (seconds since the listener started, the message's
newlines shown as '|'), until SIGTERM.

Usage: notify_listener.py PATH LOG
"""
import os
import signal
import socket
import sys
import time

path, log = sys.argv[1], sys.argv[2]
if os.path.exists(path):
    os.unlink(path)
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.bind(path)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
t0 = time.monotonic()
with open(log, "a", buffering=1) as out:
    while True:
        data = sock.recv(65536).decode("utf-8", "replace")
        out.write("%.3f %s\n" % (time.monotonic() - t0, data.replace("\n", "|")))
