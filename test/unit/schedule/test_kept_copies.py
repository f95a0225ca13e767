"""``refine.kept_copies`` without its full build (session 30): the builder reads the broadcast
mode of kept K chunks (``Plan.kept_bcast``) only from the segment ``keep.first_bcast_read``
names on, so a ``+copies`` build resumes from a checkpoint of the broadcast plan at or before
it, and a plan where no segment reads it is its own ``+copies`` plan.

Oracle: the full ``+copies`` build of the same segments (the path every ``kept_copies`` took
before): the same JSON (every task, time, piece, buffer) and task count. The index is also
checked against the two full builds (every task of the segments before it equal), and a
mutant without the limit (the latest checkpoint of the broadcast plan) gives another plan."""

from __future__ import annotations

import pytest

from m100.passes.schedule import keep as keep_mod
from m100.passes.schedule import refine
from m100.passes.schedule.keep import first_bcast_read

from .test_resume import placed, restores  # noqa: F401 (placed: ResNet-18 64x64's final segments)


def _first_difference(a, b) -> int:
    """The index of the first task where two plans differ."""
    for i, (x, y) in enumerate(zip(a.tasks, b.tasks)):
        if x != y:
            return i
    return min(len(a.tasks), len(b.tasks))


@pytest.mark.parametrize("mode", ["one-stage", "all"])
def test_copies_resumed_from_the_broadcast_plan_are_the_full_build(placed, mode, monkeypatch):
    s, segs, _ = placed
    sched = s.sched
    base = sched.build(segs, keep=mode, checkpoints=set(range(len(segs))))
    r = first_bcast_read(sched, segs, base.kept)
    assert 0 < r < len(segs) - 1, "no kept K chunk read: the test checks nothing"
    n0 = sched.tasks_built
    full = sched.build(segs, keep=mode + "+copies")
    n1 = sched.tasks_built
    assert full.to_json() != base.to_json(), "the modes build alike: the test checks nothing"
    # the segments before r are built alike in both modes (their tasks come first)
    assert _first_difference(base, full) >= len(base.checkpoints[r].plan.tasks)
    restored = restores(monkeypatch)
    got = sched.build(segs, keep=mode + "+copies", base=base)
    n2 = sched.tasks_built
    assert restored == [r]
    assert got.to_json() == full.to_json() and not got.kept_bcast
    assert got.buffers == full.buffers and got.prefetch == full.prefetch
    assert n2 - n1 == n1 - n0 == len(full.tasks)
    # kept_copies: the same answer as the full build's ``shorter``
    want = sched.shorter(segs, base, mode + "+copies")
    tl, k = refine.kept_copies(sched, segs, base, mode)
    assert (tl.to_json(), k) == ((want.to_json(), mode + "+copies") if want is not None
                                 else (base.to_json(), mode))
    # a mutant without the limit resumes later and builds another plan
    restored.clear()
    monkeypatch.setattr("m100.passes.schedule.timeline.first_bcast_read",
                        lambda sch, sg, kept: len(sg))
    bad = sched.build(segs, keep=mode + "+copies", base=base)
    assert restored[0] > r and bad.to_json() != full.to_json()


def test_a_plan_whose_chunks_no_segment_reads_is_its_own_copies_plan(placed, monkeypatch):
    """No segment reads a kept K chunk (kept activations read only by pipelines / whole pieces):
    kept_copies answers the broadcast plan without a build, and the full ``+copies`` build
    is that plan."""
    s, segs, _ = placed
    sched = s.sched
    base = sched.build(segs, keep="all")
    # keep only the tensors no lockstep contraction reads
    readers = set()
    for si, seg in enumerate(segs):
        if first_bcast_read(sched, segs[si:si + 1], base.kept) == 0:
            readers |= {t for t in sched.ops[seg.stages[0].op].inputs}
    kept = {o for o in base.kept if sched.ops[o].outputs[0] not in readers}
    assert kept and kept != base.kept, "the test checks nothing"
    orig = keep_mod.choose_kept

    def only(sch, sg, cap, one_stage=False, matmul=False):
        k, use = orig(sch, sg, cap, one_stage, matmul)
        return k & kept, use

    monkeypatch.setattr("m100.passes.schedule.timeline.choose_kept", only)
    tl = sched.build(segs, keep="all")
    assert tl.kept and first_bcast_read(sched, segs, tl.kept) == len(segs)
    n0 = sched.tasks_built
    assert refine.kept_copies(sched, segs, tl, "all") == (tl, "all")
    assert sched.tasks_built == n0
    assert sched.build(segs, keep="all+copies").to_json() == tl.to_json()
