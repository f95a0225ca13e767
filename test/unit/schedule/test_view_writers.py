"""The readers of a view wait for every store of its root, also for the stores built after the
view's own (empty) segment (``ListScheduler._wrote``, the emitter's shared writer list; session
26, issue 13, docs/llm.md section 5). A vector op's late stores (``build_segments.
LATE_WAVE_STORES``: RoPE's, between the prefill projections) pass over the views of its result
(reshape, transpose, the heads' slices) to the next projection; the views took their root's
writers when their segments were built -- none yet --, so a later load of a view waited for no
store of its bytes, in the plan and in the program. In the 4-head W8A8 layer with the heads' kT
/ v prefetched (``list_schedule.ACT_PREFETCH``) the plan started head 0's q loads of rows 85-105
before RoPE stored them, the program (in the plan's order) read stale SRAM bytes: y off by up to
0.75 (``test_act_prefetch``), every race check clean (the sync orders the stores after the loads,
as the body does).

Oracles: the bytes tensors share, derived here from ``OpGraph.views`` / ``wmap`` / ``view_ops``
(not the builder's bookkeeping), and the plan: every load of bytes the program writes (column
views excepted: they wait for the stores of their columns, ``test_late_read_stores``) depends,
transitively, on the store of those bytes that ends last, and starts after each of them ends;
onnxruntime (``m100 check``) on the outputs.
"""

from __future__ import annotations

import numpy as np
import pytest

from m100.passes.schedule import build_segments


def alias_root(g):
    """tensor -> one name per set of tensors sharing bytes (views, view ops, writer maps)."""
    par: dict[str, str] = {}

    def find(t: str) -> str:
        while par.get(t, t) != t:
            t = par[t]
        return t

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            par[max(ra, rb)] = min(ra, rb)

    for t, (r, _) in g.views.items():
        union(t, r)
    for t, v in g.wmap.items():
        union(t, v[0])
    for o in g.ops:
        if o.name in g.view_ops:
            for t in o.outputs:
                union(t, o.inputs[0])
    return find


def unordered_loads(pl) -> tuple[int, list]:
    """(loads of bytes the program writes, those not ordered after every store of those bytes:
    the store that ends last is not among the load's dependencies, transitively, or some store
    ends after the load starts). Not the stores of a matmul's plain 2-D result (``boxed_store``):
    a load of a box of it waits for the stores of that box only."""
    from m100.passes.schedule.list_schedule import boxed_store
    g, tl = pl.graph, pl.timeline
    root = alias_root(g)
    ops = {o.name: o for o in g.ops}
    stores: dict[str, list] = {}
    boxed: set[str] = set()  # (a box read waits for the stores of its box only: ``_box_deps``)
    for t in tl.tasks:
        if t.kind in ("dma-out", "dma-mem") and t.tensor not in g.cviews:
            stores.setdefault(root(t.tensor), []).append(t)
            if boxed_store(g, ops[t.op]):
                boxed.add(root(t.tensor))
    n, bad = 0, []
    for t in tl.tasks:
        if t.kind != "dma-in" or t.tensor in g.cviews or \
                g.tensors[t.tensor].kind in ("input", "weight"):
            continue
        ss = stores.get(root(t.tensor))
        if not ss or root(t.tensor) in boxed:
            continue
        n += 1
        end = max(s.end for s in ss)
        last = {s.id for s in ss if s.end >= end - 1e-6}  # (ties: any of them)
        seen, todo = set(), list(t.deps)
        while todo and not last & seen:
            d = todo.pop()
            if d not in seen:
                seen.add(d)
                todo.extend(tl.tasks[d].deps)
        early = [s.id for s in ss if s.end > t.start + 1e-6]
        if not last & seen or early:
            bad.append((t.id, t.op, t.tensor, t.start, sorted(last), early))
    return n, bad


def _model():
    """``e = x * x`` (a vector op, an output), ``z`` its reshape (a view), ``q = x @ wq`` (a
    contraction that does not read ``e``: ``e``'s stores are built during its first steps),
    ``r = z @ wr`` (loads ``z``: ``e``'s bytes)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    m, k, n = 128, 2048, 256
    rng = np.random.default_rng(5)
    wq = (rng.standard_normal((k, n)) / 64).astype(np.float32)
    wr = (rng.standard_normal((512, 64)) / 32).astype(np.float32)
    shape = np.array([m * k // 512, 512], np.int64)
    nodes = [helper.make_node("Mul", ["x", "x"], ["e"]),
             helper.make_node("Reshape", ["e", "shape"], ["z"]),
             helper.make_node("MatMul", ["x", "wq"], ["q"]),
             helper.make_node("MatMul", ["z", "wr"], ["r"])]
    graph = helper.make_graph(
        nodes, "late_wave_view", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [m, k]),
         helper.make_tensor_value_info("q", TensorProto.FLOAT, [m, n]),
         helper.make_tensor_value_info("r", TensorProto.FLOAT, [m * k // 512, 64])],
        [numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(wr, "wr"),
         numpy_helper.from_array(shape, "shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("late", [True, False])
def test_view_of_a_late_stored_result_waits_for_its_stores(late, monkeypatch, placements):
    from m100.tools import driver
    monkeypatch.setattr(build_segments, "LATE_WAVE_STORES", late)
    x = np.random.default_rng(6).standard_normal((128, 2048)).astype(np.float32)
    ck = driver.check(_model(), inputs={"x": x}, machine="m100", tpbs=4,
                      strategy="data-parallel")
    pl = placements[-1]
    tl = pl.timeline
    ops = {o.name: o for o in pl.graph.ops}
    vec = [si for si in tl.late if ops[tl.segments[si].stages[0].op].unit.startswith("cvu.")]
    # (the case: e's stores built after z's empty segment, during q's first steps)
    assert bool(vec) == late, tl.late
    n, bad = unordered_loads(pl)
    assert n, "no load reads bytes the program wrote: the test checks nothing"
    assert not bad, bad[:3]
    assert ck.result.reports == [] and ck.problems == [], ck.problems[:3]
    assert ck.passed, ck.summary()
