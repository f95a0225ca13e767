"""Small vector ops of a DMA-bound plan moved to fewer TPBs (``narrow_vectors``, issue 13 decode).

A W4A16 GEMV chain with an elementwise product between the GEMVs. Oracles: the invariants of the
refinement from the configurations alone (only one-stage CVU segments change, each to a prefix of
its TPBs, the plan gets shorter, the returned plan is the one a fresh build of the returned
segments gives), the DMA-busy gate computed by hand, and numpy from the ``DequantizeLinear``
definition on the program compiled from a narrowed plan.
"""

from dataclasses import replace

import numpy as np
import pytest
from onnx import TensorProto, helper

from m100.passes.schedule import narrow_vectors, placement
from m100.passes.schedule.plan import Plan, PlanTask
from m100.targets.m100.machine import get_machine

from .test_widen_gemvs import _w4_reference, _w4_weight

M100 = get_machine("m100")
DIMS, B = (1024, 4096, 4096), 128
WIDE = 8  # the TPBs the product is spread over before the refinement


def _model():
    """x [1, 1024] @ W0 [1024, 4096] * c [1, 4096] @ W1 [4096, 4096] (W int4 + f16 scales per
    128 rows, shape-only)."""
    nodes, inits, prev = [], [], "x"
    for i, (k, n) in enumerate(zip(DIMS, DIMS[1:])):
        inits += _w4_weight(i, k, n, B)
        out = "y" if i == len(DIMS) - 2 else f"y{i}"
        nodes += [helper.make_node("DequantizeLinear", [f"q{i}", f"s{i}"], [f"w{i}"], axis=0,
                                   block_size=B),
                  helper.make_node("MatMul", [prev, f"w{i}"], [out])]
        prev = out
        if i == 0:
            nodes.append(helper.make_node("Mul", [prev, "c"], ["m0"]))
            prev = "m0"
    g = helper.make_graph(
        nodes, "w4_mul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, DIMS[0]]),
         helper.make_tensor_value_info("c", TensorProto.FLOAT16, [1, DIMS[1]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, DIMS[-1]])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m


def _widen(s, segs):
    """``segs`` with the product (a one-stage CVU segment) spread over :data:`WIDE` TPBs (column
    parts): what the search picks for the small RoPE ops of a decode layer."""
    out = []
    for seg in segs:
        st = seg.stages[0]
        if len(seg.stages) == 1 and s.ops[st.op].unit.startswith("cvu."):
            seg = replace(seg, stages=(replace(st, tpbs=tuple(range(WIDE)), gc=WIDE, bands=1),))
        out.append(seg)
    assert out != segs
    return out


def _spy(monkeypatch, seen):
    orig = placement.narrow_vector_ops

    def spy(s, segs, tl, keep):
        wide = _widen(s, segs)
        tlw = s.sched.build(wide, keep=keep)
        out = orig(s, wide, tlw, keep)
        seen.append((s, wide, tlw, keep, out))
        return out
    monkeypatch.setattr(placement, "narrow_vector_ops", spy)


def test_dma_busy_is_the_engines_busy_share_of_the_makespan():
    def t(i, unit, start, end):
        return PlanTask(id=i, kind="dma-in" if unit == "dma" else "compute", unit=unit, tpb=0,
                        op="o", tensor="t", nbytes=1, cycles=end - start, deps=[], start=start,
                        end=end)
    tl = Plan(tasks=[t(0, "dma", 0, 30), t(1, "dma", 10, 50), t(2, "tcu", 0, 100)])
    assert tl.makespan == 100
    assert narrow_vectors.dma_busy(tl, 2) == pytest.approx((30 + 40) / 200)


def test_a_spread_vector_op_is_narrowed_only_shorter_plans_are_kept_and_it_matches_numpy(
        monkeypatch):
    from m100.tools import driver
    monkeypatch.setattr(narrow_vectors, "MIN_DMA_BUSY", 0.0)  # (the gate: checked below)
    seen = []
    _spy(monkeypatch, seen)
    # on the serial DMA engine (depth 1: every small transfer pays its whole latency on the
    # engine) narrowing this model's vector ops shortens the plan; with two transfers in flight
    # (the m100 default since session 11) the latencies overlap and nothing is gained here
    cr = driver.compile(_model(), machine=M100.replace(dma_outstanding=1))
    s, wide, tlw, keep, (segs2, tl2) = seen[-1]
    changed = [(a.stages[0], b.stages[0]) for a, b in zip(wide, segs2) if a != b]
    assert changed, "narrow_vector_ops changed nothing: the test checks nothing"
    assert len(segs2) == len(wide) and tl2.makespan < tlw.makespan
    for a, b in changed:
        assert s.ops[b.op].unit.startswith("cvu.")
        assert len(b.tpbs) in (1, 2) and b.tpbs == a.tpbs[:len(b.tpbs)]
        assert b.gc == 1 and b.bands == len(b.tpbs)
    assert s.sched.build(segs2, keep=keep).makespan == tl2.makespan
    # a plan whose DMA engines are busy less than MIN_DMA_BUSY of the makespan: no trial
    monkeypatch.setattr(narrow_vectors, "MIN_DMA_BUSY", 1.01)
    monkeypatch.setattr(s.sched, "shorter", lambda *a, **k: pytest.fail("a trial was built"))
    segs3, tl3 = narrow_vectors.narrow_vector_ops(s, wide, tlw, keep)
    assert segs3 is wide and tl3 is tlw
    # the program (of the narrowed plan) against numpy
    rng = np.random.default_rng(11)
    feed = {"x": rng.standard_normal((1, DIMS[0])).astype(np.float16),
            "c": rng.standard_normal((1, DIMS[1])).astype(np.float16)}
    want = _w4_reference(rng, feed, DIMS, B, after=lambda i, y: y if i else (
        y.astype(np.float32) * feed["c"].astype(np.float32)).astype(np.float16))
    got = driver.run(cr.program, feed, machine=cr.machine).outputs["y"].reshape(want.shape)
    # f32 accumulation, one f16 rounding per GEMV and per product: a few ulps; a wrong band or
    # TPB is off by about the values themselves
    d = np.abs(got.astype(np.float64) - want.astype(np.float64))
    assert np.all(d <= 8 * np.abs(np.spacing(want)) + 2e-3 * np.abs(want).max())
