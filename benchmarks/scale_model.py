"""A latency-bandwidth model of gcurun's allreduce, fitted to the namespace-host testbed,
checked against what was measured there, then used (as an extrapolation) to predict
ResNet-50's step time and scaling efficiency at 8 to 1,024 ranks.

    python benchmarks/scale_model.py --fit calib-1.json two-1.json ... \\
        [--engine engine-1.json ...] [--plot docs/scaling.png] [--compute-ms 103.6]

``--fit`` takes the ``--json`` files of benchmarks/cluster_allreduce.py (any layouts,
repeated runs pooled: a size's time is the median of the runs' medians), ``--engine``
those of ``benchmarks/engine.py --hosts``, ``--training`` those of
benchmarks/cluster_training.py (gcurun-tcp's training steps across hosts, predicted as
the measured step without communication plus the gradients' fused allreduce and, with
``--overhead-from`` (cluster_training.py runs with a layout of one host), each model's
step overhead measured there: what its step took beyond those two without a link).

The model (every term a message or a byte of gcurun's own algorithms):

- a call costs ``call_overhead`` (the engine's cycle) and then its algorithm;
- a ring step moves m bytes between neighbours: in the reduce-scatter, in messages of at
  most one ring chunk (2 MiB): ``ceil(m / chunk) x latency`` and then, between hosts,
  where the ring streams (chunks reduced as they arrive, the next already on the wire),
  ``max(m / bandwidth, m / reduce_bandwidth)``, inside a host, where a chunk is received
  and then reduced, ``m / bandwidth + m / reduce_bandwidth``; in the allgather, one
  message: ``latency + m / bandwidth``. A step is as slow as its slowest hop: the
  network's (``net_*``) when the ring crosses hosts, shared memory's (``shm_*``) inside
  one;
- the flat ring over p ranks takes 2(p-1) steps of S/p; a single tensor of at most
  64 KiB is gathered (Bruck, ceil(log2 p) rounds) instead;
- the two-level allreduce runs gcurun's pipeline: slices of L chunks, each taking L-1
  steps among a host's L ranks (shared memory), H-1 + H-1 steps across the H hosts
  (where L rings share each host's link, each getting 1/L of it) and L-1 steps among the
  host's ranks again; up to 4 slices in flight, a new one starting each tick; a tick
  costs its slower ring (the host's or the cross-host one, working at once), then the
  reduction of what arrived;
- ranks that outnumber this machine's cores share them: reduction and shared-memory
  copies go ranks/cores times slower, and every message waits ``oversubscribed_latency``
  more for its peer to be scheduled (the namespace hosts share this machine's cores).

Fitted: ``shm_latency``, ``shm_bandwidth`` (from layouts of one host), ``net_latency``,
``net_bandwidth`` (from 2 hosts x 1 rank), ``oversubscribed_latency`` (from 4 hosts x 1
rank on 2 cores) and ``call_overhead`` (all of them), by least squares on relative
error; ``reduce_bandwidth`` is measured (numpy adding a chunk into a large buffer on this
machine, in the benchmark's JSON). Every other measurement is a prediction: two hosts of
two ranks (flat and two levels) and ResNet-50's steps.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

KIB, MIB = 1 << 10, 1 << 20
CHUNK_BYTES = 2 * MIB               # the ring's chunk (GCURUN_CHUNK_BYTES' default)
GATHER_BYTES = 64 * KIB             # single tensors up to this are gathered
FUSION_BYTES = 64 * MIB             # the engine's fusion threshold (default)
RESNET50_BYTES = 25_557_032 * 4     # ResNet-50's gradients, float32
RESNET50_TENSORS = 161
# Per-step compute of ResNet-50 on one card, the extrapolation's default: 256 images per
# card at 2,470 images/s, NVIDIA's published training throughput of ResNet-50 v1.5 on
# one A100 80GB with mixed precision (DeepLearningExamples, PyTorch, 21.03 container).
COMPUTE_MS = 256 / 2470 * 1e3
RANKS = (8, 64, 256, 1024)
PER_HOST = 8
LINKS_GBIT = (100.0, 200.0)
TARGET = 0.90
OVERLAP_BACKWARD = 2 / 3            # the backward pass: about 2/3 of a step's compute
ERROR_LIMIT = 0.15
WINDOW = 4                          # slices of the two-level pipeline in flight
LATENCY_BYTES = 256 * KIB           # the fit's latencies come from sizes up to this,
BANDWIDTH_BYTES = 1 * MIB           # its bandwidths from sizes of at least this


@dataclass(frozen=True)
class Model:
    """The fitted parameters: seconds, bytes per second."""

    call_overhead: float
    shm_latency: float
    shm_bandwidth: float
    net_latency: float
    net_bandwidth: float
    reduce_bandwidth: float
    oversubscribed_latency: float = 0.0
    cores: int = 2


@dataclass(frozen=True)
class Layout:
    hosts: int
    per_host: int

    @property
    def ranks(self) -> int:
        return self.hosts * self.per_host

    @property
    def label(self) -> str:
        return f"{self.hosts}x{self.per_host}"


# -- the model ------------------------------------------------------------------------

def _contention(model: Model, ranks: int) -> float:
    return max(1.0, ranks / model.cores)


def _waiting(model: Model, ranks: int) -> float:
    """What each message waits more when ranks outnumber the cores."""
    return model.oversubscribed_latency if ranks > model.cores else 0.0


def _ring_steps(model: Model, nbytes: float, p: int, across: bool, share: int,
                slow: float, wait: float) -> float:
    """Reduce-scatter and allgather of ``nbytes`` over a ring of ``p`` ranks, its hops
    over the network (``across``, the link shared by ``share`` rings) or shared memory;
    ``slow`` = how much slower CPU work goes, ``wait`` = what a message waits more
    (contention)."""
    if p < 2 or nbytes <= 0:
        return 0.0
    m = nbytes / p
    if across:
        latency, per_byte = model.net_latency, share / model.net_bandwidth
    else:
        latency, per_byte = model.shm_latency, slow / model.shm_bandwidth
    latency += wait
    messages = max(1, math.ceil(m / CHUNK_BYTES))
    reduce_step = messages * latency + _moved_and_reduced(model, m, per_byte, slow, across)
    gather_step = latency + m * per_byte
    return (p - 1) * (reduce_step + gather_step)


def _moved_and_reduced(model: Model, m: float, per_byte: float, slow: float,
                       across: bool) -> float:
    """Seconds to move ``m`` bytes over one hop and reduce them: between hosts the ring
    streams (chunks reduced as they arrive, the next already on the wire), so the slower
    of the two; in shared memory one after the other."""
    moved, reduced = m * per_byte, m * slow / model.reduce_bandwidth
    return max(moved, reduced) if across else moved + reduced


def _slice_ticks(nbytes: float, hosts: int, local: int) -> list[tuple[float, float, float]]:
    """One slice of the two-level pipeline, tick by tick: (bytes to the host's ring,
    bytes to the cross-host ring, bytes reduced), as gcurun's TwoLevels yields them (the
    widest segment's chunks; every rank yields as often)."""
    widest = math.ceil(nbytes / local)
    across = math.ceil(widest / hosts)
    ticks: list[tuple[float, float, float]] = []
    for _ in range(local - 1):
        for start in range(0, max(int(widest), 1), CHUNK_BYTES):
            part = min(CHUNK_BYTES, widest - start)
            ticks.append((part, 0.0, part))
    for _ in range(hosts - 1):
        for start in range(0, max(int(across), 1), CHUNK_BYTES):
            part = min(CHUNK_BYTES, across - start)
            ticks.append((0.0, part, part))
    ticks += [(0.0, across, 0.0)] * (hosts - 1) + [(widest, 0.0, 0.0)] * (local - 1)
    return ticks


