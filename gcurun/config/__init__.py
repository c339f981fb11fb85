"""Cluster profiles (YAML) and the one place where CLI, profile, environment and defaults
are merged into :class:`gcurun.config.api.Settings`."""
