"""Rank 0's tuner as a state machine: steps fed by hand on a fake clock, optuna's TPE
sampler with a seed (no processes, no timing)."""

from __future__ import annotations

import csv
import json
import sys

import pytest

from gcurun.errors import UsageError
from gcurun.runtime.autotune import knobs as kn
from gcurun.runtime.autotune.knobs import Knobs, held_knobs, start_knobs
from gcurun.runtime.autotune.search import load_optuna
from gcurun.runtime.autotune.store import COLUMNS, Shape, TuneCache
from gcurun.runtime.autotune.tuner import Phase, Tuner
from gcurun.runtime.settings import AutotuneEnv, parse_runtime_env

SIZES = [4000, 1000, 250_000]           # the bytes of one step's three tensors
SHAPE = Shape(hosts=2, ranks_per_host=2, backend="tcp")


class Job:
    """Steps of named tensors on a fake clock; a step takes ``step_seconds`` unless the
    knobs make it faster (so the search has something to find)."""

    def __init__(self, tuner: Tuner, sizes: list[int] = SIZES):
        self.tuner, self.sizes, self.now = tuner, sizes, 0.0
        self.decisions: list[Knobs] = []

    def step(self, sizes: list[int] | None = None) -> None:
        knobs = self.tuner.current
        self.now += 0.1 if knobs.fusion_threshold_mb > 8 else 0.2
        for i, nbytes in enumerate(sizes or self.sizes):
            decision = self.tuner.observe([(f"grad.{i}", nbytes)], self.now)
            if decision is not None:
                self.decisions.append(decision)
        search = self.tuner.search
        if self.tuner._waiting and search is not None:
            search.wait(30)         # (the sampler's thread; no step goes by unmeasured)

    def until(self, phase: Phase, most: int = 400) -> int:
        for count in range(most):
            if self.tuner.phase == phase and count:
                return count
            self.step()
        raise AssertionError(f"not {phase} after {most} steps: {self.tuner.phase}")


def config(tmp_path, **changes) -> AutotuneEnv:
    values = dict(warmup_samples=1, steps_per_sample=2, max_samples=6, sampler="tpe",
                  seed=3, log_file=str(tmp_path / "log.csv"))
    values.update(changes)
    return AutotuneEnv(**values)


START = start_knobs(parse_runtime_env({}))


def test_it_settles_within_its_budget_on_the_best_sample_and_logs_horovods_columns(tmp_path):
    tuner = Tuner(config(tmp_path), START, frozenset(), SHAPE)
    job = Job(tuner)
    job.until(Phase.DONE)
    with open(tmp_path / "log.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == list(COLUMNS) == [
        "hierarchical_allreduce", "hierarchical_allgather", "torus_allreduce",
        "cache_enabled", "cycle_time_ms", "tensor_fusion_threshold", "score",
        "chunk_bytes", "stream_bytes"]
    assert len(rows) == 1 + 6 + 1         # a row per sample (warmup left out), the best last
    scores = [float(row[6]) for row in rows[1:-1]]
    assert float(rows[-1][6]) == max(scores)
    # the starting settings first (hierarchical allreduce: automatic, gcurun's default)
    assert rows[1][:7] == ["auto", "0", "0", "1", "1", "64", rows[1][6]]
    assert tuner.current == tuner.best[0] and job.decisions[-1] == tuner.best[0]
    out = tuner.outcome()
    assert out.finished and out.samples == 6
    assert out.start_score == pytest.approx(scores[0] * 1e6, rel=1e-4)   # (MB/s in the log)


def test_held_knobs_never_move(tmp_path):
    env = parse_runtime_env({"GCURUN_CYCLE_TIME_MS": "3", "HOROVOD_FUSION_THRESHOLD": "1048576",
                             "GCURUN_CHUNK_BYTES": "65536"})
    held = held_knobs(env, two_levels=True)
    assert held == {"cycle_time_ms", "fusion_threshold_mb", "chunk_bytes"}
    tuner = Tuner(config(tmp_path), start_knobs(env), held, SHAPE)
    job = Job(tuner)
    job.until(Phase.DONE)
    assert job.decisions
    for knobs in job.decisions:
        assert (knobs.cycle_time_ms, knobs.fusion_threshold_mb, knobs.chunk_bytes) == \
            (3.0, 1.0, 65536)
    assert len({(k.stream_bytes, k.cache_enabled, k.hierarchical_allreduce)
                for k in job.decisions}) > 1         # the others were searched


def test_one_host_and_a_cache_without_room_hold_hierarchical_allreduce_and_the_cache():
    env = parse_runtime_env({"GCURUN_CACHE_CAPACITY": "0"})
    assert held_knobs(env, two_levels=False) == {"cache_enabled", "hierarchical_allreduce"}
    assert start_knobs(env).cache_enabled is False


def test_the_cache_keys_by_layout_and_tensor_sizes():
    key = SHAPE.key([3, 1, 2])
    assert key == SHAPE.key([1, 2, 3])                            # order does not matter
    assert key != SHAPE.key([1, 2, 4])
    assert key != Shape(2, 2, "mpi").key([1, 2, 3])
    assert key != Shape(1, 4, "tcp").key([1, 2, 3])
    assert key != Shape(4, 1, "tcp").key([1, 2, 3])
    assert key.startswith("hosts=2 ranks_per_host=2 backend=tcp tensors=3 bytes=6 sizes=")


