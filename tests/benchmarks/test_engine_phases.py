"""benchmarks/engine_phases.py's clock without a job: the waits of an exchange left in
flight count as transfers (the streamed ring between hosts waits there, not in
``sendrecv_parts``). The clock is a fake one, advanced by the fake exchange."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks import engine_phases
from benchmarks.engine_phases import Clock


class FakeTime:
    now = 0.0

    @classmethod
    def perf_counter(cls) -> float:
        return cls.now


class Flight:
    """An exchange in flight whose waits take seconds of the fake clock."""

    def received(self, at_least: int) -> int:
        FakeTime.now += 1.5
        return at_least

    def wait(self) -> None:
        FakeTime.now += 2.0


def test_an_exchange_left_in_flight_counts_its_waits_as_transfers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_phases, "time", FakeTime)
    clock = Clock()

    def start(*args: Any) -> Flight | None:
        FakeTime.now += 0.25
        return Flight() if args[1] == 1 else None

    started = clock._started(start)
    flight = started([b"x"], 1, [bytearray(1)], 1)
    assert flight.received(8) == 8
    flight.wait()
    assert clock.spent["transfers"] == pytest.approx(0.25 + 1.5 + 2.0)
    # Where the transport runs the exchange at once, the caller still gets None.
    assert started([b"x"], 2, [bytearray(1)], 2) is None
    assert clock.spent["transfers"] == pytest.approx(0.25 * 2 + 1.5 + 2.0)
