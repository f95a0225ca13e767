"""A whole-plan build resumed from a checkpoint of an earlier build (:mod:`passes.schedule.resume`)
is the plan a full build gives: same JSON (every task, time, piece, buffer, prefetch), same task
count for the search budget, same early stop at a bound. Oracle: the full build of the same
segments (the code path every plan took before checkpoints existed)."""

from dataclasses import replace

import pytest

from m100.passes.schedule import placement
from m100.passes.schedule.graph import ScheduleError
from m100.passes.schedule.keep import choose_kept
from m100.passes.schedule.list_schedule import BoundExceeded
from m100.passes.schedule.resume import EndScan, best_checkpoint, copy_state
from m100.targets.m100.machine import get_machine

from .test_weights_once import _graph

M100 = get_machine("m100")


@pytest.fixture(scope="module")
def placed():
    """ResNet-18 64x64 on 56 TPBs: the search, its final segments and keep mode."""
    from m100.frontend import models
    seen = []
    orig = placement.weights_once

    def spy(s, segs, tl, keep):
        out = orig(s, segs, tl, keep)
        seen.append((s, out[0], keep))
        return out

    mp = pytest.MonkeyPatch()
    mp.setattr(placement, "weights_once", spy)
    try:
        placement.schedule(_graph(models.resnet18(hw=64)), M100)
    finally:
        mp.undo()
    return seen[-1]


def restores(monkeypatch) -> list[int]:
    """The indices of the checkpoints builds resume from from now on (a spy on
    ``Checkpoint.restore``; the list the caller may clear)."""
    from m100.passes.schedule import resume
    restored: list[int] = []
    restore = resume.Checkpoint.restore

    def spy(self, bld, segs):
        restored.append(self.index)
        return restore(self, bld, segs)

    monkeypatch.setattr(resume.Checkpoint, "restore", spy)
    return restored


def _trials(segs):
    """Per checkpointed segment, the plan with that segment's K chunking toggled."""
    pts = sorted(placement.trial_points(segs))
    assert len(pts) >= 3, "too few K-split segments: the test would check little"
    for si in pts:
        st = segs[si].stages[0]
        yield si, segs[:si] + [replace(segs[si], stages=(replace(st, chunked=not st.chunked),))] \
            + segs[si + 1:]


