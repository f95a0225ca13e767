"""A first run's shared derivations give the same results bit for bit as the per-instruction /
per-walk ones (issue 15): conv box plans by geometry (``semantics_tcu.SHARED_PLANS``), whole
walk view plans per levels tuple (``memory.SHARED_VIEW_PLANS``), a block's accesses made once
for its race items and view spec (``engine_checks.DERIVE_ONCE``). Each side runs a fresh decode
with empty tables, in every mode, with and without race checks, with random latencies and on
monitor-dropping mutants (races, deadlocks): outputs (bytes), stats, reports and records equal."""

from __future__ import annotations

import pytest

from e2e_helpers import monitor_sites, mutate
from m100.sim import engine_checks, memory, semantics_tcu, twu
from m100.targets.m100.program import Program
from m100.tools import driver
from test_speed_paths import CASES, _records, _same

SWITCHES = ((semantics_tcu, "SHARED_PLANS"), (memory, "SHARED_VIEW_PLANS"),
            (engine_checks, "DERIVE_ONCE"))


@pytest.mark.parametrize("name", ["mlp", "convnet", "llama",
                                  pytest.param("resnet18-32", marks=pytest.mark.slow)])
def test_shared_first_run_derivations_equal_per_instruction_ones(name, monkeypatch):
    build, machine, tpbs = CASES[name]
    cr = driver.compile(build(), machine=machine, tpbs=tpbs)
    inputs = driver.random_inputs(cr.program, 6)
    sites = monitor_sites(cr.program)
    mutants = [mutate(cr.program, s, "drop") for s in sites[:: max(1, len(sites) // 4)]]
    runs = ({"mode": "functional"}, {"mode": "full"}, {"mode": "timing"},
            {"mode": "functional", "check_races": False}, {"random_latency": 7})
    reported = 0
    for i, blob in enumerate(p.to_bytes() for p in [cr.program] + mutants):
        for kw in runs if i == 0 else runs[:2]:
            got = []
            for on in (True, False):
                for mod, flag in SWITCHES:
                    monkeypatch.setattr(mod, flag, on)
                twu._GEO.clear()
                twu._IDS.clear()
                semantics_tcu._PLANS.clear()
                prog = Program.from_bytes(blob)
                got.append(driver.run(prog, inputs, **kw))
                if kw == {"mode": "functional"}:  # and a replay of it, if one was kept
                    _same(driver.run(prog, inputs, **kw), got[-1])
            _same(got[0], got[1])
            assert _records(got[0]) == _records(got[1])
            reported += any(r.kind == "race" for r in got[0].reports)
    assert reported  # runs with race reports were compared too
