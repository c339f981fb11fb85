"""Parsing YAML profiles: values, the lines they came from, and every error message."""

from __future__ import annotations

import textwrap

import pytest

from gcurun.config.profile import Profile, parse_profile, read_profile
from gcurun.errors import ProfileError, UsageError
from gcurun.hosts.api import HostSpec

SOURCE = "configs/x.yaml"


def parse(text: str, source: str = SOURCE) -> Profile:
    return parse_profile(textwrap.dedent(text), source)


def error(text: str) -> str:
    with pytest.raises(ProfileError) as info:
        parse(text)
    return str(info.value)


# -- values and lines ---------------------------------------------------------------------

def test_values_and_lines_of_every_kind():
    profile = parse("""\
        np: 16
        oversubscribe: true
        accelerator: cuda
        devices: [0, "1", 07]
        workdir: /srv/job
        grace_seconds: 2.5
        ssh:
          port: 2222
          user: train
        mpi:
          args: [--mca, btl, "tcp,self"]
        runtime:
          fusion_threshold_mb: 32
          timeline_mark_cycles: yes
        """)
    assert profile.values == {
        "np": 16, "oversubscribe": True, "accelerator": "cuda",
        "devices": ("0", "1", "07"), "workdir": "/srv/job", "grace_seconds": 2.5,
        "ssh.port": 2222, "ssh.user": "train", "mpi.args": ("--mca", "btl", "tcp,self"),
        "runtime.fusion_threshold_mb": 32.0, "runtime.timeline_mark_cycles": True,
    }
    assert profile.lines == {
        "np": 1, "oversubscribe": 2, "accelerator": 3, "devices": 4, "workdir": 5,
        "grace_seconds": 6, "ssh.port": 8, "ssh.user": 9, "mpi.args": 11,
        "runtime.fusion_threshold_mb": 13, "runtime.timeline_mark_cycles": 14,
    }
    assert profile.origin("ssh.port") == "profile:configs/x.yaml:8"


def test_empty_or_comment_only_profile_sets_nothing():
    assert parse("").values == {}
    assert parse("# nothing yet\n").values == {}


def test_words_that_yaml_reads_as_booleans_stay_words_for_choices():
    profile = parse("ssh:\n  host_key_policy: off\nbind_to: none\n")
    assert profile.values == {"ssh.host_key_policy": "off", "bind_to": "none"}


def test_null_keeps_optional_settings_empty_and_empty_lists_for_collections():
    profile = parse("""\
        np:
        runtime:
          timeline: null
        ssh:
          config_file: ~
        env:
        forward_env:
        """)
    assert profile.values == {"np": None, "runtime.timeline": None, "ssh.config_file": None,
                              "env": {}, "forward_env": ()}


def test_comma_strings_for_devices_and_forward_env():
    profile = parse("devices: 0, 1,2\nforward_env: PATH,LD_LIBRARY_PATH\n")
    assert profile.values == {"devices": ("0", "1", "2"),
                              "forward_env": ("PATH", "LD_LIBRARY_PATH")}


def test_mpi_args_string_is_split_like_a_shell():
    profile = parse("mpi:\n  args: --mca btl 'tcp,self' -x \"A B\"\n")
    assert profile.values["mpi.args"] == ("--mca", "btl", "tcp,self", "-x", "A B")


def test_numbers_written_in_exponent_form_are_numbers():
    profile = parse("runtime:\n  fusion_threshold_mb: 1e3\n  cycle_time_ms: 0.5\n")
    assert profile.values == {"runtime.fusion_threshold_mb": 1000.0,
                              "runtime.cycle_time_ms": 0.5}


def test_env_values_keep_their_text_and_lines():
    profile = parse("""\
        env:
          OMP_NUM_THREADS: 4
          RATIO: 1.50
          FLAG: true
          NAME: "x y"
        """)
    assert profile.values == {"env": {"OMP_NUM_THREADS": "4", "RATIO": "1.50",
                                      "FLAG": "true", "NAME": "x y"}}
    assert profile.lines == {"env": 1, "env.OMP_NUM_THREADS": 2, "env.RATIO": 3,
                             "env.FLAG": 4, "env.NAME": 5}


