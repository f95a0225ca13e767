"""The search costs candidates only as far as it must (issue 15, :mod:`.search`,
:mod:`.search_floor`).

Oracles: the unbounded pipeline search (``best_pipeline`` without a bound, on a fresh search, so
no cached answer is shared) for every bound below, at and above its result; the DP as it was
before the pruning (written out here: runs tried from the longest, every candidate pipeline
searched without a bound, strict improvement) and without lower bounds, for the whole placement;
the TCU floor of every candidate of real searches against its full isolated build (makespan, and
each TPB's TCU busy time).
"""

import math
import os
import sys

import pytest

from m100.passes.schedule import placement
from m100.passes.schedule import search as search_mod
from m100.passes.schedule.examples import conv_chain, resnet18
from m100.passes.schedule.graph import ScheduleError
from m100.passes.schedule.search import Search
from m100.targets.m100.machine import get_machine

sys.path.insert(0, os.path.dirname(__file__))

from search_spy import costed_segments  # noqa: E402

M100 = get_machine("m100")


def _runs(s: Search, longest: int = 4):
    ops = s.g.ops
    for e in range(1, len(ops) + 1):
        for b in range(max(0, e - longest), e - 1):
            if s.connected(list(ops[b:e])):
                yield list(ops[b:e])


@pytest.mark.parametrize("tpbs", [8, 28])
def test_bounded_pipeline_search_is_the_unbounded_one_below_the_bound(tpbs):
    g = resnet18(hw=32, classes=10)
    pool = tuple(range(tpbs))
    runs = list(_runs(Search(g, M100, pool)))
    assert len(runs) > 20
    above = 0
    for run in runs[::3]:
        try:
            want_cfg, want = Search(g, M100, pool).best_pipeline(run, 4)
        except ScheduleError:
            continue
        for bound in (want * 0.25, want * 0.9, want, math.nextafter(want, math.inf), want * 1.5,
                      math.inf):
            s = Search(g, M100, pool)
            cfg, c = s.best_pipeline(run, 4, bound)
            if want < bound:
                assert (cfg, c) == (want_cfg, want), (run, bound)
            else:
                assert c >= bound, (run, bound, c, want)
                above += 1
    assert above > 10  # the test saw the bounded answers


class _Unpruned(Search):
    """The DP of :meth:`Search.run` before the pruning (its ``auto`` branch, verbatim but for the
    bound, which it never passes)."""

    def run(self, strategy):
        assert strategy == "auto"
        ops = self.g.ops
        n = len(ops)
        best = [(0.0, -1, None)] + [(float("inf"), -1, None)] * n
        for e in range(1, n + 1):
            for s in range(max(0, e - self.max_stages), e):
                run = list(ops[s:e])
                if len(run) > 1 and not self.connected(run):
                    continue
                if best[s][0] == float("inf"):
                    continue
                try:
                    cfg, c = self.segment_best(
                        run, (0 if self.spent() else self.pipe_iters) if len(run) > 1 else None)
                except ScheduleError:
                    if len(run) == 1:
                        raise
                    continue
                if best[s][0] + c < best[e][0]:
                    best[e] = (best[s][0] + c, s, cfg)
        segs = []
        e = n
        while e > 0:
            _, s, cfg = best[e]
            segs.append(cfg)
            e = s
        out = []
        for cfg in segs[::-1]:
            if len(cfg.stages) > 1 and not self.spent():
                better, c = self.best_pipeline([self.ops[st.op] for st in cfg.stages])
                cfg = better if c <= self.cost(cfg) else cfg
            out.append(cfg)
        return out


