"""The Estimators' Store: Horovod's layout of data and runs under a prefix, files written
whole, checkpoints found and resumed from, and no store for a scheme gcurun cannot serve."""

from __future__ import annotations

import pytest

from gcurun.spark.common import training
from gcurun.spark.common.store import LocalStore, Store


def test_create_gives_a_local_store_for_paths_and_file_urls(tmp_path):
    for prefix in (str(tmp_path), f"file://{tmp_path}"):
        store = Store.create(prefix)
        assert isinstance(store, LocalStore)
        assert store.get_train_data_path(3) == f"{tmp_path}/intermediate_train_data.3"
        assert store.get_val_data_path() == f"{tmp_path}/intermediate_val_data"
        assert store.get_run_path("r") == f"{tmp_path}/runs/r"
        assert store.get_checkpoint_path("r") == f"{tmp_path}/runs/r"
        assert store.get_logs_path("r") == f"{tmp_path}/runs/r/logs"
        assert store.spark_path(store.get_train_data_path(1)) == \
            f"file://{tmp_path}/intermediate_train_data.1"


def test_create_refuses_a_scheme_it_has_no_store_for():
    with pytest.raises(ValueError, match=r"store path 'hdfs://nn:8020/x': only local paths"):
        Store.create("hdfs://nn:8020/x")


def test_files_are_written_whole_listed_and_deleted(tmp_path):
    store = LocalStore(str(tmp_path))
    path = store.join(store.get_run_path("r"), "a.ckpt")
    store.write(path, b"one")
    store.write(path, b"two")
    store.write_text(store.join(store.get_run_path("r"), "b.txt"), "text")
    assert store.read(path) == b"two"
    assert store.list(store.get_run_path("r")) == ["a.ckpt", "b.txt"]
    assert store.get_checkpoints("r") == [path]
    store.delete(store.get_run_path("r"))
    assert not store.exists(path) and store.get_checkpoints("r") == []


def test_a_run_without_saved_runs_has_no_checkpoint_path(tmp_path):
    store = LocalStore(str(tmp_path), save_runs=False)
    assert store.get_checkpoint_path("r") is None and store.get_logs_path("r") is None
    training.save_checkpoint(store, "r", "pt", training.Checkpoint(b"x", 1, {}))
    assert training.load_checkpoint(store, "r", "pt") is None


def test_a_checkpoint_comes_back_with_its_epochs_and_history_and_logs(tmp_path):
    store = LocalStore(str(tmp_path))
    assert training.load_checkpoint(store, "r", "pt") is None
    for epoch in (1, 2):
        history = {"loss": [0.9, 0.5][:epoch]}
        training.save_checkpoint(store, "r", "pt",
                                 training.Checkpoint(b"state%d" % epoch, epoch, history))
    last = training.load_checkpoint(store, "r", "pt")
    assert last == training.Checkpoint(b"state2", 2, {"loss": [0.9, 0.5]})
    logs = store.read_text(store.join(store.get_logs_path("r"), "metrics.jsonl"))
    assert logs.splitlines() == ['{"epoch": 1, "loss": 0.9}', '{"epoch": 2, "loss": 0.5}']
