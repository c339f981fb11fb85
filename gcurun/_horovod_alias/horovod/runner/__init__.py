"""``horovod.runner.run`` under ``gcurun --horovod-alias``: :func:`gcurun.run`, which takes
horovod.run's arguments."""

from __future__ import annotations

from typing import Any

__all__ = ["run"]


def __getattr__(name: str) -> Any:
    if name == "run":
        from gcurun import run

        return run
    raise AttributeError(f"module 'horovod.runner' has no attribute {name!r}: under gcurun's "
                         "Horovod alias it holds run only")
