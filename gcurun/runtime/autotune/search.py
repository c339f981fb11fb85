"""The search over the knobs: optuna's Gaussian-process sampler (Bayesian optimisation,
as Horovod's autotune) or its TPE sampler, asked on a thread of its own so that the
engine's cycles never wait for it.

optuna is an optional extra (``pip install 'gcurun[autotune]'``); :func:`load_optuna`
says how to get it when it is missing.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
import warnings
from typing import Any

from gcurun.errors import UsageError
from gcurun.runtime.autotune import knobs as kn

INSTALL = "pip install 'gcurun[autotune]'"
log = logging.getLogger("gcurun.autotune")


def _gp_available() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in ("torch", "scipy"))


def load_optuna() -> Any:
    """The optuna module, quiet; raises UsageError saying how to install it."""
    try:
        import optuna
    except ImportError:
        raise UsageError(f"--autotune needs the optuna package, which is not installed on "
                         f"rank 0's host; install it with {INSTALL} (or pip install "
                         "optuna), or run without --autotune") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return optuna


def space(held: frozenset[str]) -> dict[str, Any]:
    """optuna's distributions of the knobs not ``held``, by the search's names."""
    optuna = load_optuna()
    dist = optuna.distributions
    out: dict[str, Any] = {}
    if "fusion_threshold_mb" not in held:
        out["fusion_threshold_mb"] = dist.FloatDistribution(*kn.FUSION_MB, log=True)
    if "cycle_time_ms" not in held:
        out["cycle_time_ms"] = dist.FloatDistribution(*kn.CYCLE_MS, log=True)
    if "cache_enabled" not in held:
        out["cache_enabled"] = dist.CategoricalDistribution([True, False])
    if "hierarchical_allreduce" not in held:
        # None: the cost model decides per size (gcurun's default)
        out["hierarchical_allreduce"] = dist.CategoricalDistribution([None, False, True])
    if "chunk_bytes" not in held:
        out["chunk_exponent"] = dist.IntDistribution(*kn.CHUNK_EXPONENTS)
    if "stream_bytes" not in held:
        out["stream_exponent"] = dist.IntDistribution(*kn.STREAM_EXPONENTS)
    return out


class Search:
    """One study: ``first`` points are tried in order, then the sampler's; :meth:`next`
    hands the previous point's score over and starts asking for the next point on a
    thread; :meth:`ready` returns it once there."""

    def __init__(self, distributions: dict[str, Any], first: list[dict[str, Any]],
                 sampler: str = "gp", noise: float = 0.8, seed: int | None = None):
        optuna = load_optuna()
        self.distributions = distributions
        startup = max(len(first), 4)
        if sampler == "gp" and not _gp_available():
            log.info("optuna's Gaussian-process sampler needs torch and scipy; using its "
                     "TPE sampler")
            sampler = "tpe"
        if sampler == "gp":
            chosen = optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup,
                                               deterministic_objective=noise == 0)
        else:
            chosen = optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup)
        self.study = optuna.create_study(direction="maximize", sampler=chosen)
        seen: list[dict[str, Any]] = []
        for point in first:
            if point not in seen:
                seen.append(point)
                self.study.enqueue_trial(point, skip_if_exists=True)
        self._trial: Any = None
        self._asked: dict[str, Any] | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def next(self, score: float | None) -> None:
        """Record ``score`` for the point last asked (None: none yet) and start asking for
        the next one."""
        trial, self._trial, self._asked = self._trial, None, None
        self._thread = threading.Thread(target=self._ask, args=(trial, score),
                                        name="gcurun-autotune", daemon=True)
        self._thread.start()

    def _ask(self, trial: Any, score: float | None) -> None:
        try:
            if trial is not None and score is not None:
                self.study.tell(trial, score)
            new = self.study.ask(self.distributions)
            self._trial, self._asked = new, dict(new.params)
        except BaseException as exc:  # reported by ready(), on the engine's thread
            self._error = exc

    def ready(self) -> dict[str, Any] | None:
        """The next point once asked (else None). Raises what the sampler raised."""
        if self._error is not None:
            raise self._error
        if self._thread is not None and self._thread.is_alive():
            return None
        return self._asked

    def wait(self, seconds: float) -> dict[str, Any] | None:
        """:meth:`ready` after waiting up to ``seconds`` for the sampler."""
        if self._thread is not None:
            self._thread.join(seconds)
        return self.ready()

    def best(self) -> tuple[dict[str, Any], float] | None:
        """The best point told so far and its score, or None."""
        done = [t for t in self.study.trials if t.value is not None]
        if not done:
            return None
        top = max(done, key=lambda t: t.value)
        return dict(top.params), float(top.value)
