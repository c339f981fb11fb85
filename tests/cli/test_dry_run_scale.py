"""--dry-run of thousands of ranks: the table groups the ranks of a host into one row and
the JSON streams one rank a line (their times are measured by benchmarks/launch_scale.py)."""

from __future__ import annotations

import json

from tests.helpers import run_gcurun


def test_the_table_gives_each_host_one_row():
    res = run_gcurun("--dry-run", "-H", "node[0001-1000]:8", "python", "train.py")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "launcher ssh, 8000 ranks on 1000 host(s), accelerator gcu " \
                       "(TOPS_VISIBLE_DEVICES: each rank sees its host's devices, its own " \
                       "at index LOCAL_RANK)"
    rows = [line.split() for line in lines[2:] if line[:1].isdigit()]
    assert len(rows) == 1000
    assert rows[0] == ["0-7", "node0001", "0-7/8", "0/1000", "0", "0-7", "0-7", "-",
                       "python", "train.py"]
    assert rows[-1] == ["7992-7999", "node1000", "0-7/8", "999/1000", "999", "0-7", "0-7",
                        "-", "python", "train.py"]


def test_a_hundred_thousand_ranks_on_one_host_make_one_row():
    res = run_gcurun("--dry-run", "-np", "100000", "--oversubscribe", "true", timeout=300)
    assert res.returncode == 0, res.stderr
    rows = [line.split() for line in res.stdout.splitlines()[2:] if line[:1].isdigit()]
    assert rows == [["0-99999", "localhost", "0-99999/100000", "0/1", "0", "0-99999",
                     "0-99999", "-", "true"]]


def test_rows_that_differ_in_more_than_their_numbers_stay_apart():
    res = run_gcurun("--dry-run", "-H", "a:3,b:2", "--devices", "07,1,2", "true")
    assert res.returncode == 0, res.stderr
    rows = [line.split() for line in res.stdout.splitlines()[2:] if line[:1].isdigit()]
    assert rows == [["0-1", "a", "0-1/3", "0/2", "0", "07,1", "07,1,2", "-", "true"],
                    ["2", "a", "2/3", "0/1", "0", "2", "07,1,2", "-", "true"],  # no other
                    ["3-4", "b", "0-1/2", "1/2", "1", "07,1", "07,1,2", "-", "true"]]  # 2


def test_the_table_shows_what_each_rank_sees():
    res = run_gcurun("--dry-run", "-H", "a:4,b:4", "-np", "6", "--devices", "3,1,2,0",
                     "--accelerator", "cuda", "true")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "launcher ssh, 6 ranks on 2 host(s), accelerator cuda " \
                       "(CUDA_VISIBLE_DEVICES: each rank sees its host's devices, its own " \
                       "at index LOCAL_RANK)"
    assert lines[1].split() == ["rank", "host", "local", "cross", "node", "device", "visible",
                                "cpus", "command"]
    assert [line.split() for line in lines[2:5]] == [
        ["0-1", "a", "0-1/4", "0/2", "0", "3,1", "3,1,2,0", "-", "true"],
        ["2-3", "a", "2-3/4", "0/1", "0", "2,0", "3,1,2,0", "-", "true"],
        ["4-5", "b", "0-1/2", "1/2", "1", "3,1", "3,1,2,0", "-", "true"]]
    res = run_gcurun("--dry-run", "-H", "a:4,b:4", "-np", "6", "--device-isolation", "true")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "launcher ssh, 6 ranks on 2 host(s), accelerator gcu " \
                       "(TOPS_VISIBLE_DEVICES, --device-isolation: each rank sees its own " \
                       "device alone, at index 0)"
    assert [line.split() for line in lines[2:5]] == [
        ["0-1", "a", "0-1/4", "0/2", "0", "0-1", "own", "-", "true"],
        ["2-3", "a", "2-3/4", "0/1", "0", "2-3", "own", "-", "true"],
        ["4-5", "b", "0-1/2", "1/2", "1", "0-1", "own", "-", "true"]]


def test_the_json_streams_one_rank_a_line_and_parses_whole():
    res = run_gcurun("--dry-run", "--json", "-H", "node[0001-1000]:8", "true")
    assert res.returncode == 0, res.stderr
    rank_lines = [line for line in res.stdout.splitlines() if line.startswith('    {"rank": ')]
    assert len(rank_lines) == 8000
    plan = json.loads(res.stdout)
    assert [r["rank"] for r in plan["ranks"]] == list(range(8000))
    assert plan["ranks"][8]["host"] == "node0002" and plan["ranks"][8]["cross_rank"] == 1
    assert json.loads(rank_lines[8].rstrip(",")) == plan["ranks"][8]
    assert plan["sources"]["hosts"] == "cli" and plan["size"] == 8000
