"""The settings of an elastic job and their checks (Horovod's bounds and messages)."""

from __future__ import annotations

from dataclasses import dataclass

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


def make_config(*, np: int | None, min_np: int | None, max_np: int | None,
                slots: int | None = None, elastic_timeout: float | None = None,
                reset_limit: int | None = None,
                cooldown: tuple[int, int] | None = None) -> ElasticConfig:
    """Check the elastic options together and return the config.

    Raises UsageError quoting the values, the rule and the fix."""
    if min_np is None:
        min_np = np
    if min_np is None:
        raise UsageError("an elastic job needs --min-np N (or -np N): the fewest ranks it "
                         "may run with")
    if min_np < 1:
        raise UsageError(f"--min-np {min_np}: an elastic job runs at least 1 rank; give "
                         "--min-np 1 or more")
    if max_np is None and np is not None:
        max_np = max(np, min_np)
    if max_np is not None and max_np < min_np:
        raise UsageError(f"--max-np {max_np} is below --min-np {min_np}; give --max-np of "
                         f"at least {min_np}")
    if np is not None and not min_np <= np <= (max_np if max_np is not None else np):
        raise UsageError(f"-np {np} must lie between --min-np {min_np} and --max-np "
                         f"{max_np}; it is the number of ranks to start with")
    if slots is not None and slots < 1:
        raise UsageError(f"--slots {slots}: a host has at least 1 slot")
    if elastic_timeout is not None and elastic_timeout <= 0:
        raise UsageError(f"--elastic-timeout {elastic_timeout:g}: give a positive number "
                         "of seconds")
    if reset_limit is not None and reset_limit < 0:
        raise UsageError(f"--reset-limit {reset_limit}: give 0 or more resets")
    if cooldown is not None:
        low, high = cooldown
        if low < COOLDOWN_LOWER_LIMIT:
            raise UsageError(f"--blacklist-cooldown-range {low} {high}: the lower limit "
                             f"{low} cannot be lower than {COOLDOWN_LOWER_LIMIT} s")
        if high > COOLDOWN_UPPER_LIMIT:
            raise UsageError(f"--blacklist-cooldown-range {low} {high}: the upper limit "
                             f"{high} cannot be higher than {COOLDOWN_UPPER_LIMIT} s")
        if low > high:
            raise UsageError(f"--blacklist-cooldown-range {low} {high}: MIN is above MAX; "
                             "give MIN first")
    return ElasticConfig(
        min_np=min_np, max_np=max_np, start_np=np, default_slots=slots,
        elastic_timeout=DEFAULT_ELASTIC_TIMEOUT if elastic_timeout is None
        else float(elastic_timeout),
        reset_limit=reset_limit, cooldown=cooldown)
