"""The search's cost builds (``Scheduler.build(..., search=True)``, :class:`SearchBuilder`).

Oracle: the full builder on the same isolated segment (``Scheduler.build([seg], isolated=True)``,
what the search built before). On every configuration a ResNet-18 32x32 placement on 8 TPBs
costed, the search build creates the same tasks (every field, start and end) and, bounded, stops
at the same task with the same end; what it leaves out is only what nothing of it reads."""

import random

import pytest

from m100.passes.schedule.graph import ScheduleError
from m100.passes.schedule.list_schedule import BoundExceeded

from .test_shared_costs import _searched


@pytest.fixture(scope="module")
def resnet():
    from m100.frontend import models
    return _searched(models.resnet18(hw=32, num_classes=10), tpbs=8)


def _build(s, seg, search, bound=float("inf")):
    try:
        tl = s.sched.build([seg], isolated=True, bound=bound, search=search)
    except ScheduleError as e:
        return ("error", str(e))
    except BoundExceeded as e:
        return ("stop", e.end, [t.to_dict() for t in e.plan.tasks])
    return ("plan", tl.makespan, [t.to_dict() for t in tl.tasks])


def test_search_builds_are_the_isolated_builds(resnet):
    g, s, cfgs = resnet
    assert len(cfgs) >= 50
    kinds = set()
    for seg in cfgs:
        want = _build(s, seg, False)
        assert _build(s, seg, True) == want, seg
        kinds.add((seg.kind, len(seg.stages), seg.stages[0].ks > 1, seg.stages[0].chunked))
        if want[0] == "plan" and want[2]:
            ends = sorted(t["end"] for t in want[2])
            for bound in (ends[0], ends[len(ends) // 2], want[1]):
                assert _build(s, seg, True, bound) == _build(s, seg, False, bound), (seg, bound)
    # the candidates cover pipelines, K splits and chunked K, not only one kind of segment
    assert len(kinds) >= 4, kinds


def test_search_build_is_one_isolated_segment(resnet):
    g, s, cfgs = resnet
    seg = next(c for c in cfgs if c.kind == "data-parallel")
    with pytest.raises(ScheduleError, match="one isolated segment"):
        s.sched.build([seg], search=True)
    with pytest.raises(ScheduleError, match="one isolated segment"):
        s.sched.build([seg, seg], isolated=True, search=True)


def test_search_build_leaves_out_the_emitters_state(resnet):
    """What a search build skips (so the test above compares something): the pieces' task lists."""
    g, s, cfgs = resnet
    seg = random.Random(3).choice([c for c in cfgs if c.kind == "data-parallel"])
    full = s.sched.build([seg], isolated=True)
    fast = s.sched.build([seg], isolated=True, search=True)
    assert any(p.tasks for ps in full.pieces for p in ps)
    assert not any(p.tasks for ps in fast.pieces for p in ps)


def test_task_fields_are_in_the_order_the_builder_passes_them():
    """The builder's hot call sites create ``PlanTask`` with positional fields (cheaper than
    keywords): they rely on :data:`TASK_FIELDS` being the dataclass's order."""
    from dataclasses import fields

    from m100.passes.schedule.plan import TASK_FIELDS, PlanTask
    assert tuple(f.name for f in fields(PlanTask)) == TASK_FIELDS