def test_relative_file_paths_are_taken_from_the_profile_folder():
    profile = parse("""\
        hostfile: hosts.txt
        ssh:
          identity_file: keys/id_ed25519
          known_hosts: /etc/cluster/known_hosts
          config_file: ~/.ssh/config
        output_dir: logs
        """, source="site/cluster.yaml")
    assert profile.values == {
        "hostfile": "site/hosts.txt", "ssh.identity_file": "site/keys/id_ed25519",
        "ssh.known_hosts": "/etc/cluster/known_hosts", "ssh.config_file": "~/.ssh/config",
        "output_dir": "logs",
    }


def test_anchors_and_aliases_are_followed():
    profile = parse("""\
        devices: &gcus [0, 1]
        hosts:
          - {name: a, devices: *gcus}
        """)
    assert profile.values["hosts"] == (HostSpec("a", slots=2, devices=("0", "1")),)


def test_host_mappings():
    profile = parse("""\
        hosts:
          - name: node1
            slots: 4
            user: train
            port: 2222
            python: /opt/venv/bin/python
            max_slots: 8
          - name: node2
            devices: [4, 5, 6]
          - name: "[fe80::1]"
          - {name: "fe80::2", slots: 2}
        """)
    assert profile.values["hosts"] == (
        HostSpec("node1", slots=4, user="train", port=2222, python="/opt/venv/bin/python",
                 max_slots=8),
        HostSpec("node2", slots=3, devices=("4", "5", "6")),
        HostSpec("fe80::1", slots=1),
        HostSpec("fe80::2", slots=2),
    )
    assert profile.lines["hosts"] == 1


def test_profile_errors_are_usage_errors():
    assert issubclass(ProfileError, UsageError)


# -- reading files ------------------------------------------------------------------------

def test_read_profile_names_the_file_as_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.yaml").write_text("np: 2\nbind_to: numa\n")
    profile = read_profile("p.yaml")
    assert profile.source == "p.yaml"
    assert profile.origin("bind_to") == "profile:p.yaml:2"


def test_read_profile_missing_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ProfileError) as info:
        read_profile(missing)
    assert str(info.value) == (f"profile '{missing}': cannot read it (No such file or "
                               "directory); check the path given to --profile or "
                               "GCURUN_PROFILE")


def test_read_profile_not_utf8(tmp_path):
    path = tmp_path / "latin.yaml"
    path.write_bytes(b"np: 2\n# caf\xe9\n")
    with pytest.raises(ProfileError) as info:
        read_profile(path)
    assert str(info.value) == f"{path}:2: byte 0xe9 is not UTF-8; save the file as UTF-8 text"


# -- unknown keys ---------------------------------------------------------------------------

def test_unknown_key_suggests_the_nearest_key_in_its_section():
    text = """\
        np: 8
        runtime:
          cycle_time_ms: 2
          fusion_treshold_mb: 32
        """
    assert error(text) == ("configs/x.yaml:4: runtime.fusion_treshold_mb: unknown key; "
                           "did you mean 'fusion_threshold_mb'?")


def test_unknown_top_level_key_suggests_the_nearest():
    assert error("np: 8\nacelerator: gcu\n") == (
        "configs/x.yaml:2: acelerator: unknown key; did you mean 'accelerator'?")


def test_misspelt_section_is_suggested():
    assert error("runtme:\n  cycle_time_ms: 2\n") == (
        "configs/x.yaml:1: runtme: unknown key; did you mean 'runtime'?")


def test_key_of_another_section_says_where_it_goes():
    assert error("np: 8\nport: 2222\n") == (
        "configs/x.yaml:2: port: unknown key; did you mean 'ssh.port'? it goes under 'ssh:'")
    assert error("runtime:\n  np: 8\n") == (
        "configs/x.yaml:2: runtime.np: unknown key; did you mean 'np'? "
        "it goes at the top level")
    assert error("ssh:\n  fusion_threshold_mb: 8\n") == (
        "configs/x.yaml:2: ssh.fusion_threshold_mb: unknown key; did you mean "
        "'runtime.fusion_threshold_mb'? it goes under 'runtime:'")


