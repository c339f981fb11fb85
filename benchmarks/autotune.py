"""Autotune on shaped links: the default settings, ``--autotune``'s choice and the best
point of an exhaustive grid over the same knobs, in steady-state step times.

    python benchmarks/autotune.py [--rate 2gbit] [--layouts 1x2,2x2]
        [--models resnet50-grads,mlp] [--steps 10] [--rounds 3] [--cluster DIR]
        [--json FILE]
    python benchmarks/autotune.py --quick        # one host x 2, the MLP, a tiny grid
    python benchmarks/autotune.py --summary run-1.json run-2.json run-3.json

Needs root, ip, tc, unshare and sshd: it builds namespace hosts with
tests/cluster/netns-cluster.sh (benchmarks/cluster_allreduce.py's ``prepare_cluster``),
every host's link shaped to ``--rate``. Layouts: ``1x2`` is one host with two ranks (no
link between them), ``2x2`` two hosts of two ranks each.

Models (every rank the same):
  resnet50-grads  ResNet-50's 161 gradient tensors (benchmarks/engine.py), averaged with
                  allreduce_async_ in backward order each step: communication alone
  mlp             benchmarks/torch_ddp.py's MLP trained by gcurun's DistributedOptimizer

Per layout and model, three jobs (gcurun over SSH, the tcp backend):
  grid      the defaults and every point of the grid, each set on every rank at once
            (rank 0's engine sends it with the next cycle, as autotune's decisions go),
            timed in a first pass of ``--screen-steps`` steps; then the defaults and the
            fastest point take turns for ``--rounds`` rounds of ``--steps`` steps
  autotune  ``gcurun --autotune`` (Horovod's budget unless told otherwise); once it has
            settled (or after ``--tune-steps`` steps), its choice and the defaults take
            turns for ``--rounds`` rounds of ``--steps`` steps; it writes what it learned
            to an ``--autotune-cache`` file
  warm      ``gcurun --autotune`` with that cache: its steps 2 to ``--steps`` + 1 are
            timed as they come ("first steps": the first step tells the tuner the job's
            shape, runs on the defaults and carries the job's start-up costs), then, once
            it has settled, its choice and the defaults take turns as above

A round's step time is the slowest rank's mean. Each job also times the defaults, taking
turns with its own variant (jobs run minutes apart, and a shared machine's load moves in
between): the table gives the median round, the range, each variant over its own job's
defaults, and over the grid's best (both first taken over their job's defaults). Progress
lines go to stderr while it runs. Times on a shared, busy machine move from run to run:
compare the ratios of one run, and run it several times.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.cluster_allreduce import (  # noqa: E402
    BenchmarkError,
    Layout,
    exit_on_sigterm,
    parse_layouts,
    prepare_cluster,
)

MODELS = ("resnet50-grads", "mlp")
RANK_FLAG = "--rank-of"
KIB, MIB = 1 << 10, 1 << 20
# The grid: every combination of two values a knob, far apart in the range
# autotune searches (hierarchical allreduce only where there are 2+ hosts: on or off,
# one of which "automatic" picks): 64 points on two hosts, 32 on one.
GRID = {
    "fusion_threshold_mb": (2.0, 64.0),
    "cycle_time_ms": (0.5, 2.0),
    "cache_enabled": (True, False),
    "hierarchical_allreduce": (True, False),
    "chunk_bytes": (512 * KIB, 4 * MIB),
    "stream_bytes": (128 * KIB, 1 * MIB),
}
QUICK_GRID = {"fusion_threshold_mb": (1.0, 64.0), "cycle_time_ms": (1.0,),
              "cache_enabled": (True,), "hierarchical_allreduce": (None,),
              "chunk_bytes": (2 * MIB,), "stream_bytes": (256 * KIB,)}


# -- options ------------------------------------------------------------------------

def parse_models(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names or any(n not in MODELS for n in names):
        raise argparse.ArgumentTypeError(f"models {text!r}: pick from {','.join(MODELS)}, "
                                         "comma-separated")
    return names


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", default=None, help="tc rate of every host's link "
                        "(default 2gbit; with --cluster, the cluster's own)")
    parser.add_argument("--layouts", type=parse_layouts, default=None,
                        help="HOSTSxRANKS, comma-separated (default 1x2,2x2)")
    parser.add_argument("--models", type=parse_models, default=None,
                        help=f"comma-separated, of {','.join(MODELS)} (default both)")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per round "
                        "(default 5)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 3)")
    parser.add_argument("--screen-steps", type=int, default=None,
                        help="steps per grid point in the first pass (default 3)")
    parser.add_argument("--tune-steps", type=int, default=None,
                        help="the most steps autotune may take to settle (default 2000)")
    parser.add_argument("--autotune-args", default=None,
                        help="extra gcurun --autotune-* options, quoted (default none: "
                             "Horovod's budget)")
    parser.add_argument("--quick", action="store_true",
                        help="a short run: 1x2, the MLP, a grid of 2 points, autotune with "
                             "4 samples of 2 steps (options given as well still count)")
    parser.add_argument("--cluster", type=Path, default=None,
                        help="state directory of namespace hosts built already")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    parser.add_argument("--job-seconds", type=float, default=3600.0,
                        help="deadline of one job (default 3600)")
    parser.add_argument("--summary", type=Path, nargs="+", default=None, metavar="JSON",
                        help="no run: the goals of earlier runs' --json files side by side")
    args = parser.parse_args(list(argv))
    quick = {"layouts": parse_layouts("1x2"), "models": ["mlp"], "steps": 3, "rounds": 2,
             "screen_steps": 2, "tune_steps": 200,
             "autotune_args": "--autotune-warmup-samples 1 --autotune-steps-per-sample 2 "
                              "--autotune-bayes-opt-max-samples 4"}
    full = {"layouts": parse_layouts("1x2,2x2"), "models": list(MODELS), "steps": 5,
            "rounds": 3, "screen_steps": 3, "tune_steps": 2000, "autotune_args": ""}
    for name, value in (quick if args.quick else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if min(args.steps, args.rounds, args.screen_steps, args.tune_steps) < 1:
        parser.error("--steps, --rounds, --screen-steps and --tune-steps must be at least 1")
    return args


def grid_points(grid: dict[str, tuple[Any, ...]], hosts: int) -> list[dict[str, Any]]:
    """Every combination of ``grid``'s values (hierarchical allreduce as automatic on one
    host, where it does not apply)."""
    values = dict(grid)
    if hosts < 2:
        values["hierarchical_allreduce"] = (None,)
    names = list(values)
    return [dict(zip(names, combo, strict=True))
            for combo in itertools.product(*(values[n] for n in names))]


# -- results ------------------------------------------------------------------------

@dataclass
class ModelResult:
    """One model on one layout: seconds per round, per variant, and their settings."""

    model: str
    times: dict[str, list[float]] = field(default_factory=dict)
    settings: dict[str, str] = field(default_factory=dict)
    tune_steps: int = 0
    warm_steps: int = 0


def format_table(layout: Layout, rate_bits: int, models: list[ModelResult]) -> str:
    lines = [f"# autotune, {layout.hosts} host(s) x {layout.per_host} ranks, links shaped "
             f"to {rate_bits / 1e9:g} Gbit/s", "",
             "| model | variant | median ms/step | range ms | / defaults | / grid best "
             "| settings |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for result in models:
        median = {v: statistics.median(t) for v, t in result.times.items()}
        for variant, times in result.times.items():
            m = median[variant]
            own = median.get(TWIN[variant])         # the defaults of the same job
            over = m / own if own else None
            best = _over_grid_best(median, variant)
            lines.append(
                f"| {result.model} | {variant} | {m * 1e3:.1f} | {min(times) * 1e3:.1f}-"
                f"{max(times) * 1e3:.1f} | {f'{over:.2f}' if over else '-'} | "
                f"{f'{best:.2f}' if best else '-'} | {result.settings.get(variant, '')} |")
        if result.tune_steps:
            lines.append(f"# {result.model}: autotune settled after {result.tune_steps} steps")
        if result.warm_steps:
            lines.append(f"# {result.model}: with the warm cache, settled after "
                         f"{result.warm_steps} steps")
        lines.extend(goal_lines(result.model, result.times))
    return "\n".join(lines) + "\n"


GOALS = ("autotuned steady state", "warm cache, first steps", "never below the defaults")


def goal_figures(times: dict[str, list[float]]) -> dict[str, tuple[float, float]]:
    """Issue 30's goals, judged from one run, as (figure, the least it may be): the first
    two are throughput over the grid best's (the inverse of the step time, each first taken
    over its own job's defaults); the third, autotune's throughput over the defaults' in
    the same job, may fall short of 1 by the defaults' measured spread (their range
    between rounds, as a share of their median)."""
    median = {v: statistics.median(t) for v, t in times.items()}
    figures = {}
    for variant, goal in (("autotune", GOALS[0]), (FIRST, GOALS[1])):
        best = _over_grid_best(median, variant) if variant in median else None
        if best:
            figures[goal] = (1 / best, 0.95)
    own, tuned = times.get("defaults (autotune job)"), times.get("autotune")
    if own and tuned:
        base = statistics.median(own)
        figures[GOALS[2]] = (base / statistics.median(tuned),
                             1 - (max(own) - min(own)) / base)
    return figures


def goal_lines(model: str, times: dict[str, list[float]]) -> list[str]:
    lines = []
    for goal, (figure, least) in goal_figures(times).items():
        met = "met" if figure >= least else "missed"
        if goal == GOALS[2]:
            lines.append(f"# goal: {model} autotune's throughput >= the defaults' - their "
                         f"spread ({least:.2f}): {figure:.2f} ({met})")
        else:
            lines.append(f"# goal: {model} {goal} >= 0.95 x the grid best's throughput: "
                         f"{figure:.2f} ({met})")
    return lines


def summary(runs: Sequence[tuple[str, list[dict[str, Any]]]]) -> str:
    """Several runs' --json files side by side: per layout, model and run, each goal's
    figure (see :func:`goal_figures`), how many steps autotune took to settle (alone and
    with the warm cache) and what it chose; then how often each goal was met."""
    lines = ["| layout | model | run | autotune / grid best | warm first steps / grid best "
             "| autotune / defaults (least) | settled after (autotune, warm) | autotune's "
             "choice |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    met = {goal: [0, 0] for goal in GOALS}
    rows = sorted(((f"{lay['hosts']}x{lay['ranks_per_host']}", model, name, entry)
                   for name, layouts in runs for lay in layouts
                   for model, entry in lay["models"].items()),
                  key=lambda row: (row[0], MODELS.index(row[1]) if row[1] in MODELS
                                   else len(MODELS), row[1]))
    for label, model, name, entry in rows:
        figures = goal_figures(entry["times"])
        cells = []
        for goal in GOALS:
            if goal not in figures:
                cells.append("-")
                continue
            figure, least = figures[goal]
            met[goal][0] += figure >= least
            met[goal][1] += 1
            cells.append(f"{figure:.2f}" + (f" ({least:.2f})" if goal == GOALS[2] else ""))
        settled = f"{entry.get('tune_steps') or '-'}, {entry.get('warm_steps') or '-'}"
        lines.append(f"| {label} | {model} | {name} | {' | '.join(cells)} | {settled} | "
                     f"{entry.get('settings', {}).get('autotune', '-')} |")
    lines.append("")
    lines += [f"# goal: {goal}: met in {hit} of {count}" for goal, (hit, count) in met.items()]
    return "\n".join(lines) + "\n"


# Each variant's defaults: the same job's (jobs run minutes apart on a shared machine).
# Steps 2 to --steps + 1 of a job, timed as they come: with the warm cache, and without
# (the autotune job's, on the defaults while it takes its warmup samples: the start-up
# costs every job's first steps carry, to compare the warm cache's with).
FIRST, COLD = "warm cache, first steps", "autotune job, first steps"
TWIN = {"defaults": "defaults", "grid best": "defaults",
        "defaults (autotune job)": "defaults (autotune job)",
        "autotune": "defaults (autotune job)", COLD: "defaults (autotune job)",
        "defaults (warm job)": "defaults (warm job)", FIRST: "defaults (warm job)",
        "warm cache": "defaults (warm job)"}
ORDER = tuple(TWIN)


def _over_grid_best(median: dict[str, float], variant: str) -> float | None:
    """A variant's step over the grid's best, each first taken over its own job's
    defaults."""
    best, base = median.get("grid best"), median.get("defaults")
    own = median.get(TWIN[variant])
    if not (best and base and own):
        return None
    return (median[variant] / own) / (best / base)


def describe(point: dict[str, Any]) -> str:
    from gcurun.runtime.autotune.knobs import Knobs

    return Knobs.from_json(point).describe()


# -- the ranks ----------------------------------------------------------------------

class Workload:
    """One model's training step on this rank."""

    def __init__(self, model: str):
        import gcurun.runtime as hvd

        self.hvd = hvd
        if model == "resnet50-grads":
            import numpy as np

            from benchmarks.engine import resnet50_shapes

            self.grads = [np.ones(s, np.float32).reshape(-1) for s in resnet50_shapes()]
            names = [f"resnet50.{i}" for i in range(len(self.grads))]
            order = list(reversed(range(len(self.grads))))     # backward order

            def step() -> None:
                handles = [hvd.allreduce_async_(self.grads[i], name=names[i],
                                                op=hvd.Average) for i in order]
                for handle in handles:
                    hvd.synchronize(handle)
            self.step: Callable[[], None] = step
        else:
            import torch

            import gcurun.runtime.torch as hvt
            from benchmarks.torch_ddp import sgd_step

            sys.path.insert(0, str(ROOT / "examples"))
            from pytorch_synthetic_benchmark import MODELS as TORCH_MODELS
            from pytorch_synthetic_benchmark import synthetic_batch

            torch.set_num_threads(1)
            torch.manual_seed(0)
            net = TORCH_MODELS["mlp"]()
            data, target = synthetic_batch("mlp", 64, 32)
            opt = hvt.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.01),
                                           named_parameters=net.named_parameters())
            hvt.broadcast_parameters(net.state_dict(), root_rank=0)
            self.step = sgd_step(net, opt, data, target)

    def timed(self, steps: int) -> float:
        """The slowest rank's mean seconds per step over ``steps`` steps."""
        import numpy as np

        start = time.perf_counter()
        for _ in range(steps):
            self.step()
        mine = np.array([(time.perf_counter() - start) / steps])
        return float(self.hvd.allreduce(mine, op=self.hvd.Max, name="bench.time")[0])


