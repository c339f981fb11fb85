"""A pytest plugin for Horovod's test/single/test_ray.py on Ray 2.x (``-p
tests.ray.ray2_fixtures``): its fixture ``ray_start_4_cpus`` passes
``ray.init(_redis_max_memory=...)``, an argument recent Ray refuses (Ray keeps no Redis
of its own any more), so every test using it fails before it starts. This drops that
argument and nothing else; the tests themselves run unedited."""

from __future__ import annotations

import functools

import ray

_REMOVED = ("_redis_max_memory",)
_init = ray.init


@functools.wraps(_init)
def _init_without_removed_arguments(*args, **kwargs):
    for name in _REMOVED:
        kwargs.pop(name, None)
    return _init(*args, **kwargs)


ray.init = _init_without_removed_arguments