def _pipeline(model: Model, nbytes: float, layout: Layout, slow: float,
              wait: float) -> float:
    """The two-level pipeline's ticks, each as slow as its slower ring, then the
    reduction; slices start one a tick while fewer than WINDOW are in flight."""
    hosts, local = layout.hosts, layout.per_host
    size = local * CHUNK_BYTES
    slices = [min(size, nbytes - start) for start in range(0, int(nbytes), size)] or [0]
    waiting = [_slice_ticks(n, hosts, local) for n in slices]
    active: list[list[tuple[float, float, float]]] = []
    seconds = 0.0
    while waiting or active:
        if waiting and len(active) < WINDOW:        # a slice a tick, as TwoLevels starts them
            active.append(list(waiting.pop(0)))
        inside = sum(ticks[0][0] for ticks in active)
        across = sum(ticks[0][1] for ticks in active)
        reduced_inside = sum(t[0][2] for t in active if t[0][0])
        reduced_across = sum(t[0][2] for t in active if t[0][1])
        costs = [0.0]
        if inside:
            costs.append(model.shm_latency + wait + inside * slow / model.shm_bandwidth)
        if across:     # streamed: the reduction of what arrives goes on under the transfer
            costs.append(model.net_latency + wait + max(
                across * local / model.net_bandwidth,
                reduced_across * slow / model.reduce_bandwidth))
        seconds += max(costs) + reduced_inside * slow / model.reduce_bandwidth
        active = [ticks[1:] for ticks in active if len(ticks) > 1]
    return seconds


def _gather(model: Model, nbytes: float, layout: Layout, slow: float, wait: float) -> float:
    p = layout.ranks
    rounds = math.ceil(math.log2(p))
    across = layout.hosts > 1
    latency = (model.net_latency if across else model.shm_latency) + wait
    bandwidth = model.net_bandwidth if across else model.shm_bandwidth / slow
    return rounds * latency + (p - 1) * nbytes * (1 / bandwidth +
                                                  slow / model.reduce_bandwidth)


def allreduce_seconds(model: Model, nbytes: float, layout: Layout,
                      two_levels: bool = False, single_tensor: bool = True) -> float:
    """One allreduce call of ``nbytes`` on ``layout`` (flat ring, or two levels)."""
    p = layout.ranks
    if p < 2:
        return 0.0
    slow, wait = _contention(model, p), _waiting(model, p)
    if single_tensor and nbytes <= GATHER_BYTES:
        return model.call_overhead + _gather(model, nbytes, layout, slow, wait)
    if two_levels and layout.hosts > 1 and layout.per_host > 1:
        return model.call_overhead + _pipeline(model, nbytes, layout, slow, wait)
    return model.call_overhead + _ring_steps(model, nbytes, p, layout.hosts > 1, 1, slow,
                                             wait)


def resnet_step_seconds(model: Model, layout: Layout, variant: str,
                        two_levels: bool = False, sizes: Sequence[int] | None = None) -> float:
    """One step of engine.py's variant: ``single`` (one buffer), ``fused``/``views`` (the
    engine's batches of FUSION_BYTES), ``unfused`` (a call per tensor of ``sizes``)."""
    if variant == "single":
        return allreduce_seconds(model, RESNET50_BYTES, layout, two_levels)
    if variant in ("fused", "views"):
        full, rest = divmod(RESNET50_BYTES, FUSION_BYTES)
        batches = [FUSION_BYTES] * full + ([rest] if rest else [])
        return sum(allreduce_seconds(model, b, layout, two_levels, single_tensor=False)
                   for b in batches)
    if variant == "unfused":
        return sum(allreduce_seconds(model, n, layout, two_levels)
                   for n in sizes or resnet50_sizes())
    raise ValueError(f"variant {variant!r}: use single, fused, views or unfused")


