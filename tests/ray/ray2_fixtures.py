"""A pytest plugin for Horovod's test/single/test_ray.py on Ray 2.x (``-p
tests.ray.ray2_fixtures``): its fixture ``ray_start_4_cpus`` passes
``ray.init(_redis_max_memory=...)``, an argument recent Ray refuses (Ray keeps no Redis
of its own any more), so every test using it fails before it starts. This drops that
argument and nothing else; the tests themselves run unedited.

For test_ray_elastic_v2.py it also names two modules that Horovod's test patches (see
``_horovod_launcher_names`` below)."""

from __future__ import annotations

import functools
import importlib
import sys
import types

import ray

_REMOVED = ("_redis_max_memory",)
_init = ray.init


@functools.wraps(_init)
def _init_without_removed_arguments(*args, **kwargs):
    for name in _REMOVED:
        kwargs.pop(name, None)
    return _init(*args, **kwargs)


ray.init = _init_without_removed_arguments


# Horovod's test_ray_elastic_v2.py patches two attributes of Horovod's launcher that no
# gcurun module is named after: ``horovod.runner.elastic.driver.DISCOVER_HOSTS_FREQUENCY_SECS``
# (how often discovery runs) and ``horovod.runner.util.network.get_driver_ip``. Under
# these names are gcurun's own: the constant that gcurun.ray's elastic jobs read at each
# run, and a function giving this node's address. The tests run unedited.
def _alias_missing(name: str, module: types.ModuleType) -> None:
    try:
        importlib.import_module(name)
    except ImportError:
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent in sys.modules:
            setattr(sys.modules[parent], child, module)


def _horovod_launcher_names() -> None:
    try:
        importlib.import_module("horovod.runner")
    except ImportError:
        return      # not run under run-horovod.sh
    from gcurun.ray import elastic_v2

    network = types.ModuleType("horovod.runner.util.network")
    network.get_driver_ip = lambda *_args, **_kwargs: ray.util.get_node_ip_address()  # type: ignore[attr-defined]
    _alias_missing("horovod.runner.elastic.driver", elastic_v2)
    _alias_missing("horovod.runner.util.network", network)


_horovod_launcher_names()
