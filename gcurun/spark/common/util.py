"""A DataFrame into the store as Parquet (on the driver), and back as each rank's shard
(on the ranks).

The driver selects the feature, label and sample-weight columns, turns Spark ML vectors
into arrays (Parquet has no vector type), splits off the validation rows, and has Spark
write both parts into the store, ``num_proc * partitions_per_process`` files each. A rank
reads the row groups ``rank, rank + size, ...`` of those files (every file's row groups in
part order), so the ranks read disjoint shards that together are the whole dataset; with
fewer row groups than ranks, each rank takes every ``size``-th row of the whole instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from gcurun.spark.common.store import Store


@dataclasses.dataclass(frozen=True)
class ColumnInfo:
    """What the ranks and the Model need to know of a column: its Spark type's name, how
    many values a row holds (1 for a scalar) and whether it was a Spark ML vector."""

    spark_type: str
    size: int
    is_vector: bool = False
    is_integral: bool = False


@dataclasses.dataclass(frozen=True)
class Dataset:
    """The materialised data of one fit."""

    idx: str
    train_path: str
    val_path: str | None
    train_rows: int
    val_rows: int
    metadata: dict[str, ColumnInfo]


def check_validation(validation: Any) -> None:
    """Raises ValueError unless ``validation`` is None, a fraction in [0, 1) or a column name."""
    if validation is None or isinstance(validation, str):
        return
    if isinstance(validation, (int, float)) and not isinstance(validation, bool) \
            and 0 <= validation < 1:
        return
    raise ValueError(f"validation={validation!r}: give a fraction in [0, 1) of the rows to "
                     "hold out, or the name of a column that is true on validation rows")


def to_list(value: Any, length: int) -> list[Any]:
    """``value`` as a list of ``length`` (one value repeated, or a list of that length).
    Raises ValueError for a list of another length."""
    if value is None:
        return [None] * length
    if not isinstance(value, (list, tuple)):
        return [value] * length
    if len(value) != length:
        raise ValueError(f"{len(value)} values given where {length} are needed "
                         "(one per label column)")
    return list(value)


def column_metadata(df: Any, columns: Sequence[str]) -> dict[str, ColumnInfo]:
    """Each column's ColumnInfo, its size read from the first row. Raises ValueError for a
    column the DataFrame lacks or of a type the Estimators cannot feed to a model."""
    from pyspark.ml.linalg import VectorUDT
    from pyspark.sql import types as T

    fields = {f.name: f.dataType for f in df.schema.fields}
    missing = [c for c in columns if c not in fields]
    if missing:
        raise ValueError(f"columns {missing} are not in the DataFrame (its columns: "
                         f"{sorted(fields)}); fix feature_cols / label_cols")
    first = df.select(*columns).head()
    if first is None:
        raise ValueError("the DataFrame has no rows; an Estimator needs data to fit")
    info = {}
    for name in columns:
        kind = fields[name]
        value = first[name]
        if isinstance(kind, VectorUDT):
            info[name] = ColumnInfo("VectorUDT", int(value.size), is_vector=True)
        elif isinstance(kind, T.ArrayType) and isinstance(kind.elementType, T.NumericType):
            info[name] = ColumnInfo(f"ArrayType({kind.elementType.simpleString()})",
                                    len(value), is_integral=isinstance(
                                        kind.elementType, T.IntegralType))
        elif isinstance(kind, (T.NumericType, T.BooleanType)):
            info[name] = ColumnInfo(type(kind).__name__, 1, is_integral=isinstance(
                kind, (T.IntegralType, T.BooleanType)))
        else:
            raise ValueError(f"column {name!r} is {kind.simpleString()}: an Estimator "
                             "takes numbers, arrays of numbers or Spark ML vectors")
    return info


def _as_parquet_columns(df: Any, metadata: dict[str, ColumnInfo], extra: list[str]) -> Any:
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    return df.select(*[vector_to_array(F.col(n)).alias(n) if info.is_vector else F.col(n)
                       for n, info in metadata.items()], *extra)


def _split(df: Any, validation: Any, seed: int) -> tuple[Any, Any | None]:
    from pyspark.sql import functions as F

    if validation is None or validation == 0:
        return df, None
    if isinstance(validation, str):
        flag = F.col(validation).cast("boolean")
        return df.filter(~flag), df.filter(flag)
    train, val = df.randomSplit([1.0 - float(validation), float(validation)], seed=seed)
    return train, val


def count_rows(store: Store, path: str) -> int:
    """Rows of the Parquet dataset at ``path`` (from the files' footers)."""
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in store.parquet_files(path))


