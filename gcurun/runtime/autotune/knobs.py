"""The engine's knobs that autotune searches: what every rank can change between two
cycles without restarting, their ranges, and how to write a choice down for the next run
(command line and profile lines)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from gcurun.runtime.algorithms.ring import STREAM_BYTES
from gcurun.runtime.settings import RuntimeEnv

KIB = 1 << 10
MIB = 1 << 20

# The knobs, in the order of the log's columns after Horovod's.
NAMES = ("fusion_threshold_mb", "cycle_time_ms", "cache_enabled", "hierarchical_allreduce",
         "chunk_bytes", "stream_bytes")

# The search space. Sizes are searched as powers of two (their exponent), the fusion
# threshold and the cycle time on a log scale: a step of one matters as much at 1 MiB
# as at 32. Horovod searches 0-64 MB and 1-100 ms; gcurun's cycles start at once for
# ready ops, so shorter cycles matter more than longer ones.
FUSION_MB = (0.25, 128.0)
CYCLE_MS = (0.1, 25.0)
CHUNK_EXPONENTS = (16, 23)      # 64 KiB - 8 MiB
STREAM_EXPONENTS = (15, 21)     # 32 KiB - 2 MiB


@dataclass(frozen=True)
class Knobs:
    """One setting of every tunable knob (the same on every rank)."""

    fusion_threshold_mb: float
    cycle_time_ms: float
    cache_enabled: bool
    hierarchical_allreduce: bool | None      # None: the cost model decides per size
    chunk_bytes: int
    stream_bytes: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Knobs:
        return cls(float(data["fusion_threshold_mb"]), float(data["cycle_time_ms"]),
                   bool(data["cache_enabled"]),
                   None if data["hierarchical_allreduce"] is None
                   else bool(data["hierarchical_allreduce"]),
                   int(data["chunk_bytes"]), int(data["stream_bytes"]))

    def with_params(self, params: dict[str, Any]) -> Knobs:
        """These knobs with the searched ``params`` (the search's names) put in."""
        changes: dict[str, Any] = {}
        for name, value in params.items():
            if name == "chunk_exponent":
                changes["chunk_bytes"] = 1 << int(value)
            elif name == "stream_exponent":
                changes["stream_bytes"] = 1 << int(value)
            elif name == "cache_enabled":
                changes[name] = bool(value)
            elif name == "hierarchical_allreduce":
                changes[name] = None if value is None else bool(value)
            else:
                changes[name] = round(float(value), 3)
        return replace(self, **changes)

    def params(self, names: list[str]) -> dict[str, Any]:
        """The search's ``names`` with these knobs' values (for a trial to enqueue)."""
        out: dict[str, Any] = {}
        for name in names:
            if name == "chunk_exponent":
                out[name] = _exponent(self.chunk_bytes, CHUNK_EXPONENTS)
            elif name == "stream_exponent":
                out[name] = _exponent(self.stream_bytes, STREAM_EXPONENTS)
            elif name == "fusion_threshold_mb":
                out[name] = min(max(self.fusion_threshold_mb, FUSION_MB[0]), FUSION_MB[1])
            elif name == "cycle_time_ms":
                out[name] = min(max(self.cycle_time_ms, CYCLE_MS[0]), CYCLE_MS[1])
            elif name == "cache_enabled":
                out[name] = self.cache_enabled
            else:
                out[name] = self.hierarchical_allreduce
        return out

    def describe(self) -> str:
        """``fusion 64 MB, cycle 1 ms, cache on, hierarchical auto, chunk 2 MiB, stream
        256 KiB``"""
        hier = {None: "auto", True: "on", False: "off"}[self.hierarchical_allreduce]
        return (f"fusion {self.fusion_threshold_mb:g} MB, cycle {self.cycle_time_ms:g} ms, "
                f"cache {'on' if self.cache_enabled else 'off'}, hierarchical {hier}, "
                f"chunk {_size(self.chunk_bytes)}, stream {_size(self.stream_bytes)}")

    def command_line(self) -> str:
        """gcurun options (and -x variables) that fix these knobs for the next run."""
        parts = [f"--fusion-threshold-mb {self.fusion_threshold_mb:g}",
                 f"--cycle-time-ms {self.cycle_time_ms:g}"]
        if not self.cache_enabled:
            parts.append("--cache-capacity 0")
        if self.hierarchical_allreduce is not None:
            parts.append("--hierarchical-allreduce" if self.hierarchical_allreduce
                         else "--no-hierarchical-allreduce")
        parts.append(f"-x GCURUN_CHUNK_BYTES={self.chunk_bytes}")
        parts.append(f"-x GCURUN_STREAM_BYTES={self.stream_bytes}")
        return " ".join(parts)

    def profile_lines(self) -> list[str]:
        """The same as lines of a gcurun profile."""
        lines = ["runtime:", f"  fusion_threshold_mb: {self.fusion_threshold_mb:g}",
                 f"  cycle_time_ms: {self.cycle_time_ms:g}"]
        if self.hierarchical_allreduce is not None:
            lines.append(f"  hierarchical_allreduce: "
                         f"{'true' if self.hierarchical_allreduce else 'false'}")
        lines += ["env:", f"  GCURUN_CHUNK_BYTES: \"{self.chunk_bytes}\"",
                  f"  GCURUN_STREAM_BYTES: \"{self.stream_bytes}\""]
        if not self.cache_enabled:
            lines.append("  GCURUN_CACHE_CAPACITY: \"0\"")
        return lines


def start_knobs(env: RuntimeEnv) -> Knobs:
    """The knobs a rank starts with (its settings, else the defaults)."""
    return Knobs(env.fusion_threshold_mb, env.cycle_time_ms, env.cache_capacity > 0,
                 env.hierarchical_allreduce, env.chunk_bytes,
                 env.stream_bytes or STREAM_BYTES)


def held_knobs(env: RuntimeEnv, two_levels: bool) -> frozenset[str]:
    """The knobs autotune leaves alone: those the user set, the response cache when it
    has no room (capacity 0), and hierarchical allreduce where ranks are not on several
    hosts with several ranks each."""
    held = set(env.knobs_set)
    if env.cache_capacity == 0:
        held.add("cache_enabled")
    if not two_levels:
        held.add("hierarchical_allreduce")
    return frozenset(held)


def _exponent(nbytes: int, bounds: tuple[int, int]) -> int:
    return min(max(round(math.log2(max(nbytes, 1))), bounds[0]), bounds[1])


def _size(nbytes: int) -> str:
    if nbytes >= MIB and nbytes % MIB == 0:
        return f"{nbytes // MIB} MiB"
    if nbytes >= KIB and nbytes % KIB == 0:
        return f"{nbytes // KIB} KiB"
    return f"{nbytes} B"
