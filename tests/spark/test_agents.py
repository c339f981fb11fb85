"""The agents of run_elastic and the driver's agent service over loopback, with no
Spark: registration, a worker's start and exit, and a connection that stays up while
nothing is said."""

from __future__ import annotations

import queue
import shutil
import threading
import time

from gcurun.spark import agent as agent_module
from gcurun.spark import elastic as elastic_module
from gcurun.spark.agent import Agent, AgentJob, connect
from gcurun.spark.elastic import AgentService
from tests.helpers import wait_for


def test_an_agent_runs_a_worker_reports_its_exit_and_stays_connected_while_quiet(
        monkeypatch):
    # Sends leave their deadline's timeout on a socket another thread reads from: the
    # reader must not take that for the end of the connection.
    monkeypatch.setattr(agent_module, "SEND_SECONDS", 0.3)
    monkeypatch.setattr(elastic_module, "SEND_SECONDS", 0.3)
    secret = b"k" * 32
    service = AgentService("127.0.0.1", secret)
    exits: queue.Queue = queue.Queue()
    lost: queue.Queue = queue.Queue()
    service.on_exit = lambda *args: exits.put(args)
    service.on_lost = lambda *args: lost.put(args)
    service.start()
    job = AgentJob(service.address, secret.hex(), {}, executable=shutil.which("true"))
    agent = Agent(job, connect(job))
    agent.send({"op": "agent", "host": "127.0.0.1", "executor": 7, "partition": 0,
                "attempt": 0})
    serving = threading.Thread(target=agent.serve, daemon=True)
    serving.start()
    try:
        wait_for("the agent to register", lambda: service.connected() == 1, timeout=10)
        assert [(h.name, h.slots) for h in service.hosts()] == [("127.0.0.1-7", 1)]
        assert service.send(0, {"op": "start", "worker": 5, "env": {}})
        assert exits.get(timeout=10) == (5, 0, None, "")
        time.sleep(1.0)     # quiet for longer than any send's deadline
        assert service.connected() == 1 and serving.is_alive() and lost.empty()
    finally:
        service.close()
    serving.join(10)
    assert not serving.is_alive()
