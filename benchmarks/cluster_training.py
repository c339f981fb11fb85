"""Training across namespace hosts on shaped links: gcurun beside DDP and
MultiWorkerMirroredStrategy, and beside the step without communication.

    python benchmarks/cluster_training.py [--rate 2gbit] [--layouts 2x1,4x1,2x2]
        [--models mlp,resnet18-narrow,keras-mlp] [--backends tcp,mpi]
        [--steps 10] [--warmup 2] [--rounds 5] [--cluster DIR] [--json FILE]
    python benchmarks/cluster_training.py --small          # one layout, the MLP, a minute
    python benchmarks/cluster_training.py --summary run-1.json run-2.json run-3.json

Needs root, ip, tc, unshare and sshd: it builds namespace hosts with
tests/cluster/netns-cluster.sh (through benchmarks/cluster_allreduce.py's
``prepare_cluster``), every host's link shaped to ``--rate`` with tc tbf on both ends.

For each layout (hosts x ranks per host) and each model, one job started by gcurun over
SSH (``-H h1:R,h2:R,...``, the tcp backend) trains a copy of the model per variant on every rank,
taking turns round after round in an order shuffled every round (the same on every rank):

    torch models (benchmarks/torch_ddp.py's: ``mlp`` and ``resnet18-narrow``)
      gcurun-tcp   gcurun.runtime.torch.DistributedOptimizer
      gcurun-tcp-fp16  the same with ``compression=Compression.fp16``: gradients sent as
                   float16, half the bytes (its cost in accuracy on the MLP:
                   benchmarks/compression_accuracy.py)
      ddp          torch DistributedDataParallel over gloo; its process group meets at the
                   MASTER_ADDR/MASTER_PORT gcurun gives every rank (``--master-addr`` is
                   h1's bridge address; GLOO_SOCKET_IFNAME=eth0, the host's bridge link)
      floor        the same step on each rank alone, no communication
    keras-mlp (benchmarks/tf_keras.py's MLP)
      gcurun-tcp   gcurun.runtime.tensorflow.keras.DistributedOptimizer
      mwms         tf.distribute.MultiWorkerMirroredStrategy; TF_CONFIG lists every rank's
                   bridge address (the source address of its route to MASTER_ADDR) and a
                   free port, agreed through gcurun's runtime before TensorFlow starts
      floor        alone

With ``--backends`` naming mpi (and mpirun on PATH), a second job per torch model runs
``gcurun --mpi`` (Open MPI over btl tcp on the bridge, shared memory inside a host) and
times gcurun-mpi alone: its peer's and floor's times are the tcp job's, a job apart.

A round times ``--steps`` steps after ``--warmup`` untimed ones; its step time is the
slowest rank's mean. ``--phases`` adds, per layout, where the tcp jobs' steps went: each
variant's CPU time per step (every thread of the rank's process) and, for gcurun's
variants, the engine's time in ring passes, transfers and reductions, and its thread's
cycles per step with the CPU they took (the mean over ranks of each rank's median
round). ``--timeline DIR`` has gcurun write each tcp job's engine trace there (``gcurun
timeline summary FILE`` reads it). One rank alone (a job of one rank on h1, the floor
only) gives each model's single-rank step: scaling efficiency is that time over a
variant's step time (samples per second per rank relative to one rank; every rank has the
same batch). The namespace hosts share this machine's cores: a layout with more ranks
than cores is CPU-bound, and the table says so.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
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
    open_mpi_transport,
    parse_layouts,
    prepare_cluster,
)
from benchmarks.cluster_training_rank import (  # noqa: E402
    BATCH,
)

MODELS = ("mlp", "resnet18-narrow", "keras-mlp")
BACKENDS = ("tcp", "mpi")
PEER = {"mlp": "ddp", "resnet18-narrow": "ddp", "keras-mlp": "mwms"}
JOB_VARIANTS = {"torch": ("gcurun-tcp", "gcurun-tcp-fp16", "ddp", "floor"),
                "keras": ("gcurun-tcp", "mwms", "floor")}
RANK_FLAG = "--rank-of"
# Issue 31's goals (a benchmark's, never a test's): gcurun's step over its peer's.
LINK_GOAL = 0.95            # 2 x 1 and 4 x 1: the link decides, both move the same bytes
TWO_LEVEL_GOAL = 0.75       # 2 x 2: two levels send 2/3 of the flat ring's bytes
TWO_LEVEL_FLOOR_GOAL = 0.7  # 2 x 2: of DDP's time over the floor
MWMS_GOAL = 0.8             # Keras, every layout
FP16_GOAL = 0.6             # 2 x 1, torch: gcurun-tcp-fp16 sends half DDP's bytes
STOP_SECONDS = 30


# -- options ------------------------------------------------------------------------

def _names(kind: str, choices: Sequence[str]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",") if n.strip()]
        if not names or any(n not in choices for n in names):
            raise argparse.ArgumentTypeError(
                f"{kind} {text!r}: pick from {','.join(choices)}, comma-separated")
        return names
    return parse


parse_models = _names("models", MODELS)
parse_backends = _names("backends", BACKENDS)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", default=None,
                        help="tc rate of every host's link (default 2gbit; with --cluster, "
                             "the cluster's own)")
    parser.add_argument("--layouts", type=parse_layouts, default=None,
                        help="HOSTSxRANKS, comma-separated (default 2x1,4x1,2x2)")
    parser.add_argument("--models", type=parse_models, default=None,
                        help=f"comma-separated, of {','.join(MODELS)} (default all)")
    parser.add_argument("--backends", type=parse_backends, default=None,
                        help="gcurun's backends for the torch models (default tcp,mpi; mpi "
                             "is left out when mpirun is not on PATH)")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per turn "
                        "(default 10)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps before "
                        "each turn (default 2)")
    parser.add_argument("--rounds", type=int, default=None, help="turns of every variant "
                        "(default 5)")
    parser.add_argument("--threads", type=int, default=1, help="torch/TF threads per rank")
    parser.add_argument("--small", action="store_true",
                        help="a quick run: 2x1, the torch MLP on tcp, 2 rounds of 2 steps "
                             "(options given as well still count)")
    parser.add_argument("--cluster", type=Path, default=None,
                        help="state directory of namespace hosts built already")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    parser.add_argument("--phases", action="store_true",
                        help="also time where the tcp jobs' steps go: CPU per step, and "
                             "gcurun's ring passes, transfers, reductions and engine cycles")
    parser.add_argument("--timeline", type=Path, default=None, metavar="DIR",
                        help="write each tcp job's engine trace to DIR/LAYOUT-MODEL.json")
    parser.add_argument("--job-seconds", type=float, default=1800.0,
                        help="deadline of one job (default 1800)")
    parser.add_argument("--summary", type=Path, nargs="+", default=None, metavar="JSON",
                        help="no run: earlier runs' --json files, side by side")
    args = parser.parse_args(list(argv))
    small = {"layouts": parse_layouts("2x1"), "models": ["mlp"], "backends": ["tcp"],
             "steps": 2, "warmup": 1, "rounds": 2}
    full = {"layouts": parse_layouts("2x1,4x1,2x2"), "models": list(MODELS),
            "backends": list(BACKENDS), "steps": 10, "warmup": 2, "rounds": 5}
    for name, value in (small if args.small else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.steps < 1 or args.warmup < 0 or args.rounds < 1 or args.threads < 1:
        parser.error(f"--steps {args.steps}, --rounds {args.rounds} and --threads "
                     f"{args.threads} must be at least 1, --warmup {args.warmup} at least 0")
    return args


# -- results ------------------------------------------------------------------------

@dataclass
class ModelResult:
    """One model's step times on one layout: seconds per round, per variant."""

    model: str
    params: int = 0
    times: dict[str, list[float]] = field(default_factory=dict)
    # Per rank, per variant, per column (Phases.COLUMNS): seconds per step, per round.
    phases: list[dict[str, dict[str, list[float]]]] = field(default_factory=list)


