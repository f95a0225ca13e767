"""`m100 bench`: the one entry to the scripts of bench/ (list, run with a table + JSON)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _m100(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "m100.tools.m100_cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_list_names_every_script_with_its_docstring():
    r = _m100("bench", "--list")
    assert r.returncode == 0, r.stderr
    names = [line.split()[0] for line in r.stdout.splitlines()]
    assert names == sorted(p.stem for p in BENCH.glob("*.py") if not p.name.startswith("_"))
    assert any("dataflow vs barrier-all" in line for line in r.stdout.splitlines()
               if line.startswith("sync_modes"))


def test_run_prints_the_table_and_writes_json(tmp_path):
    r = _m100("bench", "sync_modes", "--tiles", "2", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = json.loads((tmp_path / "out" / "bench" / "sync_modes.json").read_text())
    assert {row["mode"] for row in rows} == {"dataflow", "barrier-all"}
    for row in rows:  # every JSON row is a line of the printed table
        assert any(row["workload"] in line and row["mode"] in line and
                   f"{row['cycles']}" in line for line in r.stdout.splitlines())
    custom = tmp_path / "x.json"
    r = _m100("bench", "sync_modes", "--tiles", "2", "--json", str(custom), cwd=tmp_path)
    assert r.returncode == 0
    again = json.loads(custom.read_text())  # the same table again (insert_s is a wall time)
    assert [(x["workload"], x["mode"], x["cycles"]) for x in again] == \
        [(x["workload"], x["mode"], x["cycles"]) for x in rows]


def test_unknown_benchmark_is_a_user_error():
    r = _m100("bench", "nope")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "unknown benchmark 'nope'" in r.stderr and "sync_modes" in r.stderr