def rank_main(argv: list[str]) -> int:
    model, mode, out = argv[0], argv[1], Path(argv[3])
    options = json.loads(Path(argv[2]).read_text())
    import gcurun.runtime as hvd
    from gcurun.runtime.frontend import state

    hvd.init()
    engine = state.current_state().engine
    work = Workload(model)
    rank0 = hvd.rank() == 0
    steps, rounds = options["steps"], options["rounds"]
    result: dict[str, Any] = {"times": {}, "settings": {}}

    def say(message: str) -> None:
        if rank0:
            print(f"autotune-bench: {model}: {message}", file=sys.stderr, flush=True)

    def take_turns(variants: dict[str, dict[str, Any]]) -> None:
        """``rounds`` rounds of ``steps`` timed steps of each variant, in a shuffled order."""
        result["settings"] = {name: describe(p) for name, p in variants.items()}
        result["times"] = {name: [] for name in variants}
        for round_ in range(rounds):
            order = list(variants)
            random.Random(round_).shuffle(order)
            for name in order:
                settle(variants[name])
                result["times"][name].append(work.timed(steps))
            say(f"round {round_ + 1} of {rounds}: " + ", ".join(
                f"{n} {result['times'][n][-1] * 1e3:.1f} ms" for n in variants))

    def settle(point: dict[str, Any]) -> None:
        if rank0:
            engine.request_knobs(point)
        for _ in range(2):                  # (the change comes with a cycle of the first)
            work.step()

    if mode == "grid":
        from gcurun.runtime.autotune.knobs import start_knobs

        defaults = start_knobs(state.current_state().env).to_json()
        points = options["points"]
        screened = []
        for index, point in enumerate(points):
            settle(point)
            screened.append(work.timed(options["screen_steps"]))
            if index % max(1, len(points) // 10) == 0 or index == len(points) - 1:
                say(f"grid point {index + 1} of {len(points)}: "
                    f"{screened[-1] * 1e3:.1f} ms/step")
        best = points[min(range(len(points)), key=screened.__getitem__)]
        variants = {"defaults": defaults, "grid best": best}
        take_turns(variants)
    else:
        import numpy as np

        # Steps 2 to steps + 1 are timed as they come (the first tells the tuner the job's
        # shape and runs on the defaults, with the job's start-up costs), in the same loop
        # in both jobs: the cache is keyed by a step's tensors.
        first, started, taken = None, 0.0, 0
        while taken < options["tune_steps"]:
            work.step()
            taken += 1
            if taken == 1:
                started = time.perf_counter()
            if taken == steps + 1:
                mine = np.array([(time.perf_counter() - started) / steps])
                first = float(hvd.allreduce(mine, op=hvd.Max, name="bench.first")[0])
            tuner = getattr(engine, "tuner", None)
            done = np.array([1 if rank0 and (tuner is None or tuner.phase.name == "DONE")
                             else 0])
            settled = hvd.allreduce(done, op=hvd.Max, name="bench.settled")[0]
            if settled and first is not None:
                break
            if taken % 50 == 0:
                say(f"autotune: {taken} steps, {tuner.phase.value if rank0 and tuner else ''}")
        say(f"autotune settled after {taken} steps")
        result["tune_steps" if mode == "autotune" else "warm_steps"] = taken
        from gcurun.runtime.autotune.knobs import start_knobs

        defaults = start_knobs(state.current_state().env).to_json()
        # (every rank holds the same history; the last entry is what it settled on)
        chosen = engine.knob_history[-1][2] if engine.knob_history else defaults
        if first is None:       # (--tune-steps not above --steps)
            raise SystemExit(f"autotune-bench: the {mode} job ended its tuning loop "
                             f"before {steps + 1} steps; give --tune-steps above --steps")
        if mode == "autotune":
            take_turns({"defaults (autotune job)": defaults, "autotune": chosen})
            result["times"][COLD] = [first]
            result["settings"][COLD] = "its warmup samples': the defaults"
        else:
            take_turns({"defaults (warm job)": defaults, "warm cache": chosen})
            result["times"][FIRST] = [first]
            result["settings"][FIRST] = "the cache's, from the second step on"
    hvd.shutdown()
    if rank0:
        out.write_text(json.dumps(result))
    return 0


# -- the driver ---------------------------------------------------------------------

def progress(message: str) -> None:
    print(f"autotune-bench: {message}", file=sys.stderr, flush=True)


def job_argv(cluster: Any, layout: Layout, model: str, mode: str, args: argparse.Namespace,
             out: Path, options: dict[str, Any], cache: Path) -> list[str]:
    import shlex

    spec = ",".join(f"h{i + 1}:{layout.per_host}" for i in range(layout.hosts))
    argv = [sys.executable, "-m", "gcurun", "-np", str(layout.ranks), "-H", spec,
            "--ssh-config", str(cluster.ssh_config), "--ssh-timeout", "120",
            "-x", f"PYTHONPATH={ROOT}"]
    if mode in ("autotune", "warm"):
        argv += ["--autotune", "--autotune-cache", str(cache), *shlex.split(args.autotune_args)]
    settings = out.with_suffix(".options.json")
    settings.write_text(json.dumps(options))
    return [*argv, sys.executable, str(Path(__file__).resolve()), RANK_FLAG, model, mode,
            str(settings), str(out)]


def run_job(argv: list[str], seconds: float) -> dict[str, Any]:
    """One job to its end, its ranks' progress lines passed on as they come; rank 0's
    results. Raises BenchmarkError with the output's tail."""
    import signal
    import subprocess
    import threading

    out = Path(argv[-1])
    process = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if "autotune-bench: " in line or "gcurun: autotune: " in line:
                print(line.rstrip("\n"), file=sys.stderr, flush=True)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)
        raise BenchmarkError(f"a job did not end within {seconds:g} s") from None
    except BaseException:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)
        raise
    reader.join(60)
    if process.returncode != 0 or not out.is_file():
        tail = "\n".join(f"    {line}" for line in lines[-20:])
        raise BenchmarkError(f"a job ended with code {process.returncode}: "
                             f"{' '.join(argv[:12])} ...\n{tail}")
    return json.loads(out.read_text())


