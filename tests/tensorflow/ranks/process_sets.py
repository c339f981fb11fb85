"""Rank script (3 ranks or more): collectives of gcurun.runtime.tensorflow on a process
set, eagerly, in ``tf.function`` and in a TF1 session, and DistributedGradientTape
restricted to a set. Roots are ranks of the job (Horovod's convention). Needs a runtime
with process sets (``gcurun.runtime.add_process_set``). Prints one summary line per
rank."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import gcurun.runtime.tensorflow as hvd  # noqa: E402
from tests.helpers import Tally  # noqa: E402


def main() -> None:
    hvd.init()
    r, p = hvd.rank(), hvd.size()
    checks = Tally(r, p)
    members = [k for k in range(p) if k % 2 == 0]
    even = hvd.add_process_set(members)
    checks.ok(even.included() == (r in members), "included()")
    set_id = even.process_set_id
    checks.ok(int(hvd.size_op(process_set_id=set_id)) == len(members), "size_op of a set")
    checks.ok(int(hvd.process_set_included_op(process_set_id=set_id)) == (r in members),
              "process_set_included_op of a set")
    mine = tf.fill([2, 3], float(r + 1))
    want_sum = float(sum(k + 1 for k in members))
    if r in members:
        got = hvd.allreduce(mine, op=hvd.Sum, process_set=even)
        checks.ok(np.all(got.numpy() == want_sum), f"eager allreduce on a set: {got}")
        gathered = hvd.allgather(tf.fill([r + 1], r), process_set=even)
        checks.ok(gathered.numpy().tolist() == [k for k in members for _ in range(k + 1)],
                  f"allgather on a set: {gathered}")
        root = members[-1]
        got = hvd.broadcast(mine, root_rank=root, process_set=even)
        checks.ok(np.all(got.numpy() == root + 1), "broadcast on a set from a job rank")

        @tf.function
        def step(x: tf.Tensor) -> tf.Tensor:
            return hvd.grouped_allreduce([x, 2 * x], op=hvd.Sum, process_set=even)[1]

        checks.ok(np.all(step(mine).numpy() == 2 * want_sum), "tf.function on a set")
        with tf.Graph().as_default():
            reduced = [hvd.allreduce(tf.fill([k + 1], float(r)), op=hvd.Sum,
                                     process_set=even) for k in range(6)]
            with tf.compat.v1.Session() as session:
                out = session.run(reduced)
        checks.ok(all(np.all(o == sum(members)) for o in out), "a TF1 session on a set")
        v = tf.Variable(tf.fill([3], float(r)))
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(v * v)
        grad = hvd.DistributedGradientTape(tape, process_set=even).gradient(loss, v)
        checks.ok(np.allclose(grad.numpy(), 2 * np.mean(members)),
                  f"DistributedGradientTape averages over the set: {grad}")
    else:
        try:
            hvd.allreduce(mine, process_set=even)
        except (ValueError, tf.errors.OpError) as exc:
            checks.ok(True, f"a non-member is refused: {exc}")
        else:
            checks.ok(False, "a non-member ran a set's collective")
    hvd.barrier()
    checks.ok(hvd.remove_process_set(even), "remove_process_set")
    print(f"rank {r} of {p} ok ({checks.count} checks)", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
