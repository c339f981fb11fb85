#!/usr/bin/env bash
# The run.sh of Horovod_gcu's TensorFlow recipe: what each rank runs when the job is started
# by mpirun, e.g.  gcurun --mpi -np 2 --bind-to numa bash examples/tensorflow_v1_run.sh
# PYTHON picks the interpreter (default: python3 on PATH); arguments go to the script.
set -euo pipefail
exec "${PYTHON:-python3}" "$(dirname "$0")/tensorflow_v1_train.py" "$@"
