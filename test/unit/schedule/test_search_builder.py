"""The search's flat cost builds (``Scheduler.cost_build``, :class:`SearchBuilder`).

Oracle: the full builder on the same isolated segment (``Scheduler.build([seg], isolated=True)``,
what the search built before). On every configuration a ResNet-18 32x32 placement on 8 TPBs
costed, the flat build list-schedules the same tasks: its answer for each task (:func:`_check`)
is the full build's end -- or, for a TCU task, with the TCU tail (session 30: a TPB's TCU has
that much counted work left), a value between that end and the full build's makespan --, the
largest answer is the makespan, and bounded, it stops at the first task whose answer reaches
the bound (at or before the full bounded build's stop), with that answer, counting the tasks
before it in the search budget -- with the m100's DMA queues of depth 2 and with depth-1
engines (busy blocks)."""

import random

import pytest

from m100.passes.schedule import placement
from m100.passes.schedule.graph import ScheduleError
from m100.passes.schedule.list_schedule import BoundExceeded

from .test_shared_costs import M100, _searched


@pytest.fixture(scope="module")
def resnet():
    from m100.frontend import models
    return _searched(models.resnet18(hw=32, num_classes=10), tpbs=8)


def _full(s, seg, bound=float("inf")):
    n = s.sched.tasks_built
    try:
        tl = s.sched.build([seg], isolated=True, bound=bound)
    except ScheduleError as e:
        return ("error", str(e)), s.sched.tasks_built - n
    except BoundExceeded as e:
        return ("stop", e.end, [t.end for t in e.plan.tasks]), s.sched.tasks_built - n
    return ("plan", tl.makespan, [t.end for t in tl.tasks]), s.sched.tasks_built - n


def _flat(s, seg, bound=float("inf")):
    n = s.sched.tasks_built
    try:
        ends = s.sched.cost_build(seg, bound)
    except ScheduleError as e:
        return ("error", str(e)), s.sched.tasks_built - n
    except BoundExceeded as e:
        return ("stop", e.end, list(e.ends)), s.sched.tasks_built - n
    return ("plan", max(ends, default=0.0), list(ends)), s.sched.tasks_built - n


def _ends_units(s, seg):
    """The full isolated build's makespan, task ends and units (None: it fails)."""
    try:
        tl = s.sched.build([seg], isolated=True)
    except ScheduleError:
        return None
    return tl.makespan, [t.end for t in tl.tasks], [t.unit for t in tl.tasks]


def _check(s, seg, bound=float("inf"), full=None) -> bool:
    """The flat build of ``seg`` with ``bound`` against the full builds (module doc); True
    when it stopped other than the full build with that bound (the TCU tail)."""
    got, want = _flat(s, seg, bound), _full(s, seg, bound)
    if want[0][0] == "error":
        assert got == want, seg
        return False
    M, E, U = full or _ends_units(s, seg)
    (kind, val, ans), n = got
    assert n == len(ans) <= len(E)
    for a, e, u in zip(ans, E, U):
        assert a == e if u != "tcu" else e <= a <= M, (seg, a, e, u, M)
    if kind == "plan":
        assert want[0][0] == "plan" and val == M and n == len(E), seg
        assert want[1] == n
        return False
    assert kind == "stop" and want[0][0] == "stop", (got, want)
    assert max(ans, default=0.0) < bound <= val <= M and E[n] <= val, (seg, bound, val, M)
    assert n <= want[1]  # at or before the full build's stop
    return (val, n) != (want[0][1], want[1])


