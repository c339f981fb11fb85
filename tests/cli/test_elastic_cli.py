"""``gcurun --min-np ...``: elastic options are settings (command line, profile
``elastic:`` section, ``GCURUN_MIN_NP`` ...), and ``--dry-run`` shows an elastic job's first
rank plan as it shows a static job's."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from gcurun.cli.main import main
from tests.helpers import ROOT


def gcurun(capsys, *args: str) -> tuple[int, str, str]:
    """Run gcurun in this process; (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as done:
        main(list(args))
    out = capsys.readouterr()
    return done.value.code, out.out, out.err


@pytest.fixture
def hosts_script(tmp_path: Path) -> Path:
    script = tmp_path / "hosts.sh"
    script.write_text("#!/bin/sh\necho localhost:3\n")
    script.chmod(0o755)
    return script


def setting_rows(out: str) -> dict[str, tuple[str, str]]:
    """The settings table of a plan: key -> (value, source)."""
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0].startswith("elastic."):
            rows[parts[0]] = (" ".join(parts[1:-1]), parts[-1])
    return rows


def test_a_profile_elastic_section_is_a_setting_with_its_line(capsys, tmp_path, hosts_script):
    profile = tmp_path / "p.yaml"
    profile.write_text(f"np: 2\nelastic:\n  min_np: 1\n  max_np: 3\n"
                       f"  host_discovery_script: {hosts_script}\n  reset_limit: 4\n"
                       "  blacklist_cooldown_range: [5, 50]\n")
    code, out, err = gcurun(capsys, "--profile", str(profile), "--elastic-timeout", "30",
                            "--dry-run", "python3", "train.py")
    assert code == 0, err
    rows = setting_rows(out)
    assert rows == {
        "elastic.min_np": ("1", f"profile:{profile}:3"),
        "elastic.max_np": ("3", f"profile:{profile}:4"),
        "elastic.host_discovery_script": (str(hosts_script), f"profile:{profile}:5"),
        "elastic.slots": ("-", "default"),
        "elastic.reset_limit": ("4", f"profile:{profile}:6"),
        "elastic.timeout": ("30.0", "cli"),
        "elastic.blacklist_cooldown_range": ("5,50", f"profile:{profile}:7"),
    }


def test_the_environment_gives_elastic_settings_below_the_command_line(capsys, monkeypatch,
                                                                         hosts_script):
    monkeypatch.setenv("GCURUN_HOST_DISCOVERY_SCRIPT", str(hosts_script))
    monkeypatch.setenv("GCURUN_MIN_NP", "1")
    code, out, err = gcurun(capsys, "--min-np", "2", "--dry-run", "true")
    assert code == 0, err
    rows = setting_rows(out)
    assert rows["elastic.min_np"] == ("2", "cli")
    assert rows["elastic.host_discovery_script"] == (
        str(hosts_script), "env:GCURUN_HOST_DISCOVERY_SCRIPT")


def test_dry_run_shows_the_first_generations_rank_plan(capsys, hosts_script):
    code, out, err = gcurun(capsys, "--min-np", "1", "--max-np", "2",
                            "--host-discovery-script", str(hosts_script), "--dry-run",
                            "python3", "train.py")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[:5] == [
        "elastic job: localhost:3",
        "first generation: 2 ranks (min_np 1, max_np 2, start_np 1)",
        "launcher local, 2 ranks on 1 host(s), accelerator gcu (TOPS_VISIBLE_DEVICES: each "
        "rank sees its host's devices, its own at index LOCAL_RANK)",
        "rank  host       local  cross  node  device  visible  cpus  command",
        "0-1   localhost  0-1/2  0/1    0     0-1     0-1      -     python3 train.py",
    ]


def test_dry_run_json_gives_each_rank_its_elastic_environment(capsys, hosts_script):
    code, out, err = gcurun(capsys, "--min-np", "2", "--host-discovery-script",
                            str(hosts_script), "--dry-run", "--json", "true")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["elastic"]["hosts"] == ["localhost:3"]
    assert (plan["elastic"]["min_np"], plan["elastic"]["start_np"]) == (2, 2)
    assert [r["rank"] for r in plan["ranks"]] == [0, 1, 2]
    assert plan["env"]["GCURUN_ELASTIC"] == "1"
    assert [r["env"]["GCURUN_ELASTIC_WORKER"] for r in plan["ranks"]] == ["0", "1", "2"]
    assert plan["sources"]["elastic.min_np"] == "cli"


