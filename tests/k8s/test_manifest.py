"""`gcurun k8s manifest`: the MPIJob it writes, validated against the MPIJob CRD's
OpenAPI schema (kubeflow.org/v2beta1, vendored beside this file with its source)."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from gcurun.cli.k8s import k8s
from tests.helpers import run_gcurun

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
SCHEMA = yaml.load((HERE / "mpijob-v2beta1.schema.yaml").read_text(), Loader=yaml.CSafeLoader)


def manifest(*args: str) -> dict:
    result = CliRunner().invoke(k8s, ["manifest", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return yaml.safe_load(result.output)


def test_the_two_node_profile_makes_a_valid_mpijob():
    job = manifest("--profile", str(ROOT / "configs/two-nodes-ssh.yaml"), "--image",
                   "registry.example/train:1", "--queue", "training", "--priority-class",
                   "high", "--", "python", "train.py", "--epochs", "3")
    jsonschema.Draft7Validator(SCHEMA).validate(job)
    spec = job["spec"]
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v2beta1", "MPIJob")
    assert (spec["slotsPerWorker"], spec["sshAuthMountPath"]) == (8, "/root/.ssh")
    assert spec["runPolicy"] == {"cleanPodPolicy": "Running", "schedulingPolicy": {
        "minAvailable": 3, "queue": "training", "priorityClass": "high"}}
    launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert launcher["args"] == ["gcurun", "-np", "16", "python", "train.py", "--epochs", "3"]
    assert {"name": "GCURUN_BACKEND", "value": "tcp"} in launcher["env"]
    worker = spec["mpiReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 2
    container = worker["template"]["spec"]["containers"][0]
    assert container["args"] == ["/usr/sbin/sshd", "-De"]
    assert container["resources"] == {"limits": {"enflame.com/gcu": 8}}


def test_a_profile_without_hosts_makes_one_worker_of_np_slots(tmp_path):
    profile = tmp_path / "p.yaml"
    profile.write_text("np: 4\naccelerator: cuda\n")
    job = manifest("--profile", str(profile), "--image", "i", "--clean-pod-policy", "All",
                   "--worker-cpu", "16", "--worker-memory", "64Gi", "--name", "bert-1",
                   "--namespace", "ml", "--", "python", "t.py")
    jsonschema.Draft7Validator(SCHEMA).validate(job)
    assert job["metadata"] == {"name": "bert-1", "namespace": "ml"}
    assert (job["spec"]["slotsPerWorker"], job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"],
            job["spec"]["runPolicy"]["cleanPodPolicy"]) == (4, 1, "All")
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["resources"] == {"limits": {"nvidia.com/gpu": 4, "cpu": "16",
                                              "memory": "64Gi"}}


def test_the_schema_catches_what_the_operator_would_refuse():
    job = manifest("--profile", str(ROOT / "configs/two-nodes-ssh.yaml"), "--image", "i",
                   "--", "true")
    job["spec"]["slotsPerWorker"] = "8"
    with pytest.raises(jsonschema.ValidationError, match="'8' is not of type 'integer'"):
        jsonschema.Draft7Validator(SCHEMA).validate(job)
    job["spec"]["slotsPerWorker"] = 8
    del job["spec"]["mpiReplicaSpecs"]
    with pytest.raises(jsonschema.ValidationError, match="'mpiReplicaSpecs' is a required"):
        jsonschema.Draft7Validator(SCHEMA).validate(job)


def test_hosts_with_different_slots_are_refused_with_the_fix(tmp_path):
    profile = tmp_path / "p.yaml"
    profile.write_text("hosts: [a:8, b:4]\n")
    res = run_gcurun("k8s", "manifest", "--profile", str(profile), "--image", "i", "--",
                     "python", "t.py")
    assert res.returncode == 2
    assert res.stderr == ("gcurun: error: the profile's hosts have a:8, b:4 slots, but an "
                          "MPIJob gives every worker the same slotsPerWorker; give "
                          "--slots-per-worker N\n")
