"""A rank that prints, as one JSON line, the variables named on its command line, the
runtime knobs it would run with, and whether a module only the launcher's PYTHONPATH
offers can be imported.

    env_report.py NAME...
"""

import json
import os
import sys

from gcurun.runtime.settings import parse_runtime_env

knobs = parse_runtime_env(os.environ)
report = {
    "env": {name: os.environ.get(name) for name in sys.argv[1:]},
    "stall_check_warning_seconds": knobs.stall_check_warning_seconds,
    "cycle_time_ms": knobs.cycle_time_ms,
    "network_interface": knobs.network_interface,
}
try:
    import envfwd_probe  # type: ignore[import-not-found]

    report["probe"] = envfwd_probe.VALUE
except ImportError as exc:
    report["probe"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(report), flush=True)