@pytest.mark.parametrize("text, message", [
    ("elastic:\n  min_nps: 2\n", "{p}:2: elastic.min_nps: unknown key; did you mean "
                                 "'min_np'?"),
    ("elastic:\n  min_np: 0\n", "{p}:2: elastic.min_np: expected an integer from 1 to "
                                "1048576, got '0'"),
    ("elastic:\n  timeout: soon\n", "{p}:2: elastic.timeout: expected a number, got "
                                    "'soon'"),
    ("elastic:\n  blacklist_cooldown_range: [50, 5]\n",
     "{p}:2: elastic.blacklist_cooldown_range: MIN 50 is above MAX 5; give MIN first"),
    ("elastic:\n  blacklist_cooldown_range: 5\n",
     "{p}:2: elastic.blacklist_cooldown_range: expected two integers MIN MAX, got '5'; "
     "write [MIN, MAX]"),
    ("elastic: 3\n", "{p}:1: elastic: expected a mapping of elastic settings, got '3'"),
])
def test_a_bad_elastic_section_is_bad_input(capsys, tmp_path, text, message):
    profile = tmp_path / "p.yaml"
    profile.write_text(text)
    code, out, err = gcurun(capsys, "--profile", str(profile), "--dry-run", "true")
    assert (code, out) == (2, "")
    assert err == "gcurun: error: " + message.format(p=profile) + "\n"


@pytest.mark.parametrize("low, high, problem", [
    ("0", "10", "the lower limit 0 cannot be lower than 1 s"),
    ("5", "4000", "the upper limit 4000 cannot be higher than 3600 s"),
    ("9", "5", "MIN is above MAX; give MIN first"),
])
def test_a_cooldown_range_out_of_horovods_bounds_is_bad_input(capsys, hosts_script, low,
                                                              high, problem):
    """The same words as RayExecutor(cooldown_range=...) (tests/ray/test_arguments.py)."""
    code, out, err = gcurun(capsys, "--min-np", "1", "--host-discovery-script",
                            str(hosts_script), "--blacklist-cooldown-range", low, high,
                            "--dry-run", "true")
    assert (code, out) == (2, "")
    assert err == f"gcurun: error: --blacklist-cooldown-range {low} {high}: {problem}\n"


def test_a_profiles_elastic_section_is_unused_by_a_static_job(capsys, tmp_path):
    """As the mpi section is unused by a local job: one profile serves both kinds."""
    profile = tmp_path / "p.yaml"
    profile.write_text("np: 2\nelastic:\n  reset_limit: 3\n  timeout: 60\n")
    code, out, err = gcurun(capsys, "--profile", str(profile), "--dry-run", "true")
    assert code == 0, err
    assert out.startswith("launcher local, 2 ranks on 1 host(s)")
    assert "elastic." not in out


def test_an_elastic_option_alone_on_the_command_line_is_refused(capsys):
    code, _, err = gcurun(capsys, "--max-np", "4", "--dry-run", "true")
    assert code == 2
    assert err == ("gcurun: error: --max-np applies to elastic jobs; add --min-np or "
                   "--host-discovery-script\n")


def test_bounds_from_a_profile_are_named_by_its_lines(capsys, tmp_path, hosts_script):
    profile = tmp_path / "p.yaml"
    profile.write_text(f"elastic:\n  min_np: 3\n  max_np: 2\n"
                       f"  host_discovery_script: {hosts_script}\n")
    code, _, err = gcurun(capsys, "--profile", str(profile), "--dry-run", "true")
    assert code == 2
    assert err == (f"gcurun: error: {profile}:3: elastic.max_np 2 is below {profile}:2: "
                   f"elastic.min_np 3; give {profile}:3: elastic.max_np of at least 3\n")


def test_cli_elastic_does_not_import_cli_job():
    """The elastic command takes what it shares with the static one from cli/console.py,
    so the imports between cli/job.py and cli/elastic.py run one way."""
    tree = ast.parse((ROOT / "gcurun" / "cli" / "elastic.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "gcurun.cli.job" not in imported
