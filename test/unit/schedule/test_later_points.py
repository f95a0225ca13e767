"""The checkpoints ``later_points`` asks for (before side_by_side's runs, sibling_tilings' pairs,
pipe_starts' pipelines, background's transposes) change no plan, only where the later trials'
builds start (:mod:`passes.schedule.resume`: a checkpoint fits a trial only if the segments its
prefix looked at are the trial's). Oracle: the same placement with ``later_points`` answering
nothing -- the final plan and segments, every whole-plan build's answer (its plan or its stop at
the bound) and the search budget's task count after it; and the test checks something: the
trials skip more segments in all (the sum of the indices they resume at). Without the reach
(``Checkpoint.fits`` on the prefix only) background's trial resumes at its transpose and the
plan differs."""

from __future__ import annotations

from m100.passes.schedule import (later_points as lp, pipe_starts, placement, refine,
                                  sibling_tiling, side_by_side, timeline)
from m100.passes.schedule.list_schedule import BoundExceeded
from m100.targets.m100.machine import get_machine

from .test_resume import restores
from .test_side_by_side import _prefill_graph


def test_later_points_change_no_plan_only_where_builds_start(monkeypatch):
    restored = restores(monkeypatch)
    builds: list = []
    orig = timeline.Scheduler.build

    def build(self, segs, *a, **kw):
        try:
            tl = orig(self, segs, *a, **kw)
        except BoundExceeded as e:
            builds.append(("stop", e.end, self.tasks_built))
            raise
        if not kw.get("isolated") and not (a and a[0]):
            builds.append((tl.to_json(), self.tasks_built))
        return tl

    monkeypatch.setattr(timeline.Scheduler, "build", build)
    out = {}
    seen = {}
    for on in (False, True):
        fn = lp.later_points if on else (lambda s, segs, after=-1: set())
        for mod in (refine, side_by_side, sibling_tiling, pipe_starts):
            monkeypatch.setattr(mod, "later_points", fn)
        restored.clear()
        builds.clear()
        pl = placement.schedule(_prefill_graph(), get_machine("m100"), tpbs=8)
        out[on] = (pl.timeline.to_json(), pl.segments, list(builds))
        seen[on] = (sum(restored),)
    assert out[True] == out[False]
    assert seen[True][0] > seen[False][0], (seen[True][0], seen[False][0])

