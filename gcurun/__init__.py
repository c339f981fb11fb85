"""gcurun: launch data-parallel training jobs on accelerator clusters and synchronise them.

``gcurun.run(fn, num_proc=...)`` runs a function on every rank (Horovod's ``horovod.run``).
The package root stays import-light: a rank's ``import gcurun.runtime``, ``import gcurun``
and ``gcurun --help`` must not pay for rich, paramiko, mpi4py or numpy; ``run`` loads on
first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# The one place of the version: pyproject.toml reads it ([tool.setuptools.dynamic]).
__version__ = "0.1.0"

__all__ = ["RankFunctionError", "__version__", "run"]

if TYPE_CHECKING:  # what type checkers, IDEs and help() see; loaded on first use below
    from gcurun.errors import RankFunctionError
    from gcurun.launch.library import run


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def __getattr__(name: str) -> Any:
    if name == "run":
        from gcurun.launch.library import run

        return run
    if name == "RankFunctionError":
        from gcurun.errors import RankFunctionError

        return RankFunctionError
    raise AttributeError(f"module 'gcurun' has no attribute {name!r}")
