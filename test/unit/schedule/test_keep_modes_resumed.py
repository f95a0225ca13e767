"""``refine.keep_activations`` resumes each keep mode's build from an earlier mode's checkpoints
(session 30): where two modes' kept activations first differ (``_kept_agree``) the earlier build
keeps a checkpoint, and the later one starts there. Oracle: the same refinement written out as
it was (each mode built from ``tl``'s checkpoints only): the same plan, keep mode and task
count; and the test checks something -- some mode resumed after segment 0."""

from __future__ import annotations

import pytest

from m100.passes.schedule import placement, refine
from m100.passes.schedule.list_schedule import BoundExceeded
from m100.targets.m100.machine import get_machine

from .test_resume import restores


def _reference(sched, segs, tl):
    """keep_activations before session 30."""
    mode_of = ""
    for mode in refine.KEEP_MODES:
        try:
            tl2 = sched.build(segs, bound=tl.makespan, keep=mode, base=tl,
                              checkpoints=refine.trial_points(segs))
        except BoundExceeded:
            continue
        if tl2.makespan < tl.makespan and tl2.kept:
            tl, mode_of = tl2, mode
    return tl, mode_of


def _at_keep(graph, tpbs):
    """(scheduler, segments, plan) as ``placement.schedule`` hands them to keep_activations."""
    seen = []
    mp = pytest.MonkeyPatch()
    mp.setattr(placement, "keep_activations",
               lambda sched, segs, tl: seen.append((sched, segs, tl)) or (tl, ""))
    try:
        placement.schedule(graph, get_machine("m100"), tpbs=tpbs)
    finally:
        mp.undo()
    return seen[0]


def _graphs():
    from m100.frontend import models

    from .test_side_by_side import _prefill_graph
    from .test_weights_once import _graph
    yield "resnet18-64", _graph(models.resnet18(hw=64)), 0
    yield "prefill-w8a8", _prefill_graph(), 8


@pytest.mark.parametrize("case", [0, 1])
def test_keep_modes_resumed_are_the_full_builds(case, monkeypatch):
    _, graph, tpbs = list(_graphs())[case]
    sched, segs, tl = _at_keep(graph, tpbs)
    n0 = sched.tasks_built
    want, want_mode = _reference(sched, segs, tl)
    n1 = sched.tasks_built
    restored = restores(monkeypatch)
    sched.recent.clear()
    got, mode = refine.keep_activations(sched, segs, tl)
    n2 = sched.tasks_built
    assert (got.to_json(), mode) == (want.to_json(), want_mode)
    assert n2 - n1 == n1 - n0
    assert any(i > 0 for i in restored), restored
    # the kept plan holds a checkpoint before side_by_side's runs (its first trial resumes)
    from m100.passes.schedule.side_by_side import trial_points
    pts = trial_points(sched, segs)
    if case == 1:
        assert pts and set(got.checkpoints) >= pts