def test_a_job_of_the_same_shape_starts_from_the_cache_and_only_rechecks(tmp_path):
    cache = str(tmp_path / "cache.json")
    first = Tuner(config(tmp_path, cache=cache), START, frozenset(), SHAPE)
    Job(first).until(Phase.DONE)
    best = first.best[0]
    stored = json.loads(open(cache).read())["entries"]
    assert list(stored) == [SHAPE.key(SIZES)]
    assert stored[SHAPE.key(SIZES)]["knobs"] == best.to_json()

    again = Tuner(config(tmp_path, cache=cache, log_file=None), START, frozenset(), SHAPE)
    job = Job(again)
    job.step()
    assert again.phase == Phase.LEARN
    job.step()                          # the first step is known when the second begins
    assert again.phase == Phase.CHECK and job.decisions == ([best] if best != START else [])
    steps = job.until(Phase.DONE)
    assert again.search is None                 # no search: one sample re-checked it
    # (the step that switched, a warmup sample's steps, the sample, the settling step)
    assert steps <= 1 + 2 + 2 + 1 and again.current == best and again.outcome().from_cache
    entry = json.loads(open(cache).read())["entries"][SHAPE.key(SIZES)]
    assert entry["samples"] == 6                # (what the search that found it took)

    other = Tuner(config(tmp_path, cache=cache, log_file=None), START, frozenset(),
                  Shape(1, 4, "tcp"))
    Job(other).step()
    Job(other).step()
    assert other.phase in (Phase.WARMUP, Phase.TUNE)        # another layout: tuned anew


class SlowStart(Job):
    """A job whose first steps take three times as long (its start-up costs)."""

    def __init__(self, tuner: Tuner, slow_steps: int):
        super().__init__(tuner)
        self.slow_left = slow_steps

    def step(self, sizes: list[int] | None = None) -> None:
        if self.slow_left:
            self.slow_left -= 1
            fast = 0.1 if self.tuner.current.fusion_threshold_mb > 8 else 0.2
            self.now += 2 * fast
        super().step(sizes)


def test_the_recheck_waits_out_the_jobs_slow_first_steps(tmp_path):
    cache = str(tmp_path / "cache.json")
    first = Tuner(config(tmp_path, cache=cache), START, frozenset(), SHAPE)
    Job(first).until(Phase.DONE)
    again = Tuner(config(tmp_path, cache=cache, log_file=None), START, frozenset(), SHAPE)
    # Its first four steps (the one that tells its shape, the switch and two more) are
    # slow: a re-check scored on them would fall below the cache's score by two thirds.
    SlowStart(again, slow_steps=4).until(Phase.DONE)
    assert again.search is None and again.outcome().from_cache
    assert again.current == first.best[0]
    # Without warmup samples (the user's choice), the re-check is the first sample.
    hasty = Tuner(config(tmp_path, cache=cache, log_file=None, warmup_samples=0), START,
                  frozenset(), SHAPE)
    job = SlowStart(hasty, slow_steps=4)
    for _ in range(5):              # (a step is scored when the next one begins)
        job.step()
    assert hasty.phase != Phase.CHECK and hasty.search is not None     # tuning again


def test_it_tunes_again_when_the_bytes_per_step_change_beyond_the_threshold(tmp_path):
    tuner = Tuner(config(tmp_path, retune_threshold=0.2), START, frozenset(), SHAPE)
    job = Job(tuner)
    job.until(Phase.DONE)
    for _ in range(5):
        job.step([int(s * 1.1) for s in SIZES])     # within the threshold: settled
    assert tuner.phase == Phase.DONE
    job.step(SIZES + [400_000])         # more than double: one step is not yet a change
    assert tuner.phase == Phase.DONE
    for _ in range(2):
        job.step(SIZES + [400_000])
    assert tuner.phase in (Phase.WARMUP, Phase.TUNE)
    assert tuner.key == SHAPE.key(SIZES + [400_000])


def test_the_summary_says_what_was_chosen_and_how_to_keep_it(tmp_path):
    tuner = Tuner(config(tmp_path), START, frozenset(), SHAPE)
    Job(tuner).until(Phase.DONE)
    best = tuner.best[0]
    lines = tuner.close()
    assert lines[0] == f"chose: {best.describe()}"
    assert "; the starting settings: " in lines[1] and "6 samples" in lines[1]
    assert lines[2] == f"to start there next time: gcurun {best.command_line()} ..."
    assert lines[3:] == ["or in a profile:"] + ["  " + line for line in best.profile_lines()]


def test_a_job_too_short_to_sample_says_so(tmp_path):
    tuner = Tuner(config(tmp_path), START, frozenset(), SHAPE)
    Job(tuner).step()
    assert tuner.close()[0].startswith("no sample was scored (learning the traffic after 0 steps)")


