"""The builder's per-task cuts of session 23 (pflat) build the plans the code before them built.

Written out or hoisted: the waits of ``_load``, ``_broadcast`` and ``_kept_chunk`` (a kept
activation's K chunks), ``CostModel.dtdu_broadcast_cycles`` memoized, the end-of-queue case of
``DmaQueue.earliest``, ``Plan.makespan`` scanning only the tasks appended since its last answer,
and a K-split reduction's parts found by tile instead of a scan of the group. Oracle: the code
before them (``_load``, ``_broadcast``, ``_kept_chunk`` kept here verbatim as reference methods;
the end of a DMA queue by ``DmaQueue._at``; the scanning ``makespan``) on whole plans of ResNet-18
64x64 on 56 TPBs in every keep mode (kept chunks by broadcast and by copies, K splits, weight
prefetch): the same ``Plan.to_json`` -- every task's dependencies in order, its times, engine
and TPBs."""

import random

import pytest

from m100.passes.schedule import build_transfers, cost, dma_queue, plan, placement
from m100.passes.schedule.build_segments import PlanBuilder
from m100.passes.schedule.list_schedule import BoundExceeded
from m100.passes.schedule.segment import memory_of
from m100.targets.m100.machine import get_machine

from .test_recipe import full_builds
from .test_resume import placed  # noqa: F401  (the fixture: ResNet-18 64's final segments)


# ---------------------------------------------------------------- the code before (reference)
def _load_ref(self, op, tensor, tpb, nbytes, role, slot=True, box=None):
    src = "ddr" if self.g.tensors[tensor].kind == "weight" else memory_of(self.cm, self.g, tensor)
    mem = self._box_deps(tensor, box) if box is not None else None
    deps = (self._mem_deps(tensor) if mem is None else mem) + \
        self._wbar(tpb, tensor, role) + (self._slot_deps() if slot else [])
    p = self.piece
    return self.task("dma-in", "dma", -1, op.name, tensor, nbytes,
                     self.cm.dma_cycles(nbytes, src), deps, p.segment, p.band, p.col,
                     (tpb,), src, "hbsm", -1, 0, role)


def _broadcast_ref(self, op, tensor, tpbs, nbytes, role="act"):
    _CALLS["broadcast"] += 1
    src = memory_of(self.cm, self.g, tensor)
    deps = self._mem_deps(tensor)
    for x in tpbs:
        h = self.hist.get((x, op.name), [])
        deps += self._wbar(x, tensor, role) + ([h[-2]] if len(h) >= 2 else [])
    return self.task("dma-in", "dma", -1, op.name, tensor, nbytes,
                     self.cm.dma_cycles(nbytes, src, broadcast=True), deps,
                     self.piece.segment, self.piece.band, -1, tpbs, src, "hbsm", -1, 0, role)


def _kept_chunk_ref(self, si, op, tensor, key, rows, bshape, cols, tpbs, tpb, nbytes):
    if len(tpbs) <= 1:
        return self._act_in(si, op, tensor, rows, bshape, cols, tpb, nbytes)
    k = (op.name, tensor, key, tpb)
    if k in self.gcache:
        return self.gcache[k]
    _CALLS["kept"] += 1
    prod = self.s.producers[tensor]
    a0, a1 = rows
    k0, k1 = cols
    over, nbs = self._over(prod.name, tensor, a0, a1, k0, k1)
    out = []
    self.fill_gap = prod.name not in self.seg_ops
    for q, nb in zip(over, nbs):
        deps = [q.compute]
        for x in tpbs:
            h = self.hist.get((x, op.name), [])
            deps += self._bar(x) + ([h[-2]] if len(h) >= 2 else [])
        c = self.task("copy", "dtdu", q.tpb, prod.name, tensor, nb,
                      self.cm._dtdu_broadcast_cycles(nb, q.tpb, tpbs), deps, si,
                      self.piece.band, q.col, tpbs, "hbsm", "hbsm", -1, 0, "act")
        if q.segment == si:
            self.readers[q.compute].append(c)
        for x in set(tpbs) | {q.tpb}:
            self._touch(x, c)
        out.append(c)
    self.fill_gap = False
    for x in tpbs:
        self.gcache[(op.name, tensor, key, x)] = out
    return out


_EARLIEST = dma_queue.DmaQueue.earliest


def _earliest_ref(self, ready, lat, data):
    """``DmaQueue.earliest`` with its end-of-queue case by ``_at``'s definition, as before."""
    lo, dn, k = _EARLIEST(self, ready, lat, data)
    if k == len(self.s):
        lo, dn = self._at(k, ready, lat, data)
    return lo, dn, k


_CALLS = {"broadcast": 0, "kept": 0}


