"""gcurun.run's function travels with the lines of its file, so a rank's traceback shows
the failing line under any cloudpickle (3.1 names shipped code ``<dynamic-code>``) and on
a host where the file is not."""

from __future__ import annotations

import functools
import importlib.util
import linecache
import traceback
from pathlib import Path

import pytest

import gcurun
from gcurun.errors import RankFunctionError
from gcurun.launch.remote.run_function import pack_call, unpack_call

SOURCE = '''\
def fail(word):
    values = [len(w) for w in [word]]
    raise ValueError(f"{word} is {values[0]} long")
'''


def gone_function(tmp_path: Path):
    """``fail`` from a module file that is deleted once loaded, under a module name no
    rank can import (so it is pickled by value)."""
    path = tmp_path / "gone_module.py"
    path.write_text(SOURCE)
    spec = importlib.util.spec_from_file_location("gcurun_gone_module", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    linecache.getlines(str(path))   # the launcher's process read it while it existed
    path.unlink()
    return module.fail, str(path)


def test_a_packed_call_raises_with_its_files_name_and_lines(tmp_path: Path) -> None:
    fail, path = gone_function(tmp_path)   # deleted once loaded
    payload = pack_call(functools.partial(fail, "nan"))
    linecache.clearcache()          # a rank's process has nothing cached
    with pytest.raises(ValueError) as info:
        unpack_call(payload)()
    text = "".join(traceback.format_exception(info.value))
    assert f'File "{path}", line 3, in fail' in text, text
    assert 'raise ValueError(f"{word} is {values[0]} long")' in text, text


@pytest.mark.integration
def test_a_rank_shows_the_failing_line_of_a_file_it_cannot_read(tmp_path: Path) -> None:
    fail, path = gone_function(tmp_path)
    with pytest.raises(RankFunctionError) as info:
        gcurun.run(fail, args=("nan",), num_proc=1)
    assert f'File "{path}", line 3, in fail\n' in info.value.remote_traceback
    assert 'raise ValueError(f"{word} is {values[0]} long")' in info.value.remote_traceback
