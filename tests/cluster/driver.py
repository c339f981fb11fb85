"""Runs one job through gcurun's run_job (prepare, then execute); the outcome as JSON.

``python driver.py SPEC_FILE`` (a JSON file, so nothing of the job shows on the driver's
command line) prints rank output as gcurun does, then one line
``RESULT {...}``; tests also call :func:`run_spec` in-process.
"""

from __future__ import annotations

import io
import json
import sys
from typing import Any, TextIO

from gcurun.config.api import Settings, SSHSettings
from gcurun.errors import GcurunError, RanksFailedError, SSHConnectError
from gcurun.hosts.api import HostSpec
from gcurun.launch.execute import run_job
from gcurun.launch.planning.plan import build_plan
from gcurun.launch.supervision.output import OutputSink


def run_spec(spec: dict[str, Any], out: TextIO, err: TextIO) -> dict[str, Any]:
    """Run the job ``spec`` describes; the outcome as a dict (never raises GcurunError)."""
    hosts = tuple(HostSpec(h[0], h[1], python=h[2] if len(h) > 2 else None)
                  for h in spec["hosts"])
    ssh = SSHSettings(config_file=spec["ssh_config"], timeout=spec.get("timeout", 10.0),
                      host_key_policy=spec.get("policy", "strict"),
                      python=spec.get("python"))
    settings = Settings(ssh=ssh, grace_seconds=spec.get("grace", 3.0),
                        sources={"ssh.config_file": "cli", "ssh.host_key_policy": "cli"})
    plan = build_plan(hosts, spec["argv"], np=spec.get("np"), job_env=spec.get("env"),
                      workdir=spec.get("workdir", "/"), local_names=frozenset(
                          spec.get("local_names", ["localhost", "127.0.0.1"])))
    try:
        run_job(plan, settings, OutputSink(out, err, output_dir=spec.get("output_dir")),
                secrets=spec.get("secrets"))
    except SSHConnectError as exc:
        return {"error": "SSHConnectError", "failures": exc.failures}
    except RanksFailedError as exc:
        f = exc.failure
        return {"error": "RanksFailedError", "rank": f.rank, "host": f.host,
                "exit_code": f.exit_code, "signal": f.signal, "error_text": f.error_text}
    except GcurunError as exc:
        return {"error": type(exc).__name__, "message": str(exc)}
    return {"error": None}


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        job = json.load(f)
    result = run_spec(job, sys.stdout, sys.stderr)
    print("RESULT " + json.dumps(result), flush=True)


def run_in_process(spec: dict[str, Any]) -> tuple[dict[str, Any], str, str]:
    out, err = io.StringIO(), io.StringIO()
    return run_spec(spec, out, err), out.getvalue(), err.getvalue()


if __name__ == "__main__":
    main()
