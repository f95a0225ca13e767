"""A checkpoint fits a build only if the segments its prefix's build looked at are the build's
(:meth:`passes.schedule.resume.Checkpoint.fits` up to ``reach``): the late-store decisions of a
segment read the segments after it (``PlanBuilder._late_ok`` / ``_late_reads`` /
``_late_wave_next``). Session 30 found the gap: a trial of ``background`` on the 4-head W8A8
prefill layer on 8 TPBs resumed from the checkpoint before the segment it moves gave 35 637
cycles, the full build 35 779. Oracles: the full build of the same segments (never resumed), and
the indices the builder actually reads of the plan's segment list (a logging list)."""

import pytest

from m100.passes.schedule import background, build_segments, resume
from m100.passes.schedule import placement
from m100.targets.m100.machine import get_machine

from .test_recipe import full_builds
from .test_side_by_side import _prefill_graph


@pytest.fixture(scope="module")
def before_background():
    """The prefill layer's search, segments, plan and keep mode as ``background`` gets them."""
    seen = []
    orig = placement.background

    def spy(s, segs, tl, keep):
        seen.append((s, segs, tl, keep))
        return orig(s, segs, tl, keep)

    mp = pytest.MonkeyPatch()
    mp.setattr(placement, "background", spy)
    try:
        placement.schedule(_prefill_graph(), get_machine("m100"), tpbs=8)
    finally:
        mp.undo()
    return seen[-1]


def test_background_trial_resumed_is_the_full_build(before_background, monkeypatch):
    s, segs, _, keep = before_background
    cands = background.candidates(s, segs)
    assert len(cands) == 1, "the V transpose: the case the test is about"
    i = cands[0]
    sched = s.sched
    base = sched.build(segs, keep=keep, checkpoints=set(range(len(segs))))
    # the case: the prefix before the transpose looks at it (late stores decide by it)
    assert base.checkpoints[i].reach >= i
    moved = segs[:i] + segs[i + 1:] + [segs[i]]
    name = segs[i].stages[0].op
    restored = []
    restore = resume.Checkpoint.restore

    def spy(self, bld, sg):
        restored.append(self.index)
        return restore(self, bld, sg)

    monkeypatch.setattr(resume.Checkpoint, "restore", spy)
    for n in background.CHUNKS:
        monkeypatch.setitem(s.g.chunks, name, n)
        full = sched.build(moved, keep=keep)
        got = sched.build(moved, keep=keep, base=base)
        assert got.to_json() == full.to_json(), (n, got.makespan, full.makespan)
        assert got.buffers == full.buffers and got.prefetch == full.prefetch
    # resumed (from a checkpoint before the transpose whose prefix does not look at it)
    assert restored and all(0 < j < i for j in restored), restored


class _LogList(list):
    """The plan's segment list, logging each index the builder reads with the segment being
    built (``at[0]``)."""

    def __init__(self, lst, log, at):
        super().__init__(lst)
        self.log, self.at = log, at

    def __getitem__(self, j):
        if type(j) is int:
            self.log.append((self.at[0], j))
        return super().__getitem__(j)


def test_reach_covers_every_segment_read(before_background, monkeypatch):
    """Each checkpoint's ``reach`` is at least every index of the segment list the builds of
    the segments before it read (recipes off: every segment built in full); a build that
    replays recorded segments (recipes on, built twice) keeps the same reaches."""
    s, segs, _, keep = before_background
    sched = s.sched
    log: list = []
    at = [-1]

    def segment(self, si, seg, isolated, inner):
        at[0] = si
        if type(self.tl.segments) is list:
            self.tl.segments = _LogList(self.tl.segments, log, at)
        return inner(self, si, seg, isolated)

    pts = set(range(len(segs)))
    with pytest.MonkeyPatch.context() as mp:
        full_builds(mp)
        inner = build_segments.PlanBuilder.segment
        mp.setattr(build_segments.PlanBuilder, "segment",
                   lambda self, si, seg, iso: segment(self, si, seg, iso, inner))
        tl = sched.build(segs, keep=keep, checkpoints=pts)
    ahead = 0
    for c, cp in tl.checkpoints.items():
        read = max([j for si, j in log if si < c] + [c - 1])
        assert cp.reach >= read, (c, cp.reach, read)
        ahead += read >= c
    assert ahead, "no prefix read a later segment: the test would check little"
    want = {c: cp.reach for c, cp in tl.checkpoints.items()}
    replayed = sched.recipes.replayed if sched.recipes else 0
    for _ in range(2):
        tl2 = sched.build(segs, keep=keep, checkpoints=pts)
        assert {c: cp.reach for c, cp in tl2.checkpoints.items()} == want
        assert tl2.to_json() == tl.to_json()
    assert sched.recipes.replayed > replayed, "nothing replayed: the test would check little"
