"""The scheduler search computed faster must decide the same (issue 15).

Oracles: a bounded cost (``Search.cost(seg, bound)``) against the exact isolated build of the
same segment (``Scheduler.build``, no bound); the TCU lower bound of a pool (``tcu_bound``)
against the whole plans the search makes on pools of that size, and against the MACs / peak
rate written out from the graph's shapes here.
"""

import math

import pytest

from m100.passes.schedule.cost import CostModel
from m100.passes.schedule.examples import GraphBuilder, conv_chain, mlp_graph, resnet18
from m100.passes.schedule.graph import ScheduleError
from m100.passes.schedule.placement import Search, schedule, tcu_bound
from m100.passes.schedule.timeline import Scheduler
from m100.targets.m100.machine import get_machine

M100 = get_machine("m100")


def _mlp():
    return mlp_graph(64, 256, 256, 64)


def _convs():
    return conv_chain(n=1, hw=32, c=16, f=16)


@pytest.mark.parametrize("make", [_mlp, _convs])
def test_bounded_cost_is_exact_below_the_bound_and_at_least_it_above(make):
    g = make()
    s = Search(g, M100, tuple(range(16)))
    exact_of = Scheduler(CostModel(M100), g)
    for op in g.ops:  # every configuration the search for this op tries
        s.best_data_parallel(op)
    segs = list(s.cache)
    assert len(segs) > 10
    for seg in segs:
        exact = exact_of.build([seg], isolated=True).makespan
        assert s.cost(seg) == exact  # the search's own (cached) answer
        for bound in (exact * 0.5, exact, exact * 1.5, math.inf):
            fresh = Search(g, M100, tuple(range(16)))
            c = fresh.cost(seg, bound)
            if exact < bound:
                assert c == exact, (seg, bound)
            else:
                assert c >= bound, (seg, bound, c)
            # a later exact question is answered exactly (a bounded answer is not reused)
            assert fresh.cost(seg) == exact


def test_tcu_bound_is_the_macs_over_the_peak_rate():
    b = GraphBuilder()
    x = b.input((128, 512))
    g = b.output(b.matmul(b.eltwise(b.matmul(x, 256), kind="relu"), 64))
    macs = 128 * 512 * 256 + 128 * 256 * 64
    peak_f32 = M100.tcu_macs_per_cycle_i8 * M100.tcu_rate("f32")
    assert tcu_bound(CostModel(M100), g, 8) == pytest.approx(macs / peak_f32 / 8)


@pytest.mark.parametrize("make", [_mlp, _convs])
@pytest.mark.parametrize("n", [56, 28, 14, 7])
def test_tcu_bound_never_exceeds_a_plan_on_that_many_tpbs(make, n):
    g = make()
    plan = schedule(g, M100, tpbs=n, strategy="auto").timeline
    assert tcu_bound(CostModel(M100), g, n) <= plan.makespan


def _in_order_scan(cands, cost):
    """The first cheapest of ``cands`` as ``best_data_parallel`` scanned its starts until session
    31 (the oracle of ``_first_cheapest``)."""
    best, bc = cands[0], cost(cands[0])
    for c in cands[1:]:
        x = cost(c, bc)
        if x < bc:
            best, bc = c, x
    return best, bc


