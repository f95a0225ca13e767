"""The pipelines' local search enumerates its moves and its answers are memoized per structure
(issue 15, :meth:`.search.Search._pipe_climb`, :data:`.search_pipeline.PIPE_MEMO`).

Oracles: the neighbours of a pipeline state written out here from the definition (a set); a
plain hill climb (first improvement, at most ``iters`` distinct candidates) with every candidate
costed by an unbounded build on a fresh search -- no bound, no floor, no shared cost, no memo --
against :meth:`.search.Search.best_pipeline`; the neighbours' unbounded costs for local
optimality at a budget the climb never reaches; the whole placement with the memo off (the same
segments and plan, bit for bit); the same graph under other op names.
"""

import math

import pytest

from m100.passes.schedule import placement
from m100.passes.schedule import search_pipeline as pipe_mod
from m100.passes.schedule.examples import GraphBuilder, resnet18
from m100.passes.schedule.graph import ScheduleError
from m100.passes.schedule.partition import col_splits
from m100.passes.schedule.search import Search
from m100.targets.m100.machine import get_machine

M100 = get_machine("m100")


def _runs(s: Search, longest: int = 4):
    ops = s.g.ops
    for e in range(1, len(ops) + 1):
        for b in range(max(0, e - longest), e - 1):
            if s.connected(list(ops[b:e])):
                yield list(ops[b:e])


