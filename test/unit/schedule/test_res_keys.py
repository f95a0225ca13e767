"""The list scheduler's resource keys as one int (session 35, issue 15).

``ListScheduler.free`` / ``last_on_res`` (the free time and the last task of each in-order
resource) were keyed by the ``(unit, TPB)`` tuple: ``put`` and ``SearchBuilder.task`` built and
hashed one ~4 times a task. Now the key is :func:`.list_schedule.res_key`'s int (a TPB unit
``tpb * NU + UNIT_SLOT[unit]``, a CCB DMA engine ``e`` ``~e``). Oracles:

* ``put`` and ``SearchBuilder.task`` as they were, written out here with the tuple keys
  (:func:`_put_by_pairs`, :func:`_task_by_pairs`; ``Scheduler.build``'s TCU tail floor reading
  ``free[("tcu", x)]``): whole placements of ResNet-18 32 with them and with the builders' own
  give the same plan, and every builder (~360: the search's cost builds, the whole-plan builds
  and trials, those stopped at their bound too) ends with the same ``free`` / ``last_on_res``
  (the reference's tuple keys made by ``res_key``);
* the definition from the plan's tasks: in the final plan's builder, a TPB unit is free at the
  latest end of its tasks, and each resource's last task is the last one created on it;
* ``res_key`` is one key per resource (all units of all TPBs and the DMA engines).
"""

from __future__ import annotations

from m100.passes.schedule import build_segments, placement, timeline
from m100.passes.schedule.build_segments import TAIL_SCALE, SearchBuilder
from m100.passes.schedule.graph import ScheduleError
from m100.passes.schedule.plan import Unit
from m100.passes.schedule.list_schedule import (NU, UNIT_SLOT, BoundExceeded, BusyBlocks,
                                                ListScheduler, res_key)
from m100.targets.m100.machine import get_machine

M100 = get_machine("m100")


def _put_by_pairs(self, t):
    """``ListScheduler.put`` before session 35: a TPB unit's ``free`` / ``last_on_res`` keyed by
    ``(unit, TPB)`` (a CCB DMA engine's by what the DMA placement returns)."""
    tasks = self.tl.tasks
    if t.id != len(tasks):
        raise ScheduleError(f"internal: task id {t.id} created at position {len(tasks)}")
    ready, pred = 0.0, -1
    is_dma = t.unit == "dma"
    lat = self.dma_sync_latency
    dma_deps = []
    for d in t.deps:
        p = tasks[d]
        e = p.end
        if p.unit == "dma":
            if is_dma:
                dma_deps.append((e, p.engine, d))
                continue
            e += lat
        if e > ready:
            ready, pred = e, d
    cycles = t.cycles
    if is_dma:
        start, cycles, t.engine, pred, res = (
            self._dma_queued if self.dma_queued else self._dma_place)(
            t.src, t.dst, t.nbytes, cycles, len(t.dst_tpbs), ready, pred, dma_deps, lat)
    else:
        res = (t.unit, t.tpb)
        start = ready
        free = self.free.get(res, 0.0)
        rate = t.nbytes / cycles if t.unit == "dtdu" and len(t.dst_tpbs) > 1 and cycles > 0 \
            else 0.0
        if self.fill_gap:
            if self.search_only:
                raise ScheduleError("internal: a copy from a kept activation in a search "
                                    "build")
            blocks = self.dtdu_busy.get(t.tpb)
            if blocks is None:
                blocks = self.dtdu_busy[t.tpb] = BusyBlocks()
            start, idx = blocks.earliest(ready, cycles)
            while rate:
                a = self.drb_use.earliest(start, cycles, rate)
                if a <= start:
                    break
                a = self._drb_wait(t, a, cycles, rate)
                start, idx = blocks.earliest(a, cycles)
            self.drb_use.add(start, cycles, rate)
            blocks.insert(idx, start, start + cycles)
            if start > ready:
                pred = self.last_on_res.get(res, pred)
            self.free[res] = max(free, start + cycles)
        else:
            if free > start:
                start, pred = free, self.last_on_res.get(res, -1)
            if rate:
                a = self.drb_use.earliest(start, cycles, rate)
                if a > start:
                    a = self._drb_wait(t, a, cycles, rate)
                start = a
                self.drb_use.add(start, cycles, rate)
            self.free[res] = start + cycles
            if t.unit == "dtdu" and not self.search_only:
                blocks = self.dtdu_busy.get(t.tpb)
                if blocks is None:
                    blocks = self.dtdu_busy[t.tpb] = BusyBlocks()
                blocks.append(start, start + cycles)
    t.start = start
    t.end = end = start + cycles
    if end >= self.bound:
        raise BoundExceeded(end)
    t.crit_pred = pred
    self.last_on_res[res] = t.id
    if len(t.dst_tpbs) > 1 and cycles > 0 and (is_dma or t.unit == "dtdu") and \
            not self.search_only:
        self.drb_ends[end] = self.drb_ends.get(end, ()) + (t.id,)
    tasks.append(t)
    if self.piece is not None and not self.search_only:
        self.piece.tasks.append(t.id)
    return t


