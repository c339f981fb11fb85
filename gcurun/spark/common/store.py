"""Where an Estimator keeps what it writes: Horovod's ``Store``.

A store holds the DataFrames an Estimator materialised for training (Parquet), and for
every run (a ``run_id``) its checkpoints and logs:

    <prefix>/intermediate_train_data.<idx>/part-*.parquet
    <prefix>/intermediate_val_data.<idx>/part-*.parquet
    <prefix>/runs/<run_id>/checkpoint.<ext>      the last epoch's model and optimizer
    <prefix>/runs/<run_id>/checkpoint.json       its epoch and the history so far
    <prefix>/runs/<run_id>/logs/metrics.jsonl    one line per epoch

``Store.create(path)`` picks the implementation from the path. The ranks read and write
through the store object itself (it is pickled to them), so an implementation holds only
what pickles: paths, no open handles. ``LocalStore`` is a directory every rank can reach
(one host, or a file system the hosts share); a store on HDFS or DBFS is another subclass
of ``Store`` that implements its few primitives (``exists``, ``read``, ``write``, ``delete``,
``list``, ``local_path``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

TRAIN_DATA = "intermediate_train_data"
VAL_DATA = "intermediate_val_data"
TEST_DATA = "intermediate_test_data"
RUNS = "runs"
LOGS = "logs"
CHECKPOINT = "checkpoint"
# Schemes a later store would serve; LocalStore takes file:// and plain paths only.
OTHER_SCHEMES = ("hdfs://", "dbfs:/", "s3://", "s3a://", "gs://", "abfs://")


class Store:
    """Horovod's Store interface: the paths of an Estimator's data and runs, and the file
    operations the driver and the ranks need on them. Subclasses implement the primitives
    below ``# primitives``; the path layout is shared."""

    def __init__(self, prefix_path: str, train_path: str | None = None,
                 val_path: str | None = None, test_path: str | None = None,
                 runs_path: str | None = None, save_runs: bool = True,
                 checkpoint_filename: str | None = None) -> None:
        self.prefix_path = prefix_path
        self._train_path = train_path or self.join(prefix_path, TRAIN_DATA)
        self._val_path = val_path or self.join(prefix_path, VAL_DATA)
        self._test_path = test_path or self.join(prefix_path, TEST_DATA)
        self._runs_path = runs_path or self.join(prefix_path, RUNS)
        self._save_runs = save_runs
        self.checkpoint_filename = checkpoint_filename or CHECKPOINT

    @staticmethod
    def create(prefix_path: str, *args: Any, **kwargs: Any) -> Store:
        """The store for ``prefix_path``: a LocalStore for a plain path or ``file://`` URL.
        Raises ValueError for a scheme no store here serves yet (HDFS, DBFS, object stores)."""
        if prefix_path.startswith(OTHER_SCHEMES):
            raise ValueError(f"store path {prefix_path!r}: only local paths (or file:// URLs) "
                             "have a store in gcurun so far; give a directory every Spark "
                             "executor can reach, e.g. on a shared file system")
        return LocalStore(prefix_path, *args, **kwargs)

    # The layout (Horovod's names).
    def join(self, *parts: str) -> str:
        return "/".join(p.rstrip("/") for p in parts)

    def get_train_data_path(self, idx: Any = None) -> str:
        return self._train_path if idx is None else f"{self._train_path}.{idx}"

    def get_val_data_path(self, idx: Any = None) -> str:
        return self._val_path if idx is None else f"{self._val_path}.{idx}"

    def get_test_data_path(self, idx: Any = None) -> str:
        return self._test_path if idx is None else f"{self._test_path}.{idx}"

    def saving_runs(self) -> bool:
        return self._save_runs

    def get_runs_path(self) -> str:
        return self._runs_path

    def get_run_path(self, run_id: str) -> str:
        return self.join(self._runs_path, run_id)

    def get_checkpoint_path(self, run_id: str) -> str | None:
        """The directory of a run's checkpoints; None when the store keeps no runs."""
        return self.get_run_path(run_id) if self._save_runs else None

    def get_checkpoint_filename(self) -> str:
        return self.checkpoint_filename

    def get_checkpoints(self, run_id: str, suffix: str = ".ckpt") -> list[str]:
        """The paths of the run's files ending in ``suffix``, sorted."""
        path = self.get_checkpoint_path(run_id)
        if path is None or not self.exists(path):
            return []
        return sorted(self.join(path, n) for n in self.list(path) if n.endswith(suffix))

    def get_logs_subdir(self) -> str:
        return LOGS

    def get_logs_path(self, run_id: str) -> str | None:
        return self.join(self.get_run_path(run_id), LOGS) if self._save_runs else None

    def is_parquet_dataset(self, path: str) -> bool:
        """True when ``path`` is a directory holding Parquet files."""
        return self.exists(path) and any(n.endswith(".parquet") for n in self.list(path))

    def get_parquet_dataset(self, path: str) -> Any:
        """A pyarrow ParquetDataset of the files under ``path``."""
        import pyarrow.parquet as pq

        return pq.ParquetDataset(self.local_path(path))

    def parquet_files(self, path: str) -> list[str]:
        """The Parquet files of the dataset at ``path``, in name order (Spark's part
        numbers), as paths pyarrow opens."""
        return [os.path.join(self.local_path(path), n) for n in sorted(self.list(path))
                if n.endswith(".parquet")]

    def write_text(self, path: str, text: str) -> None:
        self.write(path, text.encode())

    def read_text(self, path: str) -> str:
        return self.read(path).decode()

    # primitives
    def exists(self, path: str) -> bool:
        raise NotImplementedError

    def read(self, path: str) -> bytes:
        raise NotImplementedError

    def write(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path`` whole: a reader sees the old file or the new one."""
        raise NotImplementedError

    def append_text(self, path: str, text: str) -> None:
        raise NotImplementedError

    def delete(self, path: str) -> None:
        """Remove ``path`` (a file or a directory tree); nothing when it does not exist."""
        raise NotImplementedError

    def list(self, path: str) -> list[str]:
        """The names in directory ``path``."""
        raise NotImplementedError

    def local_path(self, path: str) -> str:
        """``path`` as this machine's file API (pyarrow, open) takes it."""
        raise NotImplementedError

    def spark_path(self, path: str) -> str:
        """``path`` as Spark's DataFrameWriter takes it (a URL with its scheme)."""
        raise NotImplementedError


class LocalStore(Store):
    """A store in a local directory (``/data/run`` or ``file:///data/run``). Across hosts
    the directory must be one every executor reaches at the same path (NFS, a shared
    volume): Spark writes the training data from the executors and the ranks read it."""

    def __init__(self, prefix_path: str, *args: Any, **kwargs: Any) -> None:
        local = prefix_path[len("file://"):] if prefix_path.startswith("file://") else prefix_path
        super().__init__(os.path.abspath(local), *args, **kwargs)

    def exists(self, path: str) -> bool:
        return os.path.exists(self.local_path(path))

    def read(self, path: str) -> bytes:
        with open(self.local_path(path), "rb") as f:
            return f.read()

    def write(self, path: str, data: bytes) -> None:
        target = self.local_path(path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(temporary, target)
        except BaseException:
            if os.path.exists(temporary):
                os.unlink(temporary)
            raise

    def append_text(self, path: str, text: str) -> None:
        target = self.local_path(path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "a") as f:
            f.write(text)

    def delete(self, path: str) -> None:
        target = self.local_path(path)
        if os.path.isdir(target):
            shutil.rmtree(target, ignore_errors=True)
        elif os.path.exists(target):
            os.unlink(target)

    def list(self, path: str) -> list[str]:
        target = self.local_path(path)
        return sorted(os.listdir(target)) if os.path.isdir(target) else []

    def local_path(self, path: str) -> str:
        return path[len("file://"):] if path.startswith("file://") else path

    def spark_path(self, path: str) -> str:
        return "file://" + self.local_path(path)


# Horovod's other name for a store on a file system.
FilesystemStore = LocalStore

__all__ = ["FilesystemStore", "LocalStore", "Store"]
