"""A rank that picks its device as Horovod recipes do and prints what it found.

    device_check.py VARIABLE

``torch.cuda.set_device(hvd.local_rank())`` and ``visible_device_list =
str(hvd.local_rank())`` take entry LOCAL_RANK of the device variable's list (entry 0
under --device-isolation); Paddle takes entry FLAGS_selected_*, JAX entry
JAX_LOCAL_DEVICE_IDS. The rank prints one JSON object: the list, the entry each way
picks, and GCURUN_DEVICE, so the launcher's test compares them.
"""

from __future__ import annotations

import json
import os
import sys

variable = sys.argv[1]
visible = os.environ[variable].split(",")
local_rank = int(os.environ["LOCAL_RANK"])
flags = next(v for k, v in os.environ.items() if k.startswith("FLAGS_selected_"))
print(json.dumps({
    "rank": int(os.environ["GCURUN_RANK"]), "local_rank": local_rank,
    "visible": os.environ[variable], "own": os.environ["GCURUN_DEVICE"],
    "by_local_rank": visible[local_rank] if local_rank < len(visible) else None,
    "by_paddle": visible[int(flags)],
    "by_jax": visible[int(os.environ["JAX_LOCAL_DEVICE_IDS"])],
}), flush=True)
