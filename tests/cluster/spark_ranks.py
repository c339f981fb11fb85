"""Functions the Spark cluster tests run on every rank (imported by name on the
executors: PYTHONPATH holds the repository on every namespace host)."""

from __future__ import annotations

import os
import signal
import time


def where():
    """Rank, size, host, network namespace, the sum of an allreduce of rank + 1."""
    import numpy as np

    import gcurun.runtime as hvd

    hvd.init()
    total = hvd.allreduce(np.array([hvd.rank() + 1.0]), op=hvd.Sum, name="sum")
    found = {"rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(),
             "host": os.environ["GCURUN_HOSTNAME"],
             "netns": os.stat("/proc/self/ns/net").st_ino, "sum": float(total[0]),
             "pid": os.getpid(), "ancestors": ancestors()}
    print(f"rank {hvd.rank()} on {found['host']}")     # reaches the driver's stdout
    hvd.shutdown()
    return found


def ancestors():
    """The command lines of this process's ancestors, parent first."""
    found, pid = [], os.getppid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                found.append(f.read().replace(b"\0", b" ").decode(errors="replace"))
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            break
    return found


def elastic_steps(steps, directory):
    """An elastic training loop of ``steps`` committed allreduce steps; at step 1 of a
    3-worker generation, rank 2 writes its executor's pid to ``directory/kill`` and
    waits for the ``go`` file (its executor is killed meanwhile)."""
    import numpy as np

    import gcurun.runtime as hvd
    from gcurun.runtime import elastic
    from gcurun.spark.agent import executor_pid

    hvd.init()
    state = elastic.ObjectState(step=0, total=0.0)

    @elastic.run
    def train(state):
        while state.step < steps:
            if state.step == 1 and hvd.size() == 3 and hvd.rank() == 2:
                with open(os.path.join(directory, "kill"), "w") as out:
                    out.write(f"{executor_pid()} {os.getpid()}")
                while not os.path.exists(os.path.join(directory, "go")):
                    time.sleep(0.1)
            state.total += float(hvd.allreduce(np.ones(1), op=hvd.Sum, name="one")[0])
            state.step += 1
            state.commit()
        return {"rank": hvd.rank(), "size": hvd.size(), "total": state.total,
                "pid": os.getpid(), "host": os.environ["GCURUN_HOSTNAME"]}

    return train(state)


def kill_when_asked(directory):
    """In the driver: SIGKILL the executor named in ``directory/kill`` once it appears,
    then write ``go``."""
    path = os.path.join(directory, "kill")
    deadline = time.monotonic() + 300
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.2)      # the file is written in one call; let it be complete
    executor, rank = (int(pid) for pid in open(path).read().split())
    os.kill(executor, signal.SIGKILL)
    # The rank goes with its executor; "go" only lets a rank that outlived it go on
    # (which the test then catches).
    deadline = time.monotonic() + 60
    while os.path.exists(f"/proc/{rank}") and time.monotonic() < deadline:
        time.sleep(0.1)
    open(os.path.join(directory, "go"), "w").close()
