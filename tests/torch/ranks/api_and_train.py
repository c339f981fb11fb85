"""Rank script: api.py, then train.py, in one job, so torch starts once per rank for
both. Each part runs all its checks, then prints its own summary line,
``PART: rank R of S ok: N checks``; a failed check ends the job there (its traceback
names the rank and the check), so train.py's line is then missing too."""

from __future__ import annotations

import api
import train

import gcurun.runtime.torch as hvd


def main() -> None:
    hvd.init()
    for name, run in (("api", api.run), ("train", train.run)):
        count = run()
        print(f"{name}: rank {hvd.rank()} of {hvd.size()} ok: {count} checks", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
