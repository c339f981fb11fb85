"""Horovod's import names, resolved to gcurun's bindings (``gcurun --horovod-alias``).

``import horovod.torch as hvd`` gives :mod:`gcurun.runtime.torch` itself (the same module
object, so its state exists once), ``horovod.tensorflow`` :mod:`gcurun.runtime.tensorflow`,
``horovod.tensorflow.keras`` and ``horovod.keras`` (Keras 3, that is ``tf.keras``)
:mod:`gcurun.runtime.tensorflow.keras`; their submodules (``horovod.torch.elastic``,
``horovod.keras.callbacks`` ...) resolve to the submodules of the same name. ``horovod.run``
and ``horovod.runner.run`` are :func:`gcurun.run`. ``horovod.__version__`` is the Horovod
release whose API gcurun follows.

A Horovod installed on the rank's host wins: this package then hands ``import horovod``
over to it (with a warning) unless ``GCURUN_HOROVOD_ALIAS`` is ``force``. The search for it
reads the other ``sys.path`` entries and imports nothing.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType
from typing import Any

__version__ = "0.28.1"

MODE_VARIABLE = "GCURUN_HOROVOD_ALIAS"

# Horovod's module -> gcurun's; a submodule follows its package (longest name first).
ALIASES = {
    "horovod.torch": "gcurun.runtime.torch",
    "horovod.tensorflow": "gcurun.runtime.tensorflow",
    "horovod.keras": "gcurun.runtime.tensorflow.keras",
}
# Modules of this folder itself.
OWN = frozenset({"horovod.runner"})

_FOLDER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def target_of(name: str) -> str | None:
    """gcurun's module for Horovod's module ``name``, or None where none is mapped."""
    for alias in sorted(ALIASES, key=len, reverse=True):
        if name == alias or name.startswith(alias + "."):
            return ALIASES[alias] + name[len(alias):]
    return None


class _AliasLoader(importlib.abc.Loader):
    """Loads a Horovod name as the gcurun module itself: the import system returns what
    ``sys.modules`` holds under the name once the module ran."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        sys.modules[module.__name__] = importlib.import_module(self.target)


class AliasFinder(importlib.abc.MetaPathFinder):
    """Finds ``horovod.*`` modules as gcurun's; refuses Horovod modules gcurun has not."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("horovod.") or fullname in OWN:
            return None
        gcurun_name = target_of(fullname)
        if gcurun_name is None or importlib.util.find_spec(gcurun_name) is None:
            covered = ", ".join(sorted([*ALIASES, "horovod.tensorflow.keras", *OWN]))
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: gcurun's Horovod alias covers {covered} and "
                "their submodules that gcurun has", name=fullname)
        return importlib.util.spec_from_loader(fullname, _AliasLoader(gcurun_name))


def real_horovod() -> importlib.machinery.ModuleSpec | None:
    """The spec of a Horovod installed beside this folder on ``sys.path``, found without
    importing it, or None."""
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != _FOLDER]
    return importlib.machinery.PathFinder.find_spec("horovod", others)


def _hand_over(spec: importlib.machinery.ModuleSpec) -> None:
    """Make ``import horovod`` give the real Horovod: the import system returns the module
    that ``sys.modules`` holds once this one ran."""
    warnings.warn(
        f"{MODE_VARIABLE}=on: Horovod is installed ({spec.origin}), so 'import horovod' "
        f"imports it; set {MODE_VARIABLE}=force (gcurun --horovod-alias force) for gcurun's "
        "bindings", stacklevel=3)
    module = importlib.util.module_from_spec(spec)
    sys.modules[__name__] = module
    assert spec.loader is not None
    spec.loader.exec_module(module)


def __getattr__(name: str) -> Any:
    if name == "run":
        from gcurun import run

        return run
    raise AttributeError(f"module 'horovod' has no attribute {name!r}")


_real = None if os.environ.get(MODE_VARIABLE, "").strip().lower() == "force" else real_horovod()
if _real is not None:
    _hand_over(_real)
elif not any(isinstance(f, AliasFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, AliasFinder())
