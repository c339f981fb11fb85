"""`gcurun bench allreduce` runs the benchmark as a real job and prints its table."""

from __future__ import annotations

import pytest

from tests.helpers import run_gcurun

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("mode,columns", [((), ["ring(tcp)"]),
                                         (("--mpi",), ["ring(mpi)", "ring(tcp)", "native"])])
def test_bench_allreduce_prints_a_table_per_size(mode, columns):
    res = run_gcurun("bench", "allreduce", *mode, "--min-bytes", "4096", "--max-bytes",
                     "8192", "--rounds", "1", "--seconds", "0.001", timeout=120)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert all(line.startswith("[0] ") for line in lines)  # rank 0 alone reports
    header = next(line for line in lines if "size" in line and "count" in line)
    assert [c for c in columns if c in header] == columns
    sizes = [line.split()[1] for line in lines if not line.startswith("[0] #")]
    assert sizes == ["8", "4096", "8192"]
