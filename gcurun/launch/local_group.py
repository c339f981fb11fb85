"""The local executor: this host's ranks, run by a bootstrap that gcurun starts here over
pipes, the same program that runs the ranks of an SSH host.

So a local job ends as a remote one does: each rank leads its own session; the bootstrap
stops every rank's group (SIGTERM, grace, SIGKILL) when gcurun asks, when gcurun dies
(its pipe ends, even after SIGKILL) and when the bootstrap is itself told to stop; its
guard stops them if the bootstrap is killed. The job is sent in bounded messages while the
ranks start, and a stop is obeyed between two of them.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from gcurun.errors import LaunchError
from gcurun.launch.api import RankGroup, RankSpec
from gcurun.launch.bootstrap_group import SEND_WAIT_SECONDS, BootstrapGroup
from gcurun.launch.kinds import LauncherKind
from gcurun.launch.remote.protocol import parse_hello

if TYPE_CHECKING:
    from gcurun.launch.kinds import PreparedJob

# The bootstrap imports this gcurun from the package's own directory, whatever the ranks'
# working directory or PYTHONPATH hold; it needs nothing else (stdlib only), so it starts
# isolated and without site-packages (-I -S), which halves its start-up.
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BOOTSTRAP_CODE = ("import sys; sys.path.insert(0, sys.argv[1]); "
                  "from gcurun.launch.remote.bootstrap import main; sys.exit(main())")
HELLO_SECONDS = 30.0       # for the local bootstrap to start and say hello
STDERR_TAIL_BYTES = 4096


class LocalRankGroup(BootstrapGroup):
    """Runs the ranks of a plan that live on this host.

    ``argv_for`` turns a rank into the argv actually started (binding wrappers go there);
    ``extra_env`` carries variables that must not appear in the plan, such as the job
    secret; ``base_env`` is what the ranks inherit (the launcher's environment).
    ``kill_grace`` is how long the bootstrap waits between SIGTERM and SIGKILL when
    gcurun is gone.
    """

    def __init__(
        self,
        ranks: Sequence[RankSpec],
        *,
        workdir: str | None = None,
        base_env: Mapping[str, str] | None = None,
        extra_env: Mapping[str, str] | None = None,
        argv_for: Callable[[RankSpec], Sequence[str]] = lambda r: r.argv,
        kill_grace: float = 10.0,
    ) -> None:
        super().__init__(ranks, workdir=workdir or os.getcwd(), secrets=extra_env,
                         kill_grace=kill_grace)
        self.host = ranks[0].host if ranks else "localhost"
        self._base_env = dict(os.environ if base_env is None else base_env)
        self._argv_of = {r.rank: list(argv_for(r)) for r in ranks}
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr = bytearray()
        self._stderr_lock = threading.Lock()

    # -- the channel: a bootstrap over pipes ------------------------------------------------
    def _open(self) -> None:
        """Check what can be checked here, start the bootstrap and wait for its hello.
        Raises LaunchError, with nothing left running, when the ranks cannot start."""
        self._check()
        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", BOOTSTRAP_CODE, _PACKAGE_ROOT],
            env=self._base_env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True)
        threading.Thread(target=self._keep_stderr, daemon=True,
                         name="bootstrap-stderr").start()
        line = self._hello_line()
        if parse_hello(line) is None:
            self._abandon()
            raise LaunchError(f"gcurun's bootstrap did not start on this host: "
                              f"{self._stderr_tail() or line.decode(errors='replace')!r}")

    def _send(self, data: bytes) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write(data)
            self._proc.stdin.flush()
        except ValueError as exc:   # closed by a stop meanwhile
            raise OSError(str(exc)) from exc

    def _recv(self) -> bytes:
        assert self._proc is not None and self._proc.stdout is not None
        return os.read(self._proc.stdout.fileno(), 65536)

    def _close(self) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None:
            return
        # A job message still being written holds the lock; a bootstrap that stopped
        # reading is ended by _abandon instead.
        if not self._send_lock.acquire(timeout=SEND_WAIT_SECONDS):
            return
        try:
            proc.stdin.close()
        except OSError:
            pass
        finally:
            self._send_lock.release()

    def _abandon(self) -> None:
        """SIGKILL the bootstrap: its ranks die with it and its guard stops their groups."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
        if proc is not None:
            proc.wait()

    def _lost_reason(self) -> str:
        if self._error is not None:
            return self._error
        proc = self._proc
        code = None
        if proc is not None:
            try:
                code = proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                pass
        if code is not None and code < 0:
            status = f"was killed by {signal.Signals(-code).name}"
        else:
            status = f"ended (status {'unknown' if code is None else code})"
        return (f"gcurun's bootstrap on {self.host} {status} without reporting these "
                f"ranks: {self._stderr_tail() or 'no message'}")

    def _argv(self) -> Mapping[int, Sequence[str]]:
        return self._argv_of

    # -- helpers ------------------------------------------------------------------------------
    def _check(self) -> None:
        """The working directory and every program, checked before anything starts."""
        workdir = self._workdir
        if not os.path.exists(workdir):
            raise LaunchError(f"working directory '{workdir}' does not exist; create it or "
                              "pass another --workdir")
        if not os.path.isdir(workdir):
            raise LaunchError(f"working directory '{workdir}' is not a directory; pass a "
                              "directory as --workdir")
        checked: set[tuple[str, str]] = set()
        for r in self._ranks:
            program = self._argv_of[r.rank][0] if self._argv_of[r.rank] else ""
            path = r.env.get("PATH", self._base_env.get("PATH", os.defpath))
            if (program, path) in checked:
                continue
            checked.add((program, path))
            problem = program_problem(program, path, workdir)
            if problem:
                raise LaunchError(f"rank {r.rank}: cannot run '{program}': {problem}")

    def _hello_line(self) -> bytes:
        assert self._proc is not None and self._proc.stdout is not None
        fd, line = self._proc.stdout.fileno(), b""
        deadline = time.monotonic() + HELLO_SECONDS
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return line
            byte = os.read(fd, 1)
            if not byte:
                return line
            line += byte
        return line

    def _keep_stderr(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stderr is not None
        for chunk in iter(lambda: os.read(proc.stderr.fileno(), 4096), b""):  # type: ignore
            with self._stderr_lock:
                self._stderr += chunk
                del self._stderr[:-STDERR_TAIL_BYTES]

    def _stderr_tail(self) -> str:
        with self._stderr_lock:
            lines = self._stderr.decode(errors="replace").strip().splitlines()
        return " | ".join(lines[-5:])


def program_problem(program: str, path: str, workdir: str) -> str | None:
    """Why ``program`` cannot run as a rank here (found on ``path``, or relative to
    ``workdir`` when it names a path), or None."""
    if not program:
        return "an empty program name"
    if os.sep in program:
        where = os.path.join(workdir, program)
        if os.path.isdir(where):
            return "it is a directory; give the program to run in it"
        if not os.path.exists(where):
            return "no such file; check the path"
        if not os.access(where, os.X_OK):
            return "it is not executable; chmod +x it or run it with its interpreter"
        return None
    if shutil.which(program, path=path) is None:
        return "no such program on PATH; check the command's spelling or give its full path"
    return None


def local_groups(job: PreparedJob, secrets: Mapping[str, str]) -> list[RankGroup]:
    """The ranks of ``job`` that run on this host, in one group (none if there are none),
    each started under its binding."""
    from gcurun.launch.planning.binding import local_binder

    ranks = [r for r in job.plan.ranks if r.is_local]
    return [LocalRankGroup(ranks, workdir=job.plan.workdir, extra_env=secrets,
                           argv_for=local_binder(),
                           kill_grace=job.settings.grace_seconds)] if ranks else []


class LocalKind(LauncherKind):
    """Every rank on this host, under one bootstrap gcurun starts here."""

    name = "local"
    this_host_only = True
    chosen_because = "every rank is on this host"

    def rank_groups(self, job: PreparedJob, secrets: Mapping[str, str]) -> list[RankGroup]:
        return local_groups(job, secrets)