def resnet50_sizes() -> list[int]:
    """The bytes of ResNet-50's 161 gradients (float32), in definition order."""
    shapes: list[tuple[int, ...]] = [(64, 3, 7, 7), (64,), (64,)]
    inplanes = 64
    for width, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        out = width * 4
        for block in range(blocks):
            shapes += [(width, inplanes, 1, 1), (width,), (width,), (width, width, 3, 3),
                       (width,), (width,), (out, width, 1, 1), (out,), (out,)]
            if block == 0:
                shapes += [(out, inplanes, 1, 1), (out,), (out,)]
            inplanes = out
    shapes += [(1000, 2048), (1000,)]
    return [4 * math.prod(s) for s in shapes]


# -- measurements ---------------------------------------------------------------------

@dataclass(frozen=True)
class Point:
    """A measured median: one variant of one size on one layout, over the runs."""

    layout: Layout
    variant: str
    nbytes: int
    seconds: float              # median of the runs' medians
    low: float                  # the lowest and highest run's median
    high: float
    runs: int
    floor: float = 0.0          # training steps: the step without communication (median)

    @property
    def two_levels(self) -> bool:
        return self.variant.endswith("2level") or (
            self.variant in ("gcurun-tcp", *TRAINING_VARIANTS) and self.layout.hosts > 1
            and self.layout.per_host > 1)


def read_allreduce(paths: Iterable[Path]) -> tuple[list[Point], float, int, int]:
    """The points of cluster_allreduce.py's JSON files, the median reduce bandwidth, the
    cores and the link rate (bits per second) they were measured with."""
    runs: dict[tuple[Layout, str, int], list[float]] = {}
    reduce, cores, rates = [], set(), set()
    for path in paths:
        data = json.loads(Path(path).read_text())
        if "reduce_bandwidth" in data:
            reduce.append(float(data["reduce_bandwidth"]))
        for layout_data in data["layouts"]:
            layout = Layout(layout_data["hosts"], layout_data["ranks_per_host"])
            cores.add(int(layout_data["cores"]))
            rates.add(int(layout_data["link_rate_bits"]))
            for row in layout_data["rows"]:
                key = (layout, row["variant"], int(row["nbytes"]))
                runs.setdefault(key, []).append(statistics.median(row["seconds"]))
    if not reduce or len(cores) != 1 or len(rates) != 1:
        raise SystemExit("--fit: the files must come from one machine and one link rate, "
                         "with the reduce bandwidth cluster_allreduce.py records "
                         f"(found cores {sorted(cores)}, rates {sorted(rates)})")
    points = [Point(layout, variant, n, statistics.median(t), min(t), max(t), len(t))
              for (layout, variant, n), t in sorted(runs.items(), key=lambda kv: (
                  kv[0][0].hosts, kv[0][0].per_host, kv[0][1], kv[0][2]))]
    return points, statistics.median(reduce), cores.pop(), rates.pop()


TRAINING_VARIANTS = ("train-mlp", "train-resnet18-narrow", "train-keras-mlp")


