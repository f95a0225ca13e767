"""The search's flat cost builds (``Scheduler.cost_build``, :class:`SearchBuilder`).

Oracle: the full builder on the same isolated segment (``Scheduler.build([seg], isolated=True)``,
what the search built before). On every configuration a ResNet-18 32x32 placement on 8 TPBs
costed, the flat build gives the same task ends in creation order (every end, exactly) and,
bounded, stops at the same task with the same end; it counts the same tasks in the search
budget -- with the m100's DMA queues of depth 2 and with depth-1 engines (busy blocks)."""

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


def _same_on_every_candidate(s, cfgs):
    kinds = set()
    for seg in cfgs:
        want = _full(s, seg)
        assert _flat(s, seg) == want, seg
        kinds.add((seg.kind, len(seg.stages), seg.stages[0].ks > 1, seg.stages[0].chunked))
        if want[0][0] == "plan" and want[0][2]:
            ends = sorted(want[0][2])
            for bound in (ends[0], ends[len(ends) // 3], ends[len(ends) // 2], want[0][1]):
                assert _flat(s, seg, bound) == _full(s, seg, bound), (seg, bound)
    return kinds


def test_flat_builds_are_the_isolated_builds(resnet):
    g, s, cfgs = resnet
    assert len(cfgs) >= 50
    kinds = _same_on_every_candidate(s, cfgs)
    # the candidates cover pipelines, K splits and chunked K, not only one kind of segment
    assert len(kinds) >= 4, kinds


def test_flat_builds_on_depth_one_dma_engines(resnet):
    """The other engine model (``dma_outstanding == 1``: busy blocks, not queues)."""
    g, s, cfgs = resnet
    s1 = placement.Search(g, M100.replace(dma_outstanding=1), s.tpbs)
    assert s1.sched.cm.machine.dma_outstanding == 1
    _same_on_every_candidate(s1, random.Random(5).sample(cfgs, min(len(cfgs), 60)))


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
