"""How to reach each remote host: ~/.ssh/config merged with -H, the profile and the CLI.

:func:`resolve_target` is pure: given a host, the SSH settings and a parsed ssh config it
returns a :class:`SSHTarget` with everything a connection needs. Precedence, most specific
first: the host's own entry (``user@host``, a profile's per-host ``port``/``python``), then
the SSH settings (CLI > profile > environment), then ~/.ssh/config, then OpenSSH's defaults.
"""

from __future__ import annotations

import getpass
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from gcurun.config.api import HostKeyPolicy, SSHSettings
from gcurun.errors import UsageError
from gcurun.hosts.api import HostSpec

if TYPE_CHECKING:
    import paramiko

DEFAULT_PORT = 22
DEFAULT_IDENTITIES = ("~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa")
DEFAULT_USER_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
DEFAULT_GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")

# StrictHostKeyChecking values of ssh_config -> gcurun's host-key policy.
CONFIG_POLICIES: Mapping[str, HostKeyPolicy] = {
    "yes": "strict", "ask": "strict", "accept-new": "accept-new", "no": "off", "off": "off",
}


@dataclass(frozen=True)
class Hop:
    """One ProxyJump hop, as written: ``[user@]host[:port]``."""

    host: str
    user: str | None = None
    port: int | None = None


@dataclass(frozen=True)
class SSHTarget:
    """Everything needed to connect to one host and start gcurun's bootstrap there."""

    alias: str                              # the host as the plan names it
    hostname: str                           # what is resolved and connected to
    port: int
    user: str
    identity_files: tuple[str, ...]         # explicit keys (CLI, profile, IdentityFile)
    identities_only: bool                   # IdentitiesOnly: no other agent keys
    known_hosts_files: tuple[str, ...]      # user files; accept-new appends to the first
    global_known_hosts_files: tuple[str, ...]
    host_key_policy: HostKeyPolicy
    host_key_alias: str | None = None
    proxy_jump: tuple[Hop, ...] = ()
    proxy_command: str | None = None
    python: str = sys.executable
    timeout: float = 10.0
    via: tuple[SSHTarget, ...] = ()         # the resolved ProxyJump hops, in order

    @property
    def known_hosts_name(self) -> str:
        """The name of this host in known_hosts files: ``host`` or ``[host]:port``."""
        name = self.host_key_alias or self.hostname
        return name if self.port == DEFAULT_PORT else f"[{name}]:{self.port}"

    @property
    def display(self) -> str:
        """``alias`` plus where it really goes when the config renames it."""
        where = self.hostname if self.port == DEFAULT_PORT else f"{self.hostname}:{self.port}"
        return self.alias if where == self.alias else f"{self.alias} ({where})"


def parse_ssh_config(text: str, origin: str = "ssh config") -> paramiko.SSHConfig:
    """Parse ssh_config text. Raises UsageError naming ``origin`` for a malformed file."""
    import paramiko

    try:
        return paramiko.SSHConfig.from_text(text)
    except (paramiko.ssh_exception.ConfigParseError, ValueError) as exc:
        raise UsageError(f"{origin}: {exc}; fix the file or pass another with --ssh-config")\
            from None


