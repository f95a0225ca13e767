"""The fidelity gate (issue 9): the scheduler's prediction holds on the interpreter.

Every case of ``bench/fidelity.py`` is compiled end to end and run timing-only; the program's own
``predicted_cycles`` must be within 15 % of the interpreter's cycles. Small cases run by default (a
few seconds each), the big ones (issue-9 acceptance GEMMs, ResNet-18 224, ...) in the slow tier.

Cases whose gap is known and caused by the emitter not moving data the way the timeline planned
(issue 9, "What to build" 1-2: per-TPB DMAs instead of broadcasts, one DMA engine, in-order DMA
queues) are strict xfails with the measured ratio: when the emission is fixed the test XPASSes and
fails, so the entry must then be removed (the gate tightens itself).
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
_spec = importlib.util.spec_from_file_location("m100_bench_fidelity",
                                               os.path.join(ROOT, "bench", "fidelity.py"))
F = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = F  # dataclasses look their module up there
_spec.loader.exec_module(F)  # type: ignore[union-attr]

TOLERANCE = 0.15

# case -> why it is outside the tolerance today (measured sim/pred in docs/schedule.md "Fidelity")
KNOWN_GAPS: dict[str, str] = {
    # (session 10: llama-layer-8, 1.169 since the 8-row granule, is within 1 %: the plan now
    # charges the sync update of a CCB DMA to its consumer, list_schedule.ListScheduler.add)
}


def _check(name: str) -> None:
    row = F.measure(F.CASES[name])
    assert row["pred"] > 0 and row["sim"] > 0, row
    ratio = row["sim"] / row["pred"]
    assert abs(ratio - 1) <= TOLERANCE, (
        f"{name}: simulated {row['sim']} vs predicted {row['pred']} cycles (sim/pred {ratio:.3f}); "
        f"diff them per instruction with bench/fidelity.py --diff {name}")


def _params(small: bool):
    out = []
    for name, c in F.CASES.items():
        if c.small != small:
            continue
        marks = [pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[name])] if name in KNOWN_GAPS else []
        if not small:
            marks.append(pytest.mark.slow)
        out.append(pytest.param(name, marks=marks, id=name))
    return out


@pytest.mark.parametrize("name", _params(small=True))
def test_fidelity_small(name):
    _check(name)


@pytest.mark.parametrize("name", _params(small=False))
def test_fidelity_big(name):
    _check(name)


def test_measure_counts_the_work():
    """The bench's figures come from the interpreter's counts; check them against the op definition:
    a 256^3 GEMM is 256^3 MACs, and DDR carries at least both operands and the result once."""
    from m100.tools import driver
    cr = driver.compile(F.gemm_runtime(256, 256, 256), machine="m100", tpbs=8)
    res = F.simulate_timing(cr.program)
    assert res.stats["tcu_macs"] == 256 ** 3
    assert F.ddr_bytes(res.stats) >= 3 * 256 * 256 * 4
    row = F.measure(F.CASES["gemm256-rt-8"])
    # utilization of all 56 TPBs x 56 / TPBs-with-a-TCU-instruction == utilization of those used
    assert math.isclose(row["tcu_all"] * 56 / 8, row["tcu_used"], rel_tol=0.01)

