"""Each launcher is one kind object, asked by prepare, execute and the CLI: every
registered kind answers the whole interface, and what differs between launchers is in
the kinds' answers, not in names compared elsewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import gcurun
from gcurun.config.api import Settings
from gcurun.errors import LaunchError, PlanError
from gcurun.hosts.api import HostSpec
from gcurun.launch.kinds import KINDS, LauncherKind, PreparedJob, Preview, launcher_kind
from gcurun.launch.planning.plan import build_plan

PACKAGE = Path(gcurun.__file__).parent


@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_registered_kind_answers_the_interface(name):
    kind = launcher_kind(name)
    assert isinstance(kind, LauncherKind) and kind.name == name
    assert type(kind).rank_groups is not LauncherKind.rank_groups
    for flag in ("needs_rendezvous", "own_launcher", "this_host_only", "connects_hosts",
                 "login_forwarding", "accepts_preflight_option"):
        assert isinstance(getattr(kind, flag), bool), flag
    assert launcher_kind(name) is kind      # chosen once, by name


def test_the_kinds_answer_what_the_launchers_did():
    answers = {name: (k.needs_rendezvous, k.own_launcher, k.this_host_only,
                      k.connects_hosts, k.login_forwarding, k.accepts_preflight_option)
               for name in sorted(KINDS) for k in [launcher_kind(name)]}
    assert answers == {
        "local": (True, True, True, False, False, True),
        "mpi": (False, False, False, False, False, False),
        "slurm": (True, False, False, False, True, True),
        "ssh": (True, True, False, True, False, True),
    }


def test_an_unknown_launcher_is_refused_with_the_known_ones():
    with pytest.raises(LaunchError, match=r"launcher 'ray' is not available in this "
                                          r"build; use one of: local, mpi, slurm, ssh"):
        launcher_kind("ray")


def test_gcurun_own_launchers_preview_nothing_and_bind_offline_ranks_as_before():
    plan = build_plan([HostSpec("localhost", 2)], ["true"], local_names={"localhost"})
    job = PreparedJob(plan, Settings(bind_to="none"))
    assert job.kind is launcher_kind("local")
    assert job.kind.preview(job) == Preview()
    assert job.kind.unbound_text(job) == "not bound"
    assert not job.remote_unbound
    remote = build_plan([HostSpec("localhost", 1), HostSpec("far", 1)], ["true"],
                        local_names={"localhost"})
    offline = PreparedJob(remote, Settings(bind_to="core"))
    assert offline.kind is launcher_kind("ssh") and offline.remote_unbound
    assert offline.kind.unbound_text(offline) == "after the ssh preflight"


def test_the_local_kind_refuses_a_remote_host():
    plan = build_plan([HostSpec("localhost", 1), HostSpec("far", 1)], ["true"],
                      local_names={"localhost"}, launcher="local")
    with pytest.raises(PlanError, match="the local launcher starts ranks on this host "
                                        "only, but host 'far' is not this host"):
        launcher_kind("local").check_hosts(plan)
    launcher_kind("ssh").check_hosts(plan)


# Option parsing that maps a horovodrun flag to a kind's name (--jsrun runs as --mpi).
FLAG_TO_NAME = ('launcher not in (None, "mpi")',)


def test_no_launcher_name_is_compared_outside_the_registry():
    compared = re.compile(r"launcher\s*(==|!=|in\s*\(|not\s+in\s*\()")
    found = [f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
             for path in sorted(PACKAGE.rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if compared.search(line) and not line.strip().startswith("for ")
             and not any(ok in line for ok in FLAG_TO_NAME)]
    assert found == []
