"""Column views emitted before the late stores they read (``emit_units.late_reads_end``, docs/llm.md
section 5, session 25): the emitter's update "the views of the stored tensor take its writers
again" is needed in the emitted program's token graph.

Session 24 read this update as an equivalent mutant: without it the program bytes were the same on
the 4-head test layer and the 7B prefill layer, because there each view op (a head's column slice)
is emitted just before its reader, after the late stores the reader needs. The heads fuzz family's
seed 1 (``[64, 512] @ [512, 128]``, one ``Split`` into 4 heads) emits the 4 view ops right after the
projection (segments 1-4), and half of the V stores are built at the end of segment 6: the views
copy the writers before those stores exist. Without the update, 22 of the 38 loads of the heads'
columns on ``m100`` (2 of 10 on ``tiny``) have no token path to a store that wrote their columns,
and the program bytes differ (fuzz seeds 1, 6, 22, 44, 51 of the first 60). The programs stay right
only because sync-insert derives every hazard from the walks in the body order, and the body
follows the plan's predicted starts, where each load waits for its stores
(``PlanBuilder._late_reads_end``, test_late_read_stores).

Oracles: onnxruntime (race and deadlock checks on); the geometry of the plan's store boxes against
each view's columns, checked in the emitted program's token graph (each load has every
overlapping store among its ancestors) and body order (each such store before the load).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from m100.passes.schedule import m100_schedule

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_late_read_stores import view_loads  # noqa: E402

SEED = 1  # random_parts_graph(RandomChoices(SEED)): view ops before the stores they need


def _ancestors(op) -> set[int]:
    """ids of every operation ``op`` waits for through its operands (tokens, joins, buffers)."""
    seen: set[int] = set()
    stack = [op]
    while stack:
        o = stack.pop()
        for v in o.operands:
            w = v.owner
            if id(w) not in seen and hasattr(w, "operands"):
                seen.add(id(w))
                stack.append(w)
    return seen


def _check(em, pl, prog) -> tuple[int, int]:
    """(loads of a late-stored tensor's column views, of them views built before a store their
    columns need): every such load has, in the emitted program, every store of the tensor whose
    box overlaps its columns among its token ancestors and before it in the body."""
    tl, g = pl.timeline, pl.graph
    body = {id(o): k for k, o in enumerate(prog.body.block.ops)}
    n = early = 0
    seg_of = {st.op: j for j, seg in enumerate(tl.segments) for st in seg.stages}
    for si, reads in tl.late_reads.items():
        built = {}  # store task -> the segment at whose end it is built
        for j, ix in reads.items():
            for i in ix:
                for tid in tl.pieces[si][i].tasks:
                    built[tid] = j
        _, _, box, loads = view_loads(pl, si)
        view_seg = {o.outputs[0]: seg_of[o.name] for o in g.ops if o.outputs}
        for t, over in loads:
            load = em.task_ops[t.id]
            anc = _ancestors(load)
            for s in over:
                st = em.task_ops[s.id]
                assert id(st) in anc, (f"load of {t.tensor} (plan task {t.id}) does not wait for "
                                       f"the store (plan task {s.id}) of columns {box[s.id]}")
                assert body[id(st)] < body[id(load)], (t, s)
            n += 1
            early += any(built.get(s.id, si) >= view_seg[t.tensor] for s in over)
    return n, early


@pytest.mark.parametrize("machine", ["m100", "tiny"])
def test_views_before_their_late_stores(machine, monkeypatch, placements):
    from m100.passes.schedule.emit import Emitter
    from m100.tools.fuzz_graph import random_parts_graph, RandomChoices
    from m100.tools.fuzz_onnx import differential, tolerance

    ems = []

    def spy(irg, pl, m):
        em = Emitter(irg, pl, m)
        prog = em.run()
        ems.append((em, pl, prog))
        return prog

    monkeypatch.setattr(m100_schedule, "emit_program", spy)
    fg = random_parts_graph(RandomChoices(SEED))
    outs = differential(fg, (machine,), **tolerance(fg))
    assert [o.status for o in outs] == ["pass"], [o.detail for o in outs]
    late = [(em, pl, prog) for em, pl, prog in ems if pl.timeline.late_reads]
    assert late, "no late read stores: the test checks nothing"
    loads, early = _check(*late[-1])
    assert loads
    # the case: a view op emitted before a late store its columns need (else the update is moot)
    assert early, "every view op after the stores it needs: the test checks nothing"
