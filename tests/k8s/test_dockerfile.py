"""The training image's Dockerfile (k8s/Dockerfile), checked as far as a machine without
docker can: its instructions parse, every file it COPYs exists in the build context (the
repository), its entrypoint is a script sh accepts, its exec-form commands are JSON, and
sshd accepts the configuration it installs. Building the image and running it under the
MPI Operator need docker and a Kubernetes cluster (docs/clusters.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
DOCKERFILE = ROOT / "k8s" / "Dockerfile"
KNOWN = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT",
         "VOLUME", "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL"}


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    found: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        pending += " " + line.rstrip("\\").strip() if pending else line.rstrip("\\").strip()
        if line.endswith("\\"):
            continue
        word, _, rest = pending.partition(" ")
        found.append((word.upper(), rest.strip()))
        pending = ""
    assert not pending, f"the Dockerfile ends inside a continued line: {pending!r}"
    return found


def test_every_instruction_is_one_docker_knows_and_from_comes_first():
    steps = instructions()
    assert {word for word, _ in steps} <= KNOWN
    first = next(word for word, _ in steps if word != "ARG")
    assert first == "FROM"


def test_every_copied_file_is_in_the_build_context():
    copies = [args.split() for word, args in instructions() if word == "COPY"]
    assert copies
    for words in copies:
        sources = [w for w in words[:-1] if not w.startswith("--")]
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: no such file in the context"


def test_the_entrypoint_is_a_copied_executable_script_sh_accepts():
    steps = instructions()
    entrypoint = json.loads(next(args for word, args in steps if word == "ENTRYPOINT"))
    json.loads(next(args for word, args in steps if word == "CMD"))
    copied = {args.split()[-1]: args.split()[-2] for word, args in steps if word == "COPY"}
    source = ROOT / copied[entrypoint[0]]
    assert os.access(source, os.X_OK)
    assert source.read_text().startswith("#!/bin/sh\n")
    subprocess.run(["sh", "-n", str(source)], check=True)


def test_the_package_the_image_installs_is_complete():
    # `pip install .` builds from pyproject.toml, whose readme and package must be copied.
    copied = {source for word, args in instructions() if word == "COPY"
              for source in args.split()[:-1]}
    assert {"pyproject.toml", "README.md", "gcurun"} <= copied


def test_sshd_accepts_the_configuration_the_image_installs(tmp_path):
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not os.access(sshd, os.X_OK):
        pytest.skip("no sshd on this machine")
    key = tmp_path / "host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    done = subprocess.run([sshd, "-t", "-f", str(ROOT / "k8s" / "sshd_config"), "-h", str(key)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
