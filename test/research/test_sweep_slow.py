"""Slow tier: the 100-point random sweep over ResNet-18 (bench/specs/resnet18_dse.toml) on Ray,
its Pareto front checked by brute force, one point re-run independently."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_resnet18_random_sweep_100_points(tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "dse.csv"
    env = dict(os.environ, M100_CACHE_DIR=str(tmp_path / "cache"), RAY_AUTH_MODE="disabled")
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "dse_sweep.py"), "--workers", "2",
                        "--csv", str(out), "--plot", str(tmp_path / "pareto.png"),
                        "--no-progress"], capture_output=True, text=True, env=env, timeout=5400)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = list(csv.DictReader(open(out, newline="")))
    assert len(rows) == 100
    keys = [(x["machine.clusters"], x["machine.hbsm_bytes"], x["machine.ddr_bandwidth"],
             x["machine.clock_hz"], x["schedule.strategy"]) for x in rows]
    assert len(set(keys)) == 100  # distinct points
    ok = [x for x in rows if not x["error"]]
    assert len(ok) >= 80, [x["error"] for x in rows if x["error"]][:5]
    pts = [(float(x["latency_us"]), int(x["machine.clusters"]) * 4 * int(x["machine.hbsm_bytes"]))
           for x in ok]
    front = [p for p in pts if not any(q[0] <= p[0] and q[1] <= p[1] and q != p for q in pts)]
    assert front and "Pareto front" in r.stdout
    # the printed front has as many rows as the brute-force front
    block = r.stdout.split("Pareto front")[1].split("fastest point")[0].strip().splitlines()
    assert len(block) - 2 == len(front)  # title line, header line, one line per point
    assert (tmp_path / "pareto.png").stat().st_size > 10_000
    # one point again, independently, through the research API
    from m100 import api
    from m100.frontend import models
    x = ok[0]
    m = api.machine("m100").replace(clusters=int(x["machine.clusters"]),
                                     hbsm_bytes=int(x["machine.hbsm_bytes"]),
                                     ddr_bandwidth=float(x["machine.ddr_bandwidth"]),
                                     clock_hz=float(x["machine.clock_hz"]))
    c = api.compile(models.resnet18(hw=64), m, strategy=x["schedule.strategy"])
    assert float(x["cycles"]) == pytest.approx(c.run(mode="timing").cycles)