def _reference(mp):
    # every segment built in full: a replayed recipe calls no builder
    full_builds(mp)
    mp.setattr(build_transfers.Transfers, "_load", _load_ref)
    mp.setattr(build_transfers.Transfers, "_broadcast", _broadcast_ref)
    mp.setattr(build_transfers.Transfers, "_kept_chunk", _kept_chunk_ref)
    mp.setattr(dma_queue.DmaQueue, "earliest", _earliest_ref)
    mp.setattr(plan.Plan, "makespan", property(lambda tl: max((t.end for t in tl.tasks),
                                                               default=0.0)))


@pytest.mark.parametrize("keep", ["", "all", "all+copies", "all-mm"])
def test_whole_plans_are_the_reference_builds(placed, keep):  # noqa: F811
    s, segs, _ = placed
    sched = s.sched
    got = sched.build(segs, keep=keep)
    assert any(st.ks > 1 for seg in segs for st in seg.stages), "no K split: _reduce unchecked"
    n0 = dict(_CALLS)
    with pytest.MonkeyPatch.context() as mp:
        _reference(mp)
        want = sched.build(segs, keep=keep)
    assert got.to_json() == want.to_json()
    assert _CALLS["broadcast"] > n0["broadcast"]
    if keep.startswith("all") and not keep.endswith("copies"):
        assert got.kept and _CALLS["kept"] > n0["kept"], "no kept chunk broadcast: unchecked"


def test_bounded_trials_stop_like_the_reference(placed):  # noqa: F811
    """A refinement's trial (bounded whole-plan build) stops at the same task, same end."""
    s, segs, _ = placed
    sched = s.sched
    full = sched.build(segs)
    ends = sorted(t.end for t in full.tasks)
    for bound in (ends[len(ends) // 4], ends[len(ends) // 2], ends[-1]):
        out = []
        for ref in (False, True):
            with pytest.MonkeyPatch.context() as mp:
                if ref:
                    _reference(mp)
                try:
                    tl = sched.build(segs, bound=bound, keep="all")
                    out.append(("plan", tl.to_json()))
                except BoundExceeded as e:
                    out.append(("stop", e.end, len(e.plan.tasks)))
        assert out[0] == out[1], bound


def test_dtdu_broadcast_cycles_memo_is_the_definition():
    cm = cost.CostModel(get_machine("m100"))
    rng = random.Random(3)
    for _ in range(300):
        src = rng.randrange(56)
        dst = tuple(sorted(rng.sample(range(56), rng.randint(1, 8))))
        nb = float(rng.choice([0, 64, 4096, 1 << 20]) + rng.randrange(3))
        first = cm.dtdu_broadcast_cycles(nb, src, dst)
        assert first == cm.dtdu_broadcast_cycles(nb, src, dst) == \
            cm._dtdu_broadcast_cycles(nb, src, dst)


def test_makespan_follows_a_growing_task_list():
    """``Plan.makespan`` after appends, on a new list, after a shrink: the scan's answer."""
    rng = random.Random(11)
    tl = plan.Plan()
    assert tl.makespan == 0.0

    def task(i, end):
        return plan.PlanTask(i, "compute", "tcu", 0, "op", "t", 0.0, 1.0, [], end=end)

    for step in range(60):
        for _ in range(rng.randint(0, 5)):
            tl.tasks.append(task(len(tl.tasks), rng.choice([0.0, 1.0, rng.random() * 100])))
        if step % 17 == 16:
            tl.tasks = list(tl.tasks[:rng.randint(0, len(tl.tasks))])  # another (shorter) list
        assert tl.makespan == max((t.end for t in tl.tasks), default=0.0)


def test_reduce_parts_by_tile_are_the_group_scan(placed):  # noqa: F811
    """A K-split group's pieces by output tile, as ``_lockstep_segment`` hands them to
    ``_reduce``, are the pieces the old scan of the group found, in group order."""
    s, segs, _ = placed
    seen = []
    orig = PlanBuilder._reduce

    def spy(self, op, red, parts):
        seen.append((red, list(parts), self._grp_ref))
        return orig(self, op, red, parts)

    orig_run = PlanBuilder._run

    def run(self, group, *a, **k):
        self._grp_ref = list(group)
        return orig_run(self, group, *a, **k)

    with pytest.MonkeyPatch.context() as mp:
        full_builds(mp)  # built in full (a replay calls no _reduce)
        mp.setattr(PlanBuilder, "_reduce", spy)
        mp.setattr(PlanBuilder, "_run", run)
        s.sched.build(segs)
    assert seen, "no K-split reduction built"
    for red, parts, grp in seen:
        assert parts == [p for p in grp if (p.band, p.col, p.r0, p.c0) ==
                         (red.band, red.col, red.r0, red.c0)]
