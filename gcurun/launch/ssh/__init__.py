"""The SSH executor: ``sshconfig`` (targets from ~/.ssh/config and the settings),
``hostkeys`` (known_hosts), ``connect`` and ``auth`` (one verified connection per host),
``preflight`` (every host checked and its bootstrap started before any rank),
``remote_topology`` (the hosts' CPUs and NUMA nodes, for binding) and ``rank_group`` (the
ranks of one host, run by its bootstrap). ``api`` holds what they share.
"""
