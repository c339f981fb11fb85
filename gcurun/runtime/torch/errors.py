"""Horovod's error name for a failed collective, inside gcurun's one error tree."""

from __future__ import annotations

from gcurun.errors import CollectiveError


class HorovodInternalError(CollectiveError, RuntimeError):
    """A collective failed (mismatched tensors between ranks, a dead peer, a timeout).

    Scripts written for Horovod catch this name; the error raised is also an instance of
    the runtime's own class for the cause (``MismatchError``, ``PeerFailureError``, ...).
    """


_combined: dict[type, type[HorovodInternalError]] = {}


def internal_error(exc: CollectiveError) -> HorovodInternalError:
    """``exc`` as an instance of both its own class and :class:`HorovodInternalError`."""
    if isinstance(exc, HorovodInternalError):
        return exc
    kind = type(exc)
    combined = _combined.get(kind)
    if combined is None:
        combined = _combined[kind] = type(kind.__name__, (kind, HorovodInternalError),
                                          {"__module__": kind.__module__})
    error: HorovodInternalError = Exception.__new__(combined)   # no __init__: keep args
    error.args = exc.args
    error.__dict__.update(getattr(exc, "__dict__", {}))
    error.__cause__ = exc.__cause__
    error.__traceback__ = exc.__traceback__
    return error