@pytest.mark.parametrize("seed", range(40))
def test_first_cheapest_is_the_in_order_scan(monkeypatch, seed):
    # costs drawn with many ties (and unplaceable ones); the fake cost answers a bounded question
    # with the bound itself when the cost reaches it (the least a bounded cost may say)
    import random
    rng = random.Random(seed)
    g = conv_chain(n=1, hw=32, c=16, f=16)
    s = Search(g, M100, tuple(range(56)))
    op = g.ops[0]
    cands = [c for k in (1, 2, 4, 8, 16, 28, 32, 56) for m in (1, 2)
             if (c := s._dp_cfg(op, k, 1, m)) is not None]
    rng.shuffle(cands)
    cands = cands[:rng.randint(1, len(cands))]
    table = {c: rng.choice((10.0, 20.0, 20.0, 30.0, math.inf)) for c in cands}
    asked = []

    def cost(seg, bound=math.inf):
        asked.append(seg)
        return table[seg] if table[seg] < bound else bound

    monkeypatch.setattr(s, "cost", cost)
    keys = {id(c): rng.random() for c in cands}  # any order of the floors
    for floor in (None, lambda seg: keys[id(seg)]):  # the real floors, then any order of them
        if floor is not None:
            monkeypatch.setattr(s, "_floor", floor)
        asked.clear()
        best, bc = s._first_cheapest(cands)
        want, wc = _in_order_scan(cands, lambda c, b=math.inf: table[c])
        assert best is want and bc == wc
        assert sorted(map(id, asked)) == sorted(map(id, cands))  # each costed once


@pytest.mark.parametrize("make", [_mlp, _convs, lambda: conv_chain(n=1, hw=14, c=64, f=64)])
def test_floor_order_same_plan(monkeypatch, make):
    # the search with its starts scanned in order (the oracle above, real bounded costs) and in
    # the order of their floors: the same segments and plan
    out = []
    for scan in (True, False):
        s = Search(make(), M100, tuple(range(56)))
        if scan:
            monkeypatch.setattr(s, "_first_cheapest", lambda c, s=s: _in_order_scan(c, s.cost))
        segs = s.run("auto")
        out.append((segs, s.sched.build(segs).to_json()))
    assert out[0] == out[1]


def _longest_first_table(ops, max_stages, segment_best, connected):
    """``Search.run``'s dynamic programming as it was until session 31, written out: per end the
    runs from the last op alone to the longest, each bounded by the best so far, a later tried
    (longer) run winning ties."""
    n = len(ops)
    best = [(0.0, -1, None)] + [(math.inf, -1, None)] * n
    for e in range(1, n + 1):
        for s in range(e - 1, max(0, e - max_stages) - 1, -1):
            run = list(ops[s:e])
            if (len(run) > 1 and not connected(run)) or best[s][0] == math.inf:
                continue
            bound = math.inf if best[e][0] == math.inf else \
                best[e][0] - best[s][0] + 1e-6 * max(1.0, best[e][0])
            try:
                cfg, c = segment_best(run, None, bound)
            except ScheduleError:
                if len(run) == 1:
                    raise
                continue
            tot = best[s][0] + c
            if tot < best[e][0] or (tot == best[e][0] < math.inf):
                best[e] = (tot, s, cfg)
    return best


@pytest.mark.parametrize("seed", range(30))
def test_dp_order_is_the_longest_first_table(monkeypatch, seed):
    # ResNet-18's ops (repeated block structures: the DP tries the run that won at the last end
    # of the same structure second) with drawn run costs, many ties and refused pipelines; a
    # bounded question is answered with the bound itself when the cost reaches it (the least
    # a bounded cost may say), a run below its bound with its exact cost
    import random
    rng = random.Random(seed)
    g = resnet18(hw=32)
    s = Search(g, M100, tuple(range(56)))
    table = {}
    for e in range(1, len(g.ops) + 1):
        for k in range(1, 5):
            table[(e - k, e)] = rng.choice((10.0, 20.0, 20.0, 30.0, 40.0) if k == 1 else
                                           (5.0, 10.0, 20.0, 30.0, 60.0, None))
    idx = {o.name: i for i, o in enumerate(g.ops)}

    def segment_best(run, iters=None, bound=math.inf):
        c = table[(idx[run[0].name], idx[run[-1].name] + 1)]
        if c is None:
            raise ScheduleError("refused")
        return (run[0].name, len(run)), (c if c < bound else bound)

    def connected(run):
        return True

    monkeypatch.setattr(s, "segment_best", segment_best)
    monkeypatch.setattr(s, "connected", connected)
    orders = []
    starts = s._dp_starts
    monkeypatch.setattr(s, "_dp_starts", lambda e, won: orders.append(starts(e, won)) or
                        orders[-1])
    got = s._dp_table(list(g.ops))
    want = _longest_first_table(list(g.ops), s.max_stages, segment_best, connected)
    assert got == want
    assert any(o != sorted(o, reverse=True) for o in orders)  # the order did change


