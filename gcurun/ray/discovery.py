"""Host discovery for elastic jobs (Horovod's ``horovod.runner.elastic.discovery`` base).

Only the interface is here: elastic jobs on Ray (``RayHostDiscovery``, which reads Ray's
live nodes) are not built yet.
"""

from __future__ import annotations


class HostDiscovery:
    """Finds the hosts an elastic job may use now."""

    def find_available_hosts_and_slots(self) -> dict[str, int]:
        """Host name -> the number of slots it offers now."""
        raise NotImplementedError
