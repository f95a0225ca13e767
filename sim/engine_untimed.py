"""The engine's event loop for a functional run (no timing), in one function: a mixin of
:class:`~m100.sim.engine.Engine` (:meth:`UntimedLoop._loop_functional`).

Without timing every block takes one cycle and an update arrives when its block ends, so the
engine's events are of two kinds only: a block's end one cycle after its start (the heap, all at
the next time, in push order) and a counter arrival at the current time (the FIFO of
``Engine._loop_untimed``, in push order; every one waits for the current time's block ends).
This loop keeps the two as a list of the units whose blocks end at the next time and a deque of
arrivals, and makes the handlers' calls -- ``try_start`` / ``_start_block`` / ``ev_block_done``
/ ``ev_visible`` / ``ev_counter`` -- inline, with their functional branches only: the same
events in the same order, the same state changes (records, units' busy and stall cycles,
counters, arrival histories and clock joins, race items recorded in the same order, executors'
``run`` / ``apply`` calls in the same order), so the same outputs, stats, reports and records
as the general loop (``test/e2e/test_speed_paths.py`` compares the two on compiled models,
race batches and the per-access checker, monitor-dropping mutants). It is a second copy of those
branches, kept for speed: a change to one of those handlers' functional branches must be made
here too (``test/e2e/test_untimed_loop.py`` names the first difference on its models).

A woken unit whose counter is still below its wait's need is put back among that counter's
waiters without ``start``: ``start`` would find the same (its monitors before that one held
when it last ran, and counters never decrease -- an update adds an amount >= 1, a checked
field; an overflow keeps the maximum), so it would wait on the same monitor and need again,
its stall unchanged (R50: 11 197 of 22 956 waits). The set's order is not kept (a wake sorts
a set of more than one unit).

What the loop keeps for itself (session 36: R50's loop 0.165 -> 0.134 CPU-s in-process, the same
state after it; 0.153 -> 0.107 with the syncs). A record's sync comes from ``Engine.syncs`` (by
record index, made in the engine's pass over the records that reads each instruction anyway),
not from its instruction: a first run's instruction objects are cold, and each start and end
read one. The waiting units as a set per counter in a list per TPB (``Engine.waiters``,
keyed by (TPB, counter), gets what is left after the loop), so an arrival makes no key tuple.
A block takes one cycle: it began at ``now - 1``, at or after its unit's last block's end, so
the general loop's busy time ``max(0, now - max(begin, busy_until))`` is 1 and ``busy_until``
becomes ``now`` (integral floats: exact). Where the race log and the clock rows are made after
the loop (``after`` below) nothing reads ``vc`` in it, so its own entries' ticks (one per block
end) are added after the loop; ``UnitState.pending`` stays ``[]`` when the calls are logged.

It runs only where those are all the events: a functional-mode engine (no dispatch times, no
costs: no CSU CPU waits, no DMA issue ahead), no random latencies (every block one cycle), no
trace (no flows or counter events) and :data:`FAST` on; anything else runs the general loop.
What a first functional run of ResNet-50 spends in the handlers (~0.3 of ~2.1 CPU-s) is mostly
Python's cost of generic event dispatch (a heap entry and a bound-method call per event), which
this removes. Where the engine logs the executors' calls (``Engine.defer``: the first run of a
program, sim/replay.py "The first full run" -- functional runs too since session 30), this loop
logs them where it would make them: (record index, block) at a block's start, (record index,
-1) at its end.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from typing import TYPE_CHECKING

from numpy import maximum

from m100.targets.m100.isa import tpbs_of

from .checks import Report
from .semantics_base import SimError

if TYPE_CHECKING:  # pragma: no cover
    from .engine import Engine

#: Run functional engines by :meth:`UntimedLoop._loop_functional` where it applies (False: the
#: general loop, ``Engine._loop_untimed``; the tests compare the two).
FAST = True


class UntimedLoop:
    """The functional loop (see the module doc)."""

    def _functional_loop_applies(self: Engine) -> bool:
        return FAST and self.mode == "functional" and not self.timed and self.fifo \
            and not self.trace_on and self.rng is None and not self.ahead_on \
            and all(r.dispatch <= 0.0 for r in self.recs)

    def _loop_functional(self: Engine) -> None:  # noqa: C901 - one loop on purpose (module doc)
        """Start every unit, then run every event; the state after it is the general loop's."""
        from .engine import PRUNE_EVERY, Aborted, KNOWN_CLOCKS

        units, counters, hist, waiters = self.units, self.counters, self.hist, self.waiters
        syncs = self.syncs  # (each record's sync by its index)
        races, rb, vc = self.races, self.rbatch, self.vc
        race_block, race_clock = self._race_block, self.race_clock
        counter_max, mask_tpbs, flow_ids = self.counter_max, self.mask_tpbs, self.flow_ids
        joins_on, progress, n_recs = self.joins_on, self.progress, len(self.recs)
        vitem = vc.item
        # the bulk race log (Checks._race_block's bulk branch without its call and mode
        # tests: the same clock rows; the entries through the same Checks._race_log)
        bulk = races is not None and rb is not None
        if bulk:
            race_snap, race_log, keep, gen = self.race_snap, self._race_log, rb.keep, rb.gen

        defer = self.defer  # (the executors' calls logged, made after the loop: module doc)
        # the bulk log made after the loop from the calls' log and the clock rows
        # (Checks._race_log_after: the same entries) when the pre-pass packed every block half
        after = bulk and defer is not None and getattr(self, "race_halves", None) is not None
        if after:  # (and the clock rows too, from the counter arrivals: sim/race_clocks.py)
            bulk = joins_on = False
            arrivals: list = []
            log_arrival = arrivals.append
            starts: list = []  # (each start's monitors; the call log's length at each time)
            log_start, marks = starts.append, []
        checker = races is not None and rb is None  # (the per-access checker)
        nxt: list[int] = []  # units whose blocks end at the next time, in push order
        # the units waiting on each counter (wsets[tpb][counter]: a set or None; Engine.waiters
        # after the loop)
        wsets: list = [[None] * len(row) for row in counters]
        ends = [0] * len(units) if after else None  # (block ends per unit: vc's ticks)
        fifo: deque = deque()  # counter arrivals at the current time, in push order
        push_arrival, pop_arrival = fifo.append, fifo.popleft
        now = self.now

        def start(u: int) -> None:  # Engine.try_start + _start_block, functional branches
            us = units[u]
            state = us.state
            if state != "idle" and state != "wait":
                return
            rec = us.cur
            if rec is None:
                if not us.queue:
                    us.state = "done"
                    return
                rec = us.cur = us.queue.popleft()
                us.block = 0
            b = us.block
            monitors = syncs[rec.index].monitors
            for mon in monitors:
                pb = mon.per_block
                if pb == 0:
                    if b > 0:
                        continue
                    need = mon.expected
                else:
                    need = mon.expected + b * pb
                tpb, c = mon.tpb, mon.counter
                if counters[tpb][c] < need:
                    us.state = "wait"
                    us.wait = (mon, need)
                    row = wsets[tpb]
                    ws = row[c]
                    if ws is None:
                        row[c] = {u}
                    else:
                        ws.add(u)
                    if us.stall_since is None:  # (Engine._stall)
                        us.stall_since = now
                        us.stall_cause = "sync"
                    elif us.stall_cause != "sync":
                        us.stalls[us.stall_cause] = us.stalls.get(us.stall_cause, 0.0) + \
                            now - us.stall_since
                        us.stall_since, us.stall_cause = now, "sync"
                    return
            us.wait = None
            if joins_on:
                for mon in monitors:
                    pb = mon.per_block
                    if pb == 0 and b > 0:
                        continue
                    need = mon.expected + b * pb
                    if need <= 0:
                        continue
                    cums, joins, _, known = hist[(mon.tpb, mon.counter)]
                    k = bisect_left(cums, need)
                    if races is not None:
                        src = known[k]
                        if src is None or vitem(u, src[0]) < src[1] or not KNOWN_CLOCKS:
                            row = vc[u]
                            maximum(row, joins[k], out=row)
            us.cost = None
            if us.stall_since is not None:  # (Engine._unstall)
                us.stalls[us.stall_cause] = us.stalls.get(us.stall_cause, 0.0) + now - \
                    us.stall_since
                us.stall_since = None
            us.state = "run"
            us.block_start = now
            if rec.start is None:
                rec.start = now
            try:
                if after:  # (its monitors: the log and the rows are made after the loop)
                    log_start(monitors)
                elif bulk:  # (_race_block's bulk branch: the reads of block b)
                    snap = keep(vc[u])
                    race_clock[u] = rb.buf[snap]
                    race_snap[u] = (gen, snap)
                    race_log(rec, b, False, (u, vitem(u, u), False, snap))
                elif races is not None:
                    race_block(u, rec, b, False)
                if defer is None:
                    us.pending = rec.ex.run(b)
                else:
                    defer.append((rec.index, b))
            except SimError as e:
                self.report("fault", str(e), rec)
                raise Aborted from None
            nxt.append(u)

        for u in range(len(units)):
            start(u)
        try:
            while True:
                # the current time's counter arrivals (Engine.ev_counter, untraced)
                while fifo:
                    tpb, c, amount, bvc, fid, src, su = pop_arrival()
                    row = counters[tpb]
                    val = row[c] + amount
                    if val > counter_max:
                        self.reports.append(Report(
                            "overflow", f"counter c{c} of TPB {tpb} overflows ({val} > "
                            f"{counter_max}) on the update by instruction #{src}", inst=src,
                            tpb=tpb))
                        val = counter_max
                    row[c] = val
                    if joins_on:
                        key = (tpb, c)
                        h = hist.get(key)
                        if h is None:
                            h = hist[key] = ([], [], [], [])
                        h[0].append(val)
                        if races is not None:
                            joins, known = h[1], h[3]
                            if not joins:
                                joins.append(bvc)
                                known.append((su, bvc.item(su)))
                            elif not KNOWN_CLOCKS:
                                joins.append(maximum(joins[-1], bvc))
                                known.append(None)
                            else:
                                prev, psrc = joins[-1], known[-1]
                                if psrc is not None and bvc.item(psrc[0]) >= psrc[1]:
                                    joins.append(bvc)
                                    known.append((su, bvc.item(su)))
                                elif prev.item(su) >= bvc.item(su):
                                    joins.append(prev)
                                    known.append(psrc)
                                else:
                                    joins.append(maximum(prev, bvc))
                                    known.append(None)
                            h[2].append((su, bvc.item(su)))  # (its identity: Engine.race_log)
                        else:
                            h[2].append(None)
                    elif after:  # (race_clocks: the arrival and its sender's record and block)
                        log_arrival((tpb, c, val, src, bvc, su))
                    wrow = wsets[tpb]
                    ws = wrow[c]
                    if ws is not None:
                        wrow[c] = None
                        for u in (sorted(ws) if len(ws) > 1 else ws):
                            us = units[u]
                            if us.state == "wait":
                                if val < us.wait[1]:  # still short: what start(u) would do
                                    again = wrow[c]
                                    if again is None:
                                        wrow[c] = {u}
                                    else:
                                        again.add(u)
                                    continue
                                us.state = "idle"
                                start(u)
                if not nxt:
                    break
                # the next time's block ends, in push order (Engine.ev_block_done + ev_visible)
                now += 1.0
                if after:
                    marks.append(len(defer))
                self.now = now
                cur, nxt = nxt, []
                for u in cur:
                    us = units[u]
                    rec, b = us.cur, us.block
                    index = rec.index
                    sync = syncs[index]
                    try:
                        if bulk:  # (_race_block's bulk branch: the writes of block b)
                            race_log(rec, b, True, (u, vitem(u, u), True, race_snap[u][1]))
                        elif checker:
                            race_block(u, rec, b, True)
                        if defer is None:
                            rec.ex.apply(us.pending)
                            us.pending = []
                        else:  # (us.pending: [] all along)
                            defer.append((index, -1))
                    except SimError as e:
                        self.report("fault", str(e), rec)
                        raise Aborted from None
                    if after:  # (the block, for the arrivals' log; vc's tick after the loop)
                        snapshot = b
                        ends[u] += 1
                    else:
                        snapshot = race_clock[u] if rb is not None else \
                            vc[u].copy() if races is not None else None
                        vc[u, u] += 1
                    if us.flows:
                        us.flows = []
                    # (a block takes one cycle here: it began at now - 1, at or after the
                    # unit's last block's end, so the general loop's busy time adds 1)
                    rec.blocks.append((us.block_start, now))
                    us.busy += 1.0
                    us.busy_until = now
                    nb = sync.blocks
                    last = b == nb - 1
                    for upd in sync.updates:
                        if upd.trigger == 1 or last:
                            fid = next(flow_ids)
                            dst = mask_tpbs.get(upd.tpb_mask)
                            if dst is None:
                                dst = mask_tpbs[upd.tpb_mask] = tuple(tpbs_of(upd.tpb_mask))
                            c, amount = upd.counter, upd.amount
                            for t in dst:
                                push_arrival((t, c, amount, snapshot, fid, index, u))
                    if last:
                        rec.end = now
                        self.done_count += 1
                        if progress is not None:
                            progress(self.done_count, n_recs)
                        if races is not None and self.done_count % PRUNE_EVERY == 0:
                            self._prune()
                        us.cur = None
                    us.block = b + 1
                    us.state = "idle"
                    start(u)
        finally:  # (the loop's own state in the engine's, as the general loop leaves it)
            self.now = now
            for tpb, row in enumerate(wsets):
                for c, ws in enumerate(row):
                    if ws:
                        waiters[(tpb, c)] = ws
            if after:
                for u, k in enumerate(ends):
                    if k:
                        vc[u, u] += k
        if after:
            self._race_log_after(defer, (arrivals, starts, marks))
