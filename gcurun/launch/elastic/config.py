"""The settings of an elastic job and their checks (Horovod's bounds and messages)."""

from __future__ import annotations

from dataclasses import dataclass

from gcurun.config.api import Settings
from gcurun.config.resolve import setting_name
from gcurun.errors import UsageError

DEFAULT_ELASTIC_TIMEOUT = 600.0
DISCOVERY_INTERVAL = 1.0
DISCOVERY_TIMEOUT = 30.0
COOLDOWN_LOWER_LIMIT = 1          # Horovod's DEFAULT_COOLDOWN_LOWER_LIMIT_SECONDS
COOLDOWN_UPPER_LIMIT = 3600       # Horovod's DEFAULT_COOLDOWN_UPPER_LIMIT_SECONDS


@dataclass(frozen=True)
class ElasticConfig:
    """What the driver needs to know about the job.

    ``start_np``: slots to wait for before the first generation; ``min_np``/``max_np``:
    the bounds of every generation (``max_np`` None: unbounded); ``default_slots``: slots
    of a bare discovery line; ``cooldown``: (MIN, MAX) seconds a blacklisted host waits
    before it may come back, None for a permanent blacklist.
    """

    min_np: int
    max_np: int | None = None
    start_np: int | None = None
    default_slots: int | None = None
    elastic_timeout: float = DEFAULT_ELASTIC_TIMEOUT
    reset_limit: int | None = None
    cooldown: tuple[int, int] | None = None
    discovery_interval: float = DISCOVERY_INTERVAL

    @property
    def first_np(self) -> int:
        return self.start_np if self.start_np is not None else self.min_np


def cooldown_problem(low: int, high: int) -> str | None:
    """What is wrong with a blacklist cooldown of ``low`` to ``high`` seconds (Horovod's
    bounds), or None; each caller raises it as its own error, after the value it quotes."""
    if low < COOLDOWN_LOWER_LIMIT:
        return f"the lower limit {low} cannot be lower than {COOLDOWN_LOWER_LIMIT} s"
    if high > COOLDOWN_UPPER_LIMIT:
        return f"the upper limit {high} cannot be higher than {COOLDOWN_UPPER_LIMIT} s"
    if low > high:
        return "MIN is above MAX; give MIN first"
    return None


def elastic_config(settings: Settings) -> ElasticConfig:
    """The driver's config from ``settings.elastic`` and ``settings.np`` (the ranks to
    start with), checked together.

    Raises UsageError quoting the values, each named as it was given (option, variable
    or profile line), the rule and the fix."""
    e = settings.elastic

    def name(field: str) -> str:
        path = "np" if field == "np" else f"elastic.{field}"
        return setting_name(path, settings.sources.get(path, "cli"))

    np, min_np, max_np = settings.np, e.min_np, e.max_np
    if min_np is None:
        min_np = np
    if min_np is None:
        raise UsageError("an elastic job needs --min-np N (or -np N): the fewest ranks it "
                         "may run with")
    if min_np < 1:
        raise UsageError(f"{name('min_np')} {min_np}: an elastic job runs at least 1 rank; "
                         f"give {name('min_np')} 1 or more")
    if max_np is None and np is not None:
        max_np = max(np, min_np)
    elif max_np is not None and max_np < min_np:
        raise UsageError(f"{name('max_np')} {max_np} is below {name('min_np')} {min_np}; "
                         f"give {name('max_np')} of at least {min_np}")
    if np is not None and not min_np <= np <= (max_np if max_np is not None else np):
        raise UsageError(f"{name('np')} {np} must lie between {name('min_np')} {min_np} "
                         f"and {name('max_np')} {max_np}; it is the number of ranks to "
                         "start with")
    if e.slots is not None and e.slots < 1:
        raise UsageError(f"{name('slots')} {e.slots}: a host has at least 1 slot")
    if not e.timeout > 0:
        raise UsageError(f"{name('timeout')} {e.timeout:g}: give a positive number of "
                         "seconds")
    if e.reset_limit is not None and e.reset_limit < 0:
        raise UsageError(f"{name('reset_limit')} {e.reset_limit}: give 0 or more resets")
    cooldown = e.blacklist_cooldown_range
    if cooldown is not None:
        low, high = cooldown
        problem = cooldown_problem(low, high)
        if problem:
            raise UsageError(f"{name('blacklist_cooldown_range')} {low} {high}: {problem}")
    return ElasticConfig(min_np=min_np, max_np=max_np, start_np=np, default_slots=e.slots,
                         elastic_timeout=float(e.timeout), reset_limit=e.reset_limit,
                         cooldown=(cooldown[0], cooldown[1]) if cooldown else None)
