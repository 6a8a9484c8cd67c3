#!/usr/bin/env python3
"""The NBD socket's limits, by a raw client (libnbd's would never send what
a hostile one does). Usage: nbd_door_test.py SOCKET DAEMON_PID EXPORT
MAX_CONNECTIONS. Exits 1 with a line per failure."""
import socket
import struct
import sys
import time

SOCK, PID, EXPORT, MAX = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode(), int(sys.argv[4])
MIB = 1 << 20
failures = []


def connect():
    s = socket.socket(socket.AF_UNIX)
    s.connect(SOCK)
    return s


def recv_exact(s, n):
    data = b""
    while len(data) < n:
        part = s.recv(n - len(data))
        if not part:
            return data
        data += part
    return data


def handshake(s):
    """Fixed newstyle, NBD_OPT_EXPORT_NAME; False when the server hung up."""
    if len(recv_exact(s, 18)) < 18:
        return False
    s.sendall(struct.pack(">I", 3))  # fixed newstyle, no zeroes
    s.sendall(struct.pack(">QII", 0x49484156454F5054, 1, len(EXPORT)) + EXPORT)
    return len(recv_exact(s, 10)) == 10  # size, flags


def request(s, kind, handle, offset, length, payload=b""):
    s.sendall(struct.pack(">IHHQQI", 0x25609513, 0, kind, handle, offset, length) + payload)


def reply(s, data=0):
    head = recv_exact(s, 16)
    magic, error, handle = struct.unpack(">IIQ", head)
    if error == 0 and data:
        recv_exact(s, data)
    return handle, error


def rss_bytes():
    with open(f"/proc/{PID}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


legit = connect()
if not handshake(legit):
    sys.exit("FAIL: the first client's handshake")
before = rss_bytes()

# 200 more clients: the limit counts the first, the rest are turned away.
attackers = []
refused = 0
for _ in range(200):
    s = connect()
    if handshake(s):
        attackers.append(s)
    else:
        refused += 1
        s.close()
if len(attackers) != MAX - 1:
    failures.append(f"{len(attackers)} more clients served, wanted {MAX - 1} ({refused} turned away)")

# Each asks for 16 reads of 32 MiB and reads no reply.
for s in attackers:
    for i in range(16):
        request(s, 0, i, 0, 32 * MIB)
time.sleep(3)
grown = rss_bytes() - before
bound = 512 * MIB  # the 256 MiB budget, and per client 1 MiB guaranteed and 16 MiB kept
print(f"daemon memory grew {grown / MIB:.0f} MiB under {len(attackers)} clients' 32 MiB reads (bound {bound / MIB:.0f} MiB)")
if grown > bound:
    failures.append(f"the daemon grew {grown / MIB:.0f} MiB, over {bound / MIB:.0f} MiB")

# The first client is still served.
legit.settimeout(20)
request(legit, 0, 77, 0, 4096)
try:
    if reply(legit, 4096) != (77, 0):
        failures.append("the first client's read failed")
except OSError as e:
    failures.append(f"the first client's read was not answered: {e}")

# Past the advertised maximum: EINVAL, and the connection goes on.
request(legit, 1, 78, 0, 32 * MIB + 4096, b"\x5a" * (32 * MIB + 4096))
if reply(legit) != (78, 22):
    failures.append("an oversized write was not answered EINVAL")
request(legit, 0, 79, 0, 4096)
if reply(legit, 4096) != (79, 0):
    failures.append("the connection did not go on after the oversized write")
for s in attackers:
    s.close()
legit.close()

# A client that says nothing after the server's greeting is let go. (The
# closed clients' connections end once what they asked for is done: until
# then new ones are turned away.)
deadline = time.time() + 120
while True:
    idle = connect()
    idle.settimeout(30)
    hello = recv_exact(idle, 18)
    if len(hello) == 18 or time.time() > deadline:
        break
    idle.close()
    time.sleep(0.5)
start = time.time()
rest = idle.recv(1)
took = time.time() - start
if len(hello) != 18 or rest != b"" or took > 20:
    failures.append(f"an idle handshake: {len(hello)} bytes of greeting, then {rest!r} after {took:.0f} s")

# One that trickles its handshake a byte a second is let go all the same.
trickle = connect()
trickle.settimeout(30)
recv_exact(trickle, 18)
trickle.sendall(struct.pack(">I", 3))  # valid flags: the server then waits for options
option = struct.pack(">QII", 0x49484156454F5054, 3, 0) * 100  # NBD_OPT_LIST, a byte at a time
start = time.time()
try:
    for byte in option:
        if time.time() - start > 30:
            break
        trickle.send(bytes([byte]))
        time.sleep(1)
except OSError:
    pass
took = time.time() - start
if took > 15:
    failures.append(f"a handshake trickled a byte a second went on for {took:.0f} s")

for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
