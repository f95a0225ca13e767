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



def _masked_softmax(t: int):
    """``Softmax(s + triu(-1e4, 1))`` in f16 on a runtime ``[t, t]``: its causal mask is computed
    in the CVU op from two iotas (``from_ir.cvu._band_mask``)."""
    import numpy as np
    from m100.frontend.models import _onnx
    onnx, TP, helper, nph = _onnx()
    mask = np.triu(np.full((t, t), -1e4), 1).astype(np.float16)
    nodes = [helper.make_node("Add", ["s", "mask"], ["a"]),
             helper.make_node("Softmax", ["a"], ["p"], axis=-1)]
    g = helper.make_graph(nodes, "sm", [helper.make_tensor_value_info("s", TP.FLOAT16, [t, t])],
                          [helper.make_tensor_value_info("p", TP.FLOAT16, [t, t])],
                          [nph.from_array(mask, "mask")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("iota", ["f16", "f32"])
def test_a_mixed_width_cvu_op_is_predicted_as_simulated(iota, monkeypatch):
    """The CVU streams one element of every operand per beat, as wide as its widest operand
    (``sim/timing.py``): an f16 softmax whose mask is computed from f32 iotas takes twice the
    cycles of an all-f16 one. The plan charged the largest operand's bytes, so it predicted the
    f16 figure for both (the 7B prefill's heads: 2.0x per softmax instruction, session 14). Per
    CVU instruction, predicted busy cycles within 15 % of the interpreter's; the iotas are f16
    when every position is an f16 integer, else f32 (``F16_IOTA_MAX``, forced to 0 here)."""
    from m100.passes.schedule.from_ir import cvu
    from m100.targets.m100.isa import CvuPipeline, DType
    if iota == "f32":
        monkeypatch.setattr(cvu, "F16_IOTA_MAX", 0)
    rows = F.instruction_diff(F.Case("masked-softmax", lambda: _masked_softmax(256), 1,
                                     machine="tiny"))
    cvus = [r for r in rows if isinstance(r["inst"], CvuPipeline)]
    assert cvus
    want = DType.F16 if iota == "f16" else DType.F32
    for r in cvus:
        assert [w.dtype for w in r["inst"].inputs[1:]] == [want, want]
        pred, sim = r["pred_end"] - r["pred_start"], r["sim_end"] - r["sim_start"]
        assert abs(sim / pred - 1) <= TOLERANCE, (r["unit"], pred, sim)


def _halves_rope(t: int, h: int):
    """``y = x[:, :h] * c - x[:, h:] * s`` (f16, runtime x [t, 2h], c, s [t, h]): fold-slice-reads
    makes the CVU op read x's halves through strided walks (its box is half of x)."""
    import numpy as np
    from m100.frontend.models import _onnx
    onnx, TP, helper, nph = _onnx()
    ints = lambda n, v: nph.from_array(np.array(v, np.int64), n)  # noqa: E731
    nodes = [helper.make_node("Slice", ["x", "z", "h", "one", "one"], ["lo"]),
             helper.make_node("Slice", ["x", "h", "e", "one", "one"], ["hi"]),
             helper.make_node("Mul", ["lo", "c"], ["a"]), helper.make_node("Mul", ["hi", "s"], ["b"]),
             helper.make_node("Sub", ["a", "b"], ["y"])]
    vi = lambda n, sh: helper.make_tensor_value_info(n, TP.FLOAT16, sh)  # noqa: E731
    g = helper.make_graph(nodes, "rope", [vi("x", [t, 2 * h]), vi("c", [t, h]), vi("s", [t, h])],
                          [vi("y", [t, h])],
                          [ints("z", [0]), ints("h", [h]), ints("e", [2 * h]), ints("one", [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_a_strided_half_read_is_predicted_as_simulated():
    """A CVU op streams its piece's output elements; an input read through a strided box (half of
    x, fold-slice-reads) costs the box, not the whole tensor. The plan charged x's bytes, twice
    the interpreter's cycles (the 7B prefill's RoPE ops: pred/sim 1.95, session 14)."""
    from m100.targets.m100.isa import CvuPipeline
    rows = F.instruction_diff(F.Case("halves", lambda: _halves_rope(256, 64), 1, machine="tiny"))
    cvus = [r for r in rows if isinstance(r["inst"], CvuPipeline)]
    assert cvus and all(len(r["inst"].inputs) == 4 for r in cvus)  # lo, hi of x, c, s: one op
    for r in cvus:
        pred, sim = r["pred_end"] - r["pred_start"], r["sim_end"] - r["sim_start"]
        assert abs(sim / pred - 1) <= TOLERANCE, (r["unit"], pred, sim)
