"""A checkpoint shares the builder's growing history instead of copying it
(:func:`passes.schedule.resume.snap_state`, :class:`~passes.schedule.resume.PlanMark`): the
state and plan a build resumes from are the copies the eager checkpoint made when it was taken.

Oracle: the eager copies as ``Checkpoint.take`` made them up to session 33 (``copy_state`` of the
builder's ``__dict__`` with ``kept_use`` copied too, and ``copy_plan`` -- written out below), taken
beside every checkpoint of whole placements and compared, item by item and in order, with what
the checkpoint gives *after the placement has ended* (the builds that took them went on growing
their containers, resumed builds restored from them, later trials replaced ``by_op`` lists)."""

import pytest

from m100.passes.schedule import placement, resume
from m100.targets.m100.machine import get_machine

from .test_shared_costs import _graph

M100 = get_machine("m100")

_FLAT_OLD = resume._FLAT | {"kept_use"}


def _eager_state(d: dict) -> dict:
    """``resume.copy_state`` as it was: every flat dict copied (``kept_use`` too), every dict of
    lists copied list by list (the other attributes as ``copy_state`` copies them)."""
    out = resume.copy_state(d)
    for k in _FLAT_OLD:
        if k in d:
            out[k] = d[k].copy()
    for k in resume._LISTS:
        if k in d:
            out[k] = {a: list(v) for a, v in d[k].items()}
    return out


def _eager_plan(tl, segs):
    """``resume.copy_plan`` as ``Checkpoint.take`` called it (every list and dict copied)."""
    return dict(tasks=list(tl.tasks), tail_dma=list(tl.tail_dma.items()),
                drb_wait=list(tl.drb_wait.items()), pieces=list(tl.pieces),
                buf_segs=list(tl.buf_segs), plans=list(tl.plans.items()), segments=list(segs),
                seg_spans=list(tl.seg_spans), prefetch=list(tl.prefetch.items()),
                kept=set(tl.kept), kept_bcast=tl.kept_bcast, late=list(tl.late.items()),
                late_reads=list(tl.late_reads.items()), carry=set(tl.carry))


def _plan_fields(p):
    return dict(tasks=list(p.tasks), tail_dma=list(p.tail_dma.items()),
                drb_wait=list(p.drb_wait.items()), pieces=list(p.pieces),
                buf_segs=list(p.buf_segs), plans=list(p.plans.items()),
                segments=list(p.segments), seg_spans=list(p.seg_spans),
                prefetch=list(p.prefetch.items()), kept=set(p.kept), kept_bcast=p.kept_bcast,
                late=list(p.late.items()), late_reads=list(p.late_reads.items()),
                carry=set(p.carry))


def _graph_of(which):
    if which == "resnet18-32":
        from m100.frontend import models
        return _graph(models.resnet18(hw=32, num_classes=10)), 8
    from .test_side_by_side import _prefill_graph
    return _prefill_graph(), 8


@pytest.mark.parametrize("which", ["resnet18-32", "prefill-heads"])
def test_a_checkpoint_gives_the_state_it_was_taken_with(which, monkeypatch):
    g, n = _graph_of(which)
    take = resume.Checkpoint.take
    taken = []

    def spy(bld, index, segs, max_end=None):
        eager = (_eager_state(bld.__dict__), _eager_plan(bld.tl, segs))
        cp = take(bld, index, segs, max_end)
        taken.append((cp, eager, list(segs)))
        return cp

    fit = resume.Checkpoint.fits
    asked = {"use": 0, "fits": 0}

    def fits_spy(self, segs, kept, kept_use, bound):
        """``Checkpoint.fits`` as it was: the kept bytes up to the reach filtered at the take
        (the eager state's ``kept_use``), compared with the build's filtered now."""
        got = fit(self, segs, kept, kept_use, bound)
        eager = next(e for c, e, _ in taken if c is self)[0]["kept_use"]
        nr = self.reach + 1
        pre = self.index <= len(segs) and tuple(segs[:nr]) == self.segs and \
            self.max_end < bound and resume._kept_in(self.segs, kept) == self.kept
        old = pre and resume._use_in(nr, kept_use) == resume._use_in(nr, eager)
        assert got == old
        asked["use"] += pre and bool(resume._use_in(nr, eager))
        asked["fits"] += got
        return got

    monkeypatch.setattr(resume.Checkpoint, "take", staticmethod(spy))
    monkeypatch.setattr(resume.Checkpoint, "fits", fits_spy)
    placement.schedule(g, M100, tpbs=n)
    assert len(taken) > 20
    assert asked["use"] and asked["fits"], asked  # kept bytes compared, checkpoints fitted
    grew = {"bar_hist": 0, "tasks": 0, "prefetch": 0, "drb_wait": 0, "bar_at": 0}
    for cp, (state, plan), segs in taken:
        got = resume.unsnap_state(cp.state)
        assert set(got) == set(state)
        for k in resume._SNAPPED:  # the same items in the same order (what a build iterates)
            assert list(got[k].items()) == list(state[k].items()), (cp.index, k)
        # shared, never changed in place (a resumed build puts its own in)
        assert got["kept_use"] is cp.state["kept_use"]
        assert list(got["kept_use"].items()) == list(state["kept_use"].items())
        p = _plan_fields(cp.mark.plan(segs))
        for k in plan:
            assert p[k] == plan[k], (cp.index, k)
        assert all(x is y for x, y in zip(p["tasks"], plan["tasks"]))
        # the shared containers did grow after the checkpoint (the test checks something)
        (ts, _), _, _, _, (pf, _), (dw, _), _ = cp.mark.grown
        grew["tasks"] += len(ts) > len(plan["tasks"])
        grew["prefetch"] += len(pf) > len(plan["prefetch"])
        grew["drb_wait"] += len(dw) > len(plan["drb_wait"])
        grew["bar_hist"] += any(len(x) > m for x, m in cp.state["bar_hist"][1].values())
        grew["bar_at"] += len(cp.state["bar_at"][1]) > cp.state["bar_at"][2]
    # (``by_op``'s lists and ``drb_ends``' tuples of a checkpoint's keys do not grow in these
    # builds: the next test grows them; the prefill layer has no DRB waits)
    if which == "prefill-heads":
        del grew["drb_wait"]
    assert all(grew.values()), grew


