"""What autotune writes down: Horovod's CSV log of samples (with gcurun's knobs after
its columns) and the cache of what was learned, keyed by the job's shape."""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from gcurun.errors import UsageError
from gcurun.runtime.autotune.knobs import Knobs

log = logging.getLogger("gcurun.autotune")

# Horovod's columns, then gcurun's own knobs.
HOROVOD_COLUMNS = ("hierarchical_allreduce", "hierarchical_allgather", "torus_allreduce",
                   "cache_enabled", "cycle_time_ms", "tensor_fusion_threshold", "score")
COLUMNS = HOROVOD_COLUMNS + ("chunk_bytes", "stream_bytes")
CACHE_VERSION = 1


class SampleLog:
    """``--autotune-log-file``: a row per sample (its knobs and score, in bytes per
    microsecond as Horovod's), and the best row last when tuning ends."""

    def __init__(self, path: str):
        """Raises UsageError when ``path`` cannot be written."""
        try:
            self._file: TextIO = open(os.path.expanduser(path), "w", newline="",
                                      encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--autotune-log-file {path!r}: cannot be written "
                             f"({exc.strerror}); give a file in a folder that exists and "
                             "that rank 0 may write") from None
        self._csv = csv.writer(self._file)
        self._csv.writerow(COLUMNS)
        self._file.flush()

    def row(self, knobs: Knobs, score: float) -> None:
        hier = knobs.hierarchical_allreduce
        self._csv.writerow([
            "auto" if hier is None else int(hier), 0, 0, int(knobs.cache_enabled),
            f"{knobs.cycle_time_ms:g}", f"{knobs.fusion_threshold_mb:g}",
            f"{score / 1e6:.4f}", knobs.chunk_bytes, knobs.stream_bytes])
        self._file.flush()

    def close(self) -> None:
        self._file.close()


@dataclass(frozen=True)
class Shape:
    """The job's layout, as the cache keys it."""

    hosts: int
    ranks_per_host: int
    backend: str

    def key(self, sizes: Sequence[int]) -> str:
        """The cache's key of this layout with a step's tensors of ``sizes`` bytes."""
        digest = hashlib.sha1(",".join(map(str, sorted(sizes))).encode()).hexdigest()[:16]
        return (f"hosts={self.hosts} ranks_per_host={self.ranks_per_host} "
                f"backend={self.backend} tensors={len(sizes)} "
                f"bytes={sum(sizes)} sizes={digest}")


@dataclass(frozen=True)
class Cached:
    """A cache entry: the best knobs found for a key, their score, the starting
    settings' score then, and the samples that search took."""

    knobs: Knobs
    score: float
    default_score: float | None
    samples: int


class TuneCache:
    """``--autotune-cache FILE``: the best knobs per key (:meth:`Shape.key`), JSON. A
    file that cannot be read is reported and treated as empty: training goes on."""

    def __init__(self, path: str):
        self.path = os.path.expanduser(path)

    def _read(self) -> dict[str, Any]:
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("the autotune cache %s cannot be read (%s); tuning from the start",
                        self.path, exc)
            return {}
        if not isinstance(data, dict) or data.get("version") != CACHE_VERSION or \
                not isinstance(data.get("entries"), dict):
            log.warning("the autotune cache %s is not a cache of this gcurun version; "
                        "tuning from the start (it is rewritten at the end)", self.path)
            return {}
        return data["entries"]

    def lookup(self, key: str) -> Cached | None:
        """What the cache holds for ``key``, or None."""
        entry = self._read().get(key)
        if not isinstance(entry, dict):
            return None
        try:
            default = entry.get("default_score")
            return Cached(Knobs.from_json(entry["knobs"]), float(entry["score"]),
                          None if default is None else float(default),
                          int(entry.get("samples", 0)))
        except (KeyError, TypeError, ValueError):
            return None

    def store(self, key: str, knobs: Knobs, score: float, default_score: float | None,
              samples: int) -> None:
        """Record ``knobs`` as the best for ``key`` (written whole, atomically)."""
        entries = self._read()
        entries[key] = {"knobs": knobs.to_json(), "score": score,
                        "default_score": default_score, "samples": samples,
                        "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        folder = os.path.dirname(os.path.abspath(self.path))
        try:
            os.makedirs(folder, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".autotune-", dir=folder)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"version": CACHE_VERSION, "entries": entries}, f, indent=1,
                          sort_keys=True)
            os.replace(tmp, self.path)
        except OSError as exc:
            log.warning("the autotune cache %s cannot be written (%s)", self.path, exc)
