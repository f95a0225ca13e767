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

from .test_resume import placed  # noqa: F401 (the fixture: ResNet-18 64x64's final segments)
from .test_weights_once import _graph

M100 = get_machine("m100")


def full_builds(mp) -> None:
    """From now on every whole-plan segment is built in full: the path before recipes (the
    builder without a recipe book, as the search's isolated builds are; session 31 dropped the
    switch ``recipe.RECIPES``)."""
    from m100.passes.schedule.build_segments import PlanBuilder
    seg = PlanBuilder.segment

    def segment(self, si, s, isolated):
        self.book = None
        return seg(self, si, s, isolated)

    mp.setattr(PlanBuilder, "segment", segment)


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
    if not on:
        full_builds(mp)
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
    off, final_off, books_off = _run(r18, M100, False)
    on, final_on, books = _run(r18, M100, True, check=True)
    assert not any(n for _, n in books_off), "the oracle replayed segments"
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


def test_reclist_logs_the_segments_read():
    """The segment list's logging view: the segments read by index and the length (read, or
    an index out of range); iteration and slices are errors, never unlogged reads."""
    segs = ["a", "b", "c"]
    log: dict = {}
    r = recipe.RecList(segs, log)
    assert r[1] == "b" and r[1] == "b"
    assert log == {1: "b"}
    assert len(r) == 3 and log[recipe._LEN] == 3
    log.clear()
    with pytest.raises(IndexError):
        r[3]
    assert log == {recipe._LEN: 3}
    for f in (list, lambda x: x[0:2]):
        with pytest.raises(TypeError):
            f(r)
    assert recipe._same_segments(((1, "b"), (recipe._LEN, 3)), segs)
    assert not recipe._same_segments(((1, "b"), (recipe._LEN, 3)), segs + ["d"])
    x, y = ["b"], ["b"]
    assert recipe._same_segments(((0, x),), [x]) and not recipe._same_segments(((0, x),), [y])
    assert not recipe._same_segments(((4, "b"),), segs)


class _P:
    def __init__(self, segments, kept=(), bcast=True):
        self.segments, self.kept, self.kept_bcast = segments, set(kept), bcast


def test_record_from():
    """Which segments a build records: a build without a base from its first checkpoint (or
    all); a trial whose kept activations differ from the plan it would replace none; else the
    segments after the last one that differs (by identity, counted from the end: a trial may
    have another segment count)."""
    a = [object() for _ in range(7)]
    tl = _P(a)
    assert recipe.record_from(a, tl, None, {5, 3}) == 3
    assert recipe.record_from(a, tl, None, frozenset()) == 0
    b = list(a)
    b[2], b[4] = object(), object()
    assert recipe.record_from(b, _P(b), _P(a), set()) == 5
    assert recipe.record_from(a, _P(a), _P(a), {1}) == 0
    assert recipe.record_from(b, _P(b, {"x"}), _P(a), set()) == 7
    assert recipe.record_from(b, _P(b, bcast=False), _P(a), set()) == 7
    c = a[:2] + [object(), object()] + a[3:]  # segment 2 split in two
    assert recipe.record_from(c, _P(c), _P(a), set()) == 4


def _later_change(placed, monkeypatch, same_segments=None):
    """The final segments built, then built again with the last compute segment a new object
    of the same configuration (a trial of a later change): (the second build with recipes,
    with each replay checked against its full build; the same without recipes; the replays)."""
    from dataclasses import replace
    s, segs, keep = placed
    sched = s.sched
    last = max(i for i, x in enumerate(segs) if x.kind != "dma")
    trial = segs[:last] + [replace(segs[last])] + segs[last + 1:]
    with pytest.MonkeyPatch.context() as mp:
        full_builds(mp)
        want = sched.build(trial, keep=keep).to_json()
    monkeypatch.setattr(recipe, "CHECK", True)
    if same_segments is not None:
        monkeypatch.setattr(recipe, "_same_segments", same_segments)
    sched.recipes = None
    base = sched.build(segs, keep=keep)
    got = sched.build(trial, keep=keep, ref=base)
    return got.to_json(), want, sched.recipes.replayed


def test_a_later_change_replays_the_segments_before_it(placed, monkeypatch):
    """A recording's key holds the later segments its generation read, not all of them (until
    session 29): a trial that changes only the last compute segment replays the segments
    before it (each checked against its full build; the plan is the one without recipes)."""
    got, want, replayed = _later_change(placed, monkeypatch)
    assert got == want
    n = sum(x.kind != "dma" for x in placed[1])
    assert replayed >= n - 3, (replayed, n)


def test_recset_logs_the_kept_reads():
    """The kept activations' logging view: each op asked about with its answer, whether any
    is kept; a recording's logged answers hold in a build that answers them alike, whatever
    else it keeps; iteration, ``len`` and an unlogged read of ``kept_bcast`` are errors."""
    log: dict = {}
    r = recipe.RecSet({"a", "b"}, log)
    assert "a" in r and "c" not in r and "a" in r and r
    assert log == {"a": True, "c": False, recipe._ANY: True}
    for f in (list, len, lambda x: x | {"d"}, lambda x: x == {"a", "b"}, hash):
        with pytest.raises(TypeError):
            f(r)
    for f in (bool, lambda x: x == True):  # noqa: E712
        with pytest.raises(TypeError):
            f(recipe._UNREAD)
    seen = tuple(log.items()) + ((recipe._BCAST, False),)
    assert recipe._same_kept(seen, _P([], {"a", "x"}, bcast=False))
    assert not recipe._same_kept(seen, _P([], {"a", "c"}, bcast=False))
    assert not recipe._same_kept(seen, _P([], {"x"}, bcast=False))
    assert not recipe._same_kept(seen, _P([], {"a"}, bcast=True))
    assert recipe._same_kept(((recipe._ANY, False),), _P([]))
    assert not recipe._same_kept(((recipe._ANY, False),), _P([], {"z"}))
    assert recipe._same_kept((), _P([], {"z"}, bcast=False))


def _cross_mode_replays(mp) -> list:
    """From now on: per replay, whether the replaying build keeps other activations (or
    another broadcast mode) than the build that recorded the recipe (a spy on ``_compile`` and
    ``RecipeBook.replay``)."""
    full: dict = {}
    out: list = []
    comp, replay = recipe._compile, recipe.RecipeBook.replay

    def _compile(raw):
        r = comp(raw)
        if r is not None:
            full[id(r)] = (r, frozenset(raw["kept_set"]), raw["bcast"])
        return r

    def rp(self, bld, si, pieces, r, ext):
        out.append(full[id(r)][1:] != (frozenset(bld.tl.kept), bld.tl.kept_bcast))
        return replay(self, bld, si, pieces, r, ext)

    mp.setattr(recipe, "_compile", _compile)
    mp.setattr(recipe.RecipeBook, "replay", rp)
    return out


def test_replays_across_keep_modes_are_the_full_builds(r18, monkeypatch):
    """A recipe's key holds the answers to the kept-activation reads its generation made, not
    the whole set (session 35): builds in other keep modes replay it where those answers agree
    -- every such replay is checked against its full build, and the schedule's builds are the
    ones without recipes."""
    off = _run(r18, M100, False)[:2]
    cross = _cross_mode_replays(monkeypatch)
    on = _run(r18, M100, True, check=True, monkeypatch=monkeypatch)[:2]
    assert on == off
    assert sum(cross) >= 5 and not all(cross), (sum(cross), len(cross))
