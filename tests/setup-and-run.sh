#!/usr/bin/env bash
# Install what the test suite needs on a fresh Debian/Ubuntu machine (as root), then run it.
#   system: openssh-server (sshd for the namespace hosts), iproute2 (ip netns), numactl
#   python: gcurun with its dev and tensorflow extras (pytest, pytest-timeout, ruff, mypy;
#           tensorflow-cpu, with Keras 3), torch 2.13.0 (CPU)
set -euo pipefail
cd "$(dirname "$0")/.."
if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    missing=""
    for tool in sshd:openssh-server ip:iproute2 numactl:numactl; do
        command -v "${tool%%:*}" >/dev/null || [ -x "/usr/sbin/${tool%%:*}" ] \
            || missing="$missing ${tool#*:}"
    done
    if [ -n "$missing" ]; then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
    fi
fi
python3 -m pip install -q -e '.[dev,tensorflow]'
# The CPU build of PyTorch for the tests of gcurun.runtime.torch (pinned: an unpinned torch
# pulls several GB of CUDA packages).
python3 -m pip install -q torch==2.13.0
ruff check .
mypy
python3 -m pytest -q "$@"
