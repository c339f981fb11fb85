"""Rank script: two threads each call ``argv[1]`` unnamed allreduces (sums) at once, of
values that tell the threads apart; every call either returns the right sum or raises,
never a sum of another thread's tensors. Each thread prints its tally; then the main
thread checks that named ops still work, with both threads' ops done."""

from __future__ import annotations

import sys
import threading

import numpy as np

import gcurun.runtime as hvd


def main() -> None:
    calls = int(sys.argv[1])
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    tallies: dict[str, list] = {}
    start = threading.Barrier(2)

    def work(value: float) -> None:
        right, wrong, errors = 0, 0, []
        start.wait()
        for _ in range(calls):
            try:
                got = hvd.allreduce(np.full(4, value), op=hvd.Sum)
            except hvd.ArgumentError as exc:
                errors.append(str(exc).replace("\n", " "))
                continue
            if got.tolist() == [value * size] * 4:
                right += 1
            else:
                wrong += 1
        tallies[threading.current_thread().name] = [right, wrong, errors]

    threads = [threading.Thread(target=work, args=(value,), name=f"worker-{value:g}")
               for value in (1.0, 1000.0)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for name, (right, wrong, errors) in sorted(tallies.items()):
        print(f"rank {rank} {name}: right={right} wrong={wrong} errors={len(errors)}",
              flush=True)
        if errors:
            print(f"rank {rank} {name} first error: {errors[0]}", flush=True)
    got = hvd.allreduce(np.ones(2), op=hvd.Sum, name="after.threads")
    print(f"rank {rank} then named: {got.tolist()}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