def _definition(s: Search, ops, state, min_rows) -> set:
    """One move from ``state``: a stage's co-location toggled (a TCU stage only when
    ``fuse_tcu``; on: its TPBs go to the last stage of its own TPBs if that one is before it,
    else to the first (the drawn move's rule, kept); off: one TPB
    from the own stage with the most, if it keeps one), the bands doubled (at most the most
    rows) or halved (at least 1), a half / quarter / eighth of one own stage's TPBs to another
    (it keeps one), another column split of one stage."""
    alloc, coloc, gcs, bands = state
    n = len(ops)
    own = [i for i in range(n) if not coloc[i]]
    states = []
    for i in range(1, n):
        if ops[i].unit.startswith("tcu") and not s.fuse_tcu:
            continue
        al, co = list(alloc), list(coloc)
        co[i] = not co[i]
        left = [x for x in range(n) if not co[x]]
        if co[i]:
            al[left[-1] if left[-1] < i else left[0]] += al[i]
            al[i] = 0
        else:
            donor = max((x for x in left if x != i), key=lambda x: al[x])
            if al[donor] < 2:
                continue
            al[donor] -= 1
            al[i] = 1
        states.append((al, co, list(gcs), bands))
    for b in (min(min_rows, 2 * bands), max(1, bands // 2)):
        states.append((list(alloc), list(coloc), list(gcs), b))
    for a in own:
        for b in own:
            for q in (2, 4, 8):
                d = max(1, alloc[a] // q)
                if a != b and alloc[a] - d >= 1:
                    al = list(alloc)
                    al[a] -= d
                    al[b] += d
                    states.append((al, list(coloc), list(gcs), bands))
    for i in range(n):
        for x in col_splits(s.cm, s.g, ops[i], alloc[i] if not coloc[i] else 1):
            gc = list(gcs)
            gc[i] = x
            states.append((list(alloc), list(coloc), gc, bands))
    cur = s._pipe_cfg(ops, *state)
    return {c for st in states if (c := s._pipe_cfg(ops, *st)) is not None} - {cur}


def _plain_cost(g, pool, cfg) -> float:
    try:
        return max(Search(g, M100, pool).sched.cost_build(cfg, math.inf), default=0.0)
    except ScheduleError:
        return math.inf


def _plain_climb(g, pool, s: Search, ops, budget: int):
    state, min_rows = s._pipe_start(ops)
    best = s._pipe_cfg(ops, *state)
    best_c = _plain_cost(g, pool, best)
    tried = {best}
    while budget > 0:
        for cand, st in s._pipe_neighbours(ops, state, min_rows):
            if cand in tried:
                continue
            tried.add(cand)
            budget -= 1
            c = _plain_cost(g, pool, cand)
            if c < best_c:
                best, best_c, state = cand, c, st
                break
            if budget == 0:
                break
        else:
            break
    return best, best_c, state, min_rows


@pytest.mark.parametrize("tpbs,iters", [(8, 24), (28, 24), (8, 200)])
def test_pipeline_climb_is_the_plain_climb(tpbs, iters):
    """The enumerated neighbours are the definition's; the search's climb (bounded costs,
    floors, shared costs, the memo, a rejected candidate never costed again) ends where the
    plain one ends; with a budget it never reaches, at a local optimum of the unbounded
    costs."""
    g = resnet18(hw=32, classes=10)
    pool = tuple(range(tpbs))
    s = Search(g, M100, pool, iters=iters)
    s.fuse_tcu = True
    checked = moved = 0
    for run in list(_runs(s))[::3]:
        state, min_rows = s._pipe_start(run)
        got = [c for c, _ in s._pipe_neighbours(run, state, min_rows)]
        assert len(got) == len(set(got))
        assert set(got) - {s._pipe_cfg(run, *state)} == _definition(s, run, state, min_rows)
        want_cfg, want, wstate, _ = _plain_climb(g, pool, s, run, iters)
        got_cfg, got_c = s.best_pipeline(run)
        assert (got_cfg, got_c) == (want_cfg, want), [o.name for o in run]
        moved += got_cfg != s._pipe_cfg(run, *state)
        checked += 1
        if iters > 100 and want < math.inf:
            for cand in _definition(s, run, wstate, min_rows):
                assert _plain_cost(g, pool, cand) >= want, cand
    assert checked > 10 and moved > 3


def test_pipeline_climb_costs_at_most_its_budget(monkeypatch):
    g = resnet18(hw=32, classes=10)
    s = Search(g, M100, tuple(range(28)), iters=6)
    s.fuse_tcu = True
    monkeypatch.setattr(pipe_mod, "PIPE_MEMO", False)
    asked = []
    orig = Search.cost
    monkeypatch.setattr(Search, "cost", lambda self, seg, bound=math.inf:
                        asked.append(seg) or orig(self, seg, bound))
    full = 0
    for run in _runs(s):
        asked.clear()
        s.best_pipeline(run)
        start, cands = asked[0], asked[1:]  # the start's exact cost, then the candidates
        assert start not in cands, [o.name for o in run]
        assert len(cands) <= 6 and len(set(cands)) == len(cands), [o.name for o in run]
        full += len(cands) == 6
    assert full > 3


def _blocks(first: int = 0):
    """Repeated residual blocks (pipelines of conv + add + relu), names numbered from
    ``first``."""
    b = GraphBuilder()
    b.n = first
    y = b.conv(b.input((1, 28, 28, 32)), 64, k=3, epilogue=("bias", "relu"))
    for _ in range(4):
        z = b.conv(y, 64, k=3, epilogue=("bias", "relu"))
        z = b.conv(z, 64, k=3, epilogue=("bias",))
        y = b.eltwise(b.eltwise(z, y, kind="add"), kind="relu")
    return b.output(y)


def _shape(p):
    pos = {o.name: i for i, o in enumerate(p.graph.ops)}
    return [(c.kind, [(pos[st.op], st.tpbs, st.gc, st.bands, st.ks, st.chunked,
                       st.act_resident) for st in c.stages]) for c in p.segments]


@pytest.mark.parametrize("make,tpbs", [
    (lambda: resnet18(hw=32, classes=10), 8),
    (_blocks, 28),
])
def test_the_memo_places_as_the_search_without_it(monkeypatch, make, tpbs):
    climbs = {}
    orig = Search._pipe_climb
    plans = {}
    for memo in (True, False):
        n = climbs[memo] = [0]
        monkeypatch.setattr(pipe_mod, "PIPE_MEMO", memo)
        monkeypatch.setattr(Search, "_pipe_climb", lambda self, *a, n=n: n.__setitem__(
            0, n[0] + 1) or orig(self, *a))
        p = placement.schedule(make(), M100, tpbs=tpbs)
        plans[memo] = (p.segments, p.timeline.to_json())
    assert plans[True] == plans[False]
    assert climbs[True][0] < climbs[False][0]  # the memo answered some searches


def test_the_placement_does_not_depend_on_the_names():
    a = placement.schedule(_blocks(0), M100, tpbs=28)
    b = placement.schedule(_blocks(700), M100, tpbs=28)
    assert _shape(a) == _shape(b)
    assert a.timeline.makespan == b.timeline.makespan
    assert any(c.kind == "pipeline" for c in a.segments)
