"""Planning, pure: ``plan`` places ranks on hosts and gives each its identity, device,
argv and environment (the contract of :mod:`gcurun.launch.remote.rank_env`); ``binding``
gives each rank its CPUs and memory node from its host's topology.
"""
