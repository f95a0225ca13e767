"""Costs shared between structurally equal segments (:mod:`passes.schedule.shared_costs`).

Oracle: full isolated builds (``Scheduler.build([seg], isolated=True)``, what the search did for
every candidate before). Every pair of candidates of real searches with equal keys builds the same
task stream; the answers of :class:`SharedCosts` for bounds below, at and above the task ends are
what a bounded build gives (its ``BoundExceeded`` end and task count, or its makespan)."""

import random

import pytest

from m100.passes.schedule import placement
from m100.passes.schedule.graph import ScheduleError
from m100.passes.schedule.list_schedule import BoundExceeded
from m100.passes.schedule.shared_costs import SharedCosts, segment_key
from m100.targets.m100.machine import get_machine

from .test_weights_once import _graph

M100 = get_machine("m100")


def _searched(model, tpbs=0):
    """The graph, a fresh search on it and every configuration the placement costed."""
    return _costed(_graph(model), tpbs)


def _costed(g, tpbs=0):
    """``g``, a fresh search on it and every configuration the placement of ``g`` costed."""
    seen = []
    orig = placement.Search.cost

    def spy(self, seg, bound=float("inf")):
        seen.append(seg)
        return orig(self, seg, bound)

    mp = pytest.MonkeyPatch()
    mp.setattr(placement.Search, "cost", spy)
    try:
        placement.schedule(g, M100, tpbs=tpbs)
    finally:
        mp.undo()
    s = placement.Search(g, M100, placement.available_tpbs(M100, tpbs))
    return g, s, list(dict.fromkeys(seen))


def _stream(s, seg):
    try:
        tl = s.sched.build([seg], isolated=True)
    except ScheduleError:
        return None
    return [(t.kind, t.unit, t.tpb, t.engine, t.nbytes, t.cycles, tuple(t.deps), t.start, t.end)
            for t in tl.tasks]


@pytest.fixture(scope="module")
def resnet():
    from m100.frontend import models
    return _searched(models.resnet18(hw=64))


def test_equal_keys_build_equal_task_streams(resnet):
    g, s, cfgs = resnet
    groups: dict = {}
    for seg in cfgs:
        k = segment_key(g, s.sched.ops, s.sched.producers, g.consumers(), seg)
        assert k is not None
        groups.setdefault(k, []).append(seg)
    shared = [v for v in groups.values() if len(v) > 1]
    # the test checks something: configurations of different ops share a key
    assert any(len({seg.ops for seg in v}) > 1 for v in shared)
    checked = 0
    for v in shared:
        ref = _stream(s, v[0])
        for seg in v[1:]:
            assert _stream(s, seg) == ref, (v[0], seg)
            checked += 1
    assert checked >= 20
    # and different ops with different shapes do not share one
    assert len(groups) > len(cfgs) // 4


