"""A real one-host Grid Engine (Debian's gridengine 8.1.9) for the long tests.

Everything lives in a directory of its own (``SGE_ROOT``): the cell's bootstrap file,
classic spooling for qmaster and execd, the configuration; the daemons listen on two free
ports given by ``SGE_QMASTER_PORT``/``SGE_EXECD_PORT``, so neither the system's
``/var/lib/gridengine`` nor another Grid Engine on this machine is touched. One queue
(``all.q``, SLOTS slots on this host) offers one parallel environment (``gcurun``,
``$fill_up``, ``control_slaves TRUE`` so ``qrsh -inherit`` may start tasks).

Two facts of this machine shape it: its hostname resolves to 127.0.0.1, whose reverse name
is ``localhost``, and qmaster refuses a client whose address resolves to another name
than the one it gives ("access denied (client IP resolved to host name "localhost". This
is not identical to clients host name ...)"); the cell's ``host_aliases`` file makes both
names one host. And jobs run as root here, which the default ``min_uid``/``min_gid``
(1000) forbid; the configuration lowers them to 0.

By hand, as root::

    python -m tests.cluster.gridengine up      # prints the variables to export
    python -m tests.cluster.gridengine down SGE_ROOT
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

BINARIES = Path("/usr/lib/gridengine")
SHARE = Path("/usr/share/gridengine")
PE_NAME = "gcurun"
SLOTS = 4
START_SECONDS = 60
COMMAND_SECONDS = 30


def available() -> str | None:
    """Why a Grid Engine cannot start here, or None."""
    if os.geteuid() != 0:
        return "the Grid Engine daemons run as root"
    for path in (BINARIES / "sge_qmaster", BINARIES / "sge_execd", BINARIES / "spoolinit"):
        if not os.access(path, os.X_OK):
            return f"{path} is missing (apt-get install gridengine-master gridengine-exec " \
                   "gridengine-client)"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class GridEngine:
    """A running one-host Grid Engine."""

    root: Path
    qmaster_port: int
    execd_port: int
    host: str

    @property
    def cell(self) -> Path:
        return self.root / "default"

    def env(self, **extra: str) -> dict[str, str]:
        """This process's environment pointed at this Grid Engine."""
        env = {k: v for k, v in os.environ.items()
               if k not in ("JOB_ID", "PE_HOSTFILE", "NSLOTS", "SGE_ROOT", "SGE_CELL")}
        env.update(SGE_ROOT=str(self.root), SGE_CELL="default",
                   SGE_QMASTER_PORT=str(self.qmaster_port),
                   SGE_EXECD_PORT=str(self.execd_port))
        env.update(extra)
        return env

    def run(self, *argv: str, check: bool = True,
            timeout: float = COMMAND_SECONDS) -> subprocess.CompletedProcess[str]:
        """A client command (qsub, qstat, qdel, qconf) against this Grid Engine."""
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              env=self.env(), stdin=subprocess.DEVNULL)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: "
                               f"{done.stdout}{done.stderr}")
        return done

    def qsub(self, script: Path, slots: int, output: Path) -> str:
        """Submit ``script`` as a parallel job of ``slots`` slots (the submitting
        environment exported, ``-V``); its id."""
        done = self.run("qsub", "-terse", "-V", "-pe", PE_NAME, str(slots), "-j", "y",
                        "-o", str(output), "-cwd", "-S", "/bin/bash", str(script))
        return done.stdout.strip().split(".")[0]

    def job_known(self, job_id: str) -> bool:
        """Whether qmaster still holds the job (pending or running)."""
        return self.run("qstat", "-j", job_id, check=False).returncode == 0

    def wait_gone(self, job_id: str, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if not self.job_known(job_id):
                return True
            time.sleep(0.5)
        return False

    def _pids(self) -> list[int]:
        pids = []
        for name in ("spool/qmaster/qmaster.pid", f"spool/execd/{self.host}/execd.pid",
                     "spool/execd/localhost/execd.pid"):
            path = self.root / name
            if path.exists():
                try:
                    pids.append(int(path.read_text().split()[0]))
                except (ValueError, IndexError):
                    pass
        return pids

    def stop(self) -> None:
        """Delete every job, stop both daemons (by their pid files), remove the root."""
        self.run("qdel", "-f", "-u", "*", check=False)
        self.run("qconf", "-ke", "all", check=False)
        self.run("qconf", "-km", check=False)
        deadline = time.monotonic() + 20
        pids = self._pids()
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.2)
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _bootstrap(root: Path) -> str:
    return "\n".join([
        "admin_user none", "default_domain none", "ignore_fqdn true",
        "spooling_method classic", "spooling_lib libspoolc",
        f"spooling_params {root}/default/common;{root}/spool/qmaster",
        f"binary_path {BINARIES}", f"qmaster_spool_dir {root}/spool/qmaster",
        "security_mode none", "listener_threads 2", "worker_threads 2",
        "scheduler_threads 1", ""])


def _configuration(root: Path) -> str:
    lines = []
    for line in (SHARE / "default-configuration").read_text().splitlines():
        key = line.split()[0] if line.split() else ""
        if key == "execd_spool_dir":
            line = f"execd_spool_dir {root}/spool/execd"
        elif key in ("min_uid", "min_gid"):
            line = f"{key} 0"
        lines.append(line)
    return "\n".join(lines) + "\n"


def start(base: Path | None = None) -> GridEngine:
    """Configure a cell in a new directory and start qmaster and execd on this host, a
    PE and a queue ready. Raises RuntimeError (with the daemons' messages) when they do
    not come up within START_SECONDS; nothing is left running then."""
    root = Path(tempfile.mkdtemp(prefix="gcurun-sge-", dir=base))
    host = socket.gethostname()
    engine = GridEngine(root, _free_port(), _free_port(), host)
    try:
        _configure(engine)
        _start_daemons(engine)
    except BaseException:
        engine.stop()
        raise
    return engine


