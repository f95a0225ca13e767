"""Per-segment recipes (:mod:`passes.schedule.recipe`): a whole-plan build that replays recorded
segments is the build that builds every segment in full. Oracles: the same schedule with recipes
off (every whole-plan build's ``Plan.to_json`` -- every task, time, engine, piece, prefetch -- and
every early stop at a bound, in order), and, with ``recipe.CHECK``, each replayed segment against
its full build from a copy of the same state (tasks, pieces and the builder state later segments
read). A mutant key (the reads' id-free part ignored) is caught by the per-segment check."""

import pytest

from m100.passes.schedule import placement, recipe, timeline
from m100.passes.schedule.list_schedule import BoundExceeded
from m100.targets.m100.machine import get_machine

from .test_weights_once import _graph

M100 = get_machine("m100")


def _run(g, mach, on: bool, check: bool = False, monkeypatch=None):
    """placement.schedule of ``g``: per whole-plan build its plan JSON or where it stopped,
    the final plan JSON, and the recipe book's counts."""
    mp = monkeypatch or pytest.MonkeyPatch()
    out, books = [], []
    orig = timeline.Scheduler.build

    def build(self, segs, isolated=False, **kw):
        try:
            tl = orig(self, segs, isolated, **kw)
        except BoundExceeded as e:
            if not isolated:
                out.append(("stop", e.end, len(e.plan.tasks)))
            raise
        if not isolated:
            out.append(tl.to_json())
        if self.recipes is not None and self.recipes not in books:
            books.append(self.recipes)
        return tl

    mp.setattr(timeline.Scheduler, "build", build)
    mp.setattr(recipe, "RECIPES", on)
    mp.setattr(recipe, "CHECK", check)
    try:
        pl = placement.schedule(g, mach)
    finally:
        if monkeypatch is None:
            mp.undo()
    return out, pl.timeline.to_json(), [(b.recorded, b.replayed) for b in books]


@pytest.fixture(scope="module")
def r18():
    from m100.frontend import models
    return _graph(models.resnet18(hw=64))


def test_replayed_builds_are_the_full_builds(r18):
    """ResNet-18 64x64 on 56 TPBs: every whole-plan build and the final plan are the same with
    recipes (each replay also checked against its full build) as without; segments were
    replayed."""
    off, final_off, _ = _run(r18, M100, False)
    on, final_on, books = _run(r18, M100, True, check=True)
    assert len(on) == len(off) > 10
    for i, (a, b) in enumerate(zip(off, on)):
        assert a == b, f"whole-plan build {i}"
    assert final_on == final_off
    assert books and sum(n for _, n in books) > 20, books


def test_fuzz_sample():
    """Random graphs of the differential fuzzer (float and integer): the same builds."""
    from m100.tools.fuzz_graph import RandomChoices, random_graph
    from m100.tools.fuzz_int import random_int_graph
    for seed in range(3):
        for make in (random_graph, random_int_graph):
            g = _graph(make(RandomChoices(seed)).model)
            off = _run(g, M100, False)[:2]
            on = _run(g, M100, True, check=True)[:2]
            assert on == off, f"{make.__name__}({seed})"


def test_a_mutant_key_is_caught(r18, monkeypatch):
    """A key that compares only the task ids its reads give, not the rest of what they read
    (producer pieces' boxes, whether a transfer prefetches, counts) replays segments that a
    full build makes differently: the per-segment check fails."""
    orig = recipe._ids

    def ids(name, v):
        form, i = orig(name, v)
        return None, i

    monkeypatch.setattr(recipe, "_ids", ids)
    with pytest.raises(AssertionError, match="recipe: segment"):
        _run(r18, M100, True, check=True, monkeypatch=monkeypatch)


def test_recdict_logs_first_accesses():
    """The logging view: the first access of a key is logged (a read with its value, or a
    write), a read of ``written`` after the segment wrote it taints the recording, and an
    access it does not define (iteration) is an error, never an unlogged read."""
    d = {"a": 1, "b": 2}
    log: dict = {}
    r = recipe.RecDict(d, log, time=True)
    assert r["a"] == 1 and r.get("c") is None and "b" in r
    r["b"] = 5
    r["d"] = 7
    assert log == {"a": 1, "c": recipe._MISSING, "b": 2, "d": recipe._W}
    assert recipe._TAINT not in log
    assert r["d"] == 7 and recipe._TAINT in log
    assert d == {"a": 1, "b": 5, "d": 7}
    for f in (list, len, bool):
        with pytest.raises(TypeError):
            f(r)
    with pytest.raises(AttributeError):
        r.items()
