"""known_hosts parsing and the host-key verdict (pure), fingerprints checked by ssh-keygen."""

from __future__ import annotations

import base64
import hashlib
import hmac
import shutil
import subprocess

import pytest

from gcurun.launch.ssh.hostkeys import (
    append_known_host,
    check_host_key,
    fingerprint,
    parse_known_hosts,
    preferred_key_types,
    read_known_hosts,
)

KEY_A = b"\x00\x00\x00\x0bssh-ed25519" + b"A" * 36
KEY_B = b"\x00\x00\x00\x0bssh-ed25519" + b"B" * 36
RSA = b"\x00\x00\x00\x07ssh-rsa" + b"R" * 40


def b64(blob: bytes) -> str:
    return base64.b64encode(blob).decode()


def hashed(name: str, salt: bytes = b"0123456789abcdefghij") -> str:
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{b64(salt)}|{b64(digest)}"


def entries(text: str):
    return parse_known_hosts(text, "kh")


def test_known_key_under_any_listed_name_or_port():
    kh = entries(f"node1,10.0.0.1 ssh-ed25519 {b64(KEY_A)}\n"
                 f"[node2]:2200 ssh-ed25519 {b64(KEY_B)}\n")
    assert check_host_key(kh, ["10.0.0.1"], "ssh-ed25519", KEY_A).status == "known"
    assert check_host_key(kh, ["[node2]:2200"], "ssh-ed25519", KEY_B).status == "known"
    assert check_host_key(kh, ["node2"], "ssh-ed25519", KEY_B).status == "unknown"


def test_changed_key_points_at_the_offending_line():
    kh = entries(f"# comment\n\nnode1 ssh-ed25519 {b64(KEY_A)}\n")
    check = check_host_key(kh, ["node1"], "ssh-ed25519", KEY_B)
    assert check.status == "changed"
    assert [e.where for e in check.entries] == ["kh:3"]


def test_a_key_of_another_type_is_not_trusted_silently():
    kh = entries(f"node1 ssh-rsa {b64(RSA)}\n")
    assert check_host_key(kh, ["node1"], "ssh-ed25519", KEY_A).status == "changed"
    assert preferred_key_types(kh, "node1") == ["ssh-rsa"]


def test_hashed_names_patterns_and_negation():
    kh = entries(f"{hashed('node9')} ssh-ed25519 {b64(KEY_A)}\n"
                 f"*.rack1,!bad.rack1 ssh-ed25519 {b64(KEY_B)}\n")
    assert check_host_key(kh, ["node9"], "ssh-ed25519", KEY_A).status == "known"
    assert check_host_key(kh, ["node8"], "ssh-ed25519", KEY_A).status == "unknown"
    assert check_host_key(kh, ["gpu3.rack1"], "ssh-ed25519", KEY_B).status == "known"
    assert check_host_key(kh, ["bad.rack1"], "ssh-ed25519", KEY_B).status == "unknown"


def test_revoked_keys_are_refused_and_cert_authorities_and_junk_skipped():
    kh = entries(f"@revoked * ssh-ed25519 {b64(KEY_A)}\n"
                 f"node1 ssh-ed25519 {b64(KEY_A)}\n"
                 f"@cert-authority *.rack1 ssh-ed25519 {b64(KEY_B)}\n"
                 "node2 ssh-ed25519 not-base64!!\n"
                 "short line\n")
    assert check_host_key(kh, ["node1"], "ssh-ed25519", KEY_A).status == "revoked"
    assert len(kh) == 2


def test_reading_skips_missing_files_and_append_adds_a_line(tmp_path):
    path = tmp_path / "sub" / "known_hosts"
    assert read_known_hosts([str(path)]) == []
    append_known_host(str(path), "[n1]:2200", "ssh-ed25519", KEY_A)
    (entry,) = read_known_hosts([str(path), str(tmp_path / "nope")])
    assert (entry.patterns, entry.key_type, entry.blob) == (("[n1]:2200",), "ssh-ed25519",
                                                            KEY_A)


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen not installed")
def test_fingerprint_matches_ssh_keygen(tmp_path):
    key = tmp_path / "k"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    blob = base64.b64decode((tmp_path / "k.pub").read_text().split()[1])
    listed = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(key) + ".pub"],
                            capture_output=True, text=True, check=True).stdout.split()[1]
    assert fingerprint(blob) == listed
