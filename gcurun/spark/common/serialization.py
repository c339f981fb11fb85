"""Spark ML persistence of the trained Models (Horovod's
``horovod.spark.common.serialization``): ``model.write().overwrite().save(path)`` and
``TorchModel.load(path)`` / ``KerasModel.load(path)``.

A saved Model is Spark ML's layout, one JSON document in ``<path>/metadata`` (written and
read through Spark, so any path Spark writes to works: a local directory, HDFS, ...)
with the class, the uid, the Spark version and every param. Values JSON cannot hold (the
framework model, its optimizer, a loss function, the training data's column metadata)
are pickled with cloudpickle and base64-encoded; a Model class may encode a param its own
way (a Keras model as its ``.keras`` file). Loading unpickles: load only what you saved
or trust, as with any pickle.
"""

from __future__ import annotations

import base64
import json
import os
import time
from typing import Any

from pyspark.ml.util import MLReadable, MLReader, MLWritable, MLWriter

PICKLED = "cloudpickle"
FORMAT = 1


def encode(value: Any) -> dict[str, Any]:
    """``value`` as JSON: itself when JSON holds it unchanged, else pickled."""
    try:
        if json.loads(json.dumps(value)) == value:
            return {"json": value}
    except (TypeError, ValueError):
        pass
    import cloudpickle

    return {PICKLED: base64.b64encode(cloudpickle.dumps(value)).decode("ascii")}


def decode(item: dict[str, Any]) -> Any:
    """What :func:`encode` encoded."""
    if "json" in item:
        return item["json"]
    import pickle

    return pickle.loads(base64.b64decode(item[PICKLED]))


class PersistableModel(MLWritable, MLReadable):
    """Spark ML persistence for a Params class whose params hold everything it is.
    Subclasses may override :meth:`_encode_param` / :meth:`_decode_param` for a param
    that has a better form than a pickle; params are decoded in the order saved, the
    ``model`` param last (its decoding may need the others, e.g. custom objects)."""

    def write(self) -> MLWriter:
        """A writer that saves this Model (``.overwrite()`` replaces what is there)."""
        return ModelWriter(self)

    @classmethod
    def read(cls) -> MLReader:
        """A reader that loads a Model this class (or a subclass) saved."""
        return ModelReader(cls)

    def _encode_param(self, name: str, value: Any) -> dict[str, Any]:
        return encode(value)

    def _decode_param(self, name: str, item: dict[str, Any],
                      decoded: dict[str, Any]) -> Any:
        return decode(item)


class ModelWriter(MLWriter):
    """Writes ``<path>/metadata`` (see the module)."""

    def __init__(self, instance: Any) -> None:
        super().__init__()
        self.instance = instance

    def saveImpl(self, path: str) -> None:
        instance = self.instance

        def encoded(params: dict[Any, Any]) -> dict[str, Any]:
            return {p.name: instance._encode_param(p.name, v) for p, v in params.items()}

        metadata = {
            "class": f"{type(instance).__module__}.{type(instance).__name__}",
            "timestamp": int(round(time.time() * 1000)),
            "sparkVersion": self.sparkSession.version, "uid": instance.uid,
            "gcurunFormat": FORMAT,
            "paramMap": encoded(instance._paramMap),
            "defaultParamMap": encoded(instance._defaultParamMap)}
        text = json.dumps(metadata, separators=(",", ":"))
        self.sparkSession.createDataFrame([(text,)], schema=["value"]).coalesce(1) \
            .write.text(os.path.join(path, "metadata"))


class ModelReader(MLReader):
    """Loads what :class:`ModelWriter` saved, as an instance of its class."""

    def __init__(self, cls: type) -> None:
        super().__init__()
        self.cls = cls

    def load(self, path: str) -> Any:
        """The Model saved at ``path``. Raises ValueError when the files there are not a
        gcurun Model of this class."""
        row = self.sparkSession.read.text(os.path.join(path, "metadata")).first()
        if row is None:
            raise ValueError(f"{path}: its metadata is empty; save the Model again")
        metadata = json.loads(row[0])
        name = f"{self.cls.__module__}.{self.cls.__name__}"
        if metadata.get("gcurunFormat") != FORMAT or metadata.get("class") != name:
            raise ValueError(f"{path}: holds {metadata.get('class')!r} (format "
                             f"{metadata.get('gcurunFormat')!r}), not a {name} saved by "
                             f"gcurun (format {FORMAT}); load it with its own class")
        instance = self.cls()
        instance._resetUid(metadata["uid"])
        for key, setter in (("defaultParamMap", instance._setDefault),
                            ("paramMap", instance._set)):
            items = metadata[key]
            decoded: dict[str, Any] = {}
            for param in sorted(items, key=lambda n: n == "model"):
                decoded[param] = instance._decode_param(param, items[param], decoded)
            setter(**decoded)
        return instance
