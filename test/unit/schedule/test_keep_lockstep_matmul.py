"""An activation kept in HBSM for lockstep matmuls (keep mode ``"all-mm"``, ``keep.choose_kept``'s
``matmul``; docs/schedule.md "Activations kept in HBSM"): each K chunk of a lockstep matmul --
rows x a range of the activation's columns -- is copied from the producer's kept pieces over the
mesh (one DTDU broadcast per producer piece to the column parts, or one copy per reader)
instead of being stored by the producer and broadcast from memory once per matmul (LLaMA
prefill: the normed ``xq`` read by the Q, K and V projections).

Oracles: onnxruntime (``m100 check``: values, no race or deadlock report), the bits of the same
model compiled without keeping, and the bytes each piece must receive (from the definition of a
K chunk: its rows x its columns of the activation, exactly once).
"""

from __future__ import annotations

import numpy as np
import pytest

from m100.passes.schedule import placement

M, K, N = 256, 2048, 512  # 8 TPBs: 4 rows x 2 column parts (broadcasts to 2)


def _model():
    """``h = relu(x)``, then ``q = h @ wq`` and ``k = h @ wk`` (both read ``h``)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(7)
    wq = (rng.standard_normal((K, N)) / 64).astype(np.float32)
    wk = (rng.standard_normal((K, N)) / 64).astype(np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["h"]),
             helper.make_node("MatMul", ["h", "wq"], ["q"]),
             helper.make_node("MatMul", ["h", "wk"], ["kk"])]
    graph = helper.make_graph(
        nodes, "keep_mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [M, K])],
        [helper.make_tensor_value_info("q", TensorProto.FLOAT, [M, N]),
         helper.make_tensor_value_info("kk", TensorProto.FLOAT, [M, N])],
        [numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(wk, "wk")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _check(mode: str | None, monkeypatch, placements):
    """``m100 check`` with the keep mode forced (``None``: nothing kept)."""
    from m100.tools import driver
    def keep(sched, segs, tl):
        if mode is None:
            return tl, ""
        return sched.build(segs, keep=mode), mode

    monkeypatch.setattr(placement, "keep_activations", keep)
    monkeypatch.setattr(placement, "kept_copies", lambda sched, segs, tl, k: (tl, k))
    x = np.random.default_rng(8).standard_normal((M, K)).astype(np.float32)
    ck = driver.check(_model(), inputs={"x": x}, machine="m100", tpbs=8,
                      strategy="data-parallel")
    assert ck.result.reports == [] and ck.problems == [], ck.problems[:3]
    assert ck.passed, ck.summary()
    return placements[-1], ck.result.outputs


@pytest.mark.parametrize("mode", ["all-mm", "all-mm+copies"])
def test_lockstep_matmuls_copy_their_chunks_from_the_kept_pieces(mode, monkeypatch, placements):
    pl, got = _check(mode, monkeypatch, placements)
    tl = pl.timeline
    relu = next(o for o in pl.graph.ops if o.unit == "cvu.elementwise")
    h = relu.outputs[0]
    mms = [o for o in pl.graph.ops if o.unit == "tcu.matmul"]
    assert relu.name in tl.kept, "h is not kept: the test checks nothing"
    segs = {st.op: si for si, seg in enumerate(tl.segments) for st in seg.stages}
    from m100.passes.schedule.segment import lockstep
    for o in mms:
        assert lockstep(tl.plans[o.name], o), "not a lockstep matmul: the test checks nothing"
    # one DTDU broadcast per producer piece to the column parts, or one copy per reader
    fan = {len(t.dst_tpbs) for t in tl.tasks if t.tensor == h and t.unit == "dtdu"}
    assert fan == ({1} if mode.endswith("+copies") else {2}), fan
    # nothing of h goes through memory: no store, no load
    assert not [t for t in tl.tasks if t.tensor == h and t.unit == "dma"]
    # each matmul piece receives its rows x every column of h exactly once, over the mesh
    for o in mms:
        recv: dict[int, float] = {}
        for t in tl.tasks:
            if t.tensor == h and t.unit == "dtdu" and t.segment == segs[o.name]:
                for x in t.dst_tpbs:
                    recv[x] = recv.get(x, 0.0) + t.nbytes
        want: dict[int, float] = {}
        for p in tl.pieces[segs[o.name]]:
            if p.op == o.name:
                want[p.tpb] = want.get(p.tpb, 0.0) + (p.r1 - p.r0) * K * 4
        assert recv == want
    _, base = _check(None, monkeypatch, placements)
    for name in base:
        np.testing.assert_array_equal(got[name], base[name])


@pytest.mark.parametrize("bands", [4, 8])
def test_a_one_tile_vector_piece_holds_its_buffers_once(bands, monkeypatch):
    """``partition.VECTOR_ONCE``: a one-stage vector segment of one round (a piece per TPB) whose
    piece is one tile fills each buffer once -- one slot each in the footprint the prefetch,
    kept tensors and late stores budget with (the room ``xq`` needs next to LLaMA's RoPE); with
    two rounds the buffers are reused by the next band: two slots."""
    from m100.passes.schedule import partition
    from m100.passes.schedule.cost import CostModel
    from m100.passes.schedule.examples import GraphBuilder
    from m100.passes.schedule.segment import SegmentCfg, StageCfg
    from m100.passes.schedule.timeline import Scheduler
    from m100.targets.m100.machine import get_machine
    b = GraphBuilder()
    g = b.output(b.eltwise(b.input((64, 512)), kind="relu"))
    op = g.ops[0]
    seg = SegmentCfg((StageCfg(op.name, tuple(range(4)), 1, bands),), "data-parallel")

    def plan(on: bool):
        monkeypatch.setattr(partition, "VECTOR_ONCE", on)
        return Scheduler(CostModel(get_machine("m100")), g).stage_plan(seg, seg.stages[0])
    on, off = plan(True), plan(False)
    assert on.tr == off.tr == 64 // bands  # one tile per piece either way
    assert {x.slots for x in off.buffers} == {2}
    if bands == 4:
        assert {x.slots for x in on.buffers} == {1} and 2 * on.footprint == off.footprint
    else:
        assert on.buffers == off.buffers