@pytest.mark.parametrize("make,tpbs", [
    (lambda: resnet18(hw=32, classes=10), 8),
    (lambda: conv_chain(n=1, hw=32, c=16, f=16), 12),
])
def test_pruned_dp_places_as_the_unpruned_one(monkeypatch, make, tpbs):
    g = make()
    pruned = []
    orig = Search._pipe_above

    def spy(self, *a):
        r = orig(self, *a)
        pruned.append(r)
        return r

    floored = []
    orig_floor = search_mod.tcu_floor

    def floor_spy(*a):
        f = orig_floor(*a)
        floored.append(f)
        return f

    monkeypatch.setattr(Search, "_pipe_above", spy)
    monkeypatch.setattr(search_mod, "tcu_floor", floor_spy)
    got = placement.schedule(g, M100, tpbs=tpbs)
    monkeypatch.setattr(placement, "Search", _Unpruned)
    monkeypatch.setattr(search_mod, "tcu_floor", lambda *a: 0.0)
    want = placement.schedule(g, M100, tpbs=tpbs)
    assert got.segments == want.segments
    assert got.timeline.to_json() == want.timeline.to_json()
    if tpbs != 12:  # the ResNets have pipelines the DP did not need to cost in full
        assert any(pruned)
    assert any(f > 0 for f in floored)


class _Table:
    """``segment_best`` answering from a table of run costs (small integers: many equal totals),
    as a bounded search may: the cost, or, when it is >= the bound, the bound."""

    def __init__(self, seed, clip):
        self.seed = seed
        self.clip = clip

    def __call__(self, search, ops, iters=None, bound=math.inf):
        from m100.passes.schedule.segment import SegmentCfg, StageCfg
        import random
        key = tuple(o.name for o in ops)
        rng = random.Random(f"{self.seed}:{key}")  # the cost of a run, whatever the call order
        c = rng.choice((1, 2, 3, 4, 5, 6, math.inf)) * len(ops) if len(ops) > 1 else \
            rng.choice((1, 2, 3))
        cfg = SegmentCfg(tuple(StageCfg(n, (0,)) for n in key),
                         "pipeline" if len(ops) > 1 else "data-parallel")
        return cfg, (max(c, bound) if self.clip and c >= bound else c)


@pytest.mark.parametrize("seed", range(40))
def test_dp_ties_go_to_the_segment_starting_first(monkeypatch, seed):
    """Equal totals (integer costs): both DPs choose the same segmentation."""
    from m100.passes.schedule.examples import GraphBuilder
    b = GraphBuilder()
    y = b.input((1, 8, 8, 8))
    for i in range(7):
        y = b.eltwise(y, kind="relu") if i % 2 else b.conv(y, 8)
    g = b.output(y)
    got = []
    for cls, clip in ((Search, True), (_Unpruned, False)):
        s = cls(g, M100, tuple(range(8)))
        s.budget = 0  # no refinement of the chosen pipelines (not under test here)
        table = _Table(seed, clip)
        monkeypatch.setattr(cls, "segment_best",
                            lambda self, ops, iters=None, bound=math.inf: table(self, ops, iters,
                                                                                 bound))
        got.append([cfg.ops for cfg in s.run("auto")])
        monkeypatch.undo()
    assert got[0] == got[1]


@pytest.mark.parametrize("tpbs", [8, 28])
def test_tcu_floor_is_below_every_build(monkeypatch, tpbs):
    """Every configuration a placement costs: the floor is <= the makespan of its full isolated
    build, and each stage's floor <= the TCU busy time of that stage's busiest TPB."""
    from m100.passes.schedule.search_floor import stage_floor, tcu_floor
    g = resnet18(hw=32, classes=10)
    s = Search(g, M100, tuple(range(tpbs)))
    bounded = 0
    for seg in costed_segments(monkeypatch, g, M100, tpbs):
        f = tcu_floor(s.cm, g, s.ops, seg)
        try:
            tl = s.sched.build([seg], isolated=True)
        except ScheduleError:
            continue
        assert f <= tl.makespan, seg
        for st in seg.stages:
            busy = {}
            for t in tl.tasks:
                if t.kind == "compute" and t.unit == "tcu" and t.op == st.op:
                    busy[t.tpb] = busy.get(t.tpb, 0.0) + t.cycles
            sf = stage_floor(s.cm, g, s.ops[st.op], st)
            assert sf <= max(busy.values(), default=0.0) * (1 + 1e-12), (seg, st)
            bounded += sf > 0
    assert bounded > 50
