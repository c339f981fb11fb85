"""What runs an Estimator's ranks (Horovod's ``Backend``): ``SparkBackend``, one rank per
Spark task through :func:`gcurun.spark.run`, unless the Estimator is given another."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol


class Backend(Protocol):
    """Runs a function on every rank and returns what each returned, in rank order."""

    def run(self, fn: Callable[..., Any], args: tuple[Any, ...] = (),
            kwargs: Mapping[str, Any] | None = None,
            env: Mapping[str, str] | None = None) -> list[Any]: ...

    def num_processes(self) -> int: ...


class SparkBackend:
    """``num_proc`` ranks as Spark tasks of the active SparkSession (default: its default
    parallelism). ``env`` is added to each rank's environment; ``run_kwargs`` go to
    :func:`gcurun.spark.run` (``start_timeout``, ``use_mpi``, ``nics``...)."""

    def __init__(self, num_proc: int | None = None, env: Mapping[str, str] | None = None,
                 verbose: int = 1, **run_kwargs: Any) -> None:
        self._num_proc = num_proc
        self._env = dict(env or {})
        self._verbose = verbose
        self._run_kwargs = run_kwargs

    def run(self, fn: Callable[..., Any], args: tuple[Any, ...] = (),
            kwargs: Mapping[str, Any] | None = None,
            env: Mapping[str, str] | None = None) -> list[Any]:
        import gcurun.spark

        return list(gcurun.spark.run(fn, args=args, kwargs=dict(kwargs or {}),
                                     num_proc=self.num_processes(),
                                     env={**self._env, **dict(env or {})},
                                     verbose=self._verbose, **self._run_kwargs))

    def num_processes(self) -> int:
        if self._num_proc is None:
            from pyspark.sql import SparkSession

            session = SparkSession.getActiveSession()
            if session is None:
                raise ValueError("no active SparkSession: start one before fit(), or give "
                                 "num_proc")
            self._num_proc = int(session.sparkContext.defaultParallelism)
        return self._num_proc


class LocalBackend:
    """Ranks started by :func:`gcurun.run` (on this host, or on ``hosts`` over SSH)
    instead of Spark tasks; Spark still materialises the data. For a driver whose
    executors cannot run the training, and for testing."""

    def __init__(self, num_proc: int, **run_kwargs: Any) -> None:
        self._num_proc = num_proc
        self._run_kwargs = run_kwargs

    def run(self, fn: Callable[..., Any], args: tuple[Any, ...] = (),
            kwargs: Mapping[str, Any] | None = None,
            env: Mapping[str, str] | None = None) -> list[Any]:
        import gcurun

        return list(gcurun.run(fn, args=args, kwargs=dict(kwargs or {}),
                               num_proc=self._num_proc, env=dict(env or {}) or None,
                               **self._run_kwargs))

    def num_processes(self) -> int:
        return self._num_proc
