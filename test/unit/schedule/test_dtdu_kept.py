"""The DTDU busy blocks kept only in builds with kept activations (session 35, issue 15).

``ListScheduler.dtdu_busy`` (per TPB, the busy intervals of its DTDU) is read only by a copy from a
kept activation (``fill_gap``: it takes the earliest idle gap of the sending DTDU), which only a
build with kept activations (``Plan.kept``) makes; yet every build kept the blocks and every
checkpoint copied them (ResNet-50: 197 of 435 checkpoints in builds without kept activations, 11 k
block copies never read). Now ``put`` appends a DTDU task's interval only with kept activations,
and a build with them that resumes from a checkpoint without blocks makes them from the plan's
tasks (``ListScheduler.resumed_dtdu`` / ``dtdu_from_tasks``). The reference is the method before:
every DTDU task appended in every plan build, the checkpoint's blocks restored as they are
(:func:`_reference`). Oracles: whole placements of ResNet-18 32 give the same plan and every
builder with kept activations ends with the reference's blocks; the builds of every keep mode
resumed from a build without kept activations give the full builds' plans and, at each resume,
the reference's blocks (interval by interval, chunk by chunk).
"""

from __future__ import annotations

from m100.passes.schedule import placement
from m100.passes.schedule.busy import BusyBlocks
from m100.passes.schedule.list_schedule import BoundExceeded, ListScheduler
from m100.targets.m100.machine import get_machine

M100 = get_machine("m100")


def _blocks(d: dict) -> dict:
    """A TPB -> ``BusyBlocks`` dict as plain lists (chunks, gap bounds, last ends, stale)."""
    return {x: (b.s, b.e, b.gap, b.last, b.stale) for x, b in sorted(d.items())}


def _reference(monkeypatch) -> None:
    """``put`` and the resume as before: every DTDU task not a copy from a kept activation
    appended to its TPB's blocks (``put``'s old last branch: ``blocks.append(start, start +
    cycles)``, before the bound test), and a resumed build keeps the checkpoint's blocks."""
    put = ListScheduler.put

    def ref_put(self, t):
        fill = self.fill_gap

        def append():
            if t.unit == "dtdu" and not fill and not self.tl.kept:  # (else ``put`` did)
                b = self.dtdu_busy.get(t.tpb)
                if b is None:
                    b = self.dtdu_busy[t.tpb] = BusyBlocks()
                b.append(t.start, t.start + t.cycles)
        try:
            r = put(self, t)
        except BoundExceeded:
            append()
            raise
        append()
        return r

    monkeypatch.setattr(ListScheduler, "put", ref_put)
    monkeypatch.setattr(ListScheduler, "resumed_dtdu", lambda self: None)


def _spied(monkeypatch, run, reference: bool):
    """``run()`` with the builder's own methods or the reference's: its result, every plan
    builder that put a task (in order) and, at each resume, the plan's length and the blocks."""
    if reference:
        _reference(monkeypatch)
    builders, resumed = [], []
    put, res = ListScheduler.put, ListScheduler.resumed_dtdu

    def spy_put(self, t):
        if not builders or builders[-1] is not self:
            builders.append(self)
        return put(self, t)

    def spy_res(self):
        res(self)
        resumed.append((len(self.tl.tasks), sorted(self.tl.kept), _blocks(self.dtdu_busy)))

    monkeypatch.setattr(ListScheduler, "put", spy_put)
    monkeypatch.setattr(ListScheduler, "resumed_dtdu", spy_res)
    try:
        out = run()
    finally:
        monkeypatch.undo()
    return out, builders, resumed


def test_blocks_only_with_kept_activations(resnet_graph, monkeypatch):
    def run():
        return placement.schedule(resnet_graph, M100, tpbs=8)
    new, nb, nr = _spied(monkeypatch, run, False)
    old, ob, orr = _spied(monkeypatch, run, True)
    assert new.segments == old.segments
    assert new.timeline.to_json() == old.timeline.to_json()
    assert len(nb) == len(ob) > 20
    kept = without = 0
    for a, b in zip(nb, ob):
        assert a.tl.kept == b.tl.kept
        if a.tl.kept:
            kept += 1
            assert _blocks(a.dtdu_busy) == _blocks(b.dtdu_busy)
        else:
            without += 1
            assert a.dtdu_busy == {}
            if any(t.unit == "dtdu" for t in b.tl.tasks):
                assert b.dtdu_busy  # the reference kept blocks there
    assert kept and without
    _same_resumes(nr, orr)


def _same_resumes(new: list, old: list) -> None:
    """The same resumes; with kept activations the reference's blocks, without none."""
    assert [r[:2] for r in new] == [r[:2] for r in old] and new
    for a, b in zip(new, old):
        assert a == b if a[1] else a[2] == {}


def test_resumed_from_a_build_without_kept(resnet_graph, monkeypatch):
    """Each keep mode's build resumed from a build without kept activations (checkpoints before
    every segment; one built from scratch, one resumed from a ``one-stage`` build): the full
    build's plan, and at each resume the reference's blocks -- made from the tasks where the
    checkpoint had none (``one-stage``: 128 tasks, 8 TPBs), none without kept activations."""
    pl = placement.schedule(resnet_graph, M100, tpbs=8)
    segs = pl.segments

    def run():
        s = placement.Search(resnet_graph, M100, placement.available_tpbs(M100, 8)).sched
        every = set(range(len(segs)))
        base = s.build(segs, checkpoints=every)
        # and one without kept activations resumed from one with (its blocks dropped), whose
        # later checkpoints the builds with kept activations resume from
        kbase = s.build(segs, keep="one-stage", checkpoints=every)
        s.recent.clear()
        mid = s.build(segs, base=kbase, checkpoints=every)
        out = []
        for b in (base, mid):
            for mode in ("all", "one-stage", "all-mm", "all+copies"):
                s.recent.clear()
                full = s.build(segs, keep=mode)
                s.recent.clear()
                out.append((full.to_json(), s.build(segs, keep=mode, base=b).to_json()))
        return out
    new, _, nr = _spied(monkeypatch, run, False)
    old, _, orr = _spied(monkeypatch, run, True)
    assert new == old
    for full, resumed in new:
        assert full == resumed
    _same_resumes(nr, orr)
    made = [r for r in nr if r[1] and r[2]]  # blocks at a resume with kept activations
    assert made and max(n for n, _, _ in made) >= 100
    assert any(not r[1] for r in nr)  # a resume without kept activations