def _mm_chain(m, k, blocks=4):
    """``blocks`` x (matmul ``[m, k] @ [k, k]`` -> relu): blocks of one structure."""
    b = GraphBuilder()
    x = b.input((m, k))
    for _ in range(blocks):
        x = b.eltwise(b.matmul(x, k), kind="relu")
    return b.output(x)


@pytest.mark.parametrize("shape", [(1024, 128), (512, 256)])
def test_dp_order_same_plan(monkeypatch, shape):
    # the search with real bounded costs (pipelines win at ends of one structure, so the
    # product's order differs), its runs tried from the last op alone to the longest (as until
    # session 31) and in the product's order: the same segments (so the same plan)
    out, moved = [], []
    for plain in (True, False):
        s = Search(_mm_chain(*shape), M100, tuple(range(56)))
        s.fuse_tcu, s.pipe_iters = True, 4  # as ``placement.schedule`` runs ``auto``
        starts = s._dp_starts
        if plain:
            monkeypatch.setattr(s, "_dp_starts", lambda e, won, s=s: list(
                range(e - 1, max(0, e - s.max_stages) - 1, -1)))
        else:
            monkeypatch.setattr(s, "_dp_starts", lambda e, won: moved.append(
                (r := starts(e, won)) != sorted(r, reverse=True)) or r)
        out.append(s.run("auto"))
    assert out[0] == out[1]
    assert any(moved)


def _pool_runs(monkeypatch, g, skip):
    """The whole plan ``schedule`` makes with ``placement.POOL_SKIP = skip`` (None: the product's)
    and the pool sizes it searched."""
    from m100.passes.schedule import placement
    seen = []
    orig = placement.Search.run

    def run(self, strategy):
        seen.append(len(self.tpbs))
        return orig(self, strategy)

    monkeypatch.setattr(placement.Search, "run", run)
    if skip is not None:
        monkeypatch.setattr(placement, "POOL_SKIP", skip)
    plan = schedule(g, M100).timeline
    monkeypatch.undo()
    return plan, seen


def test_pool_skip_leaves_out_only_a_losing_pool(monkeypatch):
    # relu(x[256, 512] @ w) @ w': the 28-TPB pool's TCU floor is 0.79 of the 56-TPB plan, its own
    # plan 1.36x it (session 31): the cut skips it, the plan is the one the full loop chooses
    g = mlp_graph(256, 512, 512, 512)
    full, seen_full = _pool_runs(monkeypatch, g, 1.0)
    cut, seen_cut = _pool_runs(monkeypatch, g, None)
    assert seen_full == [56, 28] and seen_cut == [56]  # the cut did skip a searched pool
    assert cut.to_json() == full.to_json()


def test_pool_skip_keeps_a_smaller_pool_that_wins(monkeypatch):
    # a conv chain at 14x14 x 64 channels: the 14-TPB pool wins (TCU floor 0.60 of the 56-TPB
    # plan) and is still searched with the cut
    g = conv_chain(n=1, hw=14, c=64, f=64)
    full, seen_full = _pool_runs(monkeypatch, g, 1.0)
    cut, seen_cut = _pool_runs(monkeypatch, g, None)
    assert seen_cut == seen_full == [56, 28, 14]
    assert cut.to_json() == full.to_json()
    # the plan is the 14-TPB pool's: no stage uses a TPB outside it
    assert max(t for seg in full.segments for st in seg.stages for t in st.tpbs) < 14
