"""Which of the launcher's environment variables reach ranks on other hosts. Pure.

As horovodrun does, every rank gets the launcher's environment: this host's ranks inherit
it whole (they are its children), and ranks on other hosts get it forwarded, less the
variables below, which describe this host, this login or this shell and would be wrong or
harmful elsewhere. ``--env-forward listed`` keeps mpirun's habit instead: only the names
given with ``-x`` (or a profile's ``forward_env``) cross hosts, and the variables that
configure gcurun's or Horovod's runtime (``GCURUN_*``, ``HOROVOD_*``).

The SSH launcher sends the forwarded variables over the bootstrap's channel, mpirun gets
their names only (``-x NAME``), srun propagates its own environment: no value is ever on
a command line. A name given with ``-x`` is forwarded even when the rules below leave it
out.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

EnvForward = Literal["all", "listed"]
ENV_FORWARD_MODES: tuple[EnvForward, ...] = ("all", "listed")

# Every variable of the launcher's environment that no rank on another host gets, with why.
# Shell patterns (``*``), matched against the whole name.
NEVER_FORWARDED: tuple[tuple[str, str], ...] = (
    ("HOSTNAME", "names this host"),
    ("SSH_*", "this host's SSH session: SSH_CONNECTION, SSH_CLIENT, SSH_TTY, and "
              "SSH_AUTH_SOCK, a socket here"),
    ("DISPLAY", "this host's X display"),
    ("WAYLAND_DISPLAY", "this host's display"),
    ("XAUTHORITY", "the key file of this host's X display"),
    ("PWD", "the shell's directory here; the ranks start in --workdir"),
    ("OLDPWD", "the shell's previous directory (horovodrun leaves it out too)"),
    ("SHLVL", "the depth of this shell"),
    ("_", "the shell's last command"),
    ("BASH_FUNC_*", "exported shell functions (horovodrun leaves them out too)"),
    ("*_SECRET_KEY", "keys such as horovodrun's own _HOROVOD_SECRET_KEY; pass one on "
                     "purpose with -x NAME"),
    ("GCURUN_SECRET", "the secret of the job that runs this launcher, if any"),
    ("GCURUN_RENDEZVOUS", "the rendezvous of the job that runs this launcher, if any"),
    ("*_VISIBLE_DEVICES", "this host's devices (the plan sets the accelerator's own "
                          "variable for each rank; horovodrun leaves CUDA's out too)"),
    ("TMPDIR", "a directory that may exist only here (a scheduler's per-job one)"),
    ("XDG_RUNTIME_DIR", "this login's runtime directory here"),
    ("XDG_SESSION_*", "this login's session here"),
    ("DBUS_*", "this login's message bus here"),
)
# Set by the login on the rank's host for the account the rank runs as (which --ssh-user
# or a hostfile may make another one): sshd sets them, so they are not forwarded over SSH
# or by mpirun. srun starts tasks as this same user and keeps them.
LOGIN_VARIABLES: tuple[str, ...] = ("HOME", "USER", "LOGNAME", "SHELL", "MAIL")
# Variables that configure gcurun's and Horovod's runtime: forwarded in either mode.
RUNTIME_PREFIXES = ("GCURUN_", "HOROVOD_")
# A name every shell and mpirun's -x can carry; others (a '%' of exported functions,
# a '.') stay here.
_PORTABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def never_forwarded(name: str) -> bool:
    """Whether ``name`` describes this host, login or shell (:data:`NEVER_FORWARDED`)."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern, _ in NEVER_FORWARDED)


@dataclass(frozen=True)
class Forwarding:
    """What the launcher's environment gives ranks on other hosts: ``env`` (names and
    values) and the names it leaves out (``left_out``), both sorted by name."""

    mode: EnvForward
    env: Mapping[str, str]
    left_out: tuple[str, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.env)


def plan_forwarding(environ: Mapping[str, str], mode: EnvForward,
                    listed: Sequence[str] = (), *, login: bool = False) -> Forwarding:
    """The variables of ``environ`` forwarded under ``mode`` (``all``: every one but
    :data:`NEVER_FORWARDED` and, unless ``login``, :data:`LOGIN_VARIABLES`; ``listed``:
    the runtime's ``GCURUN_*``/``HOROVOD_*`` ones). ``listed`` names (``-x NAME``) are
    forwarded in both modes, whatever the rules say."""
    given = set(listed)
    env: dict[str, str] = {}
    left_out: list[str] = []
    for name in sorted(environ):
        if name in given:
            env[name] = environ[name]
        elif never_forwarded(name) or (not login and name in LOGIN_VARIABLES) or \
                not _PORTABLE_NAME.fullmatch(name):
            left_out.append(name)
        elif mode == "all" or name.startswith(RUNTIME_PREFIXES):
            env[name] = environ[name]
        else:
            left_out.append(name)
    return Forwarding(mode, env, tuple(left_out))