def test_unknown_key_without_a_near_one_lists_the_valid_keys():
    assert error("mpi:\n  flavour: openmpi\n") == (
        "configs/x.yaml:2: mpi.flavour: unknown key; valid keys here: args, mpirun, "
        "network_interface")


def test_unknown_host_key():
    assert error("hosts:\n  - name: a\n    slot: 8\n") == (
        "configs/x.yaml:3: hosts[0].slot: unknown key; did you mean 'slots'?")


def test_show_ranks_is_not_a_profile_key():
    assert error("show_ranks: [0]\n").startswith(
        "configs/x.yaml:1: show_ranks: unknown key; valid keys here: accelerator, bind_to,")


# -- wrong types and values ----------------------------------------------------------------

@pytest.mark.parametrize(("text", "message"), [
    ("np: eight", "1: np: expected an integer, got 'eight'"),
    ("np: 8.5", "1: np: expected an integer, got '8.5'"),
    ("np: true", "1: np: expected an integer, got 'true'"),
    ("np: [8]", "1: np: expected an integer, got a list"),
    ("np: 0", "1: np: expected an integer from 1 to 1048576, got '0'"),
    ("oversubscribe: 1", "1: oversubscribe: expected true or false, got '1'"),
    ("grace_seconds: soon", "1: grace_seconds: expected a number, got 'soon'"),
    ("grace_seconds: -1", "1: grace_seconds: expected a number from 0 to 86400, got '-1'"),
    ("grace_seconds: .inf", "1: grace_seconds: expected a number, got '.inf'"),
    ("grace_seconds: '5'", "1: grace_seconds: expected a number, got '5'"),
    ("grace_seconds:", "1: grace_seconds: expected a number, got nothing"),
    ("workdir: true", "1: workdir: expected a string, got 'true'"),
    ("workdir: {a: 1}", "1: workdir: expected a string, got a mapping"),
    ("workdir: ''", "1: workdir: expected a string, got ''"),
    ("hostfile: [a]", "1: hostfile: expected a file path, got a list"),
    ("ssh: 22", "1: ssh: expected a mapping of ssh settings, got '22'"),
    ("ssh:\n  port: 70000", "2: ssh.port: expected an integer from 1 to 65535, got '70000'"),
    ("ssh:\n  timeout: 0", "2: ssh.timeout: expected a number above 0 and at most 86400, got '0'"),
    ("runtime:\n  cycle_time_ms: 0", "2: runtime.cycle_time_ms: expected a number above 0 "
                                     "and at most 60000, got '0'"),
    ("runtime:\n  fusion_threshold_mb: -1",
     "2: runtime.fusion_threshold_mb: expected a number from 0 to 65536, got '-1'"),
    ("runtime:\n  timeline_mark_cycles: sometimes",
     "2: runtime.timeline_mark_cycles: expected true or false, got 'sometimes'"),
    ("devices: []", "1: devices: expected a list of device ids, got an empty list; give at "
                    "least one or remove the key"),
    ("devices: [0, [1]]", "1: devices[1]: expected a list of device ids, got a list"),
    ("devices: '0,,1'", "1: devices: '' is not a valid entry of a list of device ids"),
    ("devices: {a: 0}", "1: devices: expected a list of device ids, got a mapping"),
    ("forward_env: [PATH, 2FAST]",
     "1: forward_env: '2FAST' is not a valid entry of a list of environment variable names"),
    ("env: [A=1]", "1: env: expected a mapping of variable names to values, got a list"),
    ("env:\n  MY-VAR: 1", "2: env.MY-VAR: 'MY-VAR' is not a variable name; use letters, "
                          "digits and underscores, not starting with a digit"),
    ("env:\n  A:", "2: env.A: expected a value, got nothing; write '' for an empty value"),
    ("env:\n  A: [1, 2]", "2: env.A: expected a string, got a list"),
    ("mpi:\n  args: --mca 'btl", "2: mpi.args: cannot split '--mca 'btl' into arguments "
                                 "(No closing quotation); balance the quotes or write a list"),
    ("mpi:\n  args: {a: 1}", "2: mpi.args: expected a list of arguments or one string, "
                             "got a mapping"),
    ("mpi:\n  mpirun:", "2: mpi.mpirun: expected a string, got nothing"),
])
def test_wrong_values(text, message):
    assert error(text + "\n") == f"configs/x.yaml:{message}"


