"""The readers of a concat whose parts are written in place (``OpGraph.in_place``) wait for
every store of those parts, also for the stores built after the concat's own (empty) segment
(``ListScheduler._wrote`` over ``graph.view_names``, the emitter's ``UnitEmitter.wrote``; session
27, the in-place twin of session 26's view writers: ``test_view_writers``). A vector op's late
stores (``build_segments.LATE_WAVE_STORES``) pass over the empty segment of a concat of it to the
next projection; the concat took its parts' writers when its segment was built -- the late part's
none yet --, so a later load of the concat waited only for the other part's stores, in the plan
(every load of the late part's rows) and in the program (the concat's writer list a copy).

Oracles: the bytes tensors share, from ``OpGraph.views`` / ``view_ops`` (``test_view_writers.
alias_root``, not the builder's bookkeeping); in the plan every load of program-written bytes
depends, transitively, on the store of those bytes that ends last and starts after each ends; in
the program every load instruction of those bytes reaches every store instruction of them through
its ``!sync.token`` operands; onnxruntime (``m100 check``, with the dataflow check) on the outputs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from m100.passes.schedule import build_segments

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_view_writers import alias_root, unordered_loads  # noqa: E402

M, K, N = 64, 1024, 128


def _model():
    """``e1 = x * x``, ``e2 = x + x`` (vector ops), ``cat = concat(e1, e2)`` (both parts written
    in place: an empty segment), ``q = x @ wq`` (a contraction that reads neither: ``e2``'s
    stores are built during its first steps), ``r = cat @ wr`` (loads both parts' rows)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(5)
    wq = (rng.standard_normal((K, N)) / 64).astype(np.float32)
    wr = (rng.standard_normal((K, 64)) / 32).astype(np.float32)
    nodes = [helper.make_node("Mul", ["x", "x"], ["e1"]),
             helper.make_node("Add", ["x", "x"], ["e2"]),
             helper.make_node("Concat", ["e1", "e2"], ["cat"], axis=0),
             helper.make_node("MatMul", ["x", "wq"], ["q"]),
             helper.make_node("MatMul", ["cat", "wr"], ["r"])]
    graph = helper.make_graph(
        nodes, "late_wave_concat", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [M, K])],
        [helper.make_tensor_value_info("q", TensorProto.FLOAT, [M, N]),
         helper.make_tensor_value_info("r", TensorProto.FLOAT, [2 * M, 64])],
        [numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(wr, "wr")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _reaches(op, targets: set[int]) -> set[int]:
    """The ids of ``targets`` (operations) that ``op`` waits for through its token operands,
    transitively."""
    from xdsl.ir import OpResult
    found, seen, todo = set(), set(), [op]
    while todo and found != targets:
        o = todo.pop()
        for v in o.operands:
            if isinstance(v, OpResult) and id(v.op) not in seen:
                seen.add(id(v.op))
                if id(v.op) in targets:
                    found.add(id(v.op))
                todo.append(v.op)
    return found


def unordered_instructions(pl, em) -> tuple[int, list]:
    """(load instructions of bytes the program writes, those that do not wait for every store
    instruction of those bytes through their tokens)."""
    g, tl = pl.graph, pl.timeline
    root = alias_root(g)
    stores: dict[str, set[int]] = {}
    for t in tl.tasks:
        if t.kind in ("dma-out", "dma-mem") and t.id in em.task_ops:
            stores.setdefault(root(t.tensor), set()).add(id(em.task_ops[t.id]))
    n, bad = 0, []
    for t in tl.tasks:
        if t.kind != "dma-in" or g.tensors[t.tensor].kind in ("input", "weight"):
            continue
        ss = stores.get(root(t.tensor))
        if not ss:
            continue
        n += 1
        missing = ss - _reaches(em.task_ops[t.id], ss)
        if missing:
            bad.append((t.id, t.op, t.tensor, len(missing)))
    return n, bad


@pytest.mark.parametrize("late", [True, False])
def test_concat_of_a_late_stored_part_waits_for_its_stores(late, monkeypatch, placements):
    from m100.passes.schedule import emit
    from m100.tools import driver
    monkeypatch.setattr(build_segments, "LATE_WAVE_STORES", late)
    ems = []
    run = emit.Emitter.run

    def spy(self):
        ems.append(self)
        return run(self)

    monkeypatch.setattr(emit.Emitter, "run", spy)
    x = np.random.default_rng(6).standard_normal((M, K)).astype(np.float32)
    ck = driver.check(_model(), inputs={"x": x}, machine="m100", tpbs=4,
                      strategy="data-parallel")
    pl, em = placements[-1], ems[-1]
    g, tl = pl.graph, pl.timeline
    ops = {o.name: o for o in g.ops}
    cat = next(o for o in g.ops if o.name in g.in_place)
    assert len(g.in_place[cat.name]) == 2, "the case: both parts written in place"
    vec = [si for si in tl.late if ops[tl.segments[si].stages[0].op].unit.startswith("cvu.")]
    # (the case: e2's stores built after the concat's empty segment, during q's first steps)
    assert bool(vec) == late, tl.late
    n, bad = unordered_loads(pl)
    assert n, "no load reads bytes the program wrote: the test checks nothing"
    assert not bad, bad[:3]
    n, bad = unordered_instructions(pl, em)
    assert n and not bad, bad[:3]
    assert ck.result.reports == [] and ck.problems == [], ck.problems[:3]
    assert ck.passed, ck.summary()
