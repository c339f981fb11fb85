"""gcurun's own signals become events without ever waiting on the event queue's lock."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import ROOT

# The main thread holds the queue's lock (as it does for a moment in every events.get())
# when SIGTERM's handler runs: a handler that put on that queue would wait forever.
SIGNAL_INSIDE_THE_LOCK = """
import os, queue, signal
from gcurun.launch.execute import signals_to

events = queue.Queue()
with signals_to(events):
    with events.mutex:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100000):
            pass
    print(events.get(timeout=30).name, flush=True)
"""


def test_a_signal_arriving_while_the_queue_is_locked_is_delivered():
    done = subprocess.run([sys.executable, "-c", SIGNAL_INSIDE_THE_LOCK], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "SIGTERM\n"
