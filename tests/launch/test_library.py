"""gcurun.run: a function on every rank through prepare -> plan -> execute, its results in
rank order, a rank's exception raised here. Real processes, local and under mpirun."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading

import pytest

import gcurun
from gcurun.errors import RankFunctionError, UsageError
from tests.helpers import ROOT, survivors

pytestmark = pytest.mark.integration

needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs mpirun")


def rank() -> int:
    return int(os.environ["GCURUN_RANK"])


def test_the_issue_example_prints_each_ranks_number():
    code = ("import gcurun; "
            "print(gcurun.run(lambda: __import__('os').environ['GCURUN_RANK'], num_proc=2))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout == "['0', '1']\n"


def test_importing_gcurun_loads_nothing_heavy():
    code = ("import sys, gcurun; print(sorted(m for m in ('paramiko', 'rich', 'numpy', "
            "'cloudpickle', 'click', 'yaml', 'gcurun.launch') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[]\n"


def test_closures_args_and_kwargs_come_back_in_rank_order(capsys):
    base = {"offset": 100}

    def work(scale, *, extra):
        import time

        time.sleep(0.3 * (2 - rank()))   # the last rank finishes first
        print(f"rank {rank()} done")
        return base["offset"] + scale * rank() + extra

    assert gcurun.run(work, args=(10,), kwargs={"extra": 1}, num_proc=3) == [101, 111, 121]
    out = capsys.readouterr().out
    assert sorted(out.splitlines()) == ["[0] rank 0 done", "[1] rank 1 done",
                                        "[2] rank 2 done"]


def test_env_and_every_rank_variable_reach_the_function():
    got = gcurun.run(lambda: (os.environ["FOO"], os.environ["GCURUN_SIZE"],
                              os.environ["LOCAL_RANK"]), num_proc=2, env={"FOO": "bar"})
    assert got == [("bar", "2", "0"), ("bar", "2", "1")]


def test_a_ranks_exception_is_raised_here_with_its_rank_and_traceback(tmp_path):
    def fail_on_one():
        (tmp_path / f"pid-{rank()}").write_text(str(os.getpid()))
        if rank() == 1:
            while not (tmp_path / "pid-0").exists():
                pass
            raise ValueError("loss is nan")
        threading.Event().wait(120)   # stopped by gcurun once rank 1 fails

    with pytest.raises(RankFunctionError) as info:
        gcurun.run(fail_on_one, num_proc=2)
    err = info.value
    assert (err.rank, err.host, err.error_type, err.message) == (
        1, "localhost", "ValueError", "loss is nan")
    assert str(err).startswith("rank 1 on localhost raised ValueError: loss is nan\n"
                               "Traceback (most recent call last):\n")
    assert 'raise ValueError("loss is nan")' in err.remote_traceback
    assert "run_function.py" not in err.remote_traceback
    assert isinstance(err.__cause__, ValueError) and str(err.__cause__) == "loss is nan"
    assert isinstance(err, gcurun.RankFunctionError) and err.exit_code == 1
    pids = [int((tmp_path / f"pid-{r}").read_text()) for r in range(2)]
    assert survivors(pids) == []


class Unpicklable(Exception):
    def __init__(self, text):
        super().__init__(text)
        self.lock = threading.Lock()


def test_an_exception_that_cannot_travel_still_reports_its_text():
    def fail():
        raise Unpicklable("holds a lock")

    with pytest.raises(RankFunctionError) as info:
        gcurun.run(fail, num_proc=1)
    assert (info.value.error_type, info.value.message) == ("Unpicklable", "holds a lock")
    assert info.value.__cause__ is None


@pytest.mark.parametrize("kwargs, message", [
    ({"slots": 4}, "--slots applies to elastic jobs; add --min-np or "
                   "--host-discovery-script"),
    ({"min_num_proc": 3, "min_np": 2}, "gcurun.run: min_num_proc=3 and min_np=2 disagree; "
                                       "give min_num_proc only"),
    ({"min_num_proc": 2, "use_mpi": True}, "gcurun.run: an elastic job runs on gcurun's own "
                                           "launcher, not mpirun; drop use_mpi or the "
                                           "elastic arguments"),
    ({"min_num_proc": 2, "hosts": "localhost:2"}, "--min-np with -H 'localhost:2': elastic "
                                                  "jobs need at least 2 hosts"),
    ({"min_num_proc": 2, "max_num_proc": 1, "host_discovery_script": "hosts.sh"},
     "--max-np 1 is below --min-np 2; give --max-np of at least 2"),
    ({"mpi_args": "--mca x y"}, "gcurun.run: mpi_args is for mpirun launches; pass "
                                "use_mpi=True too"),
    ({"use_mpi": True, "mpi_args": '--mca "x'}, "gcurun.run: mpi_args='--mca \"x': no "
                                                "closing quotation; quote the arguments as "
                                                "a shell would"),
    ({"use_gloo": True, "use_mpi": True}, "gcurun.run: use_gloo and use_mpi exclude each "
                                          "other; give one"),
    ({"hosts": "localhost:1", "hostfile": "hosts.txt"}, "gcurun.run: give either hosts or "
                                                        "hostfile, not both"),
    ({"np": 2, "num_proc": 3}, "gcurun.run: num_proc=3 and np=2 disagree"),
    ({"start_timeout": 0}, "gcurun.run: start_timeout=0: give seconds above 0"),
    ({"hosts": "node[3-1]:8"}, "host spec 'node[3-1]:8': range 3-1 runs backwards"),
    ({"num_proc": 3, "hosts": "localhost:2"}, "-np 3 asks for more ranks than the 2 slots"),
])
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_bad_arguments_are_refused_before_anything_starts(kwargs, message):
    with pytest.raises(UsageError) as info:
        gcurun.run(lambda: None, **kwargs)
    assert str(info.value).startswith(message)


def test_unpicklable_arguments_are_a_usage_error():
    with pytest.raises(UsageError, match="cannot be pickled"):
        gcurun.run(lambda lock: None, args=(threading.Lock(),), num_proc=1)


def test_np_is_horovods_old_name_for_num_proc():
    with pytest.warns(DeprecationWarning, match="np is deprecated"):
        assert gcurun.run(rank, np=2) == [0, 1]


@needs_mpirun
@pytest.mark.mpi
def test_under_mpirun_each_rank_is_an_mpi_rank():
    got = gcurun.run(lambda: (rank(), os.environ["OMPI_COMM_WORLD_RANK"]), num_proc=2,
                     use_mpi=True)
    assert got == [(0, "0"), (1, "1")]


@needs_mpirun
@pytest.mark.mpi
def test_under_mpirun_a_ranks_exception_is_raised_here():
    def fail_on_zero():
        if rank() == 0:
            raise KeyError("missing")
        return rank()

    with pytest.raises(RankFunctionError) as info:
        gcurun.run(fail_on_zero, num_proc=2, use_mpi=True)
    assert (info.value.rank, info.value.error_type) == (0, "KeyError")


def elastic_training(steps):
    """An elastic function: every worker joins, trains ``steps`` committed steps with an
    allreduce each, and returns its rank, the size and the sum it saw."""
    import numpy as np

    import gcurun.runtime as hvd
    from gcurun.runtime import elastic

    hvd.init()
    state = elastic.ObjectState(step=0, total=0.0)

    @elastic.run
    def train(state):
        while state.step < steps:
            state.total += float(hvd.allreduce(np.ones(1), op=hvd.Sum, name="one")[0])
            state.step += 1
            state.commit()
        return hvd.rank(), hvd.size(), state.total

    return train(state)


def test_min_np_max_np_and_a_discovery_script_run_an_elastic_job(tmp_path):
    script = tmp_path / "hosts.sh"
    script.write_text("#!/bin/sh\necho localhost:2\n")
    script.chmod(0o755)
    results = gcurun.run(elastic_training, args=(3,), min_num_proc=2, max_num_proc=2,
                         host_discovery_script=str(script), elastic_timeout=60,
                         output_filename=str(tmp_path / "logs"))
    assert results == [(0, 2, 6.0), (1, 2, 6.0)]
    log = (tmp_path / "logs" / "latest" / "elastic-events.jsonl").read_text()
    assert '"event": "generation"' in log and '"size": 2' in log
