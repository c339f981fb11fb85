"""The Horovod import alias on a rank's host (``gcurun --horovod-alias``).

``GCURUN_HOROVOD_ALIAS`` set to ``on`` or ``force`` puts gcurun's folder of Horovod aliases
(``gcurun/_horovod_alias``, holding a ``horovod`` package) first on the rank's PYTHONPATH,
so ``import horovod.torch`` in the command, in a script that ``bash run.sh`` starts and in
any subprocess of the rank resolves to gcurun's binding. The folder is the one of the
gcurun installed on the rank's host, found from this file: bootstraps and the MPI rank shim
call :func:`alias_environment` there. Stdlib only and free of other gcurun imports.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

ALIAS_VARIABLE = "GCURUN_HOROVOD_ALIAS"
ALIAS_MODES = ("off", "on", "force")
ALIAS_FOLDER = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "_horovod_alias")


def alias_environment(env: Mapping[str, str], folder: str = ALIAS_FOLDER) -> dict[str, str]:
    """``{"PYTHONPATH": ...}`` with ``folder`` first when ``env`` asks for the alias (its
    ``GCURUN_HOROVOD_ALIAS`` is ``on`` or ``force``) and does not have it yet; else ``{}``."""
    if env.get(ALIAS_VARIABLE, "off").strip().lower() not in ("on", "force"):
        return {}
    entries = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if entries[:1] == [folder]:
        return {}
    return {"PYTHONPATH": os.pathsep.join([folder, *(p for p in entries if p != folder)])}
