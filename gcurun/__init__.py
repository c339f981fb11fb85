"""gcurun: launch data-parallel training jobs on accelerator clusters and synchronise them.

The package root stays import-light: a rank's ``import gcurun.runtime`` and
``gcurun --help`` must not pay for rich, paramiko, mpi4py or numpy.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
