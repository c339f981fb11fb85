"""The site, built once per test session with ``mkdocs build --strict`` (both languages)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from docsite.pages import ROOT


@pytest.fixture(scope="session")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built site's directory; the build fails on any warning (a broken link or anchor,
    a page missing from the navigation's files)."""
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (tests/setup-and-run.sh)")
    site = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(site)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-4000:]}"
    return site
