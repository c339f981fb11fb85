"""Every code block of the site marked ``<!-- runnable -->`` runs on this host and
succeeds: bash blocks with ``gcurun`` on PATH (this checkout's), python blocks with this
checkout on PYTHONPATH, from the repository's root; a console block marked
``<!-- runnable: output -->`` prints what the page shows (its first lines)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from docsite.pages import ROOT, english_pages, runnable_blocks

BLOCKS = [block for page in english_pages() for block in runnable_blocks(page)]


@pytest.fixture(scope="module")
def gcurun_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory whose ``gcurun`` runs this checkout's gcurun."""
    directory = tmp_path_factory.mktemp("bin")
    script = directory / "gcurun"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gcurun "$@"\n')
    script.chmod(0o755)
    return directory


def test_some_blocks_are_marked() -> None:
    assert len(BLOCKS) >= 4


@pytest.mark.integration
@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.page}-{i}" for i, b in enumerate(BLOCKS)])
def test_runnable_block(block, gcurun_bin: Path) -> None:
    env = {**os.environ, "PATH": f"{gcurun_bin}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    if block.language == "console":
        for command, shown in block.session():
            done = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=240)
            printed = [line.rstrip() for line in done.stdout.splitlines()]
            assert printed[:len(shown)] == [line.rstrip() for line in shown], (
                f"docs/{block.page}.md: $ {command}\nprinted:\n{done.stdout[-3000:]}")
        return
    argv = (["bash", "-euo", "pipefail", "-c", block.code] if block.language == "bash"
            else [sys.executable, "-c", block.code])
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, (f"docs/{block.page}.md:\n{block.code}\n"
                                  f"exit {done.returncode}\n{done.stdout[-2000:]}"
                                  f"{done.stderr[-2000:]}")
