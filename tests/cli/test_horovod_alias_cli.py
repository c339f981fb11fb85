"""``--horovod-alias``, the profile's ``horovod_alias`` and ``GCURUN_HOROVOD_ALIAS``: one
setting (command line first), carried to every rank as ``GCURUN_HOROVOD_ALIAS``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gcurun.cli.main import main


def gcurun(capsys, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run gcurun in this process; (exit code, stdout, stderr)."""
    saved = dict(os.environ)
    os.environ.pop("GCURUN_HOROVOD_ALIAS", None)
    os.environ.update(env or {})
    try:
        with pytest.raises(SystemExit) as done:
            main(list(args))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    out = capsys.readouterr()
    return done.value.code, out.out, out.err


def planned(capsys, *args: str, env: dict[str, str] | None = None) -> tuple[str | None, str]:
    """(the ranks' GCURUN_HOROVOD_ALIAS, the setting's source) of a dry run."""
    code, out, err = gcurun(capsys, "--dry-run", "--json", "-np", "2", *args, "python", "x.py",
                            env=env)
    assert code == 0, err
    plan = json.loads(out)
    return plan["env"].get("GCURUN_HOROVOD_ALIAS"), plan["sources"].get("horovod_alias",
                                                                         "default")


def test_off_by_default_and_nothing_reaches_the_ranks(capsys) -> None:
    assert planned(capsys) == (None, "default")


def test_the_command_line_wins_over_profile_and_environment(capsys, tmp_path: Path) -> None:
    profile = tmp_path / "job.yaml"
    profile.write_text("horovod_alias: on\n")
    assert planned(capsys, "--horovod-alias", "force", "--profile", str(profile),
                   env={"GCURUN_HOROVOD_ALIAS": "off"}) == ("force", "cli")
    assert planned(capsys, "--profile", str(profile), env={"GCURUN_HOROVOD_ALIAS": "force"}) \
        == ("on", f"profile:{profile}:1")
    assert planned(capsys, env={"GCURUN_HOROVOD_ALIAS": "force"}) == (
        "force", "env:GCURUN_HOROVOD_ALIAS")


def test_off_on_the_command_line_overrides_what_the_ranks_would_inherit(capsys) -> None:
    assert planned(capsys, "--horovod-alias", "off", env={"GCURUN_HOROVOD_ALIAS": "on"}) == (
        "off", "cli")


def test_a_bad_value_is_refused_with_the_choices(capsys, tmp_path: Path) -> None:
    code, _, err = gcurun(capsys, "--horovod-alias", "yes", "python", "x.py")
    assert code == 2
    assert err == ("gcurun: error: --horovod-alias: 'yes' is not one of 'off', 'on', 'force'; "
                   "write one of off, on, force\n")
    code, _, err = gcurun(capsys, "python", "x.py", env={"GCURUN_HOROVOD_ALIAS": "yes"})
    assert (code, err) == (2, "gcurun: error: GCURUN_HOROVOD_ALIAS='yes': expected one of "
                              "off, on, force; fix the value or unset GCURUN_HOROVOD_ALIAS\n")