def run(args: argparse.Namespace) -> list[tuple[Layout, list[ModelResult]]]:
    grid = QUICK_GRID if args.quick else GRID
    cluster, built = prepare_cluster(args, max(layout.hosts for layout in args.layouts))
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="autotune-bench-") as tmp:
            for layout in args.layouts:
                models = []
                for model in args.models:
                    entry = ModelResult(model)
                    points = grid_points(grid, layout.hosts)
                    options = {"steps": args.steps, "rounds": args.rounds,
                               "screen_steps": args.screen_steps,
                               "tune_steps": args.tune_steps, "points": points}
                    cache = Path(tmp) / f"{layout.label}-{model}.cache.json"
                    for mode in ("grid", "autotune", "warm"):
                        out = Path(tmp) / f"{layout.label}-{model}-{mode}.json"
                        progress(f"{layout.label} {model}: {mode}" + (
                            f" ({len(points)} points)" if mode == "grid" else ""))
                        started = time.monotonic()
                        got = run_job(job_argv(cluster, layout, model, mode, args, out,
                                               options, cache), args.job_seconds)
                        progress(f"{layout.label} {model}: {mode} done in "
                                 f"{time.monotonic() - started:.0f} s")
                        entry.times.update(got["times"])
                        entry.settings.update(got["settings"])
                        entry.tune_steps = got.get("tune_steps", entry.tune_steps)
                        entry.warm_steps = got.get("warm_steps", entry.warm_steps)
                    entry.times = {v: entry.times[v] for v in ORDER if v in entry.times}
                    models.append(entry)
                sys.stdout.write(format_table(layout, cluster.link_rate_bits, models) + "\n")
                sys.stdout.flush()
                results.append((layout, models))
    finally:
        if built:
            from tests.cluster.netns import stop_cluster

            stop_cluster(cluster.name)
    return results


def main(argv: Sequence[str]) -> int:
    if argv and argv[0] == RANK_FLAG:
        return rank_main(list(argv[1:]))
    args = parse_args(argv)
    if args.summary:
        try:
            runs = [(path.stem, json.loads(path.read_text())) for path in args.summary]
        except (OSError, ValueError) as exc:
            print(f"autotune-bench: error: --summary: {exc}", file=sys.stderr)
            return 2
        sys.stdout.write(summary(runs))
        return 0
    exit_on_sigterm()
    try:
        results = run(args)
    except BenchmarkError as exc:
        print(f"autotune-bench: error: {exc}", file=sys.stderr)
        return 1
    if args.json is not None:
        args.json.write_text(json.dumps([{
            "hosts": layout.hosts, "ranks_per_host": layout.per_host,
            "models": {m.model: {"times": m.times, "settings": m.settings,
                                 "tune_steps": m.tune_steps, "warm_steps": m.warm_steps}
                       for m in models}}
            for layout, models in results], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