@dataclass
class LayoutResult:
    layout: Layout
    cores: int
    rate_bits: int
    models: dict[str, ModelResult] = field(default_factory=dict)
    load: tuple[float, float] = (0.0, 0.0)

    @property
    def cpu_bound(self) -> bool:
        return self.layout.ranks > self.cores


def format_table(result: LayoutResult, alone: dict[str, float]) -> str:
    """A layout's table: per model and variant the median step, the range over rounds,
    the ratio to the model's peer, the time over the floor and the scaling efficiency
    (``alone[model]``, one rank's step, over the variant's)."""
    layout = result.layout
    bound = (f"CPU-bound: {layout.ranks} ranks on {result.cores} cores" if result.cpu_bound
             else f"{layout.ranks} ranks on {result.cores} cores")
    lines = [
        f"# training, {layout.hosts} hosts x {layout.per_host} rank(s) = {layout.ranks} "
        f"ranks, links shaped to {result.rate_bits / 1e9:g} Gbit/s; {bound}; load "
        f"{result.load[0]:.2f}-{result.load[1]:.2f}",
        "",
        "| model | variant | median ms/step | range ms | / peer | over the floor ms "
        "| efficiency |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, model in result.models.items():
        median = {v: statistics.median(t) for v, t in model.times.items()}
        peer, floor = median.get(PEER[name]), median.get("floor")
        for variant, times in model.times.items():
            ratio = f"{median[variant] / peer:.2f}" if peer else "-"
            over = f"{(median[variant] - floor) * 1e3:.1f}" if floor else "-"
            eff = f"{alone[name] / median[variant]:.2f}" if name in alone else "-"
            lines.append(f"| {name} | {variant} | {median[variant] * 1e3:.1f} | "
                         f"{min(times) * 1e3:.1f}-{max(times) * 1e3:.1f} | {ratio} | "
                         f"{over} | {eff} |")
    return "\n".join([*lines, "", *goal_lines(result)]) + "\n"


PHASE_COLUMNS = ("cpu", "rings", "transfers", "reductions", "cycles", "cycle_cpu")


def phase_medians(model: ModelResult) -> dict[str, dict[str, float]]:
    """Per variant and column: each rank's median round, averaged over the ranks."""
    medians: dict[str, dict[str, float]] = {}
    for variant in model.times:
        ranks = [record[variant] for record in model.phases if variant in record]
        if ranks:
            # (runs before the engine's cycles were counted have no cycle columns)
            medians[variant] = {c: statistics.fmean(statistics.median(r.get(c, [0.0]))
                                                    for r in ranks)
                                for c in PHASE_COLUMNS}
    return medians


def format_phases(result: LayoutResult) -> str:
    """Where the steps went (``--phases``): per model and variant, ms per step."""
    rows = [(name, variant, statistics.median(model.times[variant]), row)
            for name, model in result.models.items()
            for variant, row in phase_medians(model).items()]
    if not rows:
        return ""
    lines = [f"# where the steps went, {result.layout.label}: ms per step (mean over ranks "
             "of each rank's median round); CPU = every thread of the rank's process, CPU / step = "
             "the cores a rank kept busy; cycles = the engine thread's cycles a step, and the "
             "CPU its thread spent in them",
             "",
             "| model | variant | step | CPU | CPU / step | rings | transfers | reductions "
             "| rings' rest | step outside rings | cycles | CPU in cycles |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, variant, step, row in rows:
        ms = {c: row[c] * 1e3 for c in PHASE_COLUMNS}
        if not ms["rings"]:
            engine = "- | - | - | - | - | - | -"
        else:
            rest = ms["rings"] - ms["transfers"] - ms["reductions"]
            cycles = (f"{row['cycles']:.1f} | {ms['cycle_cpu']:.1f}" if row["cycles"]
                      else "- | -")
            engine = (f"{ms['rings']:.1f} | {ms['transfers']:.1f} | "
                      f"{ms['reductions']:.1f} | {rest:.1f} | {step * 1e3 - ms['rings']:.1f} | "
                      f"{cycles}")
        lines.append(f"| {name} | {variant} | {step * 1e3:.1f} | {ms['cpu']:.1f} | "
                     f"{row['cpu'] / step:.2f} | {engine} |")
    return "\n".join(lines) + "\n"


def goal_checks(result: LayoutResult) -> list[tuple[str, str, str, str, float, float]]:
    """Issue 31's goals on this layout: (model, variant, what, peer, gcurun's figure over
    the peer's, goal), from the medians; a goal is met when the figure is at most the goal."""
    layout, checks = result.layout, []
    for name, model in result.models.items():
        median = {v: statistics.median(t) for v, t in model.times.items()}
        peer, floor = PEER[name], median.get("floor", 0.0)
        if peer not in median:
            continue
        # (variant, what, gcurun's figure over the peer's, goal)
        goals: list[tuple[str, str, float, float]] = []
        if peer == "mwms" and "gcurun-tcp" in median:
            goals.append(("gcurun-tcp", "step", median["gcurun-tcp"] / median[peer],
                          MWMS_GOAL))
        for variant in (v for v in ("gcurun-tcp", "gcurun-mpi") if v in median):
            if peer != "ddp" or layout.hosts < 2:
                continue
            if layout.per_host == 1:
                goals.append((variant, "step", median[variant] / median[peer], LINK_GOAL))
                continue
            goals.append((variant, "step", median[variant] / median[peer], TWO_LEVEL_GOAL))
            if median[peer] > floor:
                goals.append((variant, "time over the floor",
                              (median[variant] - floor) / (median[peer] - floor),
                              TWO_LEVEL_FLOOR_GOAL))
        if "gcurun-tcp-fp16" in median and peer == "ddp" and \
                (layout.hosts, layout.per_host) == (2, 1):
            goals.append(("gcurun-tcp-fp16", "step", median["gcurun-tcp-fp16"] / median[peer],
                          FP16_GOAL))
        checks += [(name, variant, what, peer, ratio, goal)
                   for variant, what, ratio, goal in goals]
    return checks


def goal_text(name: str, variant: str, what: str, peer: str, goal: float) -> str:
    return f"{name} {variant} <= {goal} x {peer}'s {what}"


def goal_lines(result: LayoutResult) -> list[str]:
    """Issue 31's goals on this layout, each met or missed, with the ratio (medians)."""
    return [f"# goal: {goal_text(name, variant, what, peer, goal)}: {ratio:.2f} "
            f"({'met' if ratio <= goal else 'missed'})"
            for name, variant, what, peer, ratio, goal in goal_checks(result)]


def from_json(data: dict[str, Any]) -> list[LayoutResult]:
    """A run's results as :func:`as_json` wrote them."""
    results = []
    for entry in data["layouts"]:
        result = LayoutResult(Layout(entry["hosts"], entry["ranks_per_host"]),
                              entry["cores"], entry["link_rate_bits"],
                              load=tuple(entry["load_average"]))
        for name, model in entry["models"].items():
            result.models[name] = ModelResult(name, model["params"], model["times"],
                                              model.get("phases") or [])
        results.append(result)
    return results


def summary(runs: Sequence[list[LayoutResult]]) -> str:
    """Several runs side by side: per layout, model and variant, the median over the runs
    of each run's median step, the runs' range of it, and the median over the runs of its
    ratio to the peer and of its time over the floor; then each goal, met in how many
    runs (each run judged on its own medians, as its goal lines are)."""
    lines = [f"# {len(runs)} runs: per variant the median of the runs' median steps, their "
             "range, and the median of the runs' ratios and times over the floor", "",
             "| layout | model | variant | median ms/step | runs' range ms | / peer "
             "| over the floor ms |", "| --- | --- | --- | --- | --- | --- | --- |"]
    cells: dict[tuple[str, str, str], list[tuple[float, float | None, float | None]]] = {}
    goals: dict[str, list[bool]] = {}
    for run in runs:
        for result in run:
            for name, model in result.models.items():
                median = {v: statistics.median(t) for v, t in model.times.items()}
                peer, floor = median.get(PEER[name]), median.get("floor")
                for variant, value in median.items():
                    cells.setdefault((result.layout.label, name, variant), []).append(
                        (value, value / peer if peer else None,
                         value - floor if floor is not None else None))
            for name, variant, what, peer, ratio, goal in goal_checks(result):
                goals.setdefault(f"{goal_text(name, variant, what, peer, goal)} "
                                 f"({result.layout.label})", []).append(ratio <= goal)
    for (label, name, variant), values in cells.items():
        steps = [v[0] for v in values]
        ratios = [v[1] for v in values if v[1] is not None]
        overs = [v[2] for v in values if v[2] is not None]
        ratio = f"{statistics.median(ratios):.2f}" if ratios else "-"
        over = f"{statistics.median(overs) * 1e3:.1f}" if overs else "-"
        lines.append(f"| {label} | {name} | {variant} | {statistics.median(steps) * 1e3:.1f} "
                     f"| {min(steps) * 1e3:.1f}-{max(steps) * 1e3:.1f} | {ratio} | {over} |")
    lines.append("")
    lines += [f"# goal: {goal}: met in {sum(met)} of {len(met)} runs"
              for goal, met in goals.items()]
    return "\n".join(lines) + "\n"


def as_json(results: list[LayoutResult], alone: dict[str, float]) -> dict[str, Any]:
    return {"one_rank_seconds": alone, "layouts": [{
        "hosts": r.layout.hosts, "ranks_per_host": r.layout.per_host, "cores": r.cores,
        "link_rate_bits": r.rate_bits, "load_average": list(r.load),
        "models": {name: {"params": m.params, "batch": BATCH[name], "times": m.times,
                          **({"phases": m.phases} if m.phases else {})}
                   for name, m in r.models.items()}} for r in results]}


# -- the jobs -----------------------------------------------------------------------

def job_argv(cluster: Any, layout: Layout, model: str, backend: str,
             variants: Sequence[str], args: argparse.Namespace, out: Path,
             mpi_transport: list[str], cores: int) -> list[str]:
    spec = ",".join(f"h{i + 1}:{layout.per_host}" for i in range(layout.hosts))
    gcurun = [sys.executable, "-m", "gcurun", "-np", str(layout.ranks), "-H", spec,
              "--ssh-config", str(cluster.ssh_config), "-x", f"PYTHONPATH={ROOT}"]
    if backend == "mpi":
        transport = list(mpi_transport)
        if layout.ranks > cores:
            transport += ["--mca", "mpi_yield_when_idle", "1"]
        gcurun += ["--mpi", "--network-interface", f"{cluster.subnet_prefix}.0/24",
                   "--mpi-args", " ".join(transport)]
    else:
        gcurun += ["--master-addr", cluster.host("h1").address,
                   "-x", "GLOO_SOCKET_IFNAME=eth0"]
        if args.timeline is not None and layout.ranks > 1:
            gcurun += ["--timeline-filename",
                       str(args.timeline.resolve() / f"{layout.label}-{model}.json")]
    extra = ["--phases"] if args.phases and backend == "tcp" and layout.ranks > 1 else []
    return [*gcurun, sys.executable, str(Path(__file__).resolve()), RANK_FLAG, model,
            "--variants", ",".join(variants), "--steps", str(args.steps),
            "--warmup", str(args.warmup), "--rounds", str(args.rounds),
            "--threads", str(args.threads), *extra, "--out", str(out)]


def run_job(argv: list[str], seconds: float) -> dict[str, Any]:
    """One job to its end; rank 0's results. Raises BenchmarkError with the output's tail."""
    out = Path(argv[-1])
    process = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.communicate(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
        raise BenchmarkError(f"a job did not end within {seconds:g} s: "
                             f"{' '.join(argv)}") from None
    except BaseException:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=STOP_SECONDS)
        raise
    if process.returncode != 0 or not out.is_file():
        tail = "\n".join(f"    {line}" for line in output.splitlines()[-20:])
        raise BenchmarkError(f"a job ended with code {process.returncode}: "
                             f"{' '.join(argv[:12])} ...\n{tail}")
    return json.loads(out.read_text())


def progress(message: str) -> None:
    print(f"cluster_training: {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> tuple[list[LayoutResult], dict[str, float]]:
    backends = list(args.backends)
    mpi_transport: list[str] = []
    if "mpi" in backends:
        try:
            mpi_transport = open_mpi_transport()
        except BenchmarkError as exc:
            progress(f"mpi left out: {exc}")
            backends.remove("mpi")
    cores = len(os.sched_getaffinity(0))
    if args.timeline is not None:
        args.timeline.mkdir(parents=True, exist_ok=True)
    cluster, built = prepare_cluster(args, max(layout.hosts for layout in args.layouts))
    results: list[LayoutResult] = []
    alone: dict[str, float] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="cluster-training-") as tmp:
            def job(layout: Layout, model: str, backend: str,
                    variants: Sequence[str]) -> dict[str, Any]:
                out = Path(tmp) / f"{layout.label}-{model}-{backend}.json"
                progress(f"{layout.label} {model} ({backend}): {', '.join(variants)}, "
                         f"{args.rounds} rounds of {args.steps} steps")
                started = time.monotonic()
                got = run_job(job_argv(cluster, layout, model, backend, variants, args, out,
                                       mpi_transport, cores), args.job_seconds)
                progress(f"{layout.label} {model} ({backend}): done in "
                         f"{time.monotonic() - started:.0f} s; medians " + ", ".join(
                             f"{v} {statistics.median(t) * 1e3:.1f} ms"
                             for v, t in got["times"].items()))
                return got

            for model in args.models:
                got = job(Layout(1, 1), model, "tcp", ["floor"])
                alone[model] = statistics.median(got["times"]["floor"])
            for layout in args.layouts:
                result = LayoutResult(layout, cores, cluster.link_rate_bits,
                                      load=(os.getloadavg()[0], 0.0))
                for model in args.models:
                    kind = "keras" if model == "keras-mlp" else "torch"
                    got = job(layout, model, "tcp", JOB_VARIANTS[kind])
                    entry = ModelResult(model, got["params"], dict(got["times"]),
                                        got.get("phases") or [])
                    if kind == "torch" and "mpi" in backends:
                        entry.times["gcurun-mpi"] = \
                            job(layout, model, "mpi", ["gcurun-mpi"])["times"]["gcurun-mpi"]
                    result.models[model] = entry
                result.load = (result.load[0], os.getloadavg()[0])
                results.append(result)
                sys.stdout.write(format_table(result, alone) + "\n")
                if args.phases:
                    sys.stdout.write(format_phases(result) + "\n")
                sys.stdout.flush()
    finally:
        if built:
            from tests.cluster.netns import stop_cluster

            stop_cluster(cluster.name)
    return results, alone


def main(argv: Sequence[str]) -> int:
    if argv and argv[0] == RANK_FLAG:
        from benchmarks.cluster_training_rank import main as rank_main

        return rank_main(list(argv[1:]))
    args = parse_args(argv)
    if args.summary:
        try:
            runs = [from_json(json.loads(path.read_text())) for path in args.summary]
        except (OSError, ValueError, KeyError) as exc:
            print(f"cluster_training: error: --summary: {exc!r}", file=sys.stderr)
            return 2
        sys.stdout.write(summary(runs))
        return 0
    exit_on_sigterm()
    try:
        results, alone = run(args)
    except BenchmarkError as exc:
        print(f"cluster_training: error: {exc}", file=sys.stderr)
        return 1
    print("# one rank alone (floor, ms/step): " + ", ".join(
        f"{m} {s * 1e3:.1f}" for m, s in alone.items()))
    if args.json is not None:
        args.json.write_text(json.dumps(as_json(results, alone), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
