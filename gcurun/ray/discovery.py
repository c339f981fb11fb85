"""Host discovery for elastic jobs (Horovod's ``horovod.runner.elastic.discovery`` base).

An elastic job on Ray asks its discovery for the hosts every
``DISCOVER_HOSTS_FREQUENCY_SECS``; ``gcurun.ray.elastic_v2.RayHostDiscovery`` (the
default) reads Ray's live nodes, and any subclass of this one may replace it
(``settings.discovery`` with ``override_discovery=False``).
"""

from __future__ import annotations


class HostDiscovery:
    """Finds the hosts an elastic job may use now."""

    def find_available_hosts_and_slots(self) -> dict[str, int]:
        """Host name -> the number of slots it offers now."""
        raise NotImplementedError
