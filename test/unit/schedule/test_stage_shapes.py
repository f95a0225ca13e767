"""The search's floors and tiler, cheaper and the same (issue 15, session 29).

* :func:`.search_floor._stage_busy` / :func:`.search_dma_floor.stage_dma` shared between stages
  of the same structure (:func:`.search_floor.stage_shape`: the op's structure, the stage's
  fields but op and TPBs, the TPBs as first-seen positions). Oracle: each floor of a real
  search, computed again from empty memos with the sharing off (``stage_shape`` answering None,
  the path of an op whose key is not hashable: each stage counted for itself), the same number
  and the same TPB dict in the same order; and the whole placement with the sharing off.
* :func:`.partition.tile_piece` sums a contraction tiling's footprint without making its buffer
  list; the list is made for a tiling that becomes the best, and summed again there (an
  internal error if the sums differ). Oracle: every candidate made a best in turn (a cost
  model whose cycles fall with every candidate asked, :class:`_Falling`, and no budget), so
  every candidate's buffer list (the list the tiler made before) is summed against the
  arithmetic sum; run over the tiler calls of real searches and over ops built to reach each
  kind of buffer (w4 scales, requant tables, K parts, ``once``, ``post_in``, bias, grouped
  convs, resident activations). (Session 30: the switches ``SHARE_STAGES`` and
  ``CHECK_FOOTPRINT`` are gone; these tests keep their oracles.)
"""

from dataclasses import replace

import pytest

from m100.passes.schedule import partition, placement, search, search_dma_floor, search_floor
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


def _unshared(monkeypatch):
    """The stages' floors not shared: every stage counted for itself."""
    monkeypatch.setattr(search_floor, "stage_shape", lambda *a: None)
    monkeypatch.setattr(search_dma_floor, "stage_shape", lambda *a: None)


def _fresh(sched, seg):
    """tpb_busy and dma_floor of ``seg`` from empty memos, the sharing off."""
    kept = {k: sched.__dict__.pop(k) for k in _MEMOS if k in sched.__dict__}
    with pytest.MonkeyPatch.context() as mp:
        _unshared(mp)
        try:
            return tpb_busy(sched, seg), dma_floor(sched, seg)
        finally:
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
    _unshared(monkeypatch)
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


class _Rank:
    """A piece's cycles that fall with every candidate asked: each is below every earlier one
    (and above any float, so ``max`` with a DMA time keeps it), whatever it is multiplied by."""

    def __init__(self, i):
        self.i = i

    def __mul__(self, n):
        return self

    __rmul__ = __mul__

    def __lt__(self, o):
        return isinstance(o, _Rank) and self.i > o.i

    def __gt__(self, o):
        return not isinstance(o, _Rank) or self.i < o.i


class _Falling(CostModel):
    """:class:`.cost.CostModel` whose ``piece_cycles`` makes every candidate tiling the best
    so far, so the tiler makes every candidate's buffer list and sums it against its own
    footprint (``partition._check_fp``)."""

    def __init__(self, machine):
        super().__init__(machine)
        self.asked = 0

    def piece_cycles(self, g, op, rows, cols, k=None):
        self.asked += 1
        return _Rank(self.asked)


def _every_candidate(g, op, rows, cols, **kw):
    """``tile_piece`` with every candidate tiling made a best (no budget): an internal error
    when a candidate's footprint is not its buffers' sum; the count of candidates checked
    (0: the tiler's own refusal, which the search never reaches with a budget either)."""
    cm = _Falling(M100)
    kw["budget"] = 1 << 60
    try:
        partition.tile_piece(cm, g, op, rows, cols, **kw)
    except ScheduleError as e:  # (the tiler's refusals of argument combinations the search
        assert "the tiler's footprint" not in str(e), e  # never asks pass, as before)
        return 0
    except TypeError:  # no candidate at all (e.g. a resident activation's column tile >=
        return 0       # cols -- the search never asks that)
    return cm.asked


def test_every_candidate_footprint_is_its_buffers(resnet_graph, monkeypatch):
    """The tiler calls of a real search, each again with every candidate's buffers summed."""
    calls = []
    tile = partition.tile_piece

    def spy(cm, g, op, rows, cols, *a, **kw):
        if op.unit in ("tcu.matmul", "tcu.conv2d"):
            calls.append((g, op, rows, cols, a, kw))
        return tile(cm, g, op, rows, cols, *a, **kw)

    from m100.passes.schedule import timeline
    monkeypatch.setattr(timeline, "tile_piece", spy)
    placement.schedule(resnet_graph, M100, tpbs=8)
    monkeypatch.undo()
    assert len(calls) > 50
    names = ("budget", "chunked", "kparts", "act_resident", "whole_parts", "wshare", "wstreams")
    checked = 0
    for g, op, rows, cols, a, kw in calls:
        checked += _every_candidate(g, op, rows, cols, **{**dict(zip(names, a)), **kw})
    assert checked > 1000


def _tile_all(cm, g, op, rows, cols, **kw):
    """tile_piece, then again with every candidate checked (:func:`_every_candidate`)."""
    try:
        r = partition.tile_piece(cm, g, op, rows, cols, **kw)
    except (ScheduleError, TypeError) as e:
        r = ("error", repr(e))
    _every_candidate(g, op, rows, cols, **kw)
    return r


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
