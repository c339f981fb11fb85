#!/usr/bin/env bash
# Install what the test suite needs on a fresh Debian/Ubuntu machine (as root), then run it.
#   system: openssh-server (sshd for the namespace hosts), iproute2 (ip netns), numactl,
#           slurm-wlm and munge (a Slurm on the namespace hosts), libpmix-dev (srun --mpi=pmix)
#   python: gcurun with its dev and tensorflow extras (pytest, pytest-timeout, ruff, mypy;
#           tensorflow-cpu, with Keras 3; tf-keras, Keras 2), torch 2.13.0 (CPU), paddlepaddle 3.3.1 (CPU) and
#           jax 0.10.2 (their distributed modes under gcurun), ray 2.60.0 (gcurun.ray),
#           pyspark 4.3.0 (gcurun.spark; Spark's JVMs need openjdk-17-jre-headless)
set -euo pipefail
cd "$(dirname "$0")/.."
if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    missing=""
    for tool in sshd:openssh-server ip:iproute2 numactl:numactl slurmd:slurm-wlm munged:munge \
            java:openjdk-17-jre-headless; do
        command -v "${tool%%:*}" >/dev/null || [ -x "/usr/sbin/${tool%%:*}" ] \
            || missing="$missing ${tool#*:}"
    done
    # Slurm's PMIx plugin loads libpmix.so, which only the -dev package provides; the tests
    # start their own slurmd, after this.
    dpkg -s libpmix-dev >/dev/null 2>&1 || missing="$missing libpmix-dev"
    if [ -n "$missing" ]; then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
    fi
fi
python3 -m pip install -q -e '.[dev,tensorflow]'
# Keras 2 for Horovod's Keras 2 examples (TF_USE_LEGACY_KERAS=1), at TensorFlow's minor;
# --no-deps, since it requires the full "tensorflow" distribution, whose files are
# tensorflow-cpu's.
python3 -m pip install -q --no-deps tf-keras==2.21.0
# The CPU build of PyTorch for the tests of gcurun.runtime.torch (pinned: an unpinned torch
# pulls several GB of CUDA packages).
python3 -m pip install -q torch==2.13.0
# Paddle's and JAX's CPU builds (about a minute), for the tests of their own distributed
# modes under gcurun (tests/frameworks, tests/cluster/test_slurm_launch.py); those tests
# skip where a framework is missing, so a broken install must fail here.
python3 -m pip install -q paddlepaddle==3.3.1 jax==0.10.2
# Ray for gcurun.ray's tests on a local Ray (tests/ray).
python3 -m pip install -q ray==2.60.0
# Spark for gcurun.spark's tests (tests/spark: a local-cluster session; tests/cluster: a
# standalone cluster on the namespace hosts).
python3 -m pip install -q pyspark==4.3.0
python3 -c "import paddle, jax, ray, pyspark"
ruff check .
mypy
python3 -m pytest -q "$@"
