#!/usr/bin/python3
"""Is an emulated cable full duplex? (issue 15, README "cluster-emulated")

Two hosts of bench/cluster-emulated's network (emulation.Network: a
namespace each, tbf on both ends of its veth): BYTES over TCP one way, then
BYTES each way at once. Prints the payload rate of each; a full-duplex cable
carries both directions at the one-way rate. Needs root; removes what it
creates (ts-emu-*), so do not run it beside run.py.

  sudo /usr/bin/python3 bench/cluster-emulated/cable_duplex.py RATE BYTES   (e.g. 10mbit 4000000)
"""
import sys, os, time, subprocess
sys.path.insert(0, "/work/main/bench/cluster-emulated")
import emulation
RECV = r"""
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1)
print("ready", flush=True)
c, _ = s.accept(); buf = bytearray(1 << 18); n = 0
while True:
    k = c.recv_into(buf)
    if not k: break
    n += k
c.sendall(b"k"); c.close(); print(n)
"""
SEND = r"""
import socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=120); total = int(sys.argv[3]); chunk = bytes(1 << 18)
t0 = time.monotonic(); left = total
while left > 0:
    k = min(left, len(chunk)); c.sendall(chunk[:k]); left -= k
c.shutdown(socket.SHUT_WR); c.recv(1); print(time.monotonic() - t0)
"""
rate = sys.argv[1]; total = int(sys.argv[2])
net = emulation.Network(); net.start()
try:
    (ns1, a1), (ns2, a2) = [net.add_host(i, rate, 0.2) for i in (1, 2)]
    def transfer(pairs):
        recvs = []
        for (src, dst, addr, port) in pairs:
            r = subprocess.Popen(["ip", "netns", "exec", dst, sys.executable, "-c", RECV, addr, str(port)], stdout=subprocess.PIPE, text=True)
            r.stdout.readline(); recvs.append(r)
        t0 = time.monotonic()
        sends = [subprocess.Popen(["ip", "netns", "exec", src, sys.executable, "-c", SEND, addr, str(port), str(total)], stdout=subprocess.PIPE, text=True) for (src, dst, addr, port) in pairs]
        outs = [s.communicate()[0].strip() for s in sends]
        for r in recvs: r.communicate()
        return time.monotonic() - t0, outs
    t, o = transfer([(ns1, ns2, a2, 7071)])
    print("one way %d B at %s: %.3f s = %.2f Mbit/s payload" % (total, rate, t, total * 8 / t / 1e6))
    t, o = transfer([(ns1, ns2, a2, 7072), (ns2, ns1, a1, 7073)])
    print("both ways at once, %d B each: %.3f s = %.2f Mbit/s payload per direction; senders: %s" % (total, t, total * 8 / t / 1e6, o))
finally:
    net.close()
