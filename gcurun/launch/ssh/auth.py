"""Logging in to a host with keys: identity files, agent keys, the default identities,
each refusal recorded so the failure names every key tried."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gcurun.launch.ssh.api import Deadline, HostFailure
from gcurun.launch.ssh.hostkeys import fingerprint
from gcurun.launch.ssh.sshconfig import DEFAULT_IDENTITIES, SSHTarget


@dataclass(frozen=True)
class _Candidate:
    label: str
    key: Any = None          # a paramiko PKey or AgentKey; None when unusable
    why_not: str = ""        # why an identity could not be tried


def authenticate(target: SSHTarget, transport: Any, deadline: Deadline, prefix: str) -> None:
    import paramiko

    transport.auth_timeout = deadline.left("before authentication")
    try:
        transport.auth_none(target.user)
        return
    except paramiko.BadAuthenticationType as exc:
        allowed = list(exc.allowed_types)
    except paramiko.SSHException:
        allowed = ["publickey"]
    if "publickey" not in allowed:
        raise HostFailure(
            f"{prefix}{target.hostname} accepts only {', '.join(allowed) or 'nothing'} for "
            f"user '{target.user}'; gcurun logs in with keys: enable PubkeyAuthentication "
            "there") from None
    tried: list[str] = []
    agent = _open_agent()
    try:
        if _try_keys(target, transport, deadline, prefix, agent, tried):
            return
    finally:
        if agent is not None:
            agent.close()
    keys = "; ".join(tried) if tried else "none (no identity file, no agent key)"
    raise HostFailure(
        f"{prefix}authentication as '{target.user}' on {target.hostname} failed; keys "
        f"tried: {keys}. Add the public key to ~{target.user}/.ssh/authorized_keys there, "
        "or choose a key with --ssh-identity-file")


def _try_keys(target: SSHTarget, transport: Any, deadline: Deadline, prefix: str,
              agent: Any, tried: list[str]) -> bool:
    """Offer keys until one is accepted (True); records each refusal in ``tried``."""
    import paramiko

    agent_keys = {k.asbytes(): k for k in agent.get_keys()} if agent is not None else {}
    for cand in _candidates(target, agent_keys):
        if cand.key is None:
            tried.append(f"{cand.label} ({cand.why_not})")
            continue
        try:
            transport.auth_timeout = deadline.left("during authentication")
            if not transport.auth_publickey(target.user, cand.key):
                return True
            raise HostFailure(f"{prefix}{target.hostname} wants a second factor after the "
                              f"key {cand.label}; gcurun cannot supply one")
        except paramiko.AuthenticationException:
            tried.append(f"{cand.label} (rejected)")
        except paramiko.SSHException as exc:
            if not transport.is_active():
                raise HostFailure(
                    f"{prefix}{target.hostname} closed the connection during authentication "
                    f"as '{target.user}' after trying {'; '.join(tried) or 'no key'}: too "
                    "many keys (MaxAuthTries)? Choose one with --ssh-identity-file or "
                    "IdentitiesOnly") from None
            tried.append(f"{cand.label} ({exc})")
    return False


def _candidates(target: SSHTarget, agent_keys: dict[bytes, Any]) -> Iterator[_Candidate]:
    """Keys in the order they are offered: explicit identity files, then agent keys (only
    those matching an identity file under IdentitiesOnly), then the default identity
    files when no identity file was named."""
    offered: set[bytes] = set()
    explicit = list(target.identity_files)
    defaults = [os.path.expanduser(p) for p in DEFAULT_IDENTITIES] if not explicit else []
    wanted_blobs = set()
    for path in explicit:
        cand = _load_identity(path)
        if cand.key is not None:
            offered.add(cand.key.asbytes())
            yield cand
            continue
        blob = _public_blob(path)
        if blob is not None and blob in agent_keys:
            wanted_blobs.add(blob)
        else:
            yield cand
    for blob, key in agent_keys.items():
        if blob in offered or (target.identities_only and blob not in wanted_blobs):
            continue
        offered.add(blob)
        yield _Candidate(f"agent key {key.get_name()} {fingerprint(blob)}", key)
    for path in defaults:
        if os.path.exists(path):
            cand = _load_identity(path)
            if cand.key is None or cand.key.asbytes() not in offered:
                yield cand


def _load_identity(path: str) -> _Candidate:
    import paramiko

    label = path
    try:
        key = paramiko.PKey.from_path(path)
    except FileNotFoundError:
        return _Candidate(label, why_not="no such file")
    except (paramiko.PasswordRequiredException, TypeError):
        # cryptography raises TypeError for an encrypted key loaded without a password
        return _Candidate(label, why_not="encrypted; load it into ssh-agent with ssh-add")
    except (OSError, paramiko.SSHException, ValueError) as exc:
        return _Candidate(label, why_not=f"unusable: {exc}")
    return _Candidate(f"{path} ({key.get_name()} {fingerprint(key.asbytes())})", key)


def _public_blob(path: str) -> bytes | None:
    import base64

    try:
        with open(path + ".pub", encoding="utf-8") as f:
            return base64.b64decode(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _open_agent() -> Any:
    """A connection to the user's ssh-agent, or None without one. Each host gets its own:
    one agent connection must not serve signatures for several threads at once."""
    if not os.environ.get("SSH_AUTH_SOCK"):
        return None
    import paramiko

    try:
        return paramiko.Agent()
    except (paramiko.SSHException, OSError):
        return None
