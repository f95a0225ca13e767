"""Late stores (``build_segments.LATE_STORES``, docs/schedule.md "Late stores"): the output stores
of a lockstep contraction's last group are built after the next lockstep contraction's first
K-chunk steps, so that contraction's loads and compute wait for the first one's last compute on a
TPB, not for its stores (LLaMA's Q / K / V projections: the store of one overlaps the next).

Oracles: onnxruntime (``m100 check``: the program's values and no race or deadlock report), the
same program built without late stores (the same bits), and the dependencies the definition
allows: a consumer of the first result must still wait for all of its stores.
"""

from __future__ import annotations

import numpy as np
import pytest

from m100.passes.schedule import build_segments


def _two_gemms(chain: bool):
    """``q = x @ wq`` and ``k = x @ wk`` (independent: both read ``x``), or, with ``chain``,
    ``k = q @ wk`` (the second reads the first's result)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    m, k, n = 128, 2048, 256
    rng = np.random.default_rng(3)
    wq = (rng.standard_normal((k, n)) / 64).astype(np.float32)
    wk = (rng.standard_normal((n if chain else k, n)) / 16).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"]),
             helper.make_node("MatMul", ["q" if chain else "x", "wk"], ["kk"])]
    graph = helper.make_graph(
        nodes, "two_gemms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("q", TensorProto.FLOAT, [m, n]),
         helper.make_tensor_value_info("kk", TensorProto.FLOAT, [m, n])],
        [numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(wk, "wk")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _check(model, late: bool, monkeypatch, placements):
    from m100.tools import driver
    monkeypatch.setattr(build_segments, "LATE_STORES", late)
    x = np.random.default_rng(4).standard_normal((128, 2048)).astype(np.float32)
    ck = driver.check(model, inputs={"x": x}, machine="m100", tpbs=4, strategy="data-parallel")
    assert ck.result.reports == [] and ck.problems == [], ck.problems[:3]
    assert ck.passed, ck.summary()
    return placements[-1], ck.result.outputs


def test_late_stores_overlap_the_next_gemm_and_give_the_same_bits(monkeypatch, placements):
    model = _two_gemms(chain=False)
    pl, got = _check(model, True, monkeypatch, placements)
    tl = pl.timeline
    assert tl.late, "no late stores: the test checks nothing"
    s0 = min(tl.late)
    first = min(t.start for t in tl.tasks if t.segment == s0 + 1 and t.kind == "compute")
    stores = [t for t in tl.tasks if t.segment == s0 and t.kind == "dma-out"]
    # the next GEMM computes before the first one's last store is done (the point of it) ...
    assert first < max(t.end for t in stores)
    # ... and its transfers into a TPB wait for that TPB's last compute of the first GEMM
    last = {}
    for t in tl.tasks:
        if t.segment == s0 and t.kind == "compute":
            last[t.tpb] = max(last.get(t.tpb, 0.0), t.end)
    for t in tl.tasks:
        if t.segment == s0 + 1 and t.kind == "dma-in":
            assert all(t.start >= last.get(x, 0.0) - 1e-6 for x in t.dst_tpbs), t
    pl2, want = _check(model, False, monkeypatch, placements)
    assert not pl2.timeline.late
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_no_late_stores_into_a_reader_of_the_result(monkeypatch, placements):
    """The second GEMM reads the first's result: its loads wait for every store of it."""
    pl, _ = _check(_two_gemms(chain=True), True, monkeypatch, placements)
    tl = pl.timeline
    assert not tl.late
    q = pl.graph.ops[0].outputs[0] if pl.graph is not None else None
    ends = [t.end for t in tl.tasks if t.kind == "dma-out" and t.tensor == q]
    reads = [t.start for t in tl.tasks if t.kind == "dma-in" and t.tensor == q]
    if ends and reads:
        assert min(reads) >= max(ends) - 1e-6


@pytest.mark.parametrize("late", [True, False])
def test_checkpoints_resume_to_the_full_build(late, monkeypatch):
    """A build resumed from a checkpoint (``resume``) equals the full build with late stores on:
    no checkpoint is taken while a segment's stores are pending."""
    from m100.passes.schedule.cost import CostModel
    from m100.passes.schedule.examples import GraphBuilder
    from m100.passes.schedule.segment import SegmentCfg, StageCfg
    from m100.passes.schedule.timeline import Scheduler
    from m100.targets.m100.machine import get_machine
    monkeypatch.setattr(build_segments, "LATE_STORES", late)
    b = GraphBuilder()
    x = b.input((128, 2048))
    b.output(b.matmul(x, 256))
    g = b.output(b.matmul(x, 256))
    g = b.output(b.matmul(x, 256))
    s = Scheduler(CostModel(get_machine("m100")), g)
    segs = [SegmentCfg((StageCfg(o.name, tuple(range(4)), 1, 8),), "data-parallel")
            for o in g.ops]
    full = s.build(segs, checkpoints={1, 2})
    assert bool(full.late) == late
    assert (1 in full.checkpoints) == (not late)  # segment 0's stores pend into segment 1
    segs2 = segs[:2] + [SegmentCfg((StageCfg(g.ops[2].name, tuple(range(4, 8)), 1, 8),),
                                   "data-parallel")]
    resumed = s.build(segs2, base=full)
    assert resumed.to_json() == s.build(segs2).to_json()
