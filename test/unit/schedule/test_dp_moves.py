"""The data-parallel local search enumerates its moves (issue 15, :meth:`.search.Search._dp_climb`;
the drawn moves of before, ``dp_draws.py``, are the seed test's control).

Oracles: a plain hill climb written out here from the definition (the neighbours of a
configuration: double / halve the bands; K in chunks or not; each other column split; the next
smaller / larger TPB count with each column split, the one closest below the current first), every
candidate costed by an unbounded build on a fresh search -- no bound, no floor, no shared cost, no
memo -- against :meth:`.search.Search._dp_climb` (bounded costs, floors, shared costs, candidates
skipped once rejected); the neighbours' unbounded costs for local optimality; the seeds.
"""

import math

import pytest

from m100.passes.schedule.examples import resnet18
from m100.passes.schedule.graph import ScheduleError
from m100.passes.schedule.partition import col_splits
from m100.passes.schedule.search import MEM_UNITS, Search
from m100.targets.m100.machine import get_machine

from .dp_draws import pin_draws

M100 = get_machine("m100")


def _neighbours(s: Search, op, cfg, kmax: int) -> list:
    """The definition, written out (not :meth:`Search._dp_neighbours`)."""
    st = cfg.stages[0]
    k, gc, ch, kp, mult = len(st.tpbs), st.gc, st.chunked, st.ks, max(1, st.bands // st.gr)
    tcu = op.unit in ("tcu.matmul", "tcu.conv2d")
    out = [s._dp_cfg(op, k, gc, mult * 2, chunked=ch, ks=kp),
           s._dp_cfg(op, k, gc, max(1, mult // 2), chunked=ch, ks=kp)]
    if tcu and kp == 1:
        out.append(s._dp_cfg(op, k, gc, mult, chunked=not ch))
    out += [s._dp_cfg(op, k, x, mult, chunked=ch, ks=kp)
            for x in col_splits(s.cm, s.g, op, k // kp) if x != gc]
    counts = sorted(s._k_candidates(kmax))
    i = counts.index(k) if k in counts else 0
    for k2 in [counts[j] for j in (i - 1, i + 1) if 0 <= j < len(counts) and j != i]:
        splits = col_splits(s.cm, s.g, op, k2)
        below = max([x for x in splits if x <= gc], default=1)
        out += [s._dp_cfg(op, k2, x, mult, chunked=ch) for x in [below] +
                [x for x in splits if x != below]]
    return [c for c in out if c is not None]


def _plain_cost(g, pool, cfg) -> float:
    try:
        return max(Search(g, M100, pool).sched.cost_build(cfg, math.inf), default=0.0)
    except ScheduleError:
        return math.inf


def _plain_climb(g, pool, s: Search, op, start, budget: int):
    """First improvement over :func:`_neighbours`, at most ``budget`` distinct candidates."""
    best, best_c = start, _plain_cost(g, pool, start)
    tried = {start}
    while budget > 0:
        for cand in _neighbours(s, op, best, len(pool)):
            if cand in tried:
                continue
            tried.add(cand)
            budget -= 1
            c = _plain_cost(g, pool, cand)
            if c < best_c:
                best, best_c = cand, c
                break
            if budget == 0:
                break
        else:
            break
    return best, best_c


def _starts(s: Search, op, kmax: int) -> list:
    """Greedy starts as the search makes them: rows x column splits on up to ``kmax`` TPBs."""
    from m100.passes.schedule.graph import geometry
    rows = geometry(s.g, op).rows
    out = []
    for kk in (kmax, kmax // 2):
        for gc in col_splits(s.cm, s.g, op, kk)[:2]:
            cfg = s._dp_cfg(op, min(kk // gc, rows) * gc, gc, 1)
            if cfg is not None:
                out.append(cfg)
    return out


@pytest.mark.parametrize("tpbs,iters", [(8, 24), (28, 24), (8, 200)])
def test_climb_is_the_plain_climb(tpbs, iters):
    """The search's climb (bounded costs, floors, costs shared between structurally equal ops,
    a rejected candidate never costed again) ends where the plain one ends; with a budget it
    never reaches (``iters`` 200) at a local optimum of the unbounded costs."""
    g = resnet18(hw=32, classes=10)
    pool = tuple(range(tpbs))
    s = Search(g, M100, pool, iters=iters)
    checked = moved = 0
    for op in g.ops[::2]:
        if op.unit in MEM_UNITS:
            continue
        tcu = op.unit in ("tcu.matmul", "tcu.conv2d")
        for start in _starts(s, op, tpbs):
            want_cfg, want = _plain_climb(g, pool, s, op, start, iters // 2)
            got_cfg, got = s._dp_climb(op, start, s.cost(start), tpbs, tcu)
            assert (got_cfg, got) == (want_cfg, want), (op.name, start)
            moved += got_cfg != start
            checked += 1
            if iters > 100:  # no neighbour is cheaper
                for cand in _neighbours(s, op, got_cfg, tpbs):
                    assert _plain_cost(g, pool, cand) >= got, (op.name, cand)
    assert checked > 20 and moved > 3


def test_climb_costs_at_most_its_budget(monkeypatch):
    g = resnet18(hw=32, classes=10)
    s = Search(g, M100, tuple(range(28)), iters=24)
    asked = []
    moved = 0
    orig = Search.cost
    monkeypatch.setattr(Search, "cost", lambda self, seg, bound=math.inf:
                        asked.append(seg) or orig(self, seg, bound))
    for op in g.ops:
        if op.unit in ("tcu.matmul", "tcu.conv2d"):
            start = _starts(s, op, 28)[0]
            c = orig(s, start)
            asked.clear()
            s._dp_climb(op, start, c, 28, True)
            assert len(asked) <= 12 and len(set(asked)) == len(asked), op.name
            moved += len(asked) > 1 and asked[-1] != start
    assert moved > 3


def _bottlenecks():
    """ResNet-50's 1x1 convs at 28 x 28 and 14 x 14 (where drawn moves missed better
    configurations on the full machine: conv23 18 276 -> 15 619 cycles alone)."""
    from m100.passes.schedule.examples import GraphBuilder
    b = GraphBuilder()
    y = b.input((1, 28, 28, 128))
    for _ in range(2):
        y = b.conv(b.conv(y, 512, k=1), 128, k=1)
    y = b.conv(y, 256, k=1, stride=2)
    for _ in range(2):
        y = b.conv(b.conv(y, 1024, k=1), 256, k=1)
    return b.output(y)


def test_data_parallel_answer_does_not_depend_on_the_seed(monkeypatch):
    """With the moves enumerated the seed no longer reaches a data-parallel op; with them drawn
    it does (the control), and the enumeration's answer is never costlier than a draw's here."""
    g = _bottlenecks()
    ops = [o for o in g.ops if o.unit in ("tcu.matmul", "tcu.conv2d")]
    got = {}
    for mode in ("enum", "draw"):
        if mode == "draw":
            pin_draws(monkeypatch)
        got[mode] = [[Search(g, M100, tuple(range(56)), seed=seed).best_data_parallel(op)
                      for op in ops] for seed in range(3)]
    differ = {mode: sum(a != b for other in v[1:] for a, b in zip(v[0], other))
              for mode, v in got.items()}
    assert differ["enum"] == 0
    assert differ["draw"] > 0
    for drawn in got["draw"]:
        assert all(e[1] <= d[1] for e, d in zip(got["enum"][0], drawn))
