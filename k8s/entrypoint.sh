#!/bin/sh
# The training image's entrypoint: host keys of this pod's own, then the pod's command
# (`/usr/sbin/sshd -De` in a worker, `gcurun -np N ...` in the launcher).
set -e
ssh-keygen -A >/dev/null
exec "$@"
