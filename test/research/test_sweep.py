"""m100.sweep / `m100 sweep`: spec checking, points, Ray and process-pool runs, cache, error rows.

Oracles: the grid's cartesian product (enumerated here), an independent compile + interpreter run
of a point through the research API in this process, and the two backends against each other.
"""

from __future__ import annotations

import csv
import itertools
import os
import subprocess
import sys

import pytest

from m100 import api, sweep
from m100.targets.m100.machine import get_machine

SPEC = """
model = "builtin:convnet"
machine = "tiny"
metrics = ["cycles", "latency_us", "tcu_util", "ddr_bytes", "compile_s", "pred_cycles", "cached"]
[grid]
"machine.hbsm_bytes" = [32768, 65536]
schedule.strategy = ["data-parallel", "pipeline"]
"""


def _spec(tmp_path, text=SPEC, name="spec.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def _read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# --- the spec ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,msg", [
    ('machine = "tiny"\n[grid]\n"machine.clusters" = [1]', "needs a 'model'"),
    ('model = "builtin:nope"\n[grid]\n"machine.clusters" = [1]', "unknown builtin model 'nope'"),
    ('model = "missing.onnx"\n[grid]\n"machine.clusters" = [1]', "no such file"),
    ('model = "builtin:mlp"\n[grid]\n"machine.hbsm" = [1]', "'hbsm' is not a machine field"),
    ('model = "builtin:mlp"\n[grid]\n"schedule.strat" = ["x"]', "unknown schedule option"),
    ('model = "builtin:mlp"\n[grid]\n"foo.bar" = [1]', "must start with 'machine.' or"),
    ('model = "builtin:mlp"\n[grid]\n"machine.clusters" = 1', "needs a non-empty list"),
    ('model = "builtin:mlp"\n[grid]', "the [grid] table is empty"),
    ('model = "builtin:mlp"\nsamples = 5\n[grid]\n"machine.clusters" = [1, 2]',
     "samples = 5 but the grid has only 2 points"),
    ('model = "builtin:mlp"\nmetrics = ["speed"]\n[grid]\n"machine.clusters" = [1]',
     "unknown metric 'speed'"),
    ('model = "builtin:mlp"\ncolour = 1\n[grid]\n"machine.clusters" = [1]', "unknown key(s) colour"),
    ('model = "builtin:mlp"\nmachine = "nope"\n[grid]\n"machine.clusters" = [1]',
     "unknown machine 'nope'"),
    ('model = [', "not valid TOML"),
])
def test_bad_specs_are_one_line_errors(tmp_path, text, msg):
    p = _spec(tmp_path, text)
    with pytest.raises(sweep.SweepError) as e:
        sweep.run(sweep.load_spec(p), backend="serial", progress=False)
    assert msg in str(e.value) and str(p) in str(e.value) and "\n" not in str(e.value)


