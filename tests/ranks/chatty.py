"""A rank that writes a lot of output, for the launcher's output tests.

    chatty.py DIR --bytes N [--line L] [--linger S]

Writes DIR/rank-<N>.pid, then N bytes to stdout in lines of L bytes (the line included:
L-1 copies of the rank's letter, a..z, then a newline), in writes of about 64 KiB, then
DIR/rank-<N>.done, then lingers S seconds (default 0) so that the launcher must stop it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--bytes", type=int, required=True)
    p.add_argument("--line", type=int, default=1024)
    p.add_argument("--linger", type=float, default=0.0)
    args = p.parse_args()
    rank = int(os.environ["GCURUN_RANK"])
    with open(os.path.join(args.dir, f"rank-{rank}.pid"), "w") as f:
        f.write(str(os.getpid()))
    line = (chr(ord("a") + rank % 26) * (args.line - 1) + "\n").encode()
    block = line * max(1, 65536 // len(line))
    out = sys.stdout.buffer
    left = args.bytes
    while left > 0:
        chunk = block if left >= len(block) else (line * (left // len(line) + 1))[:left]
        out.write(chunk)
        out.flush()
        left -= len(chunk)
    with open(os.path.join(args.dir, f"rank-{rank}.done"), "w") as f:
        f.write("done")
    time.sleep(args.linger)
    return 0


if __name__ == "__main__":
    sys.exit(main())