def _same_on_every_candidate(s, cfgs):
    kinds = set()
    tails = 0
    for seg in cfgs:
        full = _ends_units(s, seg)
        _check(s, seg, full=full)
        kinds.add((seg.kind, len(seg.stages), seg.stages[0].ks > 1, seg.stages[0].chunked))
        if full is not None and full[1]:
            ends = sorted(full[1])
            for bound in (ends[0], ends[len(ends) // 3], ends[len(ends) // 2], full[0]):
                tails += _check(s, seg, bound, full)
    return kinds, tails


def test_flat_builds_are_the_isolated_builds(resnet):
    g, s, cfgs = resnet
    assert len(cfgs) >= 50
    kinds, tails = _same_on_every_candidate(s, cfgs)
    # the candidates cover pipelines, K splits and chunked K, not only one kind of segment
    assert len(kinds) >= 4, kinds
    assert tails > 0  # (and some stop at the TCU tail)


def test_flat_builds_on_depth_one_dma_engines(resnet):
    """The other engine model (``dma_outstanding == 1``: busy blocks, not queues)."""
    g, s, cfgs = resnet
    s1 = placement.Search(g, M100.replace(dma_outstanding=1), s.tpbs)
    assert s1.sched.cm.machine.dma_outstanding == 1
    _same_on_every_candidate(s1, random.Random(5).sample(cfgs, min(len(cfgs), 60)))


def _bounded_builds(g, tpbs, monkeypatch):
    """Every (scheduler, segment, bound) a placement of ``g`` cost-builds with a bound."""
    from m100.passes.schedule import timeline
    seen = []
    orig = timeline.Scheduler.cost_build

    def spy(self, seg, bound=float("inf")):
        if bound < float("inf"):
            seen.append((self, seg, bound))
        return orig(self, seg, bound)

    monkeypatch.setattr(timeline.Scheduler, "cost_build", spy)
    placement.schedule(g, M100, tpbs=tpbs)
    monkeypatch.undo()
    return seen


def _tail_stops_are_floors(seen):
    """Each bounded build of a real search against the full isolated build with the same
    bound and without one (:func:`_check`); the count of builds that stopped at the TCU tail."""
    return sum(_check(type("S", (), {"sched": sched}), seg, bound) for sched, seg, bound in seen)


@pytest.mark.parametrize("tpbs", [8, 0])
def test_tail_stops_of_a_search_are_floors_of_the_makespan(resnet_graph, monkeypatch, tpbs):
    """The bounded builds a whole placement asks (both TPB pools on the m100): where the TCU
    tail stops one, its answer is between the bound and the full build's makespan. (A mutant
    that does not count the placed cycles off a TPB's work answers above the makespan.)"""
    seen = _bounded_builds(resnet_graph, tpbs, monkeypatch)
    assert len(seen) > 100
    assert _tail_stops_are_floors(seen) > 10


def test_tail_stops_on_fuzz_graphs(monkeypatch):
    from m100.tools.fuzz_graph import RandomChoices, random_graph
    from m100.tools.fuzz_int import random_int_graph

    from .test_shared_costs import _graph
    n = 0
    for seed in range(3):
        for make in (random_graph, random_int_graph):
            g = _graph(make(RandomChoices(seed)).model)
            n += len(seen := _bounded_builds(g, 8, monkeypatch))
            _tail_stops_are_floors(seen)
    assert n > 0


def test_search_cost_reads_the_flat_build(resnet):
    """``Search.cost`` answers what the full build's makespan (or its stop) answers."""
    g, s, cfgs = resnet
    for seg in random.Random(7).sample(cfgs, min(len(cfgs), 40)):
        fresh = placement.Search(g, M100, s.tpbs)
        want = _full(s, seg)[0]
        got = fresh.cost(seg)
        assert got == (want[1] if want[0] != "error" else float("inf")), seg


def test_flat_build_creates_no_plan_task(resnet, monkeypatch):
    """What the flat build leaves out (so the tests above compare something): no ``PlanTask``
    is created or list-scheduled by ``put``."""
    from m100.passes.schedule import list_schedule
    g, s, cfgs = resnet
    seg = random.Random(3).choice([c for c in cfgs if c.kind == "data-parallel"])
    calls = []
    orig = list_schedule.ListScheduler.put
    monkeypatch.setattr(list_schedule.ListScheduler, "put",
                        lambda self, t: calls.append(t) or orig(self, t))
    assert s.sched.cost_build(seg)
    assert not calls
    assert s.sched.build([seg], isolated=True).tasks and calls


def test_task_fields_are_in_the_order_the_builder_passes_them():
    """The builder's hot call sites pass a task's fields positionally to ``task`` (cheaper than
    keywords), which creates ``PlanTask`` from them or (the flat builder) reads them by name:
    both rely on :data:`TASK_FIELDS` being the dataclass's order and ``SearchBuilder.task``'s."""
    import inspect
    from dataclasses import fields

    from m100.passes.schedule.build_segments import SearchBuilder
    from m100.passes.schedule.plan import TASK_FIELDS, PlanTask
    assert tuple(f.name for f in fields(PlanTask)) == TASK_FIELDS
    params = tuple(inspect.signature(SearchBuilder.task).parameters)[1:]
    assert params == TASK_FIELDS[1:TASK_FIELDS.index("start")]