@pytest.mark.parametrize("keep", ["", "all"])
def test_resumed_build_is_the_full_build(placed, keep):
    s, segs, _ = placed
    sched = s.sched
    base = sched.build(segs, keep=keep, checkpoints=placement.trial_points(segs))
    # before each trial point, and before the segment before it where no late stores are
    # pending there (``Scheduler.build``: a trial changing a segment may resume there)
    pts = placement.trial_points(segs)
    assert pts <= set(base.checkpoints) <= pts | {p - 1 for p in pts}
    resumed_any = False
    for si, trial in _trials(segs):
        n0 = sched.tasks_built
        full = sched.build(trial, keep=keep)
        n1 = sched.tasks_built
        res = sched.build(trial, keep=keep, base=base, checkpoints=placement.trial_points(trial))
        n2 = sched.tasks_built
        assert res.to_json() == full.to_json(), f"segment {si}"
        # a checkpoint's latest end (kept by the build as it goes) is its tasks' latest end
        for cp in list(base.checkpoints.values()) + list(res.checkpoints.values()):
            assert cp.max_end == max((t.end for t in cp.plan.tasks), default=0.0)
        assert res.buffers == full.buffers and res.prefetch == full.prefetch
        assert n2 - n1 == n1 - n0 == len(full.tasks)
        # it did resume: the prefix's tasks are the base's objects
        shared = res.tasks[0] is base.tasks[0]
        resumed_any |= shared
        if keep == "":
            assert shared and res.tasks[len(base.tasks) // 100] is base.tasks[len(base.tasks) // 100]
        # a trial resumed from this one's checkpoints builds like a full build too
        si2 = max(placement.trial_points(segs))
        if si2 > si:
            st = trial[si2].stages[0]
            trial2 = trial[:si2] + [replace(trial[si2], stages=(replace(st, chunked=not st.chunked),))] \
                + trial[si2 + 1:]
            assert sched.build(trial2, keep=keep, base=res).to_json() == \
                sched.build(trial2, keep=keep).to_json()
    assert resumed_any


def test_resumed_build_stops_at_the_bound_like_a_full_build(placed):
    s, segs, _ = placed
    sched = s.sched
    base = sched.build(segs, checkpoints=placement.trial_points(segs))
    si, trial = list(_trials(segs))[-1]
    full = sched.build(trial)
    for bound in (full.makespan, full.makespan * 0.9, base.tasks[0].end):
        got = []
        for kw in ({}, {"base": base}):
            n0 = sched.tasks_built
            with pytest.raises(BoundExceeded) as e:
                sched.build(trial, bound=bound, **kw)
            got.append((e.value.end, sched.tasks_built - n0))
        assert got[0] == got[1]
    assert sched.build(trial, bound=full.makespan * 1.01, base=base).to_json() == full.to_json()


def test_resumed_build_keeps_its_own_activations(placed):
    """A build with other kept activations than its base builds the segments after the
    checkpoint with its own ``Plan.kept`` / ``kept_use``, not the base's: the full build's plan.
    Cases: ``keep_activations`` resumes the keeping plans from the plan without; a
    weights_once-like trial (a K-split segment on half its TPB rows with twice its K parts, or
    on twice / three times its rows with a half / a third of them: other TPBs hold its kept
    output) changes the kept bytes per TPB after the checkpoint.
    (Restoring a checkpoint used to put the base's kept set and bytes into the resumed build.)"""
    s, segs, _ = placed
    sched = s.sched
    cap = int(sched.cm.machine.hbsm_bytes * sched.prefetch_share)
    # a checkpoint before every segment: a keeping build resumes before its first kept output
    base = sched.build(segs, checkpoints=set(range(len(segs))))
    moved = 0
    for keep in ("one-stage", "all"):
        full = sched.build(segs, keep=keep)
        assert full.kept, "nothing kept: the test would check little"
        res = sched.build(segs, keep=keep, base=base, checkpoints=placement.trial_points(segs))
        assert res.to_json() == full.to_json(), keep
        assert res.buffers == full.buffers and res.prefetch == full.prefetch
        _, use = choose_kept(sched, segs, cap, keep == "one-stage")
        for si in sorted(placement.trial_points(segs)):
            st = segs[si].stages[0]
            # half the rows with twice the K parts, or (the search may leave no K-split
            # segment with an even row count: session 25's DRB waits moved ResNet-18 64's
            # plan there) a factor of the K parts traded for rows
            f = next((f for f in (2, 3) if st.ks % f == 0), 0)
            cands = [(st.ks * 2, st.gr // 2)] if st.gr % 2 == 0 and st.ks >= 2 else []
            for ks, gr in cands + ([(st.ks // f, st.gr * f)] if f else []):
                trial = segs[:si] + [replace(segs[si], stages=(replace(
                    st, ks=ks, bands=gr, chunked=False),))] + segs[si + 1:]
                try:
                    want = sched.build(trial, keep=keep)
                except ScheduleError:
                    continue
                got = sched.build(trial, keep=keep, base=res)
                assert got.to_json() == want.to_json(), (keep, si)
                # resumed, with other kept bytes than the base's
                moved += got.tasks[0] is res.tasks[0] and \
                    choose_kept(sched, trial, cap, keep == "one-stage")[1] != use
    assert moved, "no resumed trial changed the kept bytes: the test would check little"


def test_resumed_from_the_latest_plan_of_its_keep_mode(placed):
    """A build resumed from a ``base`` in another keep mode (whose checkpoints do not fit: other
    activations kept in the prefix) starts from a checkpoint of the latest plan built in its own
    mode (``Scheduler.recent``; ``pipe_starts`` tries each trial in every keep mode) and is the
    full build's plan (oracle: a build without ``base``, which never resumes)."""
    s, segs, _ = placed
    sched = s.sched
    own = sched.build(segs, checkpoints=set(range(len(segs))))  # keep "": the mode's latest plan
    assert sched.recent[""] is own
    other = sched.build(segs, keep="all", checkpoints=placement.trial_points(segs))
    assert other.kept and sched.recent["all"] is other
    checked = 0
    for si, trial in _trials(segs):
        full = sched.build(trial)
        res = sched.build(trial, base=other)
        assert res.to_json() == full.to_json(), f"segment {si}"
        assert res.buffers == full.buffers and res.prefetch == full.prefetch
        # resumed from ``own``'s checkpoint before the changed segment, not from scratch
        assert res.tasks[0] is own.tasks[0] and len(res.checkpoints) == si + 1
        checked += 1
        sched.recent[""] = own  # each trial from ``own`` (``res`` is the mode's latest now)
    assert checked >= 3


def test_a_builder_attribute_without_a_copy_rule_is_an_error(placed):
    s, segs, _ = placed
    tl = s.sched.build(segs[:1], checkpoints={0})
    state = dict(tl.checkpoints[0].state)
    state["new_thing"] = []
    with pytest.raises(ScheduleError, match="new_thing"):
        copy_state(state)


def test_end_scan_is_the_latest_end():
    """EndScan.of on a list that grows between calls = max of the ends (0.0 for none)."""
    import random
    from types import SimpleNamespace
    rng = random.Random(3)
    for _ in range(200):
        tasks, scan = [], EndScan()
        for _ in range(rng.randrange(1, 6)):
            assert scan.of(tasks) == max((t.end for t in tasks), default=0.0)
            tasks += [SimpleNamespace(end=rng.choice([0.0, 1.5, rng.uniform(0, 1e6)]))
                      for _ in range(rng.randrange(0, 4))]
        assert scan.of(tasks) == max((t.end for t in tasks), default=0.0)


def test_row_index_shared_by_a_copy_answers_like_a_scan():
    """``Transfers._pieces_over`` on a builder and on its copies (``resume._copy_index``, which
    shares the index of an op whose pieces are all indexed) after each side adds pieces of its
    own: every answer holds exactly the pieces over the rows (oracle: a scan of all pieces) and
    no side sees the other's pieces (a shared index extended in place would show them)."""
    import random
    from types import SimpleNamespace

    from m100.passes.schedule.build_transfers import Transfers
    from m100.passes.schedule.resume import _copy_index

    def over(b, op, a0, a1):
        return [q for q in Transfers._pieces_over(b, op, a0, a1) if q.r0 < a1 and a0 < q.r1]

    def scan(b, op, a0, a1):
        return [q for q in b.by_op[op] if q.r0 < a1 and a0 < q.r1]

    def grow(b, rng):
        for op in b.by_op:
            for _ in range(rng.randrange(0, 3)):
                r0 = rng.randrange(0, 60)
                b.by_op[op].append(SimpleNamespace(r0=r0, r1=r0 + rng.randrange(1, 12)))

    rng = random.Random(5)
    for _ in range(60):
        b = SimpleNamespace(by_op={op: [SimpleNamespace(r0=r, r1=r + 8)] for op, r in
                                   (("a", 0), ("b", 16))}, row_index={})
        sides = [b]
        for _ in range(4):
            for side in sides:
                grow(side, rng)
                for op in side.by_op:
                    if rng.random() < 0.7:  # some indexes complete, some behind
                        a0 = rng.randrange(0, 70)
                        a1 = a0 + rng.randrange(1, 20)
                        assert over(side, op, a0, a1) == scan(side, op, a0, a1)
            src = rng.choice(sides)
            sides.append(SimpleNamespace(by_op={op: list(v) for op, v in src.by_op.items()},
                                         row_index=_copy_index(src.row_index, src.by_op)))
        for side in sides:
            for a0 in range(0, 70, 7):
                for op in side.by_op:
                    assert over(side, op, a0, a0 + 9) == scan(side, op, a0, a0 + 9)


def test_best_checkpoint_is_the_longest_prefix_that_fits(placed):
    """``best_checkpoint`` (from the longest prefix down, the first that fits) against the
    exhaustive answer: of every checkpoint that fits, the one with the largest index -- for each
    trial, with no bound and with bounds between the checkpoints' latest ends."""
    s, segs, _ = placed
    base = s.sched.build(segs, checkpoints=placement.trial_points(segs))
    cps = list(base.checkpoints.values())
    ends = sorted(cp.max_end for cp in cps)
    bounds = [float("inf"), ends[len(ends) // 2], ends[0] + 1.0, ends[0]]
    checked = set()
    for si, trial in [(len(segs), segs)] + list(_trials(segs)):
        for bound in bounds:
            fit = [cp for cp in cps if cp.fits(trial, set(), {}, bound)]
            want = max(fit, key=lambda cp: cp.index) if fit else None
            got = best_checkpoint(base, trial, set(), {}, bound)
            assert got is want, f"segment {si}, bound {bound}"
            checked.add(None if want is None else want.index)
    assert None in checked and len(checked) >= 3, "too few distinct answers: would check little"
