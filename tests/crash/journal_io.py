#!/usr/bin/python3
"""A journaling NBD client for the crash tests.

  journal_io.py write  SOCKET STATE SEED   write until the server goes away
  journal_io.py verify SOCKET STATE        check every block, then settle

Every 4 KiB block written carries a header (magic, block number, write id)
and a pattern derived from both, so a read tells exactly which write a block
holds. The writer notes each write's id in STATE's journal before sending it
and keeps, per block, the id that was last flushed (acknowledged before an
acknowledged FLUSH) and every id sent after it. When the server dies the
writer saves that and exits. The verifier then accepts, for each block,
its last flushed write or any later one, and nothing else; what it read
becomes the block's settled content for the next cycle.
"""
import json
import os
import random
import struct
import sys

import nbd

BLOCK = 4096
MAGIC = 0x4A4F55524E414C31  # "JOURNAL1"


def block_data(block, wid):
    head = struct.pack("<QQQ", MAGIC, block, wid)
    rng = random.Random(block * 1000003 + wid)
    return head + rng.randbytes(BLOCK - len(head))


def block_id(block, data):
    """The write id a block holds: 0 when never written, None when foreign."""
    if data == bytes(BLOCK):
        return 0
    magic, number, wid = struct.unpack_from("<QQQ", data)
    if magic != MAGIC or number != block or data != block_data(block, wid):
        return None
    return wid


def load(path, blocks):
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return {"blocks": blocks, "next_id": 1, "settled": [0] * blocks, "allowed": None,
            "cycles": 0, "writes": 0, "verified": 0}


def save(path, state):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def connect(socket):
    h = nbd.NBD()
    h.connect_unix(socket)
    return h


def write(socket, path, seed):
    h = connect(socket)
    blocks = h.get_size() // BLOCK
    state = load(path, blocks)
    rng = random.Random(seed)
    flushed = list(state["settled"])          # last flushed id per block
    since = [[] for _ in range(blocks)]       # ids sent after it
    written = 0
    try:
        while True:
            if rng.random() < 0.03:
                h.flush()
                for b in range(blocks):
                    if since[b]:
                        flushed[b] = since[b][-1]
                        since[b] = []
                continue
            count = rng.choice([1, 1, 1, 2, 4, 8])
            first = rng.randrange(0, blocks - count + 1)
            wid = state["next_id"]
            state["next_id"] += 1
            for b in range(first, first + count):
                since[b].append(wid)  # noted before it is sent
            h.pwrite(b"".join(block_data(b, wid) for b in range(first, first + count)),
                     first * BLOCK)
            written += 1
    except nbd.Error:
        pass  # the server went away: that is the point
    state["allowed"] = [[flushed[b]] + since[b] for b in range(blocks)]
    state["writes"] += written
    save(path, state)
    print(f"wrote {written} requests before the server went away")


def verify(socket, path):
    h = connect(socket)
    blocks = h.get_size() // BLOCK
    state = load(path, blocks)
    allowed = state["allowed"] or [[s] for s in state["settled"]]
    bad = 0
    chunk = 256
    for first in range(0, blocks, chunk):
        n = min(chunk, blocks - first)
        data = h.pread(n * BLOCK, first * BLOCK)
        for i in range(n):
            b = first + i
            got = block_id(b, data[i * BLOCK:(i + 1) * BLOCK])
            if got is None or got not in allowed[b]:
                bad += 1
                if bad <= 10:
                    what = "data never written to it" if got is None else f"write {got}"
                    print(f"LOST: block {b} holds {what}; allowed {allowed[b][:1]} "
                          f"(last flushed) or later {allowed[b][1:][-5:]}")
                continue
            state["settled"][b] = got
    if bad:
        print(f"{bad} blocks wrong")
        sys.exit(1)
    state["allowed"] = None
    state["cycles"] += 1
    state["verified"] += blocks
    save(path, state)


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "write":
        write(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 1)
    elif len(sys.argv) == 4 and sys.argv[1] == "verify":
        verify(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