def _task_by_pairs(self, kind, unit, tpb, op, tensor, nbytes, cycles, deps, segment=0, band=0,
                   col=0, dst_tpbs=(), src="", dst="", engine=-1, macs=0, role=""):
    """``SearchBuilder.task`` before session 35: ``free`` keyed by ``(unit, TPB)``."""
    ends, engs = self.ends, self.engs
    lat = self.dma_sync_latency
    ready = 0.0
    if unit == "dma":
        dma_deps = []
        for d in deps:
            e = engs[d]
            if e >= 0:
                dma_deps.append((ends[d], e, d))
            elif ends[d] > ready:
                ready = ends[d]
        start, cycles, eng, _, _ = (self._dma_queued if self.dma_queued else self._dma_place)(
            src, dst, nbytes, cycles, len(dst_tpbs), ready, -1, dma_deps, lat)
    else:
        for d in deps:
            e = ends[d]
            if engs[d] >= 0:
                e += lat
            if e > ready:
                ready = e
        if self.fill_gap:
            raise ScheduleError("internal: a copy from a kept activation in a search build")
        res = (unit, tpb)
        free = self.free.get(res, 0.0)
        start = free if free > ready else ready
        rate = nbytes / cycles if unit == "dtdu" and len(dst_tpbs) > 1 and cycles > 0 \
            else 0.0
        if rate:
            start = self.drb_use.earliest(start, cycles, rate)
            self.drb_use.add(start, cycles, rate)
        self.free[res] = start + cycles
        eng = -1
    end = start + cycles
    if unit == "tcu" and self.tail_left is not None and op in self.tail_ops:
        left = self.tail_left.get(tpb)
        if left is not None:
            left -= cycles
            self.tail_left[tpb] = left
            a = (end + left) / TAIL_SCALE
            if a > end:
                if a >= self.bound:
                    raise BoundExceeded(a)
                self.raised[len(ends)] = a
    if end >= self.bound:
        raise BoundExceeded(end)
    ends.append(end)
    engs.append(eng)
    return len(ends) - 1


def _keyed(d: dict) -> dict:
    """A reference builder's dict with its ``(unit, TPB)`` keys made by ``res_key``."""
    return {res_key(*k) if isinstance(k, tuple) else k: v for k, v in d.items()}


def _placement(monkeypatch, g, reference: bool):
    """A placement of ``g`` on 8 TPBs, with the builders' own ``put`` / ``task`` or the
    reference's, and every builder that scheduled a task (in order; the plan builders by their
    plan's id too)."""
    builders, by_plan = [], {}
    put = _put_by_pairs if reference else ListScheduler.put
    task = _task_by_pairs if reference else SearchBuilder.task

    def spy_put(self, t):
        if not builders or builders[-1] is not self:
            builders.append(self)
        by_plan[id(self.tl)] = (self.tl, self)  # (the plan held: its id is not reused)
        return put(self, t)

    def spy_task(self, *a, **k):
        if not builders or builders[-1] is not self:
            builders.append(self)
        return task(self, *a, **k)

    monkeypatch.setattr(ListScheduler, "put", spy_put)
    monkeypatch.setattr(SearchBuilder, "task", spy_task)
    if reference:  # ``Scheduler.build``'s TCU tail floor read ``free[("tcu", x)]``
        monkeypatch.setattr(timeline, "res_key", lambda unit, tpb: (unit, tpb))
    try:
        pl = placement.schedule(g, M100, tpbs=8)
    finally:
        monkeypatch.undo()
    return pl, builders, by_plan


def test_int_keys_are_the_pairs(resnet_graph, monkeypatch):
    new, nb, by_plan = _placement(monkeypatch, resnet_graph, False)
    old, ob, _ = _placement(monkeypatch, resnet_graph, True)
    assert new.segments == old.segments
    assert new.timeline.to_json() == old.timeline.to_json()
    assert len(nb) == len(ob) > 50
    kinds = set()
    for a, b in zip(nb, ob):
        assert type(a) is type(b)
        kinds.add(type(a))
        assert a.free == _keyed(b.free)
        assert a.last_on_res == _keyed(b.last_on_res)
        assert all(type(k) is int for k in a.free)
    assert kinds == {SearchBuilder, build_segments.PlanBuilder}
    # the definition, on the final plan's builder
    tl = new.timeline
    held, bld = by_plan[id(tl)]
    assert held is tl
    want_free, want_last = {}, {}
    for t in tl.tasks:
        k = res_key("dma", t.engine) if t.unit == "dma" else res_key(t.unit, t.tpb)
        want_last[k] = t.id
        if t.unit != "dma":
            want_free[k] = max(want_free.get(k, 0.0), t.end)
    assert bld.free == want_free
    assert bld.last_on_res == want_last
    assert {t.unit for t in tl.tasks} >= {"dma", "tcu", "cvu", "dtdu"}
    assert any(k < 0 for k in want_last) and len(want_last) > 20


def test_res_key_is_one_per_resource():
    keys = [res_key(u, x) for u in UNIT_SLOT for x in range(M100.num_tpbs)]
    dma = [res_key("dma", e) for e in range(M100.ccb_dma_engines)]
    assert len(set(keys + dma)) == len(keys) + len(dma) == (NU * M100.num_tpbs +
                                                           M100.ccb_dma_engines)
    assert min(keys) >= 0 > max(dma)
    assert set(UNIT_SLOT) == {u.value for u in Unit} - {"dma"}
