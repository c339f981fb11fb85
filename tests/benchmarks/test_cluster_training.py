"""benchmarks/cluster_training.py: its options and table without hosts, and end to end in
small on namespace hosts (one layout, the torch MLP): a table with a row per variant, every
variant with numbers. Timings are never asserted."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from benchmarks.cluster_allreduce import Layout
from benchmarks.cluster_training import (
    LayoutResult,
    ModelResult,
    as_json,
    format_phases,
    format_table,
    main,
    parse_args,
    parse_models,
)
from benchmarks.cluster_training_rank import Phases, shuffled
from tests.cluster.netns import unavailable_reason
from tests.helpers import ROOT


def test_small_picks_one_layout_the_mlp_and_few_steps_unless_told_otherwise():
    args = parse_args(["--small", "--models", "mlp,keras-mlp"])
    assert [layout.label for layout in args.layouts] == ["2x1"]
    assert args.models == ["mlp", "keras-mlp"] and args.backends == ["tcp"]
    assert (args.steps, args.rounds) == (2, 2)
    full = parse_args([])
    assert [layout.label for layout in full.layouts] == ["2x1", "4x1", "2x2"]
    assert full.models == ["mlp", "resnet18-narrow", "keras-mlp"]
    assert full.backends == ["tcp", "mpi"]


def test_options_quote_bad_input():
    with pytest.raises(argparse.ArgumentTypeError,
                       match="models 'mlp,vgg': pick from mlp,resnet18-narrow,keras-mlp"):
        parse_models("mlp,vgg")
    with pytest.raises(SystemExit):
        parse_args(["--rounds", "0"])


def test_every_rank_takes_the_variants_in_the_same_order_each_round():
    variants = ["gcurun-tcp", "gcurun-tcp-fp16", "ddp", "floor"]
    orders = [shuffled(variants, r) for r in range(6)]
    assert all(sorted(order) == sorted(variants) for order in orders)
    assert orders == [shuffled(variants, r) for r in range(6)]
    assert len({tuple(order) for order in orders}) > 1


def test_the_table_gives_ratio_to_the_peer_time_over_the_floor_and_efficiency():
    result = LayoutResult(Layout(2, 1), cores=2, rate_bits=2_000_000_000, load=(1.0, 2.0))
    result.models["mlp"] = ModelResult("mlp", 9_000_000, {
        "gcurun-tcp": [0.30, 0.20, 0.25], "gcurun-tcp-fp16": [0.35, 0.3, 0.2],
        "ddp": [0.5, 0.5, 0.4], "floor": [0.1, 0.1, 0.1], "gcurun-mpi": [0.25]})
    result.models["keras-mlp"] = ModelResult("keras-mlp", 1_000_000, {
        "gcurun-tcp": [0.02], "mwms": [0.04], "floor": [0.01]})
    text = format_table(result, {"mlp": 0.05, "keras-mlp": 0.01})
    assert "2 hosts x 1 rank(s) = 2 ranks, links shaped to 2 Gbit/s" in text
    rows = [line for line in text.splitlines() if line.startswith("| mlp") or
            line.startswith("| keras")]
    assert rows == [
        "| mlp | gcurun-tcp | 250.0 | 200.0-300.0 | 0.50 | 150.0 | 0.20 |",
        "| mlp | gcurun-tcp-fp16 | 300.0 | 200.0-350.0 | 0.60 | 200.0 | 0.17 |",
        "| mlp | ddp | 500.0 | 400.0-500.0 | 1.00 | 400.0 | 0.10 |",
        "| mlp | floor | 100.0 | 100.0-100.0 | 0.20 | 0.0 | 0.50 |",
        "| mlp | gcurun-mpi | 250.0 | 250.0-250.0 | 0.50 | 150.0 | 0.20 |",
        "| keras-mlp | gcurun-tcp | 20.0 | 20.0-20.0 | 0.50 | 10.0 | 0.50 |",
        "| keras-mlp | mwms | 40.0 | 40.0-40.0 | 1.00 | 30.0 | 0.25 |",
        "| keras-mlp | floor | 10.0 | 10.0-10.0 | 0.25 | 0.0 | 1.00 |",
    ]
    assert [line for line in text.splitlines() if line.startswith("# goal")] == [
        "# goal: mlp gcurun-tcp <= 0.95 x ddp's step: 0.50 (met)",
        "# goal: mlp gcurun-mpi <= 0.95 x ddp's step: 0.50 (met)",
        "# goal: mlp gcurun-tcp-fp16 <= 0.6 x ddp's step: 0.60 (met)",
        "# goal: keras-mlp gcurun-tcp <= 0.8 x mwms's step: 0.50 (met)",
    ]


def goals_of(result: LayoutResult) -> list[str]:
    return [line for line in format_table(result, {}).splitlines()
            if line.startswith("# goal")]


def test_two_hosts_of_two_ranks_have_their_own_goals_met_or_missed():
    result = LayoutResult(Layout(2, 2), cores=2, rate_bits=2_000_000_000)
    result.models["mlp"] = ModelResult("mlp", 9_000_000, {
        "gcurun-tcp": [0.4], "gcurun-tcp-fp16": [0.2], "ddp": [0.5], "floor": [0.1]})
    assert goals_of(result) == [
        "# goal: mlp gcurun-tcp <= 0.75 x ddp's step: 0.80 (missed)",
        "# goal: mlp gcurun-tcp <= 0.7 x ddp's time over the floor: 0.75 (missed)"]


def test_fp16_has_its_goal_on_two_hosts_of_one_rank_only():
    times = {"gcurun-tcp": [0.4], "gcurun-tcp-fp16": [0.31], "ddp": [0.5], "floor": [0.1]}
    two = LayoutResult(Layout(2, 1), cores=2, rate_bits=2_000_000_000)
    two.models["resnet18-narrow"] = ModelResult("resnet18-narrow", 2_800_000, dict(times))
    assert goals_of(two) == [
        "# goal: resnet18-narrow gcurun-tcp <= 0.95 x ddp's step: 0.80 (met)",
        "# goal: resnet18-narrow gcurun-tcp-fp16 <= 0.6 x ddp's step: 0.62 (missed)"]
    four = LayoutResult(Layout(4, 1), cores=2, rate_bits=2_000_000_000)
    four.models["mlp"] = ModelResult("mlp", 9_000_000, dict(times))
    assert goals_of(four) == ["# goal: mlp gcurun-tcp <= 0.95 x ddp's step: 0.80 (met)"]


def test_phases_keep_the_timed_steps_of_each_turn_apart_from_its_warmup():
    class Clock:                    # the engine's clock, advanced by the fake steps
        spent = {"rings": 0.0, "transfers": 0.0, "reductions": 0.0, "cycles": 0.0,
                 "cycle_cpu": 0.0}

    def step(rings: float):
        def run():
            Clock.spent["rings"] += rings
            Clock.spent["transfers"] += rings / 2
        return run

    phases = Phases(steps=2, clock=Clock)
    runs = {"gcurun-tcp": phases.wrap("gcurun-tcp", step(0.5)),
            "floor": phases.wrap("floor", step(0.0))}

    def turn(run):                  # one warm-up step, then the two timed ones
        for _ in range(3):
            run()
        return 1.0

    timed = phases.timed(turn)
    for name in ("gcurun-tcp", "floor", "gcurun-tcp"):
        assert timed(runs[name]) == 1.0
    assert sorted(phases.rounds) == ["floor", "gcurun-tcp"]
    assert phases.rounds["gcurun-tcp"]["rings"] == [0.5, 0.5]
    assert phases.rounds["gcurun-tcp"]["transfers"] == [0.25, 0.25]
    assert phases.rounds["floor"]["rings"] == [0.0]
    assert all(len(v) == 2 for v in phases.rounds["gcurun-tcp"].values())


def test_the_phase_table_averages_the_ranks_median_rounds():
    result = LayoutResult(Layout(2, 1), cores=2, rate_bits=2_000_000_000)
    gcurun = {"cpu": [0.2, 0.3, 0.25], "rings": [0.1, 0.1, 0.1],
              "transfers": [0.06, 0.06, 0.06], "reductions": [0.02, 0.02, 0.02],
              "cycles": [10.0, 12.0, 11.0], "cycle_cpu": [0.03, 0.05, 0.04]}
    floor = {"cpu": [0.1], "rings": [0.0], "transfers": [0.0], "reductions": [0.0]}
    other = dict(gcurun, cpu=[0.35, 0.35, 0.35], cycles=[13.0], cycle_cpu=[0.06])
    result.models["mlp"] = ModelResult(
        "mlp", 9_000_000, {"gcurun-tcp": [0.5, 0.5, 0.5], "floor": [0.2]},
        [{"gcurun-tcp": gcurun, "floor": floor}, {"gcurun-tcp": other, "floor": floor}])
    rows = [line for line in format_phases(result).splitlines()
            if line.startswith("| mlp")]
    # CPU: (250 + 350) / 2 ms; rings' rest 100 - 60 - 20; outside the rings 500 - 100;
    # cycles (11 + 13) / 2, their CPU (40 + 60) / 2 ms.
    assert rows == ["| mlp | gcurun-tcp | 500.0 | 300.0 | 0.60 | 100.0 | 60.0 | 20.0 | "
                    "20.0 | 400.0 | 12.0 | 50.0 |",
                    "| mlp | floor | 200.0 | 100.0 | 0.50 | - | - | - | - | - | - | - |"]
    assert format_phases(LayoutResult(Layout(2, 1), cores=2, rate_bits=1)) == ""


def test_summary_gives_the_runs_medians_range_and_goals_met(tmp_path, capsys):
    paths = []
    for index, gcurun in enumerate((0.4, 0.6, 0.45)):
        result = LayoutResult(Layout(2, 1), cores=2, rate_bits=2_000_000_000)
        result.models["mlp"] = ModelResult("mlp", 9_000_000, {
            "gcurun-tcp": [gcurun], "ddp": [0.5], "floor": [0.1]})
        paths.append(tmp_path / f"run-{index}.json")
        paths[-1].write_text(json.dumps(as_json([result], {"mlp": 0.1})))
    assert main(["--summary", *map(str, paths)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if line.startswith("| 2x1")] == [
        "| 2x1 | mlp | gcurun-tcp | 450.0 | 400.0-600.0 | 0.90 | 350.0 |",
        "| 2x1 | mlp | ddp | 500.0 | 500.0-500.0 | 1.00 | 400.0 |",
        "| 2x1 | mlp | floor | 100.0 | 100.0-100.0 | 0.20 | 0.0 |"]
    assert lines[-1] == "# goal: mlp gcurun-tcp <= 0.95 x ddp's step (2x1): met in 2 of 3 runs"
    assert main(["--summary", str(tmp_path / "missing.json")]) == 2
    assert "--summary" in capsys.readouterr().err


@pytest.mark.benchmark
@pytest.mark.integration
@pytest.mark.cluster
@pytest.mark.torch
def test_cluster_training_in_small_gives_every_variant_numbers(tmp_path):
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    out = tmp_path / "result.json"
    # One timed step a turn (--small's are 2): the fp16 variant costs no more steps.
    done = subprocess.run(
        [sys.executable, "benchmarks/cluster_training.py", "--small", "--steps", "1",
         "--phases", "--timeline", str(tmp_path / "traces"), "--json", str(out)],
        capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "cluster_training: 2x1 mlp (tcp): done" in done.stderr
    # (the main table's rows have 7 cells; --phases' table below it has 12)
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines()
            if line.startswith("| mlp") and line.count("|") == 8]
    assert [row[1].strip() for row in rows] == ["gcurun-tcp", "gcurun-tcp-fp16", "ddp",
                                                "floor"]
    assert all(len(row) == 7 and float(row[2]) > 0 for row in rows)
    result = json.loads(out.read_text())
    (layout,) = result["layouts"]
    assert (layout["hosts"], layout["ranks_per_host"]) == (2, 1)
    times = layout["models"]["mlp"]["times"]
    assert sorted(times) == ["ddp", "floor", "gcurun-tcp", "gcurun-tcp-fp16"]
    assert all(len(t) == 2 and min(t) > 0 for t in times.values())
    assert result["one_rank_seconds"]["mlp"] > 0
    # --phases: both ranks' record of every variant; gcurun's engine ran rings, DDP's not.
    phases = layout["models"]["mlp"]["phases"]
    assert len(phases) == 2 and all(sorted(p) == sorted(times) for p in phases)
    assert all(min(p["gcurun-tcp"]["rings"]) > 0 and max(p["ddp"]["rings"]) == 0
               and min(p["ddp"]["cpu"]) > 0 for p in phases)
    assert all(min(p["gcurun-tcp"]["cycles"]) >= 1 and min(p["gcurun-tcp"]["cycle_cpu"]) > 0
               for p in phases)
    phase_rows = [line for line in done.stdout.splitlines()
                  if line.startswith("| mlp") and line.count("|") == 13]
    assert [row.split("|")[2].strip() for row in phase_rows] == [
        "gcurun-tcp", "gcurun-tcp-fp16", "ddp", "floor"]
    # --timeline: the job's engine trace, which gcurun's reader takes.
    trace = tmp_path / "traces" / "2x1-mlp.json"
    summary = subprocess.run([sys.executable, "-m", "gcurun", "timeline", "summary",
                              str(trace)], capture_output=True, text=True, cwd=ROOT,
                             timeout=120)
    assert summary.returncode == 0, summary.stderr
    assert "ALLREDUCE" in summary.stdout
