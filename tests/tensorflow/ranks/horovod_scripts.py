"""Rank script: horovod_keras_fit.py, then horovod_tf2_loop.py, each run as its own
``__main__`` in one process, so TensorFlow starts once per rank for both (the second
``hvd.init()`` finds the job joined). The Keras recipe goes first: the loop leaves Keras's
global dtype policy at mixed_float16. Run under ``gcurun --horovod-alias``."""

import runpy
from pathlib import Path

HERE = Path(__file__).resolve().parent
for script in ("horovod_keras_fit.py", "horovod_tf2_loop.py"):
    runpy.run_path(str(HERE / script), run_name="__main__")
