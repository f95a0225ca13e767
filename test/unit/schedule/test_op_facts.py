"""Per-op facts the builder keeps instead of recomputing them per piece (issue 15, compile speed).

``kinds.tcu.plan_piece`` reads an op's operands, their element sizes and its piece cycles from
``Scheduler.tcu_facts``; ``PlanBuilder._piece`` its family, output element size, unit, output
memory and ``boxed_store`` from ``Scheduler.piece_facts``. Oracles: every kept fact equals the
fact computed from its definition (``dtype_bytes``, ``memory_of``, ``boxed_store``,
``CostModel.piece_cycles``) for the op it was kept for, and the whole placement equals the one with
the facts computed per piece (a scheduler whose ``tcu_facts`` keeps nothing: the path of the
session-26 switch ``tcu.OP_FACTS`` off, dropped in session 31), on ResNet-18 32 and on an int4
GEMV chain (``w4`` scales) -- same segments, same ``Plan.to_json``.
"""

from m100.passes.schedule import build_segments, placement, timeline
from m100.passes.schedule.graph import dtype_bytes
from m100.passes.schedule.kinds import tcu
from m100.passes.schedule.list_schedule import boxed_store
from m100.passes.schedule.plan import Unit, op_family
from m100.passes.schedule.segment import memory_of
from m100.targets.m100.machine import get_machine

M100 = get_machine("m100")


class _KeepsNothing(dict):
    """A memo that never keeps an entry: every piece computes its op's facts again."""

    def __setitem__(self, key, value):
        pass


def _schedule(g, monkeypatch, tpbs, per_piece=False):
    scheds = []
    init = timeline.Scheduler.__init__

    def spy(self, *a, **kw):
        init(self, *a, **kw)
        if per_piece:
            self.tcu_facts = _KeepsNothing()
        scheds.append(self)

    monkeypatch.setattr(timeline.Scheduler, "__init__", spy)
    pl = placement.schedule(g, M100, tpbs=tpbs)
    monkeypatch.setattr(timeline.Scheduler, "__init__", init)
    return pl, scheds


def _check_facts(g, scheds):
    ops = {o.name: o for o in g.ops}
    n_tcu = n_piece = n_cycles = 0
    for s in scheds:
        for name, f in s.tcu_facts.items():
            op = ops[name]
            assert f[0] is op
            (_, family, x_t, w_t, rq, dq, bias, xb, wt, wdb, w4, sdb, post_in, pdb, bdb,
             grouped, pcyc) = f
            assert family == op_family(op.unit) and family in ("matmul", "conv")
            assert (x_t, w_t) == op.inputs[:2] and wt is g.tensors[w_t]
            assert (rq, dq, w4, post_in) == tuple(op.attrs.get(k) for k in (
                "rq_table", "dq_table", "w4", "post_in"))
            extra = op.inputs[2] if len(op.inputs) > 2 else None
            assert bias == (extra if extra not in (None, rq, dq, post_in) else None)
            assert xb == dtype_bytes(g.tensors[x_t].dtype)
            assert wdb == dtype_bytes(g.tensors[w_t].dtype)
            assert sdb == (dtype_bytes(g.tensors[w4[0]].dtype) if w4 else 0)
            assert pdb == (dtype_bytes(g.tensors[post_in].dtype) if post_in else 0)
            assert bdb == (dtype_bytes(g.tensors[bias].dtype) if bias else 0)
            assert grouped == (op.unit == "tcu.conv2d" and op.attrs.get("groups", 1) > 1)
            for (rows, cols, k), cyc in pcyc.items():
                assert cyc == s.cm.piece_cycles(g, op, rows, cols, k)
                n_cycles += 1
            n_tcu += 1
        for name, f in s.piece_facts.items():
            op = ops[name]
            assert f == (op, op_family(op.unit), dtype_bytes(g.tensors[op.outputs[0]].dtype),
                         Unit.of_op(op.unit).value, memory_of(s.cm, g, op.outputs[0]),
                         boxed_store(g, op))
            n_piece += 1
    return n_tcu, n_piece, n_cycles


def _same_without_facts(g, monkeypatch, tpbs):
    pl, scheds = _schedule(g, monkeypatch, tpbs)
    counts = _check_facts(g, scheds)
    assert all(counts), counts  # the facts were kept and read
    plain, scheds = _schedule(g, monkeypatch, tpbs, per_piece=True)
    assert all(not s.tcu_facts for s in scheds)
    assert pl.segments == plain.segments
    assert pl.timeline.to_json() == plain.timeline.to_json()
    return pl


def test_facts_are_the_ops_and_the_plan_is_the_same(resnet_graph, monkeypatch):
    _same_without_facts(resnet_graph, monkeypatch, 8)


def test_int4_chain_same_plan_with_and_without_facts(monkeypatch):
    from .test_wshare import _graph
    g = _graph()
    assert any(o.attrs.get("w4") for o in g.ops)
    _same_without_facts(g, monkeypatch, 0)


def test_a_fact_kept_for_another_op_of_the_same_name_is_not_used(resnet_graph):
    """The facts are keyed by op name but kept with the op: facts kept for a different ``Op``
    object under that name (a refinement's copy) are not read -- a build from a scheduler whose
    memos hold wrong facts for other objects equals a build from a fresh one."""
    from dataclasses import replace
    from types import SimpleNamespace

    from m100.passes.schedule.cost import CostModel
    g = resnet_graph
    segs = placement.schedule(g, M100, tpbs=8).segments
    fresh = timeline.Scheduler(CostModel(M100), g).build(segs)
    s = timeline.Scheduler(CostModel(M100), g)
    for op in g.ops:
        other = replace(op)  # equal, but another object
        f = build_segments._piece_facts(s.cm, g, other)
        s.piece_facts[op.name] = f[:2] + (f[2] * 2,) + f[3:]  # wrong output bytes
        if op.unit in ("tcu.matmul", "tcu.conv2d"):
            f = tcu._op_facts(SimpleNamespace(g=g), other)
            s.tcu_facts[op.name] = f[:9] + (f[9] * 2,) + f[10:]  # wrong weight bytes
    poisoned = s.build(segs)
    assert poisoned.to_json() == fresh.to_json()
