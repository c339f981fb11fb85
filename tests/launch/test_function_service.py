"""The function service of gcurun.run and a rank's side of it, over real sockets: only a
peer with the job's secret gets the function, and each rank's outcome is kept."""

from __future__ import annotations

import pytest

from gcurun.launch.function_service import FunctionService, Outcome
from gcurun.launch.remote import run_function as rank_side
from gcurun.rendezvous import wire


@pytest.fixture
def service():
    s = FunctionService(b"the function", 2, b"k" * 32)
    s.start()
    yield s
    s.close()


def address(service):
    return [("127.0.0.1", service.port)]


def test_a_rank_gets_the_function_and_its_outcome_is_kept(service):
    sock = rank_side.connect(address(service), b"k" * 32, timeout=5)
    wire.send_all(sock, wire.encode_frame({"op": "hello", "rank": 1}), wire_deadline())
    header, payload = rank_side.recv_blob(sock, wire_deadline())
    assert (header["op"], payload) == ("function", b"the function")
    rank_side.send_blob(sock, {"op": "result", "rank": 1, "ok": True}, b"result",
                        wire_deadline())
    sock.close()
    assert service.wait_for([1], 5)
    assert service.outcomes == {1: Outcome(True, b"result")}
    assert not service.wait_for([0], 0.1)


def test_a_peer_without_the_secret_gets_nothing(service):
    with pytest.raises(ConnectionError, match="cannot reach gcurun.run's launcher"):
        rank_side.connect(address(service), b"x" * 32, timeout=0.5)


def test_a_rank_out_of_range_is_sent_nothing(service):
    sock = rank_side.connect(address(service), b"k" * 32, timeout=5)
    wire.send_all(sock, wire.encode_frame({"op": "hello", "rank": 2}), wire_deadline())
    with pytest.raises(wire.WireError, match="connection closed"):
        rank_side.recv_blob(sock, wire_deadline())
    sock.close()


def test_a_second_copy_of_a_rank_is_sent_nothing_and_a_lost_rank_is_seen(service):
    first = rank_side.connect(address(service), b"k" * 32, timeout=5)
    hello = {"op": "hello", "rank": 0, "host": "h1"}
    wire.send_all(first, wire.encode_frame(hello), wire_deadline())
    assert rank_side.recv_blob(first, wire_deadline())[1] == b"the function"
    second = rank_side.connect(address(service), b"k" * 32, timeout=5)
    wire.send_all(second, wire.encode_frame(hello), wire_deadline())
    with pytest.raises(wire.WireError, match="connection closed"):
        rank_side.recv_blob(second, wire_deadline())
    second.close()
    assert (service.started, service.hosts, service.dropped) == ({0}, {0: "h1"}, set())
    first.close()    # gone without its outcome
    assert service.wait_until(lambda s: s.dropped == {0}, 5)


def test_addresses_parse_and_bad_ones_are_refused():
    assert rank_side.parse_addresses("a:1, [::1]:2") == [("a", 1), ("::1", 2)]
    for bad in ("", "a", "a:x", ":1"):
        with pytest.raises(ValueError):
            rank_side.parse_addresses(bad)


def wire_deadline() -> float:
    import time

    return time.monotonic() + 5


def test_a_function_running_past_the_handshake_deadline_still_reports(monkeypatch):
    import time

    from gcurun.launch import function_service

    monkeypatch.setattr(function_service, "HANDSHAKE_SECONDS", 0.5)
    service = FunctionService(b"the function", 1, b"k" * 32)
    service.start()
    try:
        sock = rank_side.connect(address(service), b"k" * 32, timeout=5)
        wire.send_all(sock, wire.encode_frame({"op": "hello", "rank": 0}), wire_deadline())
        rank_side.recv_blob(sock, wire_deadline())
        time.sleep(1.5)      # the function runs longer than the greeting may take
        rank_side.send_blob(sock, {"op": "result", "rank": 0, "ok": True}, b"late",
                            wire_deadline())
        assert service.wait_for([0], 5)
        assert service.outcomes == {0: Outcome(True, b"late")} and not service.dropped
        sock.close()
    finally:
        service.close()