@pytest.mark.parametrize(("text", "message"), [
    ("accelerator: gpu", "1: accelerator: expected one of gcu, cuda, rocm, ascend, mlu, none, "
                         "got 'gpu'; did you mean 'gcu'?"),
    ("accelerator: 3", "1: accelerator: expected one of gcu, cuda, rocm, ascend, mlu, none, "
                       "got '3'"),
    ("launcher: srun", "1: launcher: expected one of local, ssh, mpi, slurm, got 'srun'"),
    ("launcher: mpirun", "1: launcher: expected one of local, ssh, mpi, slurm, got 'mpirun'; "
                         "did you mean 'mpi'?"),
    ("bind_to: numa-node", "1: bind_to: expected one of none, core, socket, numa, "
                           "got 'numa-node'; did you mean 'numa'?"),
    ("map_by: node", "1: map_by: expected one of slot, numa, socket, got 'node'"),
    ("map_by: [slot]", "1: map_by: expected one of slot, numa, socket, got a list"),
    ("ssh:\n  host_key_policy: accept_new",
     "2: ssh.host_key_policy: expected one of strict, accept-new, off, got 'accept_new'; "
     "did you mean 'accept-new'?"),
    ("runtime:\n  backend: nccl", "2: runtime.backend: expected one of mpi, tcp, got 'nccl'"),
    ("bind_to:", "1: bind_to: expected one of none, core, socket, numa, got nothing"),
])
def test_enumerated_values(text, message):
    assert error(text + "\n") == f"configs/x.yaml:{message}"


def test_the_line_is_that_of_the_bad_value():
    text = """\
        hosts:
          - name: a
          - name: b
            slots: many
        """
    assert error(text) == "configs/x.yaml:4: hosts[1].slots: expected an integer, got 'many'"


# -- structure ------------------------------------------------------------------------------

def test_bad_yaml_names_the_line():
    text = "np: 8\nssh:\n  port: 22\n user: x\n"
    assert error(text) == ("configs/x.yaml:4: not valid YAML: expected <block end>, but found "
                           "'<block mapping start>'; check the indentation and quoting there")


def test_tabs_are_bad_yaml():
    assert error("np: 8\nssh:\n\tport: 22\n").startswith(
        "configs/x.yaml:3: not valid YAML: found character '\\t' that cannot start any token")


def test_profile_must_be_a_mapping():
    assert error("- np: 8\n") == (
        "configs/x.yaml:1: a profile is a mapping of keys such as 'np: 8', got a list")


def test_only_one_document():
    assert error("np: 8\n---\nnp: 4\n") == (
        "configs/x.yaml:2: not valid YAML: expected a single document in the stream, but "
        "found another document; check the indentation and quoting there")


def test_duplicate_key():
    assert error("np: 8\nbind_to: numa\nnp: 16\n") == (
        "configs/x.yaml:3: np: given twice (first on line 1); keep one")
    assert error("ssh:\n  port: 1\n  port: 2\n") == (
        "configs/x.yaml:3: ssh.port: given twice (first on line 2); keep one")


def test_object_tags_are_refused():
    assert error("np: !!python/object/apply:os.getpid []\n") == (
        "configs/x.yaml:1: np: the tag 'tag:yaml.org,2002:python/object/apply:os.getpid' is "
        "not allowed in a profile; remove it")
    assert error("workdir: !custom x\n") == (
        "configs/x.yaml:1: workdir: the tag '!custom' is not allowed in a profile; remove it")


def test_merge_keys_are_refused():
    text = """\
        base: &b {slots: 8}
        """
    assert error(text).startswith("configs/x.yaml:1: base: unknown key")
    text = """\
        hosts:
          - &h {name: a, slots: 8}
          - {<<: *h, name: b}
        """
    assert error(text) == ("configs/x.yaml:3: hosts[1].<<: merge keys are not supported; "
                           "write the keys out")