def test_knobs_written_for_the_next_run():
    knobs = Knobs(16.0, 2.5, False, True, 1 << 20, 128 << 10)
    assert knobs.command_line() == (
        "--fusion-threshold-mb 16 --cycle-time-ms 2.5 --cache-capacity 0 "
        "--hierarchical-allreduce -x GCURUN_CHUNK_BYTES=1048576 -x GCURUN_STREAM_BYTES=131072")
    assert knobs.profile_lines() == [
        "runtime:", "  fusion_threshold_mb: 16", "  cycle_time_ms: 2.5",
        "  hierarchical_allreduce: true", "env:", '  GCURUN_CHUNK_BYTES: "1048576"',
        '  GCURUN_STREAM_BYTES: "131072"', '  GCURUN_CACHE_CAPACITY: "0"']
    assert knobs.describe() == ("fusion 16 MB, cycle 2.5 ms, cache off, hierarchical on, "
                                "chunk 1 MiB, stream 128 KiB")
    assert Knobs.from_json(knobs.to_json()) == knobs
    assert START.with_params({"chunk_exponent": 20, "stream_exponent": 17}).chunk_bytes == \
        1 << 20
    assert kn.NAMES == tuple(knobs.to_json())


def test_without_optuna_autotune_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)
    with pytest.raises(UsageError) as info:
        load_optuna()
    assert str(info.value) == (
        "--autotune needs the optuna package, which is not installed on rank 0's host; "
        "install it with pip install 'gcurun[autotune]' (or pip install optuna), or run "
        "without --autotune")


def test_horovods_variables_turn_autotune_on():
    env = parse_runtime_env({"HOROVOD_AUTOTUNE": "1", "HOROVOD_AUTOTUNE_LOG": "a.csv",
                             "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "0",
                             "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "4",
                             "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": "9",
                             "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE": "0.1",
                             "GCURUN_AUTOTUNE_CACHE": "c.json"})
    assert env.autotune == AutotuneEnv(log_file="a.csv", warmup_samples=0,
                                       steps_per_sample=4, max_samples=9, noise=0.1,
                                       cache="c.json")
    assert parse_runtime_env({}).autotune is None
    assert parse_runtime_env({"GCURUN_AUTOTUNE": "0", "HOROVOD_AUTOTUNE": "1"}).autotune \
        is None
    with pytest.raises(UsageError, match="GCURUN_AUTOTUNE_SAMPLER='bo': use one of gp, tpe"):
        parse_runtime_env({"GCURUN_AUTOTUNE": "1", "GCURUN_AUTOTUNE_SAMPLER": "bo"})


def test_an_unreadable_cache_is_treated_as_empty(tmp_path, caplog):
    path = tmp_path / "c.json"
    path.write_text("{not json")
    assert TuneCache(str(path)).lookup("k") is None
    assert "cannot be read" in caplog.text


def test_a_log_file_that_cannot_be_written_is_bad_input(tmp_path):
    path = str(tmp_path / "missing" / "log.csv")
    with pytest.raises(UsageError) as info:
        Tuner(config(tmp_path, log_file=path), START, frozenset(), SHAPE)
    assert str(info.value) == (f"--autotune-log-file {path!r}: cannot be written (No such "
                               "file or directory); give a file in a folder that exists and "
                               "that rank 0 may write")


def test_one_lucky_sample_does_not_decide_alone(tmp_path):
    # The budget is spent with a best whose one sample was lucky: it and the starting
    # settings are measured twice more each, in turns, and only those fresh samples count
    # (the lucky 10.0 would have made the best's mean the higher one).
    tuner = Tuner(config(tmp_path, log_file=None), START, frozenset(), SHAPE)
    lucky = START.with_params({"fusion_threshold_mb": 2.0})
    tuner.phase, tuner.samples = Phase.TUNE, 6
    tuner.current, tuner.best, tuner.start_score = lucky, (lucky, 10.0), 5.0
    assert tuner._confirm_best() is None            # (it runs lucky already)
    assert tuner.phase == Phase.CONFIRM
    assert tuner._sampled(6.0) == START             # lucky: 6.0
    assert tuner._sampled(6.5) == lucky             # the start: 6.5
    assert tuner._sampled(6.2) == START             # lucky: 6.2 (mean 6.1)
    assert tuner._sampled(6.3) is None              # the start: 6.3 (mean 6.4) wins
    assert tuner.phase == Phase.DONE and tuner.best == (START, pytest.approx(6.4))


def test_the_best_is_kept_when_its_fresh_samples_beat_the_start(tmp_path):
    tuner = Tuner(config(tmp_path, log_file=None), START, frozenset(), SHAPE)
    better = START.with_params({"fusion_threshold_mb": 2.0})
    tuner.phase, tuner.samples = Phase.TUNE, 6
    tuner.current, tuner.best, tuner.start_score = better, (better, 9.0), 5.0
    tuner._confirm_best()
    for score in (8.0, 5.0, 8.0):
        assert tuner._sampled(score) is not None    # (each turn switches the knobs)
    assert tuner._sampled(5.0) == better            # 8.0 against 5.0: the best settles
    assert tuner.phase == Phase.DONE and tuner.best == (better, 8.0)
