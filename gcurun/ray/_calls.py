"""What a Ray job runs on each worker (a call of the user's function) and the variables it
adds, shared by the static executor (:mod:`gcurun.ray.runner`) and the elastic one
(:mod:`gcurun.ray.elastic_v2`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gcurun.ray.api import RayUsageError

__all__ = ["_Call", "check_extra_env"]


class _Call:
    """``fn(*args, **kwargs)`` ignoring the executable (``run``), picklable by value."""

    def __init__(self, fn: Callable[..., Any], args: Sequence[Any] | None,
                 kwargs: Mapping[str, Any] | None) -> None:
        self.fn, self.args, self.kwargs = fn, tuple(args or ()), dict(kwargs or {})

    def __call__(self, _executable: Any) -> Any:
        return self.fn(*self.args, **self.kwargs)


def check_extra_env(extra: Mapping[str, Any], device_var: str | None) -> dict[str, str]:
    """``extra_env_vars`` as strings. Raises RayUsageError for a variable gcurun sets
    for each rank (its rank, device or rendezvous): the job would be inconsistent."""
    from gcurun.launch.planning.plan import planned_variable
    from gcurun.launch.remote.rank_env import RENDEZVOUS_VARIABLE, SECRET_VARIABLE

    for name in extra:
        if name in (RENDEZVOUS_VARIABLE, SECRET_VARIABLE) or \
                planned_variable(str(name), device_var) is not None:
            raise RayUsageError(f"extra_env_vars={{{name!r}: {extra[name]!r}, ...}}: gcurun "
                                f"sets {name} for each rank from where Ray placed it; leave "
                                f"{name} out")
    return {str(k): str(v) for k, v in extra.items()}