def test_keys_must_be_names():
    assert error("[a]: 1\n") == "configs/x.yaml:1: a key must be a name, got a list"
    assert error("ssh:\n  ~: 1\n") == "configs/x.yaml:2: ssh: a key must be a name, got nothing"


# -- hosts ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "message"), [
    ("hosts: []", "1: hosts: expected at least one host, got an empty list; list the hosts "
                  "or remove the key to run on this host"),
    ("hosts: 8", "1: hosts: expected a list of hosts, got '8'"),
    ("hosts:\n  - 8", "2: hosts[0]: expected a host such as 'node1:8' or a mapping with "
                      "'name' and 'slots', got '8'"),
    ("hosts:\n  - [a, 8]", "2: hosts[0]: expected a host such as 'node1:8' or a mapping with "
                           "'name' and 'slots', got a list"),
    ("hosts:\n  - slots: 8", "2: hosts[0]: a host needs a 'name'; add 'name: <hostname>'"),
    ("hosts:\n  - name: a:8", "2: hosts[0].name: 'a:8' is not a host name; give the slots "
                              "as 'slots: N', not after a colon"),
    ("hosts:\n  - name: node[1-2]", "2: hosts[0].name: 'node[1-2]' is not a host name; give "
                                    "one name or address (ranges like node[1-4] are for the "
                                    "'node1:8' string form)"),
    ("hosts:\n  - name: u@a", "2: hosts[0].name: 'u@a' is not a host name; give one name or "
                              "address (ranges like node[1-4] are for the 'node1:8' string "
                              "form)"),
    ("hosts:\n  - {name: a, slots: 8, max_slots: 4}",
     "2: hosts[0].max_slots: 4 is below slots 8; raise max_slots or lower slots"),
    ("hosts:\n  - {name: a, slots: 0}",
     "2: hosts[0].slots: expected an integer from 1 to 1048576, got '0'"),
    ("hosts:\n  - {name: a, port: 0}",
     "2: hosts[0].port: expected an integer from 1 to 65535, got '0'"),
    ("hosts:\n  - name: a\n  - name: b\n  - name: a",
     "4: hosts[2]: host 'a' is listed twice (first on line 2); list each host once with all "
     "its slots"),
])
def test_host_errors(text, message):
    assert error(text + "\n") == f"configs/x.yaml:{message}"


def test_host_strings_use_the_host_spec_parser():
    profile = parse("""\
        hosts:
          - train@node[01-02]:8
          - "[fe80::1]:2"
          - name: node03
            slots: 4
        """)
    assert profile.values["hosts"] == (
        HostSpec("node01", slots=8, user="train"), HostSpec("node02", slots=8, user="train"),
        HostSpec("fe80::1", slots=2), HostSpec("node03", slots=4))


def test_hosts_as_one_string():
    assert parse("hosts: a:2, b\n").values["hosts"] == (HostSpec("a", slots=2),
                                                         HostSpec("b", slots=1))


def test_host_spec_errors_keep_the_parser_message_with_file_line_and_key():
    assert error("np: 2\nhosts:\n  - a:2\n  - node[3-1]:8\n") == (
        "configs/x.yaml:4: hosts[1]: host spec 'node[3-1]:8': range 3-1 runs backwards; "
        "write node[1-3]")
    assert error("hosts: a:x\n") == (
        "configs/x.yaml:1: hosts: host spec 'a:x': slots must be a whole number, got 'x'; "
        "write a:N with N at least 1")


def test_a_host_in_a_string_and_in_a_mapping_is_listed_twice():
    assert error("hosts:\n  - node[01-02]:8\n  - name: NODE02\n") == (
        "configs/x.yaml:3: hosts[1]: host 'NODE02' is listed twice (first on line 2); list "
        "each host once with all its slots")


def test_hosts_and_hostfile_together():
    assert error("hostfile: h.txt\nnp: 2\nhosts: a:2\n") == (
        "configs/x.yaml:3: hosts: 'hostfile' is given too (line 1); keep one of them")