def read_ssh_config(path: str | None, *, explicit: bool) -> paramiko.SSHConfig | None:
    """The ssh config at ``path``; None when there is none. A missing file is an error
    only when the user named it (``explicit``)."""
    if not path:
        return None
    full = os.path.expanduser(path)
    try:
        with open(full, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        if explicit:
            raise UsageError(f"--ssh-config '{path}': no such file; give an existing ssh "
                             "config file") from None
        return None
    except OSError as exc:
        raise UsageError(f"ssh config '{path}': cannot read it: {exc.strerror}") from None
    return parse_ssh_config(text, origin=f"ssh config '{path}'")


def parse_hop(text: str) -> Hop:
    """``user@host:port``, ``host``, ``[v6addr]:port`` or ``ssh://user@host:port``."""
    spec = text.strip().removeprefix("ssh://")
    user, _, rest = spec.rpartition("@")
    port: int | None = None
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        port_text = tail.removeprefix(":")
    elif rest.count(":") == 1:
        host, _, port_text = rest.partition(":")
    else:
        host, port_text = rest, ""
    if port_text:
        if not port_text.isdigit():
            raise UsageError(f"ProxyJump '{text}': port '{port_text}' is not a number; write "
                             "[user@]host[:port]")
        port = int(port_text)
    if not host:
        raise UsageError(f"ProxyJump '{text}': no host; write [user@]host[:port]")
    return Hop(host=host, user=user or None, port=port)


def parse_proxy_jump(value: str | None) -> tuple[Hop, ...]:
    if not value or value.strip().lower() == "none":
        return ()
    return tuple(parse_hop(part) for part in value.split(","))


def resolve_target(
    host: HostSpec,
    ssh: SSHSettings,
    config: paramiko.SSHConfig | None,
    *,
    policy_given: bool = True,
    local_user: str | None = None,
    python: str | None = None,
) -> SSHTarget:
    """Merge ``host``, ``ssh`` and ``config`` into one target (pure).

    ``policy_given`` says whether ``ssh.host_key_policy`` was chosen by the user; when not,
    the config's StrictHostKeyChecking decides. Raises UsageError for a bad Port or
    ProxyJump in the config.
    """
    opts = config.lookup(host.name) if config is not None else {"hostname": host.name}
    port = host.port or ssh.port or _config_port(opts.get("port"), host.name) or DEFAULT_PORT
    user = host.user or ssh.user or opts.get("user") or local_user or getpass.getuser()
    identities = [ssh.identity_file] if ssh.identity_file else []
    identities += [p for p in opts.get("identityfile", []) if p not in identities]
    user_files = tuple(opts["userknownhostsfile"].split()) if "userknownhostsfile" in opts \
        else DEFAULT_USER_KNOWN_HOSTS
    if ssh.known_hosts:
        user_files += (ssh.known_hosts,)
    global_files = tuple(opts["globalknownhostsfile"].split()) \
        if "globalknownhostsfile" in opts else DEFAULT_GLOBAL_KNOWN_HOSTS
    policy = ssh.host_key_policy
    if not policy_given:
        policy = CONFIG_POLICIES.get(opts.get("stricthostkeychecking", "yes").lower(), policy)
    command = opts.get("proxycommand")
    return SSHTarget(
        alias=host.name,
        hostname=opts.get("hostname", host.name),
        port=port,
        user=user,
        identity_files=tuple(_expand(p) for p in identities),
        identities_only=opts.get("identitiesonly", "no").lower() == "yes",
        known_hosts_files=tuple(_expand(p) for p in user_files),
        global_known_hosts_files=tuple(_expand(p) for p in global_files),
        host_key_policy=policy,
        host_key_alias=opts.get("hostkeyalias"),
        proxy_jump=parse_proxy_jump(opts.get("proxyjump")),
        proxy_command=None if not command or command.lower() == "none" else command,
        python=host.python or ssh.python or python or sys.executable,
        timeout=ssh.timeout,
    )


def resolve_hop(hop: Hop, via: SSHTarget, config: paramiko.SSHConfig | None,
                ssh: SSHSettings) -> SSHTarget:
    """The target of a ProxyJump hop: the config applies to it as to any host; the hop's
    own proxy settings are not followed (list every hop in one ProxyJump instead)."""
    spec = HostSpec(hop.host, user=hop.user, port=hop.port)
    target = resolve_target(spec, replace(ssh, user=None, port=None), config,
                            policy_given=True, local_user=via.user)
    return replace(target, proxy_jump=(), proxy_command=None,
                   host_key_policy=via.host_key_policy)


def resolve_targets(hosts: Sequence[HostSpec], ssh: SSHSettings,
                    sources: Mapping[str, str]) -> list[SSHTarget]:
    """Targets for ``hosts``, ProxyJump hops resolved, with the user's ssh config (I/O:
    reads the config file)."""
    explicit = sources.get("ssh.config_file", "default") != "default"
    config = read_ssh_config(ssh.config_file, explicit=explicit)
    policy_given = sources.get("ssh.host_key_policy", "default") != "default"
    targets = []
    for host in hosts:
        target = resolve_target(host, ssh, config, policy_given=policy_given)
        via = tuple(resolve_hop(hop, target, config, ssh) for hop in target.proxy_jump)
        targets.append(replace(target, via=via))
    return targets


def _config_port(value: str | None, host: str) -> int | None:
    if value is None:
        return None
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise UsageError(f"ssh config: Port '{value}' for host '{host}' is not a port number "
                         "(1-65535); fix the config")
    return int(value)


def _expand(path: str) -> str:
    return os.path.expanduser(path)
