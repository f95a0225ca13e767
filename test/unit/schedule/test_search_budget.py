"""The auto search's task budget (placement.SEARCH_TASKS, issue 13).

Oracles: the task counter against the task lists of the builds it counts (a build stopped at its
bound included); a search whose budget is not reached against the search without a budget (same
plan); a search with no budget left explores less (fewer candidates costed, only the full TPB pool)
and still compiles a program that matches onnxruntime.
"""

import math

import pytest

from m100.frontend import models
from m100.passes.schedule import placement
from m100.passes.schedule.cost import CostModel
from m100.passes.schedule.examples import conv_chain
from m100.passes.schedule.timeline import BoundExceeded, Scheduler
from m100.targets.m100.machine import get_machine
from m100.tools import driver

M100 = get_machine("m100")


def _graph():
    return conv_chain(n=2, hw=32, c=16, f=16)


def test_tasks_built_counts_every_task_of_every_build():
    g = _graph()
    s = Scheduler(CostModel(M100), g)
    srch = placement.Search(g, M100, tuple(range(16)))
    cfgs = [srch.best_data_parallel(op)[0] for op in g.ops]
    full = s.build(cfgs)
    assert s.tasks_built == len(full.tasks) > 0
    one = s.build(cfgs[:1], isolated=True)
    assert s.tasks_built == len(full.tasks) + len(one.tasks)
    before = s.tasks_built
    with pytest.raises(BoundExceeded):  # stopped early: the tasks made before the stop count
        s.build(cfgs, bound=full.makespan / 2)
    assert before < s.tasks_built < before + len(full.tasks)


def _placement(monkeypatch, budget):
    monkeypatch.setattr(placement, "SEARCH_TASKS", budget)
    return placement.schedule(_graph(), M100)


@pytest.fixture(scope="module")
def free():
    """The placement of the search without a budget."""
    with pytest.MonkeyPatch.context() as mp:
        return _placement(mp, math.inf)


def test_budget_not_reached_gives_the_unbounded_plan(monkeypatch, free):
    capped = _placement(monkeypatch, placement.SEARCH_TASKS_DEFAULT)
    assert capped.segments == free.segments
    assert capped.timeline.makespan == free.timeline.makespan
    assert capped.evaluations == free.evaluations


def test_no_budget_left_explores_less_on_the_full_pool(monkeypatch, free):
    spent = _placement(monkeypatch, 0)
    assert spent.evaluations < free.evaluations
    assert spent.tpbs == tuple(range(M100.num_tpbs))
    assert {o.name for o in _graph().ops} == {st.op for seg in spent.segments
                                              for st in seg.stages}


def test_no_budget_left_still_compiles_a_correct_program(monkeypatch):
    monkeypatch.setattr(placement, "SEARCH_TASKS", 0)
    ck = driver.check(models.mlp(), machine="m100", tpbs=16)
    assert ck.passed, ck.summary()
