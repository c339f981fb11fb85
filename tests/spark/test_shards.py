"""The ranks' view of the materialised data: disjoint shards of row groups that together
are the whole dataset, and the same number of batches on every rank."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gcurun.spark.common import util
from gcurun.spark.common.store import LocalStore


def write_dataset(store, files, rows_per_file):
    path = store.get_train_data_path("t")
    os.makedirs(path)
    start = 0
    for i in range(files):
        ids = np.arange(start, start + rows_per_file)
        start += rows_per_file
        table = pa.table({"id": ids, "x": [list(map(float, [v, -v])) for v in ids]})
        pq.write_table(table, f"{path}/part-{i:05d}.parquet", row_group_size=5)
    return path


@pytest.mark.parametrize("files,size", [(4, 2), (3, 3), (1, 2), (1, 5)])
def test_the_shards_are_disjoint_and_cover_every_row(tmp_path, files, size):
    store = LocalStore(str(tmp_path))
    path = write_dataset(store, files, 10)
    shards = [util.read_shard(store, path, rank, size, ["id", "x"]) for rank in range(size)]
    ids = np.concatenate([s["id"] for s in shards])
    assert sorted(ids.tolist()) == list(range(files * 10))
    assert all(len(s["id"]) > 0 for s in shards)
    for shard in shards:
        assert shard["x"].shape == (len(shard["id"]), 2)
        np.testing.assert_array_equal(shard["x"][:, 0], shard["id"])
    assert util.count_rows(store, path) == files * 10


def test_every_rank_takes_the_same_steps_going_round_its_rows():
    steps = util.batches_per_epoch(rows=50, size=2, batch_size=8)
    assert steps == 4
    short = {"id": np.arange(5)}
    batches = list(util.epoch_batches(short, steps, 8, shuffle=True, seed=1))
    assert len(batches) == steps and all(len(b["id"]) == 8 for b in batches)
    assert set(np.concatenate([b["id"] for b in batches]).tolist()) == set(range(5))
    ordered = list(util.epoch_batches({"id": np.arange(20)}, 2, 8, shuffle=False, seed=0))
    assert [b["id"].tolist() for b in ordered] == [list(range(8)), list(range(8, 16))]


def test_validation_is_a_fraction_or_a_column():
    for good in (None, 0, 0.2, "is_val"):
        util.check_validation(good)
    with pytest.raises(ValueError, match=r"validation=1.5: give a fraction in \[0, 1\)"):
        util.check_validation(1.5)
