"""Wall time of starting a trivial 2-rank Python job: gcurun beside mpirun, same run.

    python benchmarks/launch.py [--repeat 10] [--np 2]

Prints a table of the median and best wall time of each launcher and their ratio. Both
run `python -c pass`-like ranks that import nothing, so the figure is the launcher's own
cost plus two interpreter start-ups.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

RANK = [sys.executable, "-c", "import os; os.environ['RANK' if 'RANK' in os.environ else 'PATH']"]


def timed(argv: list[str], repeat: int, env: dict[str, str]) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env, timeout=120)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--np", type=int, default=2)
    args = parser.parse_args()
    env = dict(os.environ)
    np = str(args.np)
    runs = {"gcurun": [sys.executable, "-m", "gcurun", "-np", np, *RANK]}
    mpirun = shutil.which("mpirun")
    if mpirun:
        root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
        runs["mpirun"] = [mpirun, *root, "--oversubscribe", "-np", np, *RANK]
    print_table(time_all(runs, args.repeat, env))


def time_all(runs: dict[str, list[str]], repeat: int,
             env: dict[str, str]) -> dict[str, list[float]]:
    """Each command's wall times, after one warm-up run (page cache, hosts)."""
    results = {}
    for name, argv in runs.items():
        timed(argv, 1, env)
        results[name] = timed(argv, repeat, env)
    return results


def print_table(results: dict[str, list[float]]) -> None:
    """Median, best and the median's ratio to mpirun's, one launcher a row."""
    print(f"{'launcher':<10} {'median s':>10} {'best s':>10} {'ratio':>8}")
    base = statistics.median(results["mpirun"]) if "mpirun" in results else None
    for name, times in results.items():
        med = statistics.median(times)
        ratio = f"{med / base:.2f}" if base else "-"
        print(f"{name:<10} {med:>10.3f} {min(times):>10.3f} {ratio:>8}")


if __name__ == "__main__":
    main()
