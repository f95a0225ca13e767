"""The search's floors and tiler, cheaper and the same (issue 15, session 29).

* :func:`.search_floor._stage_busy` / :func:`.search_dma_floor.stage_dma` shared between stages
  of the same structure (``search_floor.SHARE_STAGES``: the op's structure, the stage's fields
  but op and TPBs, the TPBs as first-seen positions). Oracle: each floor of a real search,
  computed again from empty memos with the sharing off (the same number, the same TPB dict in
  the same order), and the whole placement with the sharing off.
* :func:`.partition.tile_piece` sums a contraction tiling's footprint without making its buffer
  list (``CHECK_FOOTPRINT``). Oracle: with ``"all"`` every candidate's buffer list (the list the
  tiler made before) is made and summed and must equal the arithmetic sum; run over real
  searches and over ops built to reach each kind of buffer (w4 scales, requant tables, K
  parts, ``once``, ``post_in``, bias, grouped convs, resident activations).
"""

from dataclasses import replace

import pytest

from m100.passes.schedule import partition, placement, search, search_floor
from m100.passes.schedule.cost import CostModel
from m100.passes.schedule.graph import ScheduleError
from m100.passes.schedule.search_dma_floor import dma_floor
from m100.passes.schedule.search_floor import tpb_busy
from m100.targets.m100.machine import get_machine

M100 = get_machine("m100")
_MEMOS = ("_busy_floor", "_busy_shapes", "_dma_floor", "_dma_shapes", "_seg_floors")


def _asked(monkeypatch):
    """Spy on the floors the search asks: [(scheduler, segment)]."""
    asked = []
    busy, dma = search.busy_floor, search.dma_floor

    def b(sched, seg):
        asked.append((sched, seg))
        return busy(sched, seg)

    def d(sched, seg):
        asked.append((sched, seg))
        return dma(sched, seg)

    monkeypatch.setattr(search, "busy_floor", b)
    monkeypatch.setattr(search, "dma_floor", d)
    return asked


def _fresh(sched, seg):
    """tpb_busy and dma_floor of ``seg`` from empty memos, the sharing off."""
    kept = {k: sched.__dict__.pop(k) for k in _MEMOS if k in sched.__dict__}
    was = search_floor.SHARE_STAGES
    search_floor.SHARE_STAGES = False
    try:
        return tpb_busy(sched, seg), dma_floor(sched, seg)
    finally:
        search_floor.SHARE_STAGES = was
        for k in _MEMOS:
            sched.__dict__.pop(k, None)
        sched.__dict__.update(kept)


@pytest.mark.parametrize("tpbs", [8, 0])
def test_shared_stage_floors_are_fresh_floors(resnet_graph, monkeypatch, tpbs):
    g = resnet_graph
    asked = _asked(monkeypatch)
    pl = placement.schedule(g, M100, tpbs=tpbs)
    scheds = {id(s): s for s, _ in asked}
    shared = sum(len(s.__dict__.get("_busy_shapes", {})) + len(s.__dict__.get("_dma_shapes", {}))
                 for s in scheds.values())
    memo = sum(len(s.__dict__.get("_busy_floor", {})) + len(s.__dict__.get("_dma_floor", {}))
               for s in scheds.values())
    assert shared < memo  # some stages were answered by another stage's structure
    seen = set()
    for sched, seg in asked:
        if (id(sched), seg) in seen:
            continue
        seen.add((id(sched), seg))
        got = tpb_busy(sched, seg), dma_floor(sched, seg)
        want = _fresh(sched, seg)
        assert got == want, seg
        if got[0] is not None:
            assert list(got[0]) == list(want[0])  # the same TPBs in the same order
    monkeypatch.setattr(search_floor, "SHARE_STAGES", False)
    plain = placement.schedule(g, M100, tpbs=tpbs)
    assert pl.segments == plain.segments
    assert pl.timeline.to_json() == plain.timeline.to_json()


