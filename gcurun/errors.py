"""The one exception tree of gcurun.

Library code raises these; only the CLI prints them and picks the exit code.
A message quotes the bad value, states the rule and says how to fix it.
"""

from __future__ import annotations

import signal as _signal
from dataclasses import dataclass, field


class GcurunError(Exception):
    """Base of every error gcurun raises on purpose."""

    exit_code: int = 1


class UsageError(GcurunError):
    """Bad input from the user: a flag, a host spec, a profile. Exit code 2."""

    exit_code = 2


class HostSpecError(UsageError):
    """A host spec, hostfile or hostlist that cannot be parsed."""


class ProfileError(UsageError):
    """A YAML cluster profile with an unknown key, a wrong type or bad YAML."""


class PlanError(UsageError):
    """Inputs that parse but cannot make a launch plan (too many ranks, devices)."""


class LaunchError(GcurunError):
    """The job could not be started (executable missing, port taken, ...)."""


class SSHConnectError(LaunchError):
    """One or more remote hosts failed the SSH preflight.

    ``failures`` maps host name to the reason, so all of them are reported together.
    """

    def __init__(self, failures: dict[str, str]):
        self.failures = dict(failures)
        lines = [f"  {host}: {reason}" for host, reason in sorted(self.failures.items())]
        count = len(self.failures)
        noun = "host" if count == 1 else "hosts"
        super().__init__(f"SSH preflight failed for {count} {noun}; nothing was started:\n"
                         + "\n".join(lines))


@dataclass(frozen=True)
class RankFailure:
    """How one rank ended badly: the root cause of a failed job.

    Exactly one of ``exit_code`` (a non-zero exit) and ``signal`` (the number of the
    signal that killed it) is set.
    """

    rank: int
    host: str
    exit_code: int | None = None
    signal: int | None = None
    stderr_tail: tuple[str, ...] = field(default_factory=tuple)
    error_text: str | None = None
    # Ranks this one gave up waiting for (a collective's timeout, the stall inspector),
    # with their hosts, when they were still running then: those did not arrive.
    waited_for: tuple[tuple[int, str], ...] = ()
    # The ranks in between, in order, when this rank waited for one that waited in turn
    # (its own last words said so) for ``waited_for``.
    waited_through: tuple[tuple[int, str], ...] = ()

    @property
    def signal_name(self) -> str | None:
        if self.signal is None:
            return None
        try:
            return _signal.Signals(self.signal).name
        except ValueError:
            return f"signal {self.signal}"

    @property
    def job_exit_code(self) -> int:
        """The code gcurun exits with: the rank's own, or 128+N for signal N."""
        if self.signal is not None:
            return 128 + self.signal
        return self.exit_code if self.exit_code else 1

    def describe(self) -> str:
        how = (f"was killed by {self.signal_name}" if self.signal is not None
               else f"exited with code {self.exit_code}")
        return f"rank {self.rank} on {self.host} {how}"

    def describe_cause(self) -> str:
        """The root cause in words: this rank's end, or the ranks it waited for in vain."""
        if not self.waited_for:
            return f"{self.describe()} (root cause)"
        named = " and ".join(f"rank {r} on {h}" for r, h in self.waited_for)
        them = "them" if len(self.waited_for) > 1 else "it"
        chain = "".join(f"rank {r} on {h}, which waited in turn for "
                        for r, h in self.waited_through)
        return (f"{named} did not arrive (root cause): {self.describe()} after it gave "
                f"up waiting for {chain}{them}")


class RanksFailedError(GcurunError):
    """A rank failed and the job was stopped; exit with that rank's code."""

    def __init__(self, failure: RankFailure, others: tuple[RankFailure, ...] = ()):
        self.failure = failure
        self.others = others
        self.exit_code = failure.job_exit_code
        super().__init__(failure.describe())


class RankFunctionError(RanksFailedError):
    """The function :func:`gcurun.run` ran raised on a rank: ``rank``, ``host``, the
    exception's ``error_type`` name, ``message`` and the rank's ``remote_traceback``
    (the exception itself is the ``__cause__`` when it could travel)."""

    def __init__(self, failure: RankFailure, error_type: str, message: str,
                 remote_traceback: str):
        super().__init__(failure)
        self.rank, self.host = failure.rank, failure.host
        self.error_type, self.message = error_type, message
        self.remote_traceback = remote_traceback
        self.args = (f"rank {self.rank} on {self.host} raised {error_type}: {message}\n"
                     f"{remote_traceback.rstrip()}",)


class JobInterrupted(GcurunError):
    """The launcher got SIGINT or SIGTERM and stopped every rank (exit 128+N)."""

    def __init__(self, signum: int, signal_name: str):
        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(f"interrupted by {signal_name}; stopped every rank")


class CollectiveError(GcurunError):
    """A collective failed: mismatched tensors between ranks, a dead peer, a timeout."""


class PeerFailureError(CollectiveError):
    """A peer died, closed its connections, or the job was aborted."""


class CollectiveTimeout(CollectiveError):
    """No progress from a peer within the configured timeout."""