@contextlib.contextmanager
def prepare_data(num_processes: int, store: Store, df: Any, label_columns: Sequence[str],
                 feature_columns: Sequence[str], validation: Any = None,
                 sample_weight_col: str | None = None, partitions_per_process: int = 10,
                 seed: int = 0) -> Iterator[Dataset]:
    """Write ``df``'s training (and validation) rows into ``store`` as Parquet and yield
    their Dataset; the files are deleted when the block ends. Raises ValueError for
    missing columns, a bad ``validation`` and fewer training rows than processes."""
    check_validation(validation)
    columns = [*feature_columns, *label_columns]
    if sample_weight_col:
        columns.append(sample_weight_col)
    metadata = column_metadata(df, list(dict.fromkeys(columns)))
    extra = [validation] if isinstance(validation, str) else []
    if extra:
        column_metadata(df, extra)
    train, val = _split(_as_parquet_columns(df, metadata, extra), validation, seed)
    if extra:
        train = train.drop(*extra)
        val = val.drop(*extra) if val is not None else None
    idx = uuid.uuid4().hex[:12]
    train_path = store.get_train_data_path(idx)
    val_path = store.get_val_data_path(idx) if val is not None else None
    partitions = max(1, num_processes * partitions_per_process)
    try:
        train.repartition(partitions).write.parquet(store.spark_path(train_path))
        if val is not None and val_path is not None:
            val.repartition(max(1, partitions // 2)).write.parquet(store.spark_path(val_path))
        dataset = Dataset(idx, train_path, val_path, count_rows(store, train_path),
                          count_rows(store, val_path) if val_path else 0, metadata)
        if dataset.train_rows < num_processes:
            raise ValueError(f"{dataset.train_rows} training rows for {num_processes} "
                             "processes: every process needs rows; give more data or "
                             "lower num_proc")
        yield dataset
    finally:
        store.delete(train_path)
        if val_path:
            store.delete(val_path)


def read_shard(store: Store, path: str, rank: int, size: int,
               columns: Sequence[str]) -> dict[str, np.ndarray]:
    """This rank's rows of the Parquet dataset at ``path``: one array per column, rows
    first (``(rows,)`` for a scalar column, ``(rows, n)`` for an array column)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = [pq.ParquetFile(f) for f in store.parquet_files(path)]
    groups = [(f, i) for f in files for i in range(f.num_row_groups)]
    if len(groups) >= size:
        tables = [f.read_row_group(i, columns=list(columns)) for f, i in groups[rank::size]]
        table = pa.concat_tables(tables)
    else:
        whole = pa.concat_tables([f.read(columns=list(columns)) for f in files])
        table = whole.take(list(range(rank, whole.num_rows, size)))
    return {name: _to_numpy(table.column(name)) for name in columns}


def _to_numpy(column: Any) -> np.ndarray:
    import numpy as np

    values = column.to_pylist()
    if values and isinstance(values[0], (list, tuple)):
        return np.asarray(values)
    return column.to_numpy()


def batches_per_epoch(rows: int, size: int, batch_size: int) -> int:
    """Steps each rank takes per epoch so that the ranks together see about every row
    once: every rank takes the same number (its collectives pair up with the others')."""
    return max(1, -(-rows // (size * batch_size)))


def epoch_batches(arrays: dict[str, np.ndarray], steps: int, batch_size: int,
                  shuffle: bool, seed: int) -> Iterator[dict[str, np.ndarray]]:
    """``steps`` batches of ``batch_size`` rows from ``arrays``, going round the rows as
    often as needed, in an order shuffled by ``seed`` when ``shuffle``."""
    import numpy as np

    rows = len(next(iter(arrays.values())))
    order = np.random.default_rng(seed).permutation(rows) if shuffle else np.arange(rows)
    needed = steps * batch_size
    order = np.resize(order, needed) if needed > rows else order
    for step in range(steps):
        picked = order[step * batch_size:(step + 1) * batch_size]
        yield {name: values[picked] for name, values in arrays.items()}