def test_shared_stage_floors_fuzz_graphs(monkeypatch):
    from m100.tools.fuzz_graph import RandomChoices, random_graph
    from m100.tools.fuzz_int import random_int_graph
    from .test_shared_costs import _graph
    n = 0
    for seed in range(3):
        for make in (random_graph, random_int_graph):
            g = _graph(make(RandomChoices(seed)).model)
            asked = _asked(monkeypatch)
            placement.schedule(g, M100, tpbs=8)
            for sched, seg in dict.fromkeys(asked):
                assert (tpb_busy(sched, seg), dma_floor(sched, seg)) == _fresh(sched, seg), seg
                n += 1
            monkeypatch.undo()
    assert n > 0


def test_every_candidate_footprint_is_its_buffers(resnet_graph, monkeypatch):
    """A real search's tilings with every candidate's buffers made and summed."""
    monkeypatch.setattr(partition, "CHECK_FOOTPRINT", "all")
    pl = placement.schedule(resnet_graph, M100, tpbs=8)
    monkeypatch.setattr(partition, "CHECK_FOOTPRINT", True)
    assert pl.segments == placement.schedule(resnet_graph, M100, tpbs=8).segments


def _tile_all(cm, g, op, rows, cols, **kw):
    """tile_piece with every candidate checked, then without checks: the same plan (or both
    the same error)."""
    out = []
    for check in ("all", False):
        partition.CHECK_FOOTPRINT = check
        try:
            out.append(partition.tile_piece(cm, g, op, rows, cols, **kw))
        except (ScheduleError, TypeError) as e:  # (TypeError: no candidate at all, e.g.
            # a resident activation's column tile >= cols -- the search never asks that)
            out.append(("error", repr(e)))
        finally:
            partition.CHECK_FOOTPRINT = True
    assert out[0] == out[1]
    return out[0]


def test_footprints_of_every_buffer_kind():
    """Ops that reach each buffer of the tiler's list (w4 scales, requant tables, bias,
    ``post_in``, K parts' partial sums) over budgets, ``once``, K parts, resident activations."""
    from m100.frontend import models
    from m100.passes.schedule.graph import geometry
    from m100.tools.fuzz_graph import RandomChoices, random_graph
    from m100.tools.fuzz_int import random_int_graph
    from .test_shared_costs import _graph
    from .test_widen_gemvs import _w4_chain, _graph as w4_graph
    cm = CostModel(M100)
    graphs = [_graph(models.resnet18(hw=32, num_classes=10)), _graph(models.mlp()),
              w4_graph(_w4_chain((256, 512, 128)))]
    graphs += [_graph(make(RandomChoices(s)).model) for s in range(8)
               for make in (random_graph, random_int_graph)]
    plans, roles = 0, set()
    for g in graphs:
        ops = [o for o in g.ops if o.unit in ("tcu.matmul", "tcu.conv2d")]
        # a per-channel requant table (W8A8's ``rq_table``: the tiler reads only that it is
        # there) on each contraction too
        ops += [replace(o, attrs={**o.attrs, "rq_table": o.inputs[-1]}) for o in ops]
        for op in ops:
            gm = geometry(g, op)
            for rows in {gm.rows, max(1, gm.rows // 3)}:
                for cols in {gm.cols, max(1, gm.cols // 2)}:
                    for budget in (M100.hbsm_bytes, M100.hbsm_bytes // 8, 40_000):
                        for kw in ({}, {"chunked": True}, {"once": True}, {"kparts": 2},
                                   {"kparts": 2, "whole_parts": True},
                                   {"astreams": 2, "wstreams": 3}, {"act_whole": True},
                                   {"act_resident": 64}, {"wshare": 2}):
                            r = _tile_all(cm, g, op, rows, cols, budget=budget, **kw)
                            if not isinstance(r, tuple):
                                plans += 1
                                roles |= {b.role for b in r.buffers}
    assert plans > 200
    assert roles >= {"act", "weight", "out", "bias", "scale", "requant", "partial", "red_out"}, \
        roles
