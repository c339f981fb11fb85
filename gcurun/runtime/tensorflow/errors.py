"""The runtime's errors as TensorFlow's, with Horovod's error codes.

Horovod's TensorFlow ops fail with ``tf.errors.FailedPreconditionError`` when ranks
disagree on a tensor (shape, dtype, op, root) and ``InvalidArgumentError`` for bad
arguments; scripts and Horovod's own tests catch those classes. In eager code the
runtime's error is re-raised as an instance of both its own class (``MismatchError``,
``PeerFailureError``, ...) and the TensorFlow class for its cause.

In graphs the error comes out of the op that synchronizes, which is a Python function
(``tf.numpy_function``), and TensorFlow turns any exception such a function raises into
an ``UnknownError``, except ValueError and TypeError (``InvalidArgumentError``) and a
few others. A mismatch is therefore not raised there: the op hands back a *status*,
a path that a ``WriteFile`` kernel writes an empty string to. ``/dev/null`` takes it;
``/dev/null/<message>`` cannot be created (ENOTDIR), which TensorFlow reports as
FAILED_PRECONDITION with the path, so with the message. Nothing is ever created or
changed. WriteFile is a stateful kernel, so no graph optimization drops it (a stateless
one, such as ReadFile, loses its control edge inside ``tf.function``).
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from gcurun.errors import CollectiveError, CollectiveTimeout, PeerFailureError
from gcurun.runtime import ArgumentError, MismatchError, NotInitializedError

OK_STATUS = b"/dev/null"
# Longer paths fail with ENAMETOOLONG (PATH_MAX is 4096) instead of ENOTDIR.
_MESSAGE_BYTES = 3000

# The TensorFlow class of each runtime error (first match wins).
_TF_CLASSES: tuple[tuple[type[BaseException], type[tf.errors.OpError]], ...] = (
    (MismatchError, tf.errors.FailedPreconditionError),
    (ArgumentError, tf.errors.InvalidArgumentError),
    (NotInitializedError, tf.errors.FailedPreconditionError),
    (CollectiveTimeout, tf.errors.DeadlineExceededError),
    (PeerFailureError, tf.errors.UnavailableError),
    (CollectiveError, tf.errors.UnknownError),
)
_combined: dict[type, type] = {}


def tf_error(exc: CollectiveError) -> BaseException:
    """``exc`` as an instance of both its class and the matching ``tf.errors`` class."""
    if isinstance(exc, tf.errors.OpError):
        return exc
    tf_class = next(cls for kind, cls in _TF_CLASSES if isinstance(exc, kind))
    kind = type(exc)
    combined = _combined.get(kind)
    if combined is None:
        combined = _combined[kind] = type(kind.__name__, (kind, tf_class),
                                          {"__module__": kind.__module__})
    error: Any = Exception.__new__(combined)
    tf_class.__init__(error, None, None, str(exc))
    error.args = exc.args
    error.__dict__.update({k: v for k, v in getattr(exc, "__dict__", {}).items()
                           if not k.startswith("_")})
    error.__cause__ = exc.__cause__
    error.__traceback__ = exc.__traceback__
    return error


def mismatch_status(exc: MismatchError) -> bytes:
    """The status a graph op hands back for ``exc`` (see :func:`status_check`): one
    path component, since a slash would make the kernel report a shorter path."""
    message = " ".join(str(exc).split()).replace("\0", " ").replace("/", "|")
    return OK_STATUS + b"/" + message.encode()[:_MESSAGE_BYTES]


def status_check(status: tf.Tensor) -> tf.Operation:
    """A graph op that fails with FailedPreconditionError carrying the message when
    ``status`` is a mismatch status, and does nothing when it is ``OK_STATUS``."""
    return tf.io.write_file(status, "")