def read_training(paths: Iterable[Path]) -> list[Point]:
    """gcurun-tcp's training steps of benchmarks/cluster_training.py JSON files, as points
    (nbytes: the model's float32 gradients; floor: the step without communication, both
    the median of the runs' medians)."""
    runs: dict[tuple[Layout, str, int], tuple[list[float], list[float]]] = {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        for layout_data in data["layouts"]:
            layout = Layout(layout_data["hosts"], layout_data["ranks_per_host"])
            for name, model in layout_data["models"].items():
                times = model["times"]
                if "gcurun-tcp" not in times or "floor" not in times:
                    continue
                steps, floors = runs.setdefault((layout, f"train-{name}",
                                                 4 * int(model["params"])), ([], []))
                steps.append(statistics.median(times["gcurun-tcp"]))
                floors.append(statistics.median(times["floor"]))
    return [Point(layout, variant, n, statistics.median(t), min(t), max(t), len(t),
                  floor=statistics.median(f))
            for (layout, variant, n), (t, f) in sorted(
                runs.items(), key=lambda kv: (kv[0][0].hosts, kv[0][0].per_host, kv[0][1]))]


def training_step_seconds(model: Model, point: Point,
                          overhead: Mapping[str, float] | None = None) -> float:
    """A training step of gcurun-tcp: the step without communication, then the gradients'
    allreduce (one fused call: every model here is under the fusion threshold) on the
    path gcurun takes (two levels where a layout has several hosts of several ranks), none
    of it taken as hidden behind the backward pass. With ``overhead`` (seconds per step
    for each training variant, :func:`step_overheads`), that too: the work a step does
    for its gradients beyond the allreduce (hooks, the engine's cycles, handing tensors
    over and back, on the cores that also compute), as measured on one host."""
    calls = max(1, math.ceil(point.nbytes / FUSION_BYTES))
    return point.floor + (overhead or {}).get(point.variant, 0.0) + sum(
        allreduce_seconds(model, point.nbytes / calls, point.layout, point.two_levels,
                          single_tensor=False) for _ in range(calls))


@dataclass(frozen=True)
class StepOverhead:
    """One training variant's step overhead, from runs on one host: per run, its step
    less its floor and the modelled allreduce; the median is the model's."""

    variant: str
    layout: Layout
    floor: float                # the median run's floor and step (seconds)
    seconds: float
    allreduce: float            # modelled, on that layout
    per_run: tuple[float, ...]

    @property
    def overhead(self) -> float:
        return statistics.median(self.per_run)


def step_overheads(model: Model, paths: Sequence[Path]) -> list[StepOverhead]:
    """Each training variant's step overhead from the layouts of one host (1 x N) in
    benchmarks/cluster_training.py JSON files, one run each: there no link is crossed,
    so what a step takes beyond its floor and its allreduce through shared memory is
    the work it does for its gradients on the cores that also compute."""
    runs: dict[str, list[tuple[float, Point, float]]] = {}
    for path in paths:
        for point in read_training([path]):
            if point.layout.hosts == 1:
                allreduce = training_step_seconds(model, point) - point.floor
                value = point.seconds - point.floor - allreduce
                runs.setdefault(point.variant, []).append((value, point, allreduce))
    if not runs:
        raise SystemExit(f"--overhead-from {' '.join(map(str, paths))}: no layout of one "
                         "host in them; make them with benchmarks/cluster_training.py "
                         "--layouts 1x2")
    found = []
    for variant, values in sorted(runs.items()):
        values.sort(key=lambda entry: entry[0])
        _, middle, allreduce = values[(len(values) - 1) // 2]
        found.append(StepOverhead(variant, middle.layout, middle.floor, middle.seconds,
                                  allreduce, tuple(value for value, _, _ in values)))
    return found


def read_engine(paths: Iterable[Path]) -> list[Point]:
    """The ResNet-50 step times of engine.py --hosts JSON files, as points (nbytes: the
    gradients' total)."""
    runs: dict[tuple[Layout, str], list[float]] = {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        for run in data["runs"]:
            layout = Layout(run["hosts"], int(data["per_host"]))
            for variant, times in run["times"].items():
                runs.setdefault((layout, variant), []).append(statistics.median(times))
    return [Point(layout, f"resnet50-{variant}", RESNET50_BYTES, statistics.median(t),
                  min(t), max(t), len(t)) for (layout, variant), t in sorted(
                      runs.items(), key=lambda kv: (kv[0][0].hosts, kv[0][1]))]


# -- fitting --------------------------------------------------------------------------

FITTED = ("call_overhead", "shm_latency", "shm_inverse_bandwidth", "net_latency",
          "net_inverse_bandwidth", "oversubscribed_latency")


def _features(point: Point, reduce_bandwidth: float, cores: int) -> tuple[list[float], float]:
    """The row of one fit point: coefficients of FITTED and the known rest (reduction)."""
    layout, n = point.layout, point.nbytes
    across = layout.hosts > 1
    p = layout.ranks
    slow = max(1.0, p / cores)
    row = [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    lat, inv = (3, 4) if across else (1, 2)
    if n <= GATHER_BYTES:
        row[lat] = math.ceil(math.log2(p))
        row[inv] = (p - 1) * n * (1.0 if across else slow)
        row[5] = row[lat] if p > cores else 0.0
        return row, (p - 1) * n * slow / reduce_bandwidth
    m = n / p
    messages = max(1, math.ceil(m / CHUNK_BYTES))
    row[lat] = (p - 1) * (messages + 1)
    row[inv] = (p - 1) * 2 * m * (1.0 if across else slow)
    row[5] = row[lat] if p > cores else 0.0
    # Between hosts the reduction streams under the transfer: max(m / bandwidth,
    # m / reduction) is m / bandwidth wherever the link is the slower (the fit checks).
    return row, 0.0 if across else (p - 1) * m * slow / reduce_bandwidth


LATENCIES = (0, 1, 3, 5)        # the columns of FITTED that small messages decide
BANDWIDTHS = (2, 4)             # and those that large ones do


def fit(points: Sequence[Point], reduce_bandwidth: float, cores: int) -> Model:
    """Least squares on relative error over ``points`` (flat rings), parameters kept at
    0 or above, in two stages taken in turn until they settle: the per-call and
    per-message costs from sizes up to LATENCY_BYTES, the per-byte costs from sizes of
    at least BANDWIDTH_BYTES, each with the other's last values held."""
    rows, rest, target, sizes = [], [], [], []
    for point in points:
        row, known = _features(point, reduce_bandwidth, cores)
        rows.append(row)
        rest.append(known)
        target.append(point.seconds)
        sizes.append(point.nbytes)
    a, b = np.array(rows), np.array(target) - np.array(rest)
    weight = 1.0 / np.array(target)
    small = np.array(sizes) <= LATENCY_BYTES
    large = np.array(sizes) >= BANDWIDTH_BYTES
    values = np.zeros(len(FITTED))
    values[list(BANDWIDTHS)] = _solve(a, b, weight, large, list(BANDWIDTHS), values)
    for _ in range(10):
        values[list(LATENCIES)] = _solve(a, b, weight, small, list(LATENCIES), values)
        values[list(BANDWIDTHS)] = _solve(a, b, weight, large, list(BANDWIDTHS), values)
    return Model(call_overhead=values[0], shm_latency=values[1],
                 shm_bandwidth=1 / values[2] if values[2] > 0 else math.inf,
                 net_latency=values[3],
                 net_bandwidth=1 / values[4] if values[4] > 0 else math.inf,
                 reduce_bandwidth=reduce_bandwidth, oversubscribed_latency=values[5],
                 cores=cores)


def _solve(a: np.ndarray, b: np.ndarray, weight: np.ndarray, rows: np.ndarray,
           columns: list[int], values: np.ndarray) -> np.ndarray:
    """The non-negative least-squares values of ``columns`` over ``rows``, the other
    columns held at ``values``."""
    held = [i for i in range(a.shape[1]) if i not in columns]
    target = (b - a[:, held] @ values[held]) * weight
    matrix = a[:, columns] * weight[:, None]
    if not rows.any():
        return values[columns]
    free = list(range(len(columns)))
    solution = np.zeros(len(columns))
    while free:
        found, *_ = np.linalg.lstsq(matrix[rows][:, free], target[rows], rcond=None)
        negative = [free[i] for i, value in enumerate(found) if value < 0]
        if not negative:
            solution[free] = found
            break
        free = [i for i in free if i not in negative]    # held at 0
    return solution


def is_fit_point(point: Point) -> bool:
    """The flat ring's measurements, on every layout: what a message and a byte cost on
    each link. The two levels and ResNet-50's steps are left to predict."""
    return point.variant.startswith("gcurun-tcp") and not point.two_levels


def predict(model: Model, point: Point,
            overhead: Mapping[str, float] | None = None) -> float:
    if point.variant.startswith("train-"):
        return training_step_seconds(model, point, overhead)
    if point.variant.startswith("resnet50-"):
        return resnet_step_seconds(model, point.layout, point.variant[len("resnet50-"):])
    return allreduce_seconds(model, point.nbytes, point.layout, point.two_levels)


# -- the extrapolation ----------------------------------------------------------------

@dataclass(frozen=True)
class Assumptions:
    """What the extrapolation takes beyond the fit (each a command-line option). The
    testbed is one loaded machine of 2 cores: its per-message and per-call times (a
    millisecond, the scheduler's) and its shared memory are not a real host's, so by
    default those come from elsewhere; None takes the fitted value instead."""

    compute_ms: float = COMPUTE_MS
    overlap: float = 0.0            # fraction of the compute that communication may hide in
    # One message between hosts: a TCP exchange on a 100-200 Gbit/s data-centre network
    # with gcurun's own per-message work (an assumption; the 0.90 lines vary it).
    net_latency_us: float | None = 20.0
    # Inside a host: this project's one-host measurements on this machine in quieter
    # spells (docs/benchmarks.md): a tiny allreduce of 2 ranks in 5-9 us, 102 MB between
    # 2 ranks at about 7 GB/s of bus bandwidth.
    shm_latency_us: float | None = 5.0
    shm_gbytes: float | None = 7.0
    call_overhead_us: float | None = 10.0
    net_efficiency: float | None = None      # of the link rate; None: the testbed's


AS_FITTED = Assumptions(net_latency_us=None, shm_latency_us=None, shm_gbytes=None,
                        call_overhead_us=None)


def scaled_model(model: Model, link_gbit: float, link_bits_measured: int,
                 assume: Assumptions) -> Model:
    """The fitted model on a network of ``link_gbit``: the testbed's fraction of its link
    rate (or ``net_efficiency``), the assumed latencies and shared memory (or the fitted
    ones, where None), cores enough for every rank."""
    efficiency = assume.net_efficiency or model.net_bandwidth / (link_bits_measured / 8)

    def given(value: float | None, scale: float, fitted: float) -> float:
        return fitted if value is None else value * scale

    return replace(
        model, net_bandwidth=efficiency * link_gbit * 1e9 / 8,
        net_latency=given(assume.net_latency_us, 1e-6, model.net_latency),
        shm_latency=given(assume.shm_latency_us, 1e-6, model.shm_latency),
        shm_bandwidth=given(assume.shm_gbytes, 1e9, model.shm_bandwidth),
        call_overhead=given(assume.call_overhead_us, 1e-6, model.call_overhead),
        oversubscribed_latency=0.0, cores=1 << 30)


def step(model: Model, ranks: int, two_levels: bool, assume: Assumptions) -> tuple[float, float]:
    """(step seconds, efficiency) of ResNet-50 at ``ranks`` (PER_HOST per host)."""
    layout = Layout(max(1, ranks // PER_HOST), min(ranks, PER_HOST))
    compute = assume.compute_ms / 1e3
    comm = resnet_step_seconds(model, layout, "fused", two_levels)
    exposed = max(0.0, comm - assume.overlap * compute)
    return compute + exposed, compute / (compute + exposed)


def latency_for_target(model: Model, ranks: int, two_levels: bool, assume: Assumptions,
                       link_gbit: float, link_bits: int) -> float | None:
    """The largest per-message network latency (seconds) at which ResNet-50 keeps TARGET
    efficiency at ``ranks``, the rest as assumed; None when even 0 is not enough."""
    def efficiency(latency: float) -> float:
        changed = replace(assume, net_latency_us=latency * 1e6)
        return step(scaled_model(model, link_gbit, link_bits, changed), ranks, two_levels,
                    changed)[1]

    if efficiency(0.0) < TARGET:
        return None
    low, high = 0.0, 1e-3
    if efficiency(high) >= TARGET:
        return high
    for _ in range(50):
        mid = (low + high) / 2
        low, high = (mid, high) if efficiency(mid) >= TARGET else (low, mid)
    return low


# -- output ---------------------------------------------------------------------------

def fmt_size(n: int) -> str:
    for unit, scale in (("MiB", MIB), ("KiB", KIB)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n / 1e6:.1f} MB" if n > MIB else f"{n} B"


def parameter_table(model: Model, link_bits: int) -> list[str]:
    return [
        "| parameter | fitted | meaning |",
        "| --- | --- | --- |",
        f"| call overhead | {model.call_overhead * 1e6:.0f} µs | one engine cycle per call |",
        f"| shared memory: latency | {model.shm_latency * 1e6:.0f} µs | per message between "
        "ranks of a host |",
        f"| shared memory: bandwidth | {model.shm_bandwidth / 1e9:.2f} GB/s | between two ranks "
        "of a host (single-copy reads) |",
        f"| network: latency | {model.net_latency * 1e6:.0f} µs | per message between hosts |",
        f"| waiting for a core | {model.oversubscribed_latency * 1e6:.0f} µs | more per message "
        f"when ranks outnumber the {model.cores} cores |",
        f"| network: bandwidth | {model.net_bandwidth / 1e9:.3f} GB/s | each way per host link "
        f"({model.net_bandwidth * 8 / link_bits:.2f} of its {link_bits / 1e9:g} Gbit/s) |",
        f"| reduction | {model.reduce_bandwidth / 1e9:.2f} GB/s | numpy adding float64 "
        "(measured, not fitted) |",
    ]


def check_table(model: Model, points: Sequence[Point],
                overhead: Mapping[str, float] | None = None
                ) -> tuple[list[str], list[tuple[int, float]]]:
    """Measured beside predicted for every point, and the predictions' (bytes, relative
    error)."""
    lines = ["| layout | variant | size | measured ms (runs' range) | model ms | error | role |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    errors = []
    for point in points:
        predicted = predict(model, point, overhead)
        error = predicted / point.seconds - 1
        role = "fit" if is_fit_point(point) else "prediction"
        if role == "prediction" and not point.variant.startswith("train-"):
            errors.append((point.nbytes, error))
        lines.append(f"| {point.layout.label} | {point.variant} | {fmt_size(point.nbytes)} "
                     f"| {point.seconds * 1e3:.2f} ({point.low * 1e3:.2f}-"
                     f"{point.high * 1e3:.2f}) | {predicted * 1e3:.2f} | {error:+.0%} | "
                     f"{role} |")
    return lines, errors


def summary_lines(errors: Sequence[tuple[int, float]]) -> list[str]:
    """How many predictions fall within ERROR_LIMIT, from BANDWIDTH_BYTES up and below."""
    lines = []
    for what, chosen in (("from 1 MiB up", [e for n, e in errors if n >= BANDWIDTH_BYTES]),
                         ("below 1 MiB", [e for n, e in errors if n < BANDWIDTH_BYTES])):
        if chosen:
            within = sum(abs(e) <= ERROR_LIMIT for e in chosen)
            lines.append(f"Predictions within {ERROR_LIMIT:.0%} {what}: {within} of "
                         f"{len(chosen)} (errors {min(chosen):+.0%} to {max(chosen):+.0%}).")
    return lines


def training_lines(model: Model, points: Sequence[Point],
                   overhead: Mapping[str, float] | None = None) -> list[str]:
    """Training steps measured beside predicted, and how many within ERROR_LIMIT; with
    ``overhead``, beside the prediction without it as well."""
    chosen = [p for p in points if p.variant.startswith("train-")]
    if not chosen:
        return []
    head = "| layout | model | gradients | floor ms | measured ms (runs' range) | model ms " \
           "| error |"
    if overhead:
        head += " without the overhead ms | error |"
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    errors, without = [], []
    for point in chosen:
        predicted = predict(model, point, overhead)
        errors.append(predicted / point.seconds - 1)
        line = (f"| {point.layout.label} | {point.variant[len('train-'):]} | "
                f"{point.nbytes / 1e6:.1f} MB | {point.floor * 1e3:.1f} | "
                f"{point.seconds * 1e3:.1f} ({point.low * 1e3:.1f}-"
                f"{point.high * 1e3:.1f}) | {predicted * 1e3:.1f} | {errors[-1]:+.0%} |")
        if overhead:
            bare = predict(model, point)
            without.append(bare / point.seconds - 1)
            line += f" {bare * 1e3:.1f} | {without[-1]:+.0%} |"
        lines.append(line)
    lines += ["", _within("Training steps", errors)]
    if overhead:
        lines.append(_within("Without the overhead", without))
    return lines


def _within(what: str, errors: Sequence[float]) -> str:
    within = sum(abs(e) <= ERROR_LIMIT for e in errors)
    return (f"{what} within {ERROR_LIMIT:.0%}: {within} of {len(errors)} (errors "
            f"{min(errors):+.0%} to {max(errors):+.0%}).")


def overhead_lines(overheads: Sequence[StepOverhead]) -> list[str]:
    """The step overheads and the one-host runs they come from."""
    lines = ["| model | layout | runs | floor ms, median run | step ms, median run | allreduce "
             "(model) ms | overhead ms (runs' range) |", "| --- | --- | --- | --- | --- | "
             "--- | --- |"]
    for o in overheads:
        lines.append(f"| {o.variant[len('train-'):]} | {o.layout.label} | {len(o.per_run)} | "
                     f"{o.floor * 1e3:.1f} | {o.seconds * 1e3:.1f} | {o.allreduce * 1e3:.1f} "
                     f"| {o.overhead * 1e3:.1f} ({min(o.per_run) * 1e3:.1f} to "
                     f"{max(o.per_run) * 1e3:.1f}) |")
    return lines


def streaming_line(model: Model) -> str:
    """Whether the fit's assumption holds: on the testbed's network hops the link, not
    the reduction, is the slower (so max(m / bandwidth, m / reduction) is the link's)."""
    slowest = model.reduce_bandwidth / max(1.0, 4 / model.cores)
    holds = model.net_bandwidth <= slowest
    return (f"Network hops: the link ({model.net_bandwidth / 1e9:.3f} GB/s) is "
            f"{'slower' if holds else 'FASTER'} than the reduction ({slowest / 1e9:.2f} GB/s "
            f"at its most contended): the streamed ring term is the link's"
            f"{'' if holds else ' NOT everywhere: the fit assumed it was'}.")


def extrapolation_table(model: Model, link_bits: int, assume: Assumptions) -> list[str]:
    lines = ["| ranks (hosts x 8) | link | flat ring: step ms | efficiency | two levels: step "
             "ms | efficiency |", "| --- | --- | --- | --- | --- | --- |"]
    for link in LINKS_GBIT:
        scaled = scaled_model(model, link, link_bits, assume)
        for ranks in RANKS:
            flat = step(scaled, ranks, False, assume)
            two = step(scaled, ranks, True, assume)
            lines.append(f"| {ranks} ({max(1, ranks // PER_HOST)} x {min(ranks, PER_HOST)}) "
                         f"| {link:g} Gbit/s | {flat[0] * 1e3:.1f} | {flat[1]:.3f} | "
                         f"{two[0] * 1e3:.1f} | {two[1]:.3f} |")
    return lines


def target_table(model: Model, link_bits: int, assume: Assumptions) -> list[str]:
    """For each algorithm, link and overlap: the largest network latency, and the least
    compute per step (at the assumed latency), at which 1,024 ranks keep TARGET."""
    lines = ["| algorithm | link | overlap | network latency at most | compute per step at "
             "least |", "| --- | --- | --- | --- | --- |"]
    for overlap in sorted({assume.overlap, 0.0, OVERLAP_BACKWARD}):
        changed = replace(assume, overlap=overlap)
        for link in LINKS_GBIT:
            scaled = scaled_model(model, link, link_bits, changed)
            for two_levels in (False, True):
                bound = latency_for_target(model, 1024, two_levels, changed, link, link_bits)
                layout = Layout(1024 // PER_HOST, PER_HOST)
                comm = resnet_step_seconds(scaled, layout, "fused", two_levels)
                least = comm / (1 / TARGET - 1 + overlap)
                latency = ("none suffices" if bound is None else
                           f"{bound * 1e6:.1f} µs" if bound < 1e-3 else "1 ms or more")
                lines.append(f"| {'two levels' if two_levels else 'flat ring'} | {link:g} "
                             f"Gbit/s | {overlap:.2f} | {latency} | {least * 1e3:.1f} ms |")
    return lines


def as_fitted_lines(model: Model, link_bits: int, assume: Assumptions) -> list[str]:
    fitted = replace(AS_FITTED, compute_ms=assume.compute_ms)
    lines = []
    for overlap in (0.0, OVERLAP_BACKWARD):
        for link in LINKS_GBIT:
            changed = replace(fitted, overlap=overlap)
            scaled = scaled_model(model, link, link_bits, changed)
            flat, two = (step(scaled, 1024, levels, changed)[1] for levels in (False, True))
            lines.append(f"- {link:g} Gbit/s, overlap {overlap:.2f}: flat ring {flat:.3f}, "
                         f"two levels {two:.3f}")
    return lines


def plot(path: Path, model: Model, points: Sequence[Point], link_bits: int,
         assume: Assumptions, overhead: Mapping[str, float] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right, third) = plt.subplots(1, 3, figsize=(17, 5.2))
    for role, marker in (("fit", "o"), ("prediction", "^")):
        chosen = [p for p in points if (is_fit_point(p)) == (role == "fit")]
        left.scatter([p.seconds * 1e3 for p in chosen],
                     [predict(model, p, overhead) * 1e3 for p in chosen], marker=marker, s=18,
                     label=f"{role} ({len(chosen)})")
    low = min(p.seconds for p in points) * 1e3 / 1.5
    high = max(p.seconds for p in points) * 1e3 * 1.5
    line = np.geomspace(low, high, 50)
    left.plot(line, line, "k-", lw=0.8)
    left.plot(line, line * (1 + ERROR_LIMIT), "k:", lw=0.8, label="±15 %")
    left.plot(line, line * (1 - ERROR_LIMIT), "k:", lw=0.8)
    left.set(xscale="log", yscale="log", xlabel="measured (ms)", ylabel="model (ms)",
             title=f"testbed: {link_bits / 1e9:g} Gbit/s shaped links, 2 cores")
    left.legend(fontsize=8)
    for axis, overlap in ((right, 0.0), (third, OVERLAP_BACKWARD)):
        changed = replace(assume, overlap=overlap)
        for link, style in zip(LINKS_GBIT, ("-", "--"), strict=True):
            scaled = scaled_model(model, link, link_bits, changed)
            for two_levels, colour in ((False, "tab:red"), (True, "tab:blue")):
                eff = [step(scaled, n, two_levels, changed)[1] for n in RANKS]
                axis.plot(RANKS, eff, style, color=colour, marker="o",
                          label=f"{'two levels' if two_levels else 'flat ring'}, "
                                f"{link:g} Gbit/s")
        axis.axhline(TARGET, color="k", lw=0.8, ls=":")
        axis.set(xscale="log", xticks=RANKS, xticklabels=[str(n) for n in RANKS],
                 ylim=(0, 1.02), xlabel="ranks (8 per host)", ylabel="scaling efficiency",
                 title=f"extrapolation: ResNet-50, overlap {overlap:.2f}")
        axis.legend(fontsize=8, loc="lower left")
    fig.suptitle(f"ResNet-50 at {assume.compute_ms:.1f} ms compute per step; network "
                 f"latency {scaled.net_latency * 1e6:.0f} µs, shared memory "
                 f"{scaled.shm_bandwidth / 1e9:.1f} GB/s (assumed)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def assumption_line(model: Model, link_bits: int, assume: Assumptions) -> str:
    scaled = scaled_model(model, LINKS_GBIT[0], link_bits, assume)
    return (f"Compute {assume.compute_ms:.1f} ms per step, overlap {assume.overlap:.2f}, "
            f"network latency {scaled.net_latency * 1e6:.0f} µs per message, shared memory "
            f"{scaled.shm_bandwidth / 1e9:.2f} GB/s and {scaled.shm_latency * 1e6:.0f} µs, "
            f"{scaled.net_bandwidth * 8 / (LINKS_GBIT[0] * 1e9):.2f} of the link rate "
            f"(the testbed's), reduction {scaled.reduce_bandwidth / 1e9:.1f} GB/s, call "
            f"overhead {scaled.call_overhead * 1e6:.0f} µs, ResNet-50's {RESNET50_BYTES / 1e6:.1f}"
            f" MB of gradients in batches of {FUSION_BYTES >> 20} MiB.")


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", type=Path, nargs="+", required=True,
                        help="JSON files of benchmarks/cluster_allreduce.py --json")
    parser.add_argument("--engine", type=Path, nargs="*", default=[],
                        help="JSON files of benchmarks/engine.py --hosts --json")
    parser.add_argument("--training", type=Path, nargs="*", default=[],
                        help="JSON files of benchmarks/cluster_training.py --json")
    parser.add_argument("--overhead-from", type=Path, nargs="*", default=[],
                        help="JSON files of benchmarks/cluster_training.py runs with a "
                             "layout of one host (--layouts 1x2,...), one run each: each "
                             "model's step overhead, which the --training predictions add")
    parser.add_argument("--compute-ms", type=float, default=COMPUTE_MS,
                        help=f"ResNet-50's compute per step (default {COMPUTE_MS:.1f}: 256 "
                             "images at 2,470 images/s, NVIDIA's A100 mixed-precision figure)")
    parser.add_argument("--overlap", type=float, default=0.0,
                        help="fraction of the compute that communication hides in (default 0)")
    defaults = Assumptions()
    parser.add_argument("--net-latency-us", type=float, default=defaults.net_latency_us,
                        help="per-message network latency (default %(default)s)")
    parser.add_argument("--shm-latency-us", type=float, default=defaults.shm_latency_us,
                        help="per-message latency inside a host (default %(default)s)")
    parser.add_argument("--shm-gbytes", type=float, default=defaults.shm_gbytes,
                        help="shared-memory bandwidth inside a host (default %(default)s)")
    parser.add_argument("--call-overhead-us", type=float, default=defaults.call_overhead_us,
                        help="per-call overhead (default %(default)s)")
    parser.add_argument("--as-fitted", action="store_true",
                        help="extrapolate with the testbed's fitted latencies, call overhead "
                             "and shared memory instead")
    parser.add_argument("--reduce-gbytes", type=float, default=None,
                        help="reduction bandwidth (default: the one the --fit files recorded)")
    parser.add_argument("--plot", type=Path, default=None,
                        help="write the figure here (PNG; needs matplotlib)")
    parser.add_argument("--json", type=Path, default=None, help="write the model here")
    args = parser.parse_args(list(argv))
    if not 0 <= args.overlap <= 1 or args.compute_ms <= 0:
        parser.error(f"--overlap {args.overlap} must be within 0-1 and --compute-ms "
                     f"{args.compute_ms} above 0")
    points, reduce, cores, link_bits = read_allreduce(args.fit)
    if args.reduce_gbytes is not None:
        reduce = args.reduce_gbytes * 1e9
    model = fit([p for p in points if is_fit_point(p)], reduce, cores)
    overheads = step_overheads(model, args.overhead_from) if args.overhead_from else []
    overhead = {o.variant: o.overhead for o in overheads}
    # (A layout of one host in a training run is the overheads' measurement, not a check.)
    points += read_engine(args.engine) + [p for p in read_training(args.training)
                                          if p.layout.hosts > 1]
    assume = AS_FITTED if args.as_fitted else Assumptions(
        args.compute_ms, args.overlap, args.net_latency_us, args.shm_latency_us,
        args.shm_gbytes, args.call_overhead_us)
    if args.as_fitted:
        assume = replace(assume, compute_ms=args.compute_ms, overlap=args.overlap)
    checks, errors = check_table(model, points, overhead)
    summary = summary_lines(errors)
    out = ["## Fitted parameters", "", *parameter_table(model, link_bits), "",
           "## The model beside the measurements", "", *checks, "",
           *summary, "", streaming_line(model), "",
           *(["## Step overheads (benchmarks/cluster_training.py on one host)", "",
              *overhead_lines(overheads), ""] if overheads else []),
           *(["## Training steps across hosts (benchmarks/cluster_training.py, predicted)",
              "", *training_lines(model, points, overhead), ""] if args.training else []),
           "## Extrapolation: ResNet-50 (assumptions in docs/scaling.md)", "",
           assumption_line(model, link_bits, assume), "",
           *extrapolation_table(model, link_bits, assume), "",
           f"With communication overlapping the backward pass (overlap "
           f"{OVERLAP_BACKWARD:.2f}):", "",
           *extrapolation_table(model, link_bits, replace(assume, overlap=OVERLAP_BACKWARD)),
           "", f"Efficiency {TARGET} at 1,024 ranks holds, the other inputs as above, up to "
           "this network latency, or from this much compute per step:", "",
           *target_table(model, link_bits, assume), "",
           "With the testbed's own constants instead (--as-fitted: its latencies, call "
           "overhead and shared memory, a loaded 2-core machine's), 1,024 ranks:", "",
           *as_fitted_lines(model, link_bits, assume)]
    print("\n".join(out))
    if args.plot is not None:
        plot(args.plot, model, points, link_bits, assume, overhead)
    if args.json is not None:
        args.json.write_text(json.dumps({"model": asdict(model), "link_rate_bits": link_bits,
                                         "assumptions": asdict(assume)}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