def test_shared_answers_are_the_bounded_builds(resnet):
    g, s, cfgs = resnet
    rng = random.Random(7)
    sc = SharedCosts(g, s.sched.producers, s.sched.ops)
    done = 0
    for seg in rng.sample(cfgs, min(40, len(cfgs))):
        try:
            tl = s.sched.build([seg], isolated=True)
        except ScheduleError:
            continue
        ends = [t.end for t in tl.tasks]
        if not ends:
            continue
        sc.store(seg, ends, True)
        picks = [rng.choice(ends) for _ in range(3)] + [tl.makespan, tl.makespan + 1.0,
                                                        min(ends) * 0.5]
        for bound in picks:
            got = sc.lookup(seg, bound)
            n0 = s.sched.tasks_built
            try:
                want = (s.sched.build([seg], isolated=True, bound=bound).makespan, True)
            except BoundExceeded as e:
                want = (e.end, False)
            assert got == want + (s.sched.tasks_built - n0,), (seg, bound)
        done += 1
        # a build stopped at a bound answers the bounds it reached, and no others
        b = sorted(ends)[len(ends) // 2]
        sc2 = SharedCosts(g, s.sched.producers, s.sched.ops)
        with pytest.raises(BoundExceeded) as e:
            s.sched.build([seg], isolated=True, bound=b)
        sc2.store(seg, [t.end for t in e.value.plan.tasks] + [e.value.end], False)
        assert sc2.lookup(seg, b) == (e.value.end, False, len(e.value.plan.tasks))
        assert sc2.lookup(seg, e.value.end + 1.0) is None
    assert done >= 20


def test_the_search_is_the_same_without_sharing(monkeypatch):
    """ResNet-18 32x32 on 8 TPBs: the placement and the task count (the search budget's measure)
    with shared costs equal those of a search that builds every candidate."""
    from m100.frontend import models
    g = _graph(models.resnet18(hw=32, num_classes=10))
    built = []
    orig = placement.Search.run

    def run(self, strategy):
        built.append(self)
        return orig(self, strategy)

    monkeypatch.setattr(placement.Search, "run", run)
    a = placement.schedule(g, M100, tpbs=8)
    hits = built[0].shared.hits
    n_a = built[0].sched.tasks_built
    monkeypatch.setattr(SharedCosts, "lookup", lambda self, seg, bound: None)
    built.clear()
    b = placement.schedule(g, M100, tpbs=8)
    assert hits > 0
    assert a.timeline.to_json() == b.timeline.to_json() and a.segments == b.segments
    assert a.evaluations == b.evaluations
    assert n_a == built[0].sched.tasks_built



def test_carried_search_gives_the_same_program(monkeypatch):
    """m100-pipeline schedules again with a smaller prefetch share when hbsm-allocate can not pack
    the first program; inside ``carried`` the second search answers its candidates from the first
    one's isolated builds. ResNet-18 32x32 on 8 TPBs, shares 0.9 then 0.75 (the second on a graph
    built again, as the pipeline does from its clone). Oracle: the 0.75 schedule from scratch --
    same plan, segments, evaluations and search task count; and the carried retry built no
    candidate the first search had built (only failing ones, which are never shared)."""
    from m100.frontend import models
    from m100.passes.schedule import timeline
    from m100.passes.schedule.shared_costs import carried

    model = models.resnet18(hw=32, num_classes=10)
    builds, searches = [], []
    orig_b, orig_r = timeline.Scheduler.build, placement.Search.run

    def build(self, segs, isolated=False, **kw):
        if isolated:
            builds[-1][0] += 1
            try:
                return orig_b(self, segs, isolated=isolated, **kw)
            except ScheduleError:
                builds[-1][1] += 1
                raise
        return orig_b(self, segs, isolated=isolated, **kw)

    def run(self, strategy):
        searches.append(self)
        return orig_r(self, strategy)

    monkeypatch.setattr(timeline.Scheduler, "build", build)
    monkeypatch.setattr(placement.Search, "run", run)
    orig_c = timeline.Scheduler.cost_build

    def cost_build(self, seg, bound=float("inf")):  # the search's isolated builds (flat)
        builds[-1][0] += 1
        try:
            return orig_c(self, seg, bound)
        except ScheduleError:
            builds[-1][1] += 1
            raise

    monkeypatch.setattr(timeline.Scheduler, "cost_build", cost_build)

    def sched(share):
        builds.append([0, 0])  # isolated builds of this schedule: [that ran, that failed]
        searches.clear()
        pl = placement.schedule(_graph(model), M100, tpbs=8, prefetch_share=share)
        return pl, searches[0].sched.tasks_built
    with carried():
        sched(0.9)
        a, n_a = sched(0.75)
    b, n_b = sched(0.75)
    assert a.timeline.to_json() == b.timeline.to_json() and a.segments == b.segments
    assert a.evaluations == b.evaluations and n_a == n_b
    (ran1, failed1), (ran2, failed2), (ran3, _) = builds
    assert ran1 > 50 and ran2 == failed2 == failed1 and ran3 == ran1


def test_a_root_scattered_into_ddr_is_keyed_apart():
    """Session 29: ``segment_key`` left out the graph's layout tables, so two segments of ONE
    graph with the same structure shared a cost where their tensors live in different memories
    (the 7B W8A8 prefill layer: the V projection, whose output root is read in column boxes
    and lives in DDR -- ``OpGraph.wroots``, ``segment.SCATTERED_IN_DDR`` -- was costed from
    the K projection's builds, output in SRAM: 24 candidates 0.03-7 % off per form). Two equal
    matmuls, one output scattered: the isolated builds differ (oracle: both built), so the
    keys must, and the search's cost of the second is its own build's."""
    from m100.passes.schedule.examples import GraphBuilder
    from m100.passes.schedule.search import Search
    from m100.passes.schedule.segment import SegmentCfg, StageCfg, memory_of
    b = GraphBuilder("f16")
    x = b.input((1024, 512))
    h1, h2 = b.matmul(x, 512), b.matmul(x, 512)
    g = b.output(b.eltwise(h1, h2, kind="add"))
    g.wroots[h2] = ((8192, 1024),)  # a row pitch on two of the four CCB SRAM banks
    pool = placement.available_tpbs(M100)
    s = Search(g, M100, pool)
    assert (memory_of(s.cm, g, h1), memory_of(s.cm, g, h2)) == ("sram", "ddr")
    m1, m2 = (o.name for o in g.ops if o.unit == "tcu.matmul")
    seg1, seg2 = (SegmentCfg((StageCfg(m, pool[:16], 2, 8),), "data-parallel") for m in (m1, m2))
    assert _stream(s, seg1) != _stream(s, seg2)
    key = s.shared.key
    assert key(seg1) != key(seg2)
    want = s.sched.build([seg2], isolated=True).makespan
    s.cost(seg1)
    assert s.cost(seg2) == want and s.shared.hits == 0
    # and without the scattered root the two share one key and one build
    del g.wroots[h2]
    s = Search(g, M100, pool)
    assert s.shared.key(seg1) == s.shared.key(seg2)
    assert _stream(s, seg1) == _stream(s, seg2)


def test_equal_keys_build_equal_task_streams_with_layout_tables():
    """The oracle of ``test_equal_keys_build_equal_task_streams`` on a graph whose tensors meet
    every kind of layout entry the W8A8 prefill layer has (q stored into the heads' layout:
    ``wmap``; the heads reading kT / V in column views: ``cviews``; their outputs written into
    the concat's columns: ``strided``; the causal chains): every pair of configurations of its
    search with equal keys builds the same task stream -- also pairs whose tensors' entries
    differ in their offsets (the heads' views of one root), which the key leaves out."""
    from m100.passes.schedule.graph import OpGraph
    from m100.passes.schedule.search import Search
    from .test_side_by_side import _prefill_graph
    g: OpGraph = _prefill_graph()
    g, s, seen = _costed(g, 8)
    assert isinstance(s, Search)
    groups: dict = {}
    for seg in seen:
        groups.setdefault(s.shared.key(seg), []).append(seg)

    def entries(seg):
        return [(tab, getattr(g, tab)[t]) for st in seg.stages for t in s.ops[st.op].inputs +
                s.ops[st.op].outputs for tab in ("views", "strided", "wmap", "cviews", "rmap")
                if t in getattr(g, tab)]

    checked = offsets = 0
    for k, v in groups.items():
        if k is None or len(v) < 2:
            continue
        ref = _stream(s, v[0])
        for seg in v[1:]:
            assert _stream(s, seg) == ref, (v[0], seg)
            checked += 1
            offsets += entries(seg) != entries(v[0]) and bool(entries(seg))
    assert checked >= 20 and offsets >= 5, (checked, offsets)
    assert all(getattr(g, tab) for tab in ("wmap", "cviews", "strided", "causal"))
