"""One naming rule for every setting's variable (GCURUN_ + its option's name), the old
names still read with a notice, and no variable in the docs that the code does not know."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gcurun.config.resolve import resolve_settings, runtime_environment
from gcurun.config.schema import KEYS, KEYS_BY_PATH, OLD_ENVIRON_NAMES, old_variable_notices
from gcurun.runtime.settings import parse_runtime_env

ROOT = Path(__file__).resolve().parents[2]
# Settings without an option of their own: their variable is the name the option would have.
WITHOUT_OPTION = {"runtime.backend", "runtime.timeout_seconds", "ssh.known_hosts"}


def run_options() -> set[str]:
    from gcurun.cli.run import run

    return {opt for param in run.params for opt in (*param.opts, *param.secondary_opts)}


def test_every_settings_variable_is_gcurun_and_its_options_name():
    options = run_options()
    for key in KEYS:
        if key.environ_name is None:
            continue
        assert key.environ_name == "GCURUN_" + key.option.lstrip("-").upper().replace("-", "_")
        assert (key.option in options) != (key.path in WITHOUT_OPTION), key.path


@pytest.mark.parametrize("path, new", [
    ("mpi.network_interface", "GCURUN_NETWORK_INTERFACE"),
    ("mpi.mpirun", "GCURUN_MPIRUN"),
    ("ssh.port", "GCURUN_SSH_PORT"),
    ("runtime.cycle_time_ms", "GCURUN_CYCLE_TIME_MS"),
    ("runtime.timeline", "GCURUN_TIMELINE_FILENAME"),
    ("elastic.min_np", "GCURUN_MIN_NP"),
    ("elastic.timeout", "GCURUN_ELASTIC_TIMEOUT"),
])
def test_names_by_the_rule(path, new):
    assert KEYS_BY_PATH[path].environ_name == new


def test_the_launcher_and_the_ranks_read_one_name_for_the_network_between_hosts():
    # The launcher's variable is the one the ranks' tcp backend reads.
    settings = resolve_settings({}, None, {"GCURUN_NETWORK_INTERFACE": "10.0.0.0/24"})
    assert settings.mpi.network_interface == "10.0.0.0/24"
    assert parse_runtime_env({"GCURUN_NETWORK_INTERFACE": "10.0.0.0/24"}).network_interface \
        is not None


# A good value for each renamed key, and what makes the job elastic where the key needs it.
OLD_VALUES = {
    "ssh.host_key_policy": "off", "ssh.python": "/e/python", "ssh.config_file": "/e/cfg",
    "mpi.mpirun": "e-mpirun", "mpi.network_interface": "ib0", "runtime.timeline": "e.json",
    "elastic.min_np": "1", "elastic.max_np": "4", "elastic.host_discovery_script": "e.sh",
    "elastic.slots": "2", "elastic.reset_limit": "3", "elastic.blacklist_cooldown_range": "5 6",
}
ELASTIC = {"GCURUN_HOST_DISCOVERY_SCRIPT": "find-hosts"}


@pytest.mark.parametrize("old, path", sorted(OLD_ENVIRON_NAMES.items()))
def test_an_old_name_is_still_read_below_the_new_one(old, path):
    new = KEYS_BY_PATH[path].environ_name
    assert new is not None and new != old
    job = {"GCURUN_MIN_NP": "1"} if path == "elastic.host_discovery_script" else \
        ELASTIC if path.startswith("elastic.") else {}
    settings = resolve_settings({}, None, {**job, old: OLD_VALUES[path]})
    assert settings.sources[path] == f"env:{old}"
    both = resolve_settings({}, None, {**job, old: OLD_VALUES[path], new: OLD_VALUES[path]})
    assert both.sources[path] == f"env:{new}"


def test_old_names_get_a_notice_to_rename_them(capsys):
    assert old_variable_notices({"GCURUN_MPI_NETWORK_INTERFACE": "eth0", "GCURUN_NP": "2"}) == [
        "GCURUN_MPI_NETWORK_INTERFACE is the old name of GCURUN_NETWORK_INTERFACE; rename it "
        "(the old name will stop working in a later release)"]
    assert old_variable_notices({"GCURUN_TIMELINE": " "}) == []


def test_the_cli_prints_the_notice(capsys, monkeypatch):
    from gcurun.cli.main import main

    monkeypatch.setenv("GCURUN_MPI_MPIRUN", "mpirun")
    with pytest.raises(SystemExit) as done:
        main(["-np", "1", "--dry-run", "true"])
    err = capsys.readouterr().err
    assert done.value.code == 0, err
    assert ("gcurun: note: GCURUN_MPI_MPIRUN is the old name of GCURUN_MPIRUN; rename it (the "
            "old name will stop working in a later release)\n") in err


def test_the_ranks_read_the_timelines_new_name_and_its_old_one():
    assert runtime_environment(resolve_settings({"runtime.timeline": "t.json"}, None, {})
                               .runtime)["GCURUN_TIMELINE_FILENAME"] == "t.json"
    assert parse_runtime_env({"GCURUN_TIMELINE": "old.json"}).timeline == "old.json"
    assert parse_runtime_env({"GCURUN_TIMELINE": "old.json",
                              "GCURUN_TIMELINE_FILENAME": "new.json"}).timeline == "new.json"


_NAME = re.compile(r"\b(?:GCURUN|HOROVOD)_[A-Z0-9_]*[A-Z0-9](?![A-Za-z0-9_*])")


def known_names() -> set[str]:
    """Every GCURUN_*/HOROVOD_* name the code knows: written in its source (the package,
    its tests and benchmarks) or made by the naming rule."""
    text = "\n".join(p.read_text(encoding="utf-8", errors="replace")
                     for folder in ("gcurun", "tests", "benchmarks")
                     for p in (ROOT / folder).rglob("*.py"))
    names = set(_NAME.findall(text))
    return names | {key.environ_name for key in KEYS if key.environ_name}


def test_every_variable_the_docs_name_exists_in_the_code():
    docs = [*sorted((ROOT / "docs").rglob("*.md")), *sorted(ROOT.glob("README*.md"))]
    known = known_names()
    unknown = sorted({f"{path.relative_to(ROOT)}: {name}" for path in docs
                      for name in _NAME.findall(path.read_text(encoding="utf-8"))
                      if name not in known})
    assert unknown == []


def test_the_configuration_page_lists_every_settings_variable_and_old_name():
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    for key in KEYS:
        if key.environ_name:
            assert f"| `{key.option}` | `{key.environ_name}` | `{key.path}` |" in page
    for old, path in OLD_ENVIRON_NAMES.items():
        assert f"| `{old}` | `{KEYS_BY_PATH[path].environ_name}` |" in page