def test_snapped_history_survives_the_ways_the_builder_grows_it():
    """``snap_state`` / ``unsnap_state`` of a real builder's state, then the live state grown
    every way the builder may grow it -- a list of ``by_op`` / ``bar_hist`` appended to or
    replaced by a new list (a replay), new keys, a new task's id added to an existing
    ``drb_ends`` key and new ends, new ``bar_at`` keys -- gives the eager copy taken at the
    snap."""
    import random

    from m100.frontend import models
    g = _graph(models.resnet18(hw=32, num_classes=10))
    keep = {}
    take = resume.Checkpoint.take

    def spy(bld, index, segs, max_end=None):
        keep["bld"] = bld
        return take(bld, index, segs, max_end)

    mp = pytest.MonkeyPatch()
    mp.setattr(resume.Checkpoint, "take", staticmethod(spy))
    try:
        placement.schedule(g, M100, tpbs=8)
    finally:
        mp.undo()
    bld = keep["bld"]
    rng = random.Random(7)
    for _ in range(20):
        d = _eager_state(bld.__dict__)  # a private live state to grow
        d["by_op"] = {k: list(v) for k, v in d["by_op"].items()}
        d["bar_hist"] = {k: list(v) for k, v in d["bar_hist"].items()}
        nt = len(bld.tl.tasks)
        # ends with several tasks' ids, as the builder makes them (ids in creation order)
        d["drb_ends"] = {float(e): tuple(sorted(rng.sample(range(nt), rng.randrange(1, 4))))
                         for e in range(rng.randrange(5, 40))}
        want = _eager_state(d)
        snap = resume.snap_state(d, nt)
        nxt = nt
        for _ in range(rng.randrange(1, 60)):
            what = rng.randrange(6)
            if what == 0 and d["by_op"]:
                d["by_op"][rng.choice(list(d["by_op"]))].append(object())
            elif what == 1 and d["by_op"]:  # a replay's new list for an op
                k = rng.choice(list(d["by_op"]))
                d["by_op"][k] = d["by_op"][k][:1] + [object()]
            elif what == 2:
                d["by_op"][f"new{rng.random()}"] = [object()]
                d["bar_hist"].setdefault(rng.randrange(64), []).append((99, nxt))
            elif what == 3 and d["drb_ends"]:
                e = rng.choice(list(d["drb_ends"]))
                d["drb_ends"][e] = d["drb_ends"][e] + (nxt,)
                nxt += 1
            elif what == 4:
                d["drb_ends"][rng.uniform(0, 1e6)] = (nxt,)
                d["bar_at"][(rng.randrange(64), 10 ** 6 + nxt)] = (nxt,)
                nxt += 1
            elif d["bar_hist"]:
                d["bar_hist"][rng.choice(list(d["bar_hist"]))].append((98, nxt))
        got = resume.unsnap_state(snap)
        for k in resume._SNAPPED:
            assert list(got[k].items()) == list(want[k].items()), k


def test_fits_compares_the_kept_bytes_up_to_the_reach():
    """``Checkpoint.fits`` (the build's kept bytes kept whole, filtered when first compared)
    answers as it did with the bytes filtered at the take, on random kept bytes: the same dict,
    an equal copy, a copy changed before the reach (no fit) or after it (a fit)."""
    import random
    from types import SimpleNamespace

    rng = random.Random(11)
    segs = [SimpleNamespace(stages=(SimpleNamespace(op=f"op{i}"),)) for i in range(12)]
    cases = {"same": 0, "copy": 0, "before": 0, "after": 0}
    for _ in range(300):
        use = {(rng.randrange(8), rng.randrange(12)): rng.randrange(1, 9) * 512
               for _ in range(rng.randrange(0, 30))}
        reach = rng.randrange(0, 12)
        index = min(reach + 1, rng.randrange(1, 12))
        cp = resume.Checkpoint(index, tuple(segs[:reach + 1]), frozenset(), use, None, {}, 0.0,
                               reach)
        old_use = resume._use_in(reach + 1, use)  # what the take kept before
        how = rng.choice(list(cases))
        other = use if how == "same" else dict(use)
        if how in ("before", "after"):
            lo, hi = (0, reach) if how == "before" else (reach + 1, 11)
            if lo > hi:
                continue
            k = (rng.randrange(8), rng.randrange(lo, hi + 1))
            other[k] = other.get(k, 0) + 256
        cases[how] += 1
        want = resume._use_in(reach + 1, other) == old_use
        assert cp.fits(segs, set(), other, 1.0) == want, how
        assert want == (how != "before")
    assert min(cases.values()) > 30, cases


def test_first_items_are_the_prefix():
    """``resume._first`` (a copy without the later keys, or the first items) is the first ``n``
    items of the dict in order, for every ``n`` (both of its paths), as a new dict."""
    import random
    rng = random.Random(13)
    for _ in range(200):
        d = {rng.random(): i for i in range(rng.randrange(0, 40))}
        for n in range(len(d) + 1):
            got = resume._first(d, n)
            assert list(got.items()) == list(d.items())[:n] and got is not d
            got["x"] = 1
            assert "x" not in d