def test_bad_spec_on_the_command_line(tmp_path):
    p = _spec(tmp_path, 'model = "builtin:mlp"\n[grid]\n"machine.hbsm" = [1]')
    r = subprocess.run([sys.executable, "-m", "m100.tools.m100_cli", "sweep", str(p)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith("m100: error: ") and "'hbsm' is not a machine field" in r.stderr


def test_points_product_and_random_samples(tmp_path):
    grid = {"machine.clusters": [1, 2, 3], "machine.hbsm_bytes": [32768, 65536],
            "schedule.strategy": ["auto", "pipeline"]}
    spec = sweep.parse_spec({"model": "builtin:mlp", "grid": grid})
    pts = spec.points()
    want = [dict(zip(grid, v, strict=True)) for v in itertools.product(*grid.values())]
    assert pts == want
    spec.samples, spec.seed = 7, 3
    sample = spec.points()
    assert len(sample) == 7 and all(p in want for p in sample)
    assert len({tuple(p.values()) for p in sample}) == 7  # distinct
    assert sample == spec.points()  # seeded
    spec.seed = 4
    assert sample != spec.points()


# --- running ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("m100cache")


@pytest.fixture(scope="module")
def ray_rows(tmp_path_factory, cache):
    """The acceptance run: 2 x 2 grid, `m100 sweep` on Ray with 2 workers."""
    pytest.importorskip("ray")
    d = tmp_path_factory.mktemp("sweep")
    p = _spec(d)
    out = d / "results.csv"
    env = dict(os.environ, M100_CACHE_DIR=str(cache), RAY_AUTH_MODE="disabled")
    r = subprocess.run([sys.executable, "-m", "m100.tools.m100_cli", "sweep", str(p),
                        "--workers", "2", "-o", str(out), "--no-progress"],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr
    assert "on Ray, 2 local workers" in r.stderr
    assert "wrote" in r.stdout and "4 points, 0 with an error" in r.stdout
    return _read(out)


def test_ray_sweep_writes_one_row_per_point(ray_rows):
    assert len(ray_rows) == 4
    assert [(r["machine.hbsm_bytes"], r["schedule.strategy"]) for r in ray_rows] == \
        [(h, s) for h in ("32768", "65536") for s in ("data-parallel", "pipeline")]
    for r in ray_rows:
        assert r["error"] == "" and r["cached"] == "False"
        assert float(r["cycles"]) > 0 and float(r["compile_s"]) > 0 and float(r["ddr_bytes"]) > 0
        assert float(r["latency_us"]) == pytest.approx(float(r["cycles"]) / 1.5e3)


def test_ray_rows_match_an_independent_run(ray_rows):
    """The point's machine field and schedule option reach the compiler: the same configuration
    compiled and run here through the research API gives the same cycles."""
    model = api.load(sweep.ModelRef(builtin="convnet").load())
    for r in (ray_rows[0], ray_rows[3]):
        m = get_machine("tiny").replace(hbsm_bytes=int(r["machine.hbsm_bytes"]))
        c = api.compile(model, m, strategy=r["schedule.strategy"])
        run = c.run(mode="timing")
        assert float(r["cycles"]) == pytest.approx(run.cycles)
        assert float(r["pred_cycles"]) == pytest.approx(c.predicted_cycles, abs=1)
        assert float(r["tcu_util"]) == pytest.approx(run.tcu_util)


def test_process_pool_same_rows_from_the_cache(ray_rows, cache, tmp_path, monkeypatch):
    """The same sweep in a process pool of 2 workers: the compiles come from the cache the Ray
    run wrote (keyed by model hash, machine fingerprint, options) and the metrics are equal."""
    monkeypatch.setenv("M100_CACHE_DIR", str(cache))
    rows = sweep.run(sweep.load_spec(_spec(tmp_path)), workers=2, backend="process",
                     progress=False)
    assert len(rows) == 4
    for got, want in zip(rows, ray_rows, strict=True):
        assert got["error"] == "" and got["cached"] is True
        assert got["cycles"] == pytest.approx(float(want["cycles"]))
        assert got["schedule.strategy"] == want["schedule.strategy"]


def test_failures_are_rows(tmp_path, monkeypatch):
    """An HBSM too small for the conv tiles fails in the compiler: that point is a row with the
    error; the other point still runs."""
    monkeypatch.setenv("M100_CACHE_DIR", str(tmp_path))
    df = sweep.sweep({"model": "builtin:convnet", "machine": "tiny",
                      "grid": {"machine.hbsm_bytes": [1024, 65536],
                               "schedule.strategy": ["data-parallel"]}},
                     backend="serial", progress=False, cache=False)
    assert list(df["machine.hbsm_bytes"]) == [1024, 65536]
    assert df.error[0] and "\n" not in df.error[0] and df.cycles.isna()[0]
    assert df.error[1] == "" and df.cycles[1] > 0


def test_without_ray_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sweep, "_ray_available", lambda: False)
    monkeypatch.setattr(sweep, "_run_pool", lambda tasks, workers, tick: [
        dict(t["point"], error="not run") for t in tasks])
    rows = sweep.run(sweep.parse_spec({"model": "builtin:mlp",
                                       "grid": {"machine.clusters": [1]}}),
                     workers=3, progress=False)
    assert rows == [{"machine.clusters": 1, "cycles": None, "latency_us": None, "tcu_util": None,
                     "ddr_bytes": None, "compile_s": None, "error": "not run"}]
    err = capsys.readouterr().err
    assert "Ray is not installed" in err and "local process pool of 3 workers" in err
    with pytest.raises(sweep.SweepError, match="Ray is not installed"):
        sweep.run(sweep.parse_spec({"model": "builtin:mlp", "grid": {"machine.clusters": [1]}}),
                  backend="ray", progress=False)


def test_pareto_front():
    import pandas as pd
    df = pd.DataFrame({"a": [1, 2, 3, 1, 0], "b": [3, 2, 1, 3, 9], "error": ["", "", "", "", "x"]})
    # (1,3) twice: neither dominates the other; (0,9) has an error
    assert list(sweep.pareto(df, ["a", "b"])) == [True, True, True, True, False]
    df.loc[1, "b"] = 4  # (2,4) is now dominated by (1,3)
    assert list(sweep.pareto(df, ["a", "b"])) == [True, False, True, True, False]
