"""Late stores of a vector segment (``build_segments.LATE_WAVE_STORES``, docs/schedule.md "Late
stores"): the output stores of a one-stage CVU segment built piece by piece are built after the
next lockstep contraction's first K-chunk steps, so that contraction's loads and compute wait for
the vector op's last compute on a TPB, not for its stores (LLaMA prefill: k's and q's RoPE
between the projections, each storing 8 MB).

Oracles: onnxruntime (``m100 check``: the program's values and no race or deadlock report), the
same program built without them (the same bits), and the dependencies the definition allows.
"""

from __future__ import annotations

import numpy as np

from m100.passes.schedule import build_segments


def _model():
    """``e = x * x`` (a vector op whose result is an output), then ``q = x @ wq`` (a contraction
    that does not read ``e``)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    m, k, n = 128, 2048, 256
    rng = np.random.default_rng(5)
    wq = (rng.standard_normal((k, n)) / 64).astype(np.float32)
    nodes = [helper.make_node("Mul", ["x", "x"], ["e"]),
             helper.make_node("MatMul", ["x", "wq"], ["q"])]
    graph = helper.make_graph(
        nodes, "late_wave", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [m, k]),
         helper.make_tensor_value_info("q", TensorProto.FLOAT, [m, n])],
        [numpy_helper.from_array(wq, "wq")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _check(model, late: bool, monkeypatch, placements):
    from m100.tools import driver
    monkeypatch.setattr(build_segments, "LATE_WAVE_STORES", late)
    x = np.random.default_rng(6).standard_normal((128, 2048)).astype(np.float32)
    ck = driver.check(model, inputs={"x": x}, machine="m100", tpbs=4, strategy="data-parallel")
    assert ck.result.reports == [] and ck.problems == [], ck.problems[:3]
    assert ck.passed, ck.summary()
    return placements[-1], ck.result.outputs, ck.compile.program


def _sim_overlap(prog) -> tuple[float, float]:
    """(first TCU instruction's start, last store into ``e``'s end) of a timing-only run of the
    program: the emitted program overlaps them as the plan does (its barriers and order)."""
    from m100.sim.simulator import Simulator
    from m100.targets.m100.isa import Unit
    e = next(s for s in prog.symbols if s.name == "e")
    res = Simulator(prog, mode="timing", check_races=False).run({})
    tcu = min(r.start for r in res.records if r.inst.executor[0] is Unit.TCU)
    stores = [r.end for r in res.records if r.inst.executor[0] is Unit.DMA and
              r.inst.dst.space is e.space and e.address <= r.inst.dst.base < e.address + e.nbytes]
    assert stores
    return tcu, max(stores)


def test_vector_stores_overlap_the_next_gemm_and_give_the_same_bits(monkeypatch, placements):
    pl, got, prog = _check(_model(), True, monkeypatch, placements)
    tl = pl.timeline
    ops = {o.name: o for o in pl.graph.ops}
    vec = [si for si in tl.late if ops[tl.segments[si].stages[0].op].unit.startswith("cvu.")]
    assert vec, f"no late stores of the vector op: the test checks nothing ({tl.late})"
    s0 = vec[0]
    nxt = min(t.segment for t in tl.tasks if t.segment > s0 and t.kind == "compute")
    assert ops[tl.segments[nxt].stages[0].op].unit == "tcu.matmul"
    first = min(t.start for t in tl.tasks if t.segment == nxt and t.kind == "compute")
    stores = [t for t in tl.tasks if t.segment == s0 and t.kind == "dma-out"]
    assert stores
    # the GEMM computes before the vector op's last store is done (the point of it) ...
    assert first < max(t.end for t in stores)
    # ... and its transfers into a TPB wait for that TPB's last compute of the vector op
    last: dict[int, float] = {}
    for t in tl.tasks:
        if t.segment == s0 and t.kind == "compute":
            last[t.tpb] = max(last.get(t.tpb, 0.0), t.end)
    for t in tl.tasks:
        if t.segment == nxt and t.kind == "dma-in":
            assert all(t.start >= last.get(x, 0.0) - 1e-6 for x in t.dst_tpbs), t
    # the program too: the GEMM computes before the last store (the emitter pauses the stores)
    tcu, end = _sim_overlap(prog)
    assert tcu < end
    pl2, want, prog2 = _check(_model(), False, monkeypatch, placements)
    tcu2, end2 = _sim_overlap(prog2)
    assert tcu2 >= end2
    assert not [si for si in pl2.timeline.late
                if ops[pl2.timeline.segments[si].stages[0].op].unit.startswith("cvu.")]
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
