"""``ListScheduler.kept_blocks``: whether a build has kept activations, set once per build (session 36,
issue 15).

``put`` asks it for every DTDU task (the DTDU busy blocks are kept only with kept activations). Until
session 36 it read ``bool(Plan.kept)`` there, and while a segment is recorded ``Plan.kept`` is a
logging view (:class:`.recipe.RecSet`) whose ``bool`` enters the recipe's key: a recording made in a
build without kept activations was refused by every build with them, although that read is the
builder's own (a replay runs ``put`` again, with the replaying build's answer), not the segment's
generation (ResNet-50: 860 -> 867 replays). Oracles: ``put`` reading ``bool(Plan.kept)`` as before
(written out below as a property of the builder), and the schedule without recipes; with
``recipe.CHECK`` every replay is also built in full from a copy of its state and compared. Mutants:
``Scheduler.build`` not calling ``set_kept`` after the kept activations are chosen (the invariant
below, and a copy from a kept activation raises), nor at a resume (``test_dtdu_kept``'s resumes
across keep modes, and the invariant)."""

import pytest

from m100.passes.schedule import placement, recipe
from m100.passes.schedule.list_schedule import ListScheduler
from m100.targets.m100.machine import get_machine

from .test_recipe import _run, r18  # noqa: F401 (the fixture: ResNet-18 64x64's graph)

M100 = get_machine("m100")


def _kept(tl) -> set:
    """The build's kept activations (the set behind a recording's logging view)."""
    k = tl.kept
    return k.s if type(k) is recipe.RecSet else k


def _live_read(mp) -> None:
    """From now on ``put`` reads ``bool(Plan.kept)`` at each DTDU task, as before session 36
    (through the recording's logging view while a segment is recorded); ``set_kept`` sets
    nothing."""
    mp.setattr(ListScheduler, "kept_blocks",
               property(lambda self: bool(self.tl.kept), lambda self, v: None), raising=False)


def _from_without(mp) -> list:
    """From now on: per replay, (the recording's build had kept activations, the replaying
    build has)."""
    made: dict = {}
    out: list = []
    comp, replay = recipe._compile, recipe.RecipeBook.replay

    def _compile(raw):
        r = comp(raw)
        if r is not None:
            made[id(r)] = (r, bool(raw["kept_set"]))
        return r

    def rp(self, bld, si, pieces, r, ext):
        out.append((made[id(r)][1], bool(_kept(bld.tl))))
        return replay(self, bld, si, pieces, r, ext)

    mp.setattr(recipe, "_compile", _compile)
    mp.setattr(recipe.RecipeBook, "replay", rp)
    return out


def test_flag_is_the_live_read_and_replays_more(r18):
    """ResNet-18 64x64 on 56 TPBs: every whole-plan build (and early stop) and the final plan are
    the same as with ``put`` reading ``bool(Plan.kept)`` and as without recipes; every replay is
    checked against its full build; a recording of a build without kept activations is replayed
    in a build with them more often than with the live read (which never could, for a segment
    with a DTDU task)."""
    off = _run(r18, M100, False)[:2]
    mp = pytest.MonkeyPatch()
    try:
        cross = _from_without(mp)
        new = _run(r18, M100, True, check=True, monkeypatch=mp)
    finally:
        mp.undo()
    mp = pytest.MonkeyPatch()
    try:
        _live_read(mp)
        cross_old = _from_without(mp)
        old = _run(r18, M100, True, check=True, monkeypatch=mp)
    finally:
        mp.undo()
    assert new[:2] == old[:2] == off
    n_new = sum(1 for a, b in cross if b and not a)
    n_old = sum(1 for a, b in cross_old if b and not a)
    assert n_new > n_old, (n_new, n_old)
    assert new[2][0][1] > old[2][0][1]  # replays in all


def test_flag_is_bool_of_the_builds_kept_at_every_task(resnet_graph, monkeypatch):
    """At every task a plan builder puts (the placement of ResNet-18 32 on 8 TPBs, and builds of
    every keep mode resumed from builds with and without kept activations), ``kept_blocks`` is
    whether the build keeps activations."""
    seen = []
    put = ListScheduler.put

    def spy(self, t):
        if not self.search_only:
            assert self.kept_blocks == bool(_kept(self.tl)), (t.id, sorted(_kept(self.tl)))
            seen.append(self.kept_blocks)
        return put(self, t)

    monkeypatch.setattr(ListScheduler, "put", spy)
    pl = placement.schedule(resnet_graph, M100, tpbs=8)
    segs = pl.segments
    s = placement.Search(resnet_graph, M100, placement.available_tpbs(M100, 8)).sched
    every = set(range(len(segs)))
    base = s.build(segs, checkpoints=every)
    kbase = s.build(segs, keep="one-stage", checkpoints=every)
    s.recent.clear()
    mid = s.build(segs, base=kbase, checkpoints=every)  # without, resumed from one with
    for b in (base, mid):
        for mode in ("all", "one-stage", "all+copies"):
            s.recent.clear()
            s.build(segs, keep=mode, base=b)
    assert True in seen and False in seen
