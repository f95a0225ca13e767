"""CCB DMA engines with several transfers in flight (``Machine.dma_outstanding``; lead decision,
session 11). A mixin of :class:`~m100.sim.engine.Engine` (its state is in ``UnitState``).

The model, for an engine of depth ``D`` (the cost model's :class:`~m100.passes.schedule.
dma_queue.DmaQueue` computes the same times for the plan; the fixed latency is
``Machine.dma_fixed_latency`` for both, and the per-transfer time of a back-to-back stream that
the tiler charges, ``Machine.dma_stream_period``, is this model's steady state):

* a transfer is *in flight* from the start of its setup to the end of its data phase; at most
  ``D`` are;
* setups are serial: a transfer's setup starts at least ``dma_setup_cycles`` after the previous
  one's;
* the fixed latency after the setup (``ddr_latency`` if DDR is an end, ``hbsm_latency`` if an
  HBSM is) runs beside the transfers in flight;
* data phases follow each other in program order: a transfer streams from
  ``max(setup start + its latency, end of the previous transfer's data)``;
* a transfer whose source bytes overlap the destination of a transfer in flight on its engine
  (bounding byte ranges, :meth:`Walk.byte_range`) is not issued ahead: the request would read
  bytes not yet written (the engine compares the ranges). It starts when the transfer before it
  ends, as at depth 1.

How the interpreter does it: the unit's current instruction (``us.cur``) is the one streaming (or
in its latency). While it is in flight, the next instruction(s) of the queue are *issued ahead*
(:meth:`DmaAhead.try_ahead`) as soon as they are dispatched, their block-0 monitors hold, the
setup before them is done and the depth allows; the issue time is recorded. When such an
instruction becomes current (after the previous one's last block), it starts as any block does --
its inputs are gathered, its clock joined, in program order, so data and race checking are those
of depth 1 -- but its latency is only what is left of it: ``max(0, issue + latency - now)``.
Depth 1 never issues ahead: the timing is the one of sessions 1-10. Functional mode (no timing)
never issues ahead either.
"""

from __future__ import annotations

from m100.targets.m100.isa import Space, tpbs_of


def _ranges(inst) -> tuple:
    """(src space, src tpb, src range, dst space, dst tpbs, dst range) of a DMA, cached on it."""
    r = inst.__dict__.get("_dma_ranges")
    if r is None:
        s, d = inst.src, inst.dst
        dt = tuple(tpbs_of(inst.tpb_mask)) if inst.tpb_mask else (d.tpb,)
        r = (s.space, s.tpb, s.byte_range(), d.space, dt, d.byte_range())
        object.__setattr__(inst, "_dma_ranges", r)
    return r


def reads_what_it_writes(later, earlier) -> bool:
    """Whether DMA ``later`` reads a byte DMA ``earlier`` may write (bounding ranges)."""
    ss, st, (a, b), _, _, _ = _ranges(later)
    _, _, _, ds, dt, (c, d) = _ranges(earlier)
    if ss is not ds or (ss is Space.HBSM and st not in dt):
        return False
    return a < d and c < b


class DmaAhead:
    """Issue-ahead of the DMA engines' next transfers (module doc)."""

    def try_ahead(self, u: int) -> None:
        """Issue the next transfer(s) of DMA unit ``u``'s queue ahead, if they may start now;
        otherwise arrange to be called again when what they wait for happens."""
        us = self.units[u]
        depth = self.m.dma_outstanding
        while True:
            cur = us.cur
            if cur is None or cur.start is None or len(us.ahead) + 1 >= depth:
                return
            k = len(us.ahead)
            if k >= len(us.queue):
                return
            rec = us.queue[k]
            now = self.now
            if rec.dispatch > now:
                self.push(rec.dispatch, self.ev_ahead, u)
                return
            if us.setup_free > now:
                self.push(us.setup_free, self.ev_ahead, u)
                return
            for mon in rec.inst.sync.monitors:
                if self.counters[mon.tpb][mon.counter] < mon.expected:
                    self.ahead_waiters.setdefault((mon.tpb, mon.counter), set()).add(u)
                    return
            inst = rec.inst
            if reads_what_it_writes(inst, cur.inst) or \
                    any(reads_what_it_writes(inst, r.inst) for r, _ in us.ahead):
                return  # it starts when the one before it ends
            us.ahead.append((rec, now))
            us.setup_free = now + self.m.dma_setup_cycles

    def ev_ahead(self, u: int) -> None:
        self.try_ahead(u)

    def ahead_latency(self, u: int, lat: float) -> float:
        """The latency of block 0 of the DMA unit ``u``'s new current instruction: what is left
        of ``lat`` if it was issued ahead; records its setup (the unit's next setup may start
        ``dma_setup_cycles`` later)."""
        us = self.units[u]
        if us.ahead and us.ahead[0][0] is us.cur:
            _, issued = us.ahead.pop(0)
            return max(0.0, issued + lat - self.now)
        us.setup_free = self.now + self.m.dma_setup_cycles
        return lat
