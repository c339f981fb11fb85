"""The folder that ``gcurun --horovod-alias`` puts first on a rank's PYTHONPATH.

It holds one package, :mod:`horovod`, whose modules are gcurun's bindings under Horovod's
names (``horovod.torch`` is :mod:`gcurun.runtime.torch`), so a script written for Horovod
runs unchanged. gcurun itself never imports it under this name.
"""
