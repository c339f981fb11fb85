"""benchmarks/autotune.py: its options, grid and table without hosts, and end to end in
its --quick form on namespace hosts (marked long: minutes on a busy machine). Timings are
never asserted."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from benchmarks.autotune import (
    GRID,
    ModelResult,
    format_table,
    grid_points,
    main,
    parse_args,
    parse_models,
)
from benchmarks.cluster_allreduce import Layout
from tests.cluster.netns import unavailable_reason
from tests.helpers import ROOT


def test_quick_picks_one_host_the_mlp_and_a_small_budget_unless_told_otherwise():
    args = parse_args(["--quick", "--models", "mlp,resnet50-grads"])
    assert [layout.label for layout in args.layouts] == ["1x2"]
    assert args.models == ["mlp", "resnet50-grads"]
    assert (args.steps, args.rounds, args.screen_steps) == (3, 2, 2)
    assert "--autotune-bayes-opt-max-samples 4" in args.autotune_args
    full = parse_args([])
    assert [layout.label for layout in full.layouts] == ["1x2", "2x2"]
    assert full.models == ["resnet50-grads", "mlp"] and full.autotune_args == ""


def test_options_quote_bad_input():
    with pytest.raises(argparse.ArgumentTypeError,
                       match="models 'mlp,vgg': pick from resnet50-grads,mlp"):
        parse_models("mlp,vgg")
    with pytest.raises(SystemExit):
        parse_args(["--rounds", "0"])


def test_the_grid_is_every_combination_and_hierarchical_only_across_hosts():
    across = grid_points(GRID, hosts=2)
    alone = grid_points(GRID, hosts=1)
    assert len(across) == 2 ** 6 and len(alone) == len(across) // 2
    assert {p["hierarchical_allreduce"] for p in alone} == {None}
    assert len({json.dumps(p, sort_keys=True) for p in across}) == len(across)


def test_the_table_gives_each_variant_over_its_jobs_defaults_and_the_grids_best():
    result = ModelResult("mlp", {"defaults": [0.2, 0.3, 0.25], "grid best": [0.1, 0.3],
                                 "defaults (autotune job)": [0.4], "autotune": [0.3]},
                         {"autotune": "fusion 2 MB"}, tune_steps=230)
    text = format_table(Layout(2, 2), 2_000_000_000, [result])
    assert text.splitlines()[0] == ("# autotune, 2 host(s) x 2 ranks, links shaped to "
                                    "2 Gbit/s")
    kept = ("| mlp", "# mlp", "# goal")
    assert [line for line in text.splitlines() if line.startswith(kept)] == [
        "| mlp | defaults | 250.0 | 200.0-300.0 | 1.00 | 1.25 |  |",
        "| mlp | grid best | 200.0 | 100.0-300.0 | 0.80 | 1.00 |  |",
        "| mlp | defaults (autotune job) | 400.0 | 400.0-400.0 | 1.00 | 1.25 |  |",
        "| mlp | autotune | 300.0 | 300.0-300.0 | 0.75 | 0.94 | fusion 2 MB |",
        "# mlp: autotune settled after 230 steps",
        # autotune's step over the grid best's, each over its job's defaults:
        # (300/400) / (200/250) = 0.9375, so 1/0.9375 = 1.07 of the best's throughput
        "# goal: mlp autotuned steady state >= 0.95 x the grid best's throughput: 1.07 (met)",
        # the defaults' spread is 0 here (one round): 400/300 = 1.33 >= 1.00
        "# goal: mlp autotune's throughput >= the defaults' - their spread (1.00): 1.33 (met)",
    ]


def test_the_warm_caches_first_steps_are_judged_against_the_grids_best():
    result = ModelResult("mlp", {"defaults": [0.2], "grid best": [0.2],
                                 "defaults (warm job)": [0.2, 0.3],
                                 "warm cache, first steps": [0.3], "warm cache": [0.25]},
                         warm_steps=10)
    lines = format_table(Layout(1, 2), 2_000_000_000, [result]).splitlines()
    assert "| mlp | warm cache, first steps | 300.0 | 300.0-300.0 | 1.20 | 1.20 |  |" in lines
    assert "# mlp: with the warm cache, settled after 10 steps" in lines
    # first steps 0.3 over the warm job's defaults 0.25 = 1.2 x the grid best's step
    assert ("# goal: mlp warm cache, first steps >= 0.95 x the grid best's throughput: "
            "0.83 (missed)") in lines


def test_summary_sets_runs_side_by_side_and_counts_the_goals_met(tmp_path, capsys):
    def run(tuned: float, first: float) -> list[dict]:
        times = {"defaults": [0.2], "grid best": [0.2],
                 "defaults (autotune job)": [0.2, 0.22], "autotune": [tuned],
                 "defaults (warm job)": [0.2], "warm cache, first steps": [first],
                 "warm cache": [0.2]}
        return [{"hosts": 2, "ranks_per_host": 2, "models": {"mlp": {
            "times": times, "settings": {"autotune": "fusion 2 MB"}, "tune_steps": 300,
            "warm_steps": 13}}}]

    paths = []
    for name, tuned, first in (("run-1", 0.2, 0.2), ("run-2", 0.25, 0.19)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(run(tuned, first)))
    assert main(["--summary", *map(str, paths)]) == 0
    lines = capsys.readouterr().out.splitlines()
    # the defaults' median 0.21, range 0.02: the least autotune may score is 1 - 0.02/0.21
    assert [line for line in lines if line.startswith("| 2x2")] == [
        "| 2x2 | mlp | run-1 | 1.05 | 1.00 | 1.05 (0.90) | 300, 13 | fusion 2 MB |",
        "| 2x2 | mlp | run-2 | 0.84 | 1.05 | 0.84 (0.90) | 300, 13 | fusion 2 MB |"]
    assert lines[-3:] == ["# goal: autotuned steady state: met in 1 of 2",
                          "# goal: warm cache, first steps: met in 2 of 2",
                          "# goal: never below the defaults: met in 1 of 2"]
    (tmp_path / "bad.json").write_text("{")
    assert main(["--summary", str(tmp_path / "bad.json")]) == 2
    assert "--summary" in capsys.readouterr().err


@pytest.mark.long
@pytest.mark.benchmark
@pytest.mark.integration
@pytest.mark.cluster
@pytest.mark.torch
def test_autotune_benchmark_quick_gives_every_variant_numbers(tmp_path):
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    out = tmp_path / "result.json"
    done = subprocess.run(
        [sys.executable, "benchmarks/autotune.py", "--quick", "--json", str(out)],
        capture_output=True, text=True, cwd=ROOT, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "autotune-bench: 1x2 mlp: grid done in" in done.stderr
    assert "autotune-bench: mlp: autotune settled after" in done.stderr
    assert "autotune-bench: 1x2 mlp: warm done in" in done.stderr
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines()
            if line.startswith("| mlp")]
    assert [row[1].strip() for row in rows] == [
        "defaults", "grid best", "defaults (autotune job)", "autotune",
        "autotune job, first steps", "defaults (warm job)", "warm cache, first steps",
        "warm cache"]
    assert all(float(row[2]) > 0 for row in rows)
    (layout,) = json.loads(out.read_text())
    assert (layout["hosts"], layout["ranks_per_host"]) == (1, 2)
    times = layout["models"]["mlp"]["times"]
    assert sorted(times) == ["autotune", "autotune job, first steps", "defaults",
                             "defaults (autotune job)", "defaults (warm job)", "grid best",
                             "warm cache", "warm cache, first steps"]
    for start in ("autotune job, first steps", "warm cache, first steps"):
        assert len(times.pop(start)) == 1                       # one job start each
    assert all(len(t) == 2 and min(t) > 0 for t in times.values())
