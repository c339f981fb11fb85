"""The allreduce benchmark's order of turns (its runs are in test_jobs.py and
tests/cli/test_bench.py)."""

from __future__ import annotations

from gcurun.runtime.bench import turns

NAMES = ["ring(mpi)", "ring(tcp)", "native"]


def test_every_round_holds_every_variant_once() -> None:
    for order in turns(NAMES, 20, seed=4096):
        assert sorted(order) == sorted(NAMES)


def test_every_rank_takes_the_same_turns() -> None:
    assert turns(NAMES, 20, seed=4096) == turns(NAMES, 20, seed=4096)


def test_no_variant_always_runs_right_after_the_same_one() -> None:
    sequence = [name for order in turns(NAMES, 20, seed=4194304) for name in order]
    for name in NAMES:
        before = {sequence[i - 1] for i in range(1, len(sequence)) if sequence[i] == name}
        assert before - {name} == set(NAMES) - {name}, (name, before)