def _configure(engine: GridEngine) -> None:
    root, common = engine.root, engine.cell / "common"
    common.mkdir(parents=True)
    for sub in ("spool/qmaster", "spool/execd"):
        (root / sub).mkdir(parents=True)
    for name in ("util", "utilbin", "lib"):
        target = Path("/var/lib/gridengine") / name
        (root / name).symlink_to(target if target.exists() else SHARE / name)
    (root / "bin").mkdir()
    arch = subprocess.run([str(SHARE / "util" / "arch")], capture_output=True, text=True,
                          check=True).stdout.strip()
    (root / "bin" / arch).symlink_to(BINARIES)
    (common / "bootstrap").write_text(_bootstrap(root))
    (common / "act_qmaster").write_text(engine.host + "\n")
    (common / "host_aliases").write_text(f"{engine.host} localhost\n")
    (root / "configuration").write_text(_configuration(root))
    env = engine.env()
    steps = [[str(BINARIES / "spoolinit"), "classic", "libspoolc",
              f"{root}/default/common;{root}/spool/qmaster", "init"],
             [str(BINARIES / "spooldefaults"), "configuration", str(root / "configuration")],
             [str(BINARIES / "spooldefaults"), "complexes", str(SHARE / "util/resources/centry")],
             [str(BINARIES / "spooldefaults"), "usersets",
              str(SHARE / "util/resources/usersets")],
             [str(BINARIES / "spooldefaults"), "managers", "root"],
             [str(BINARIES / "spooldefaults"), "adminhosts", engine.host]]
    for argv in steps:
        subprocess.run(argv, check=True, capture_output=True, env=env, timeout=COMMAND_SECONDS)


def _wait(engine: GridEngine, what: str, ready: object) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if callable(ready) and ready():
            return
        time.sleep(0.5)
    messages = "\n".join(p.read_text()[-2000:] for p in engine.root.glob("spool/**/messages"))
    raise RuntimeError(f"Grid Engine: {what} within {START_SECONDS} s; messages:\n{messages}")


def _start_daemons(engine: GridEngine) -> None:
    env = engine.env()
    subprocess.run([str(BINARIES / "sge_qmaster")], check=True, env=env,
                   timeout=COMMAND_SECONDS, stdin=subprocess.DEVNULL)
    _wait(engine, "qmaster did not answer",
          lambda: engine.run("qconf", "-sh", check=False).returncode == 0)
    engine.run("qconf", "-as", engine.host)
    sched = engine.run("qconf", "-ssconf").stdout
    sched = "\n".join("schedule_interval 0:0:1" if line.startswith("schedule_interval")
                      else line for line in sched.splitlines()) + "\n"
    _apply(engine, "-Msconf", sched)
    _apply(engine, "-Ap", "\n".join([
        f"pe_name {PE_NAME}", "slots 999", "user_lists NONE", "xuser_lists NONE",
        "start_proc_args NONE", "stop_proc_args NONE", "allocation_rule $fill_up",
        "control_slaves TRUE", "job_is_first_task FALSE", "urgency_slots min",
        "accounting_summary FALSE", "qsort_args NONE", ""]))
    subprocess.run([str(BINARIES / "sge_execd")], check=True, env=env,
                   timeout=COMMAND_SECONDS, stdin=subprocess.DEVNULL)
    _wait(engine, "execd did not register",
          lambda: engine.host in engine.run("qconf", "-sel", check=False).stdout.split())
    queue = engine.run("qconf", "-sq").stdout
    values = {"qname": "all.q", "hostlist": engine.host, "slots": str(SLOTS),
              "pe_list": PE_NAME, "shell": "/bin/bash", "shell_start_mode": "unix_behavior",
              # a busy machine's load must not put the queue in alarm state
              "load_thresholds": "NONE"}
    queue = "\n".join(f"{line.split()[0]} {values[line.split()[0]]}"
                      if line.split() and line.split()[0] in values else line
                      for line in queue.splitlines()) + "\n"
    _apply(engine, "-Aq", queue)
    _wait(engine, "the queue did not come up", lambda: _queue_ready(engine))


def _queue_ready(engine: GridEngine) -> bool:
    """Whether all.q on this host takes jobs (a load reported, no state such as alarm or
    unknown)."""
    lines = engine.run("qstat", "-f", "-q", "all.q", check=False).stdout.splitlines()
    rows = [line.split() for line in lines if line.startswith("all.q@")]
    return bool(rows) and len(rows[0]) == 5 and rows[0][3] != "-NA-"


def _apply(engine: GridEngine, option: str, text: str) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".conf", dir=engine.root,
                                     delete=False) as handle:
        handle.write(text)
    engine.run("qconf", option, handle.name)


def main(argv: list[str]) -> int:
    if argv[:1] == ["up"]:
        engine = start()
        for key in ("SGE_ROOT", "SGE_CELL", "SGE_QMASTER_PORT", "SGE_EXECD_PORT"):
            print(f"export {key}={engine.env()[key]}")
        return 0
    if argv[:1] == ["down"] and len(argv) == 2:
        # the ports come from the variables `up` printed
        engine = GridEngine(Path(argv[1]), int(os.environ["SGE_QMASTER_PORT"]),
                            int(os.environ["SGE_EXECD_PORT"]), socket.gethostname())
        engine.stop()
        return 0
    print(__doc__.split("By hand, as root::")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
