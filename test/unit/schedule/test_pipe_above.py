"""The DP's bounded pipeline proofs follow each distinct course once (issue 15, session 30,
:meth:`.search.Search._pipe_above`).

``_pipe_above`` no longer follows the kept course after the last move (it meets no candidate)
nor a kept course whose state is the state the loop goes on from (the same draws from the same
RNG state: the same candidates with the same bound in the same order), and its kept courses
share one RNG. Oracle: the proof as it was before (written out below, verbatim but for taking
the caller's RNG and leaving it as it was), run in the same placements -- every build of the
search (segment, bound, tasks it created, answer), in order, the task count, the proofs'
answers and the placement are the same; the new proof makes fewer ``Search.cost`` calls.
"""

import math
import random

import pytest

from m100.passes.schedule import placement
from m100.passes.schedule.examples import conv_chain, resnet18
from m100.passes.schedule.search import Search
from m100.passes.schedule.timeline import BoundExceeded, Scheduler
from m100.targets.m100.machine import get_machine

M100 = get_machine("m100")


def _old_above(self, ops, rstate, state, min_rows, left, bound):
    """``Search._pipe_above`` of session 29 (every kept course followed, one RNG each; its loop
    body in one condition: a candidate below the bound, or a kept course meeting one)."""
    rng = random.Random()
    rng.setstate(rstate)
    for i in range(left):
        mv = self._pipe_move(ops, rng, state, min_rows)
        if mv is not None and (self.cost(mv[0], bound) < bound or not _old_above(
                self, ops, rng.getstate(), mv[1], min_rows, left - i - 1, bound)):
            return False
    return True


def _record(monkeypatch, g, tpbs: int, old: bool) -> dict:
    builds, answers, costs, depth = [], [], [0], [0]
    cost_build = Scheduler.cost_build
    cost = Search.cost
    new_above = Search._pipe_above

    def spy_build(self, seg, bound=math.inf):
        n0 = self.tasks_built
        try:
            ends = cost_build(self, seg, bound)
        except BoundExceeded as b:
            builds.append((seg, bound, self.tasks_built - n0, "stop", b.end))
            raise
        builds.append((seg, bound, self.tasks_built - n0, "end", max(ends, default=0.0)))
        return ends

    def spy_cost(self, seg, bound=math.inf):
        costs[0] += 1
        return cost(self, seg, bound)

    def above(self, ops, rng, state, min_rows, left, bound):
        if depth[0]:  # a kept course of the new proof (it calls itself through the class)
            return new_above(self, ops, rng, state, min_rows, left, bound)
        depth[0] += 1
        try:
            if old:
                r = _old_above(self, ops, rng.getstate(), state, min_rows, left, bound)
            else:
                r = new_above(self, ops, rng, state, min_rows, left, bound)
        finally:
            depth[0] -= 1
        answers.append(r)
        return r

    monkeypatch.setattr(Scheduler, "cost_build", spy_build)
    monkeypatch.setattr(Search, "cost", spy_cost)
    monkeypatch.setattr(Search, "_pipe_above", above)
    tasks = []
    run = Search.run

    def spy_run(self, strategy):
        out = run(self, strategy)
        tasks.append(self.sched.tasks_built)
        return out

    monkeypatch.setattr(Search, "run", spy_run)
    pl = placement.schedule(g, M100, tpbs=tpbs)
    monkeypatch.undo()
    return dict(builds=builds, answers=answers, tasks=tasks, costs=costs[0],
                segments=pl.segments, plan=pl.timeline.to_json())


@pytest.mark.parametrize("make,tpbs", [
    (lambda: resnet18(hw=32, classes=10), 8),
    (lambda: resnet18(hw=32, classes=10), 28),
    (lambda: conv_chain(n=2, hw=32, c=16, f=16), 12),
])
def test_pipe_above_builds_what_following_every_course_builds(monkeypatch, make, tpbs):
    g = make()
    new = _record(monkeypatch, g, tpbs, old=False)
    old = _record(monkeypatch, g, tpbs, old=True)
    assert new["builds"] == old["builds"]  # same segments, bounds, tasks, stops, in order
    assert new["tasks"] == old["tasks"]
    assert new["answers"] == old["answers"]
    assert new["segments"] == old["segments"]
    assert new["plan"] == old["plan"]
    assert any(new["answers"])  # the proofs ran (and answered True)
    assert new["costs"] < old["costs"]  # and the repeated courses were not followed
