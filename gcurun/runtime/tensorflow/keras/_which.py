"""Which Keras ``tf.keras`` is, decided here alone: Keras 3 (TensorFlow 2.16+'s own), or
Keras 2 from the tf-keras package, which TensorFlow makes ``tf.keras`` when
``TF_USE_LEGACY_KERAS=1`` (how Keras 2 scripts keep running on TensorFlow 2.16+). The Keras
binding builds on ``keras`` from here, so that its optimizer and callbacks are of the
Keras that the script's model is."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import tensorflow as tf


def _which() -> tuple[ModuleType, bool]:
    if tf.keras.__name__.split(".")[0] == "tf_keras":     # TensorFlow's choice, not ours
        import tf_keras
        return tf_keras, True
    import keras
    return keras, False


keras: Any
LEGACY: bool
keras, LEGACY = _which()
# The bases of the binding's callbacks.
Callback: Any = keras.callbacks.Callback
ModelCheckpoint: Any = keras.callbacks.ModelCheckpoint
