"""Shortcuts of the plan builder that must not change any plan (issue 15, compile speed).

* ``ListScheduler._dma_queued``'s engine bound: a DMA transfer is put on the CCB DMA engine
  where its data ends first; an engine whose lower bound (it can not start before the
  transfer's dependencies allow, nor stream before that start + its setup and latency) does not
  beat the best engine so far is not asked. Oracle: the same placement with every engine asked
  (:func:`_dma_queued_every_engine`, the method as it was with the session-27 switch
  ``engine_bound`` off; the switch was dropped in session 31) -- the whole plan (search,
  refinements, kept activations) equal task by task (``Plan.to_json``).
* ``ListScheduler._dma_queued``'s DRB skip (session 32): an engine after the first whose answer
  before any DRB push does not beat the best so far is not asked about the DRB (a push only
  moves an answer later: ``DmaQueue.earliest`` never starts earlier for a later ``ready``).
  Oracles: the same reference (every DRB query made) on the whole plan and on random transfer
  streams with broadcasts beside DTDU-like DRB bookings; the monotonicity on random queues.
* ``keep.kept_bytes`` is memoized per scheduler: the memo's answer equals a fresh computation.
"""

import random
from types import SimpleNamespace

from m100.passes.schedule import placement
from m100.passes.schedule.busy import RateProfile
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
    res = ~engine  # (``ListScheduler.res_key``)
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

    drb = []
    drb_earliest = RateProfile.earliest

    def drb_spy(prof, *a):
        drb.append(1)
        return drb_earliest(prof, *a)

    monkeypatch.setattr(DmaQueue, "earliest", spy)
    monkeypatch.setattr(RateProfile, "earliest", drb_spy)
    fast = placement.schedule(g, M100, tpbs=8)
    n_fast, d_fast = len(asked), len(drb)
    monkeypatch.setattr(ListScheduler, "_dma_queued", _dma_queued_every_engine)
    plain = placement.schedule(g, M100, tpbs=8)
    assert n_fast < len(asked) - n_fast  # the bound skipped engines
    assert d_fast < len(drb) - d_fast  # the DRB skip skipped queries
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


def _engines(rng, setup=32.0):
    """Two depth-2 CCB DMA queues and a DRB profile, filled by random transfers and broadcasts
    of another kind (DTDU-like rates, which make DMA broadcasts wait)."""
    qs = [DmaQueue(2, setup), DmaQueue(2, setup)]
    prof = RateProfile(256.0)
    for _ in range(rng.randrange(0, 40)):
        q = rng.choice(qs)
        s0, d0, k = q.earliest(float(rng.randrange(0, 4000, 7)), 200.0,
                               float(rng.randrange(10, 400)))
        q.insert(k, s0, d0, d0 + float(rng.randrange(10, 400)))
    for _ in range(rng.randrange(0, 30)):
        prof.add(float(rng.randrange(0, 5000, 3)), float(rng.randrange(5, 600)),
                 float(rng.choice([40, 100, 128, 160, 200])))
    return qs, prof


class _Counting(RateProfile):
    """A DRB profile that counts its queries."""

    __slots__ = ("asked",)

    @classmethod
    def of(cls, prof):
        c = cls(prof.cap)
        c.t, c.u, c.asked = list(prof.t), list(prof.u), 0
        return c

    def earliest(self, ready, dur, rate):
        self.asked += 1
        return super().earliest(ready, dur, rate)


def _fake_builder(qs, prof):
    machine = SimpleNamespace(dma_setup_cycles=32.0)
    cm = SimpleNamespace(machine=machine, dma_latency=lambda src, dst: 232.0)
    return SimpleNamespace(dma_fixed={}, cm=cm, dma_busy=qs, drb_use=prof, last_on_res={})


def test_drb_skip_is_the_reference_on_random_streams():
    """Random streams of transfers (broadcasts at rates that do and do not fit beside the DRB's
    other bookings, DMA dependencies on either engine): ``_dma_queued`` places every one as the
    reference that makes every DRB query, and the queues and the profile end the same."""
    skipped = 0
    for seed in range(60):
        rng = random.Random(seed)
        qs, prof = _engines(rng)
        a = _fake_builder([q.copy() for q in qs], _Counting.of(prof))
        b = _fake_builder([q.copy() for q in qs], _Counting.of(prof))
        for _ in range(40):
            ready = float(rng.randrange(0, 6000, 5))
            nbytes = float(rng.randrange(256, 65536, 256))
            cycles = 232.0 + nbytes / rng.choice([64.0, 128.0])
            ndst = rng.choice([1, 2, 4])
            deps = [(float(rng.randrange(0, 6000)), rng.randrange(2), i)
                    for i in range(rng.randrange(3))]
            args = ("ddr", "hbsm", nbytes, cycles, ndst, ready, -1, deps, 48.0)
            assert ListScheduler._dma_queued(a, *args) == _dma_queued_every_engine(b, *args)
        assert [(q.s, q.d, q.e, q.open) for q in a.dma_busy] == \
            [(q.s, q.d, q.e, q.open) for q in b.dma_busy]
        assert (a.drb_use.t, a.drb_use.u) == (b.drb_use.t, b.drb_use.u)
        skipped += b.drb_use.asked - a.drb_use.asked
    assert skipped > 0  # the skip ran


def test_dma_queue_earliest_never_falls_as_ready_grows():
    """The property the DRB skip rests on: for a later ``ready`` the setup start and the data
    start of ``DmaQueue.earliest`` are no earlier (random queues, every pair of readies)."""
    for seed in range(40):
        rng = random.Random(1000 + seed)
        q = _engines(rng)[0][0]
        lat, data = 200.0, float(rng.randrange(10, 500))
        readies = sorted(float(rng.randrange(0, 6000, 3)) for _ in range(30))
        got = [q.earliest(r, lat, data)[:2] for r in readies]
        for (s1, d1), (s2, d2) in zip(got, got[1:]):
            assert s2 >= s1 and d2 >= d1
