"""The Ray actor each rank runs in (Horovod's ``horovod.ray.worker.BaseHorovodWorker``)."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def _node_id() -> str:
    import ray

    return str(ray.get_runtime_context().get_node_id())


class BaseHorovodWorker:
    """A rank: holds the user's executable object and runs functions on it.

    The executor sets the rank's environment (:meth:`update_env_vars`) before it creates
    the executable, so ``hvd.init()`` inside it, or inside a function given to
    ``execute``, joins the job.
    """

    executable: Any = None

    def __init__(self, world_rank: int = 0, world_size: int = 1) -> None:
        # Horovod's first guess; the executor replaces them once it knows every node.
        os.environ["HOROVOD_HOSTNAME"] = self.node_id()
        os.environ["HOROVOD_RANK"] = str(world_rank)
        os.environ["HOROVOD_SIZE"] = str(world_size)

    def node_id(self) -> str:
        """The id of the Ray node this actor runs on."""
        return _node_id()

    def hostname(self) -> str:
        return socket.gethostname()

    def get_gpu_ids(self) -> list[Any]:
        """The GPU ids Ray assigned to this actor."""
        import ray

        return list(ray.get_gpu_ids())

    def site(self) -> tuple[str, str, list[str], int]:
        """Where this actor runs, in one call: node id, node address, the GPU ids Ray
        assigned to it, process id."""
        import ray

        return (self.node_id(), ray.util.get_node_ip_address(),
                [str(i) for i in ray.get_gpu_ids()], os.getpid())

    def free_port(self) -> int:
        """A TCP port free on this node now (MASTER_PORT for torch.distributed users)."""
        with socket.socket() as sock:
            sock.bind(("", 0))
            return int(sock.getsockname()[1])

    def update_env_vars(self, env_vars: Mapping[str, Any]) -> None:
        """Set variables in this actor's process (values as strings)."""
        os.environ.update({str(k): str(v) for k, v in env_vars.items()})

    def env_vars(self) -> dict[str, str]:
        return dict(os.environ)

    def start_executable(self, executable_cls: type | None = None,
                         executable_args: Sequence[Any] | None = None,
                         executable_kwargs: Mapping[str, Any] | None = None) -> None:
        """Create ``executable_cls(*args, **kwargs)`` in this actor (None: no object)."""
        if executable_cls is not None:
            self.executable = executable_cls(*(executable_args or ()),
                                             **dict(executable_kwargs or {}))

    def execute(self, func: Callable[[Any], Any]) -> Any:
        """``func(executable)``. When it raises while this rank is in a job of the tcp
        runtime, the job is aborted first, so the other ranks' collectives fail at once
        instead of waiting for their timeout, and this rank leaves it (a later
        ``hvd.init()`` joins afresh)."""
        try:
            return func(self.executable)
        except BaseException as exc:
            leave_runtime(f"rank {os.environ.get('GCURUN_RANK', '?')} raised "
                          f"{type(exc).__name__}: {exc}")
            raise

    def execute_elastic(self, func: Callable[[Any], Any]) -> tuple[bool, Any]:
        """``func(executable)`` as an elastic worker: (True, its result), or (False,
        None) when the job removed this worker (its elastic loop ended it with status
        0). Errors are raised as by :meth:`execute`."""
        try:
            return True, self.execute(func)
        except SystemExit as exc:
            if exc.code in (0, None):
                return False, None
            raise RuntimeError(f"the function exited with status {exc.code}") from None

    def set_queue(self, queue: Any) -> None:
        """Send this rank's ``ray_logger.log`` values to ``queue``."""
        from gcurun.ray import ray_logger

        ray_logger.configure(queue)

    def leave_job(self) -> None:
        """Shut this rank's runtime down, if it joined (the executor's shutdown)."""
        leave_runtime(None)


def leave_runtime(abort_reason: str | None) -> None:
    """Leave the runtime's job if this process joined one; with ``abort_reason``, abort
    the job for every rank first. The runtime is not imported when it never was."""
    state_module = sys.modules.get("gcurun.runtime.frontend.state")
    if state_module is None:
        return
    current = state_module.current_state()
    if current is None:
        return
    if abort_reason is not None and current.backend == "tcp":
        abort = getattr(current.transport, "abort", None)
        if abort is not None:
            abort(abort_reason)
    state_module.shutdown()
