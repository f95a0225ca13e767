"""Shortcuts of the plan builder that must not change any plan (issue 15, compile speed).

* ``ListScheduler._dma_queued``'s engine bound: a DMA transfer is put on the CCB DMA engine
  where its data ends first; an engine whose lower bound (it can not start before the
  transfer's dependencies allow, nor stream before that start + its setup and latency) does not
  beat the best engine so far is not asked. Oracle: the same placement with every engine asked
  (:func:`_dma_queued_every_engine`, the method as it was with the session-27 switch
  ``engine_bound`` off; the switch was dropped in session 31) -- the whole plan (search,
  refinements, kept activations) equal task by task (``Plan.to_json``).
* ``keep.kept_bytes`` is memoized per scheduler: the memo's answer equals a fresh computation.
"""

from m100.passes.schedule import placement
from m100.passes.schedule.keep import _kept_bytes, kept_bytes
from m100.passes.schedule.dma_queue import DmaQueue
from m100.passes.schedule.list_schedule import ListScheduler
from m100.targets.m100.machine import get_machine

M100 = get_machine("m100")


def _dma_queued_every_engine(self, src, dst, nbytes, cycles, ndst, ready, pred, dma_deps, lat):
    """``ListScheduler._dma_queued`` asking every engine (written out: the reference)."""
    fixed = self.dma_fixed.get((src, dst))
    if fixed is None:
        fixed = self.dma_fixed[(src, dst)] = self.cm.dma_latency(src, dst)
    after = fixed - self.cm.machine.dma_setup_cycles
    data = max(0.0, cycles - fixed)
    rate = nbytes / data if ndst > 1 and data > 0 else 0.0
    best = None
    for e, q in enumerate(self.dma_busy):
        r, p = ready, pred
        for x_end, x_eng, x_id in dma_deps:
            x = x_end + (0 if x_eng == e else lat)
            if x > r:
                r, p = x, x_id
        s0, d0, k = q.earliest(r, after, data)
        while rate:
            a = self.drb_use.earliest(d0, data, rate)
            if a <= d0:
                break
            s0, d0, k = q.earliest(max(r, a - fixed), after, data)
        if best is None or (d0 + data, s0) < (best[0] + data, best[1]):
            best = (d0, s0, e, k, r, p)
    d0, start, engine, k, ready, pred = best
    end = d0 + data
    self.dma_busy[engine].insert(k, start, d0, end)
    self.drb_use.add(d0, data, rate)
    res = ("dma", engine)
    if start > ready or d0 > start + fixed:
        pred = self.last_on_res.get(res, pred)
    return start, end - start, engine, pred, res


def test_engine_bound_gives_the_same_plan(resnet_graph, monkeypatch):
    g = resnet_graph
    asked = []
    earliest = DmaQueue.earliest

    def spy(q, *a):
        asked.append(1)
        return earliest(q, *a)

    monkeypatch.setattr(DmaQueue, "earliest", spy)
    fast = placement.schedule(g, M100, tpbs=8)
    n_fast = len(asked)
    monkeypatch.setattr(ListScheduler, "_dma_queued", _dma_queued_every_engine)
    plain = placement.schedule(g, M100, tpbs=8)
    assert n_fast < len(asked) - n_fast  # the bound skipped engines
    assert any(t.unit == "dma" for t in fast.timeline.tasks)
    assert fast.segments == plain.segments
    assert fast.timeline.to_json() == plain.timeline.to_json()


def test_kept_bytes_memo_is_a_fresh_computation(resnet_graph):
    g = resnet_graph
    pl = placement.schedule(g, M100, tpbs=8)
    s = placement.Search(g, M100, placement.available_tpbs(M100, 8)).sched
    n = 0
    for seg in pl.segments:
        if seg.kind == "dma":
            continue
        for st in seg.stages:
            op = s.ops[st.op]
            tplan = s.stage_plan(seg, st)
            want = _kept_bytes(s, seg, st, op, tplan)
            assert kept_bytes(s, seg, st, op, tplan) == want  # computed
            assert kept_bytes(s, seg, st, op, tplan) == want  # memoized
            n += 1
    assert n >= 10 and s.kept_memo
