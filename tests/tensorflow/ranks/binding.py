"""Rank script: collectives.py, training.py and keras_fit.py in one job, so TensorFlow and
Keras start once per rank instead of once per script. Each part runs all its checks, then
prints its own summary line, ``PART: rank R of S ok (N checks)``; a failed check ends the
job there (its traceback names the rank and the check), so the parts after it print
nothing.

usage: binding.py DIRECTORY (shared by the ranks, for keras_fit.py's saved model)
"""

from __future__ import annotations

import sys
from pathlib import Path

import collectives
import keras_fit
import training

import gcurun.runtime.tensorflow as hvd


def main() -> None:
    hvd.init()
    parts = (("collectives", collectives.run), ("training", training.run),
             ("keras_fit", lambda: keras_fit.run(Path(sys.argv[1]))))
    for name, run in parts:
        count = run()
        print(f"{name}: rank {hvd.rank()} of {hvd.size()} ok ({count} checks)", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
