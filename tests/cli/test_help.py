"""``gcurun --help`` by groups, ``gcurun help TOPIC`` and one error style for bad input
(click's own usage errors included)."""

from __future__ import annotations

import pytest

from gcurun.cli.help import GROUPS, PROFILES, topics
from gcurun.cli.main import main


def gcurun(capsys, *args: str) -> tuple[int, str, str]:
    """Run gcurun in this process; (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as done:
        main(list(args))
    out = capsys.readouterr()
    return done.value.code, out.out, out.err


def test_every_option_of_the_run_command_is_in_exactly_one_group():
    from gcurun.cli.run import run

    listed = [name for group in GROUPS for name in group.params]
    assert len(listed) == len(set(listed))
    options = {p.name for p in run.params if p.param_type_name == "option"} | {"help"}
    assert set(listed) == options


def test_help_lists_the_options_under_their_groups(capsys):
    code, out, err = gcurun(capsys, "--help")
    assert (code, err) == (0, "")
    headings = [line for line in out.splitlines() if "(gcurun help" in line
                and not line.startswith(" ")]
    assert headings == [f"{g.title} (gcurun help {g.topic}):" for g in GROUPS]
    ssh = out.index("SSH (gcurun help ssh)")
    assert out.index("--ssh-port") > ssh > out.index("--mpirun")


def test_a_group_topic_shows_that_groups_options_alone(capsys):
    code, out, err = gcurun(capsys, "help", "elastic")
    assert (code, err) == (0, "")
    assert out.startswith("Elastic jobs: jobs that shrink and grow with their hosts.\n")
    assert "--min-np" in out and "--host-discovery-script" in out
    assert "--ssh-port" not in out


@pytest.mark.parametrize("topic, first", [
    ("environment", "Environment variables."),
    ("exit-codes", "Exit codes of gcurun:"),
    ("profiles", "Profiles: a YAML file of settings for a cluster, given with --profile FILE or"),
    ("check", "Usage: gcurun check [OPTIONS]"),
    ("run", "Usage: gcurun [OPTIONS] [COMMAND]..."),
])
def test_text_and_subcommand_topics(capsys, topic, first):
    code, out, err = gcurun(capsys, "help", topic)
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == first


def test_every_listed_topic_answers(capsys):
    for topic, _ in topics():
        code, out, _ = gcurun(capsys, "help", topic)
        assert code == 0 and out, topic


def test_an_unknown_topic_is_bad_input_listing_the_topics(capsys):
    code, out, err = gcurun(capsys, "help", "hostz")
    assert (code, out) == (2, "")
    lines = err.splitlines()
    assert lines[0] == ("gcurun: error: help topic 'hostz' is unknown; write gcurun help "
                        "TOPIC with one of these topics:")
    assert "  hosts        where ranks run and how they start" in lines


def test_the_environment_topic_names_every_settings_variable(capsys):
    from gcurun.config.schema import KEYS

    _, out, _ = gcurun(capsys, "help", "environment")
    for key in KEYS:
        if key.environ_name:
            assert f"{key.option:<30} {key.environ_name:<36} {key.path}" in out


def test_the_profile_in_the_profiles_topic_loads():
    from gcurun.config.profile import parse_profile

    text = PROFILES.split("\n\n")[1]
    example = "\n".join(line[2:] for line in text.splitlines())
    profile = parse_profile(example, "two-nodes.yaml")
    assert profile.values["runtime.fusion_threshold_mb"] == 32
    assert profile.values["mpi.network_interface"] == "10.0.0.0/24"


@pytest.mark.parametrize("args, message", [
    (("--horovod-alias", "yes", "true"),
     "--horovod-alias: 'yes' is not one of 'off', 'on', 'force'; write one of off, on, force"),
    (("-np", "x", "true"), "-np: 'x' is not a valid integer; write a whole number"),
    (("--grace-seconds", "soon", "true"),
     "--grace-seconds: 'soon' is not a valid float; write a number"),
    (("-np",), "option '-np' needs a value; write -np N"),
    (("--blacklist-cooldown-range", "1"),
     "option '--blacklist-cooldown-range' needs 2 values; write --blacklist-cooldown-range "
     "MIN MAX"),
    (("--blacklist-cooldown-range", "1", "y", "true"),
     "--blacklist-cooldown-range: 'y' is not a valid integer; write MIN MAX: 2 whole numbers"),
    (("--cache-capacity", "-1", "true"),
     "--cache-capacity: -1 is not in the range x>=0; write a number in that range"),
    (("--no-such-thing", "true"),
     "no such option '--no-such-thing'; gcurun --help lists the options"),
    (("check", "--accelerator", "gpu"),
     "--accelerator: 'gpu' is not one of 'gcu', 'cuda', 'rocm', 'ascend', 'mlu', 'none'; "
     "write one of gcu, cuda, rocm, ascend, mlu, none"),
    (("bench",), "argument WHAT is missing; write one of allreduce"),
    (("timeline", "summary"), "argument PATH is missing; give a path to a file"),
    (("timeline", "sumary"), "no such command 'sumary'; did you mean 'summary'?"),
    (("timeline", "summary", "t.json", "extra"),
     "got unexpected extra argument (extra); gcurun timeline summary --help shows the usage"),
])
def test_bad_input_has_one_style_and_exit_code_2(capsys, args, message):
    code, out, err = gcurun(capsys, *args)
    assert (code, out, err) == (2, "", f"gcurun: error: {message}\n")
