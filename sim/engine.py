"""The discrete-event engine: units, in-order queues, sync counters, the fluid timing model.

Execution model (``shared/M100.md``): the CCB dispatches every cluster's instruction stream over the
ICB (one shared bus, ``icb_bits_per_cycle``, round-robin over the cluster streams, each instruction
costing its exact encoded size) into per-unit in-order queues; the CCB's DMA stream goes straight to
the DMA engines. A unit starts block ``b`` of its head instruction when the instruction has arrived
and every monitor holds (``counter >= expected + b * per_block``); CSU blocks also need their cluster's
CPU (one routine at a time, FIFO). A block gathers its inputs when it starts, streams for its
duration (the :mod:`~m100.sim.timing` fluid model shares banks and links among concurrent blocks),
writes its outputs when it stops streaming, and -- after the drain tail of a pipelined unit (TCU,
CVU, DTDU: the unit meanwhile starts its next block) -- fires its updates: local ones at once,
remote ones after
``remote_update_latency`` (same cluster) or ``remote_update_latency_inter`` (another cluster or from
the CCB). Different units and TPBs run concurrently; each unit keeps its order.

Modes: ``full`` (data + timing), ``functional`` (data; every block takes one cycle, no dispatch or
link latencies), ``timing`` (no data: nothing is read, computed or written; races are not checked).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections import deque
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Callable

import numpy as np

from m100.targets.m100.isa import Instruction, Unit, tpbs_of
from m100.targets.m100.machine import Machine

from . import clock_cert, cost_batch
from .arrival_cert import flat_of, hist_ids, verdict
from .checks import RaceDetector, Report
from .dma_ahead import DmaAhead
from .engine_untimed import UntimedLoop
from .engine_checks import PRUNE_EVERY, Checks
from .fluid import NEAR_MARGIN, Fluid, Job, columns_of
from .memory import Memory
from .race_batch import RaceBatch
from .semantics import Exec, SimError
from .timing import Cost, CostModel, capacity
from .trace import TraceEvents


@dataclass
class InstRec:
    """One instruction of the program and what happened to it."""
    index: int
    stream: int
    pos: int
    inst: Instruction
    unit: int = -1
    dispatch: float = 0.0
    start: float | None = None
    end: float | None = None
    blocks: list[tuple[float, float]] = field(default_factory=list)
    ex: Exec | None = None
    costs: list | None = None  # the cost of its block 0 and of its later blocks (Engine._cost)


@dataclass
class UnitState:
    key: tuple[Unit, int]
    name: str
    queue: deque = field(default_factory=deque)
    cur: InstRec | None = None
    block: int = 0
    state: str = "idle"  # idle | dispatch | wait | cpu | latency | run | done
    wait: tuple | None = None
    stall_since: float | None = None
    stall_cause: str = ""
    busy: float = 0.0
    stalls: dict[str, float] = field(default_factory=dict)
    block_start: float = 0.0
    pending: list = field(default_factory=list)
    cost: Cost | None = None
    flows: list = field(default_factory=list)
    alone: float = 0.0
    tail: float = 0.0
    busy_until: float = 0.0
    bottleneck: str = ""
    # a DMA engine (sim/dma_ahead.py): the queue's next instructions issued ahead (record, issue
    # time), and when the engine's next setup may start
    ahead: list = field(default_factory=list)
    setup_free: float = 0.0


def unit_name(key: tuple[Unit, int]) -> str:
    u, i = key
    return f"DMA{i}" if u is Unit.DMA else f"TPB{i}.{u.name}"


PIPELINED = frozenset({Unit.TCU, Unit.CVU, Unit.DTDU})

#: Skip a clock join when one clock is known to be below the other (``Engine.ev_counter``);
#: False joins every time (the tests compare the two).
KNOWN_CLOCKS = True

#: A first full run takes the kept functional run's race verdict when every join takes the
#: arrivals the functional run's took (``Engine.arr_ids``: no clocks, no race log); False: when
#: every block's clock row is the functional run's (``clock_cert.same``; the tests compare).
ARRIVAL_CERT = True

class Aborted(Exception):
    pass


_STREAM_POS = attrgetter("stream", "pos")


class Engine(Fluid, Checks, TraceEvents, DmaAhead, UntimedLoop):
    """The event loop, the units' queues, block starts/ends and the SU counters; the fluid
    timing model (:class:`~m100.sim.fluid.Fluid`), the race / deadlock checks
    (:class:`~m100.sim.engine_checks.Checks`) and the trace events
    (:class:`~m100.sim.trace.TraceEvents`) and the DMA engines' transfers in flight
    (:class:`~m100.sim.dma_ahead.DmaAhead`) are mixed in."""

    def __init__(self, machine: Machine, recs: list[InstRec], mem: Memory | None, mode: str,
                 random_seed: int | None, check_races: bool, trace: bool,
                 progress: Callable[[int, int], None] | None = None, batch_races: bool = False,
                 defer: list | None = None, clock_cert: tuple | None = None):
        self.m = machine
        # (sim/replay.py, a first full run's data after its loop) the executors' ``run`` /
        # ``apply`` calls logged as (record index, block) / (record index, -1), not made
        self.defer = defer
        self.recs = recs
        self.mem = mem
        self.mode = mode
        self.functional = mode in ("full", "functional")
        self.timed = mode in ("full", "timing")
        self.rng = np.random.default_rng(random_seed) if random_seed is not None else None
        self.model = CostModel(machine)
        self.caps_cache: dict[tuple, float] = {}
        self.reports: list[Report] = []
        self.trace_on = trace
        self.events: list[dict] = []
        self.progress = progress
        self.done_count = 0
        # units
        # each record's executor once (a property: ~1 us a call, 17 090 records on ResNet-50),
        # the blocks of the run (the race batch's clock rows), and each record's sync by its
        # index (``syncs``: the functional loop reads it at every block start and end -- one cold
        # instruction object less each time; a dict where an index is not its position)
        execs: list = []
        syncs: list | dict = []
        add_exec, add_sync = execs.append, syncs.append
        rows = 0
        moved = False
        for i, r in enumerate(recs):
            inst = r.inst
            add_exec(inst.executor)
            sync = inst.sync
            add_sync(sync)
            rows += sync.blocks
            if r.index != i:
                moved = True
        self.syncs = {r.index: s for r, s in zip(recs, syncs)} if moved else syncs
        keys = sorted(set(execs), key=lambda k: (k[0] is Unit.DMA, k[1], k[0]))
        self.units = [UnitState(k, unit_name(k)) for k in keys]
        self.unit_id = uid = {k: i for i, k in enumerate(keys)}
        for r, k in zip(recs, execs):
            r.unit = uid[k]
        for r in sorted(recs, key=_STREAM_POS):
            self.units[r.unit].queue.append(r)
        n = len(self.units)
        self.vc = np.zeros((n, n), dtype=np.int64)
        self.vc[np.arange(n), np.arange(n)] = 1
        self.races = RaceDetector() if (check_races and self.functional) else None
        # (the arrivals' certificate, ``arr_ids``: no race checks in this run -- its verdict is
        # the functional run's when the certificate holds, else the run is made again)
        arrivals = ARRIVAL_CERT and clock_cert is not None and len(clock_cert) > 2 \
            and batch_races and self.races is not None
        if arrivals:
            self.races = None
        # races checked in batches (sim/race_batch.py): a race found raises RaceFound out of
        # run(), and the caller runs the program again with the per-access checker
        self.rbatch = RaceBatch(n, rows=rows) \
            if (batch_races and self.races is not None) else None
        # the counters' arrival histories (hist: the clocks a block joins, its trace flows) are
        # kept only for the race checker and the trace (a timing run keeps none)
        self.joins_on = self.races is not None or trace
        # per unit: a copy of its clock when its block started (the block's accesses' clock)
        self.race_clock: list[np.ndarray | None] = [None] * n
        self.race_snap: list[tuple[int, int]] = [(-1, -1)] * n  # its (batch, row) in rbatch.buf
        # (sim/clock_cert.py) with the functional run's race log ``clock_cert``: no log and no
        # sweep, each block's clock row kept (rbatch.keep) and its unit listed here, the rows
        # compared after the loop (clocks_ok); race_log: this run's log (entries, rows) after
        # its sweep found no race
        self.cert = clock_cert if (self.rbatch is not None or arrivals) else None
        self.cert_units: list[int] | None = [] if (self.cert is not None and not arrivals) \
            else None
        self.clocks_ok: bool | None = None
        # (the arrivals' certificate) the functional run's arrivals, flat rows (tpb, counter,
        # value after, sender record index, sender block, ...) in arrival order; this run's
        # (arr_log: the same first five fields) and its joins (join_log: (tpb, counter, need)
        # per block start and monitor), tested after the loop (arrival_cert.verdict)
        self.arr_ids: list | None = None
        self.arr_log: list | None = None
        if arrivals:
            ids = clock_cert[2]  # (its records' units and queues are this run's: the same
            # instructions, streams and machine -- so its epochs name the same blocks here)
            self.arr_ids = ids if isinstance(ids, list) else flat_of(hist_ids(ids, recs))
            self.arr_log, self.join_log = [], []
        self.race_log: tuple | None = None
        # the SU counters, counters[tpb][counter] (Python ints: read on every block start and
        # counter arrival)
        self.counters = [[0] * machine.su_counters for _ in range(machine.num_tpbs)]
        self.counter_max = machine.su_counter_max
        # per counter, per arrival: the running value, the join of the arrivals' clocks, the
        # trace flow, and (race checks) (s, k) when that join is the clock of unit s's block of
        # epoch k itself, else None (ev_counter)
        self.hist: dict[tuple[int, int], tuple[list[int], list[np.ndarray], list, list]] = {}
        self.waiters: dict[tuple[int, int], set[int]] = {}
        # DMA engines that wait on a counter to issue their next transfer ahead (sim/dma_ahead.py)
        self.ahead_waiters: dict[tuple[int, int], set[int]] = {}
        self.ahead_on = self.timed and machine.dma_outstanding > 1
        self.cpu_owner: dict[int, int | None] = {}
        self.cpu_fifo: dict[int, deque] = {}
        self.heap: list = []
        self.now_q: deque = deque()  # events at the current time without timing (run)
        # without timing, events pushed for the current time wait in a FIFO instead of the
        # heap (``_loop_untimed``: the same order; test_speed_paths runs the heap alone, fifo
        # False, as the reference)
        self.fifo = not self.timed
        self.seq = itertools.count()
        self.now = 0.0
        self.jobs: dict[int, Job] = {}  # streaming blocks by unit, in the order they started
        # per unit: the remaining work (1.0 = the whole block) and alone rate of its streaming
        # block (Python floats: ~40 jobs stream at once, fewer than pays for numpy's per-call
        # cost; the same IEEE operations, sim/fluid.py)
        self.j_rem = [0.0] * len(self.units)
        self.j_alone = [0.0] * len(self.units)
        self.fluid_t = 0.0
        self.fluid_version = 0
        # per resource column (HBSM banks of every TPB, then links: the machine's registry,
        # fluid.Columns): the number of streaming jobs with demand on it and the running sum of
        # their demands at their alone rates -- lets _reshare see when max-min sharing has
        # nothing to do (see _unlimited)
        self.columns = columns_of(machine)
        self.col_cap = np.array(self.columns.caps, dtype=np.float64)
        self.col_lim = self.col_cap * (1.0 - 1e-7)  # the margin of Fluid._unlimited
        self.col_near = self.col_cap * (1.0 - NEAR_MARGIN)  # near_rates' candidates
        self.col_use = np.zeros(self.col_cap.size)
        self.col_cnt = np.zeros(self.col_cap.size, dtype=np.int64)
        # boolean scratch per column (Fluid._unlimited, _alone_at_capacity)
        self.col_b1 = np.empty(self.col_cap.size, dtype=bool)
        self.col_b2 = np.empty(self.col_cap.size, dtype=bool)
        self.col_one = np.ones(self.col_cap.size, dtype=np.int64)  # (a job's count update)
        self.col_updates = 0
        self.crit_jobs = 0  # streaming jobs with crit set
        self.flow_ids = itertools.count(1)
        self.mask_tpbs: dict[int, tuple[int, ...]] = {}  # tpbs_of per update mask
        self.upd_lat: dict[tuple, float] = {}  # update latency per (source, destination TPB)
        self.bytes: dict[str, float] = {}
        self.macs: dict[int, float] = {}
        self.peak: dict[int, float] = {}

    # --- helpers ------------------------------------------------------------------------------
    def push(self, t: float, handler: Callable, *args) -> None:
        """Call ``handler(*args)`` at time ``t`` (an ``ev_*`` method; ties in push order)."""
        if self.fifo and t == self.now:  # (run's untimed loop: the same order)
            self.now_q.append((handler, args))
        else:
            heapq.heappush(self.heap, (t, next(self.seq), handler, args))

    def report(self, kind: str, msg: str, rec: InstRec | None = None, **kw) -> None:
        u = self.units[rec.unit] if rec is not None else None
        self.reports.append(Report(kind, msg, inst=rec.index if rec else None,
                                   tpb=(u.key[1] if u and u.key[0] is not Unit.DMA else None),
                                   unit=u.name if u else None, **kw))

    def where(self, rec: InstRec) -> str:
        return f"#{rec.index} {rec.inst.MNEMONIC} on {self.units[rec.unit].name}"

    def cap(self, key: tuple) -> float:
        c = self.caps_cache.get(key)
        if c is None:
            c = self.caps_cache[key] = capacity(self.m, key)
        return c

    # --- main loop ----------------------------------------------------------------------------
    def run(self) -> None:
        if self.timed and cost_batch.BATCH:
            self._derive_costs()
        if self.functional and self.cert is None:  # (with a certificate no race
            # items are asked for, and the copies' view specs are the functional run's, kept on
            # the instructions -- a block derives one not kept, the same value)
            self._derive_blocks()
        try:
            if self._functional_loop_applies():  # (sim/engine_untimed.py: the same events)
                self._loop_functional()
            else:
                for i in range(len(self.units)):
                    self.try_start(i)
                if self.timed or not self.fifo:
                    self._loop_timed()
                else:
                    self._loop_untimed()
        except Aborted:
            if self.rbatch is not None:
                self.rbatch.check(None)
            return
        if self.arr_ids is not None:
            self.clocks_ok = verdict(self.arr_ids, self.arr_log, self.join_log)
        elif self.cert_units is not None:
            rb = self.rbatch
            self.clocks_ok = clock_cert.same(self.cert[:2], rb.buf, rb.used, self.cert_units)
        elif self.rbatch is not None:
            rb = self.rbatch
            # (the sweep forgets the entries and rows) and per counter its running values and
            # arrivals' identities (the arrivals' certificate of a later full run)
            # -- or the functional loop's flat arrival log where it keeps one instead
            # (``Checks._race_log_after``: by reference, read by the full run, arrival_cert.verdict)
            flat = getattr(self, "arrivals", None)
            log = (rb.log_meta, rb.buf, flat if flat is not None else
                   {k: (h[0], h[2]) for k, h in self.hist.items()})
            rb.check(None)
            self.race_log = log
        left = [u for u in self.units if u.cur is not None or u.queue]
        if left:
            self.deadlock(left)

    def _loop_timed(self) -> None:
        """The loop with timing (or without ``fifo``): every event in the heap,
        by (time, push number); the fluid rates computed before any later event."""
        heap, pop, rates = self.heap, heapq.heappop, self._rates
        while True:
            if self.fluid_dirty:
                if not heap or heap[0][0] > self.now or heap[0][1] > self.fluid_seq:
                    rates()  # the jobs' last change at this time (Fluid._reshare)
                    continue
            elif not heap:
                return
            t, _, handler, args = pop(heap)
            if t > self.now:
                self.now = t
            handler(*args)

    def _loop_untimed(self) -> None:
        """The loop without timing (functional mode): the events pushed for the current time
        (counter arrivals: no update latency without timing) wait in a FIFO, ``self.now_q``,
        instead of the heap. Same order as the heap's (time, push number): an event in the
        heap at the current time was pushed before the time was reached (a push at the current
        time goes to the FIFO), so it precedes every FIFO event; the FIFO is in push order."""
        heap, pop, nq = self.heap, heapq.heappop, self.now_q
        popleft = nq.popleft
        while True:
            if nq and (not heap or heap[0][0] > self.now):
                handler, args = popleft()
            elif heap:
                t, _, handler, args = pop(heap)
                if t > self.now:
                    self.now = t
            else:
                return
            handler(*args)

    def ev_wake(self, u: int) -> None:
        if self.units[u].state == "dispatch":
            self.units[u].state = "idle"
        self.try_start(u)

    # --- starting blocks ----------------------------------------------------------------------
    def _stall(self, us: UnitState, cause: str) -> None:
        if us.stall_since is None:
            us.stall_since = self.now
            us.stall_cause = cause
        elif us.stall_cause != cause:
            us.stalls[us.stall_cause] = us.stalls.get(us.stall_cause, 0.0) + self.now - us.stall_since
            us.stall_since, us.stall_cause = self.now, cause

    def _unstall(self, us: UnitState) -> None:
        if us.stall_since is not None:
            us.stalls[us.stall_cause] = us.stalls.get(us.stall_cause, 0.0) + self.now - us.stall_since
            us.stall_since = None

    def try_start(self, u: int) -> None:
        us = self.units[u]
        if us.state not in ("idle", "wait", "cpu_ready"):
            return
        if us.cur is None:
            if not us.queue:
                us.state = "done"
                return
            us.cur = us.queue.popleft()
            us.block = 0
        rec, b = us.cur, us.block
        if rec.dispatch > self.now:
            us.state = "dispatch"
            if rec.index >= 0 and us.stall_since is None and rec.start is None:
                self._stall(us, "dispatch")
            self.push(rec.dispatch, self.ev_wake, u)
            return
        sync = rec.inst.sync
        for mon in sync.monitors:
            if mon.per_block == 0 and b > 0:
                continue
            need = mon.expected + b * mon.per_block
            val = self.counters[mon.tpb][mon.counter]
            if val < need:
                us.state = "wait"
                us.wait = (mon, need)
                self.waiters.setdefault((mon.tpb, mon.counter), set()).add(u)
                self._stall(us, "sync")
                return
        # every monitor holds: join the clocks of the updates that released them (and take
        # their trace flows)
        us.wait = None
        if self.arr_log is not None:  # (the arrivals' certificate: no clocks; its joins
            jl = self.join_log  # tested after the loop, arrival_cert.verdict)
            for mon in sync.monitors:
                if mon.per_block == 0 and b > 0:
                    continue
                need = mon.expected + b * mon.per_block
                if need > 0:
                    jl.append((mon.tpb, mon.counter, need))
        for mon in (sync.monitors if self.joins_on else ()):
            if mon.per_block == 0 and b > 0:
                continue
            need = mon.expected + b * mon.per_block
            if need <= 0:
                continue
            cums, joins, flows, known = self.hist[(mon.tpb, mon.counter)]
            k = bisect.bisect_left(cums, need)  # first arrival with cum >= need
            if self.races is not None:
                src = known[k]  # the join is a block's clock the unit already knows: no-op
                if src is None or self.vc.item(u, src[0]) < src[1] or not KNOWN_CLOCKS:
                    row = self.vc[u]
                    np.maximum(row, joins[k], out=row)
            if self.trace_on:
                us.flows.append(flows[k])
        if us.state != "cpu_ready":
            if self.timed:  # (_cost's kept cost, without the call when it is there)
                costs = rec.costs
                cost = costs[0 if b == 0 else 1] if costs is not None else None
                if cost is None:
                    cost = self._cost(rec, b)
            else:
                cost = None
            us.cost = cost
            if cost is not None and cost.exclusive is not None:
                cl = cost.exclusive[1]
                owner = self.cpu_owner.get(cl)
                if owner is not None and owner != u:
                    self.cpu_fifo.setdefault(cl, deque()).append(u)
                    us.state = "cpu"
                    self._stall(us, "csu_cpu")
                    return
                self.cpu_owner[cl] = u
        self._start_block(u)

    def _cost(self, rec: InstRec, b: int) -> Cost | None:
        if not self.timed:
            return None
        # a block's cost depends on the instruction and on whether it is the first block (a
        # DMA's setup latency), never on b otherwise: computed once per instruction and kind
        k = 0 if b == 0 else 1
        costs = rec.costs
        if costs is None:
            costs = self._kept_costs(rec)
        c = costs[k]
        if c is None:
            try:
                c = costs[k] = self.model.cost(rec.inst, b)
            except (ValueError, KeyError) as e:  # pragma: no cover - defensive
                raise SimError(f"{self.where(rec)}: cannot time: {e}") from None
        return c

    def _kept_costs(self, rec: InstRec) -> list:
        """``rec.costs``: the block costs ``[first block, later blocks]`` (None: not built yet)
        kept on the (immutable) instruction for the machine object too -- a cost is a function
        of the two (its resource columns too: they are the machine's, fluid.Columns), so a
        program run again does not compute them again."""
        got = rec.inst.__dict__.get("_sim_costs")
        if got is not None and got[0] is self.m:
            costs = got[1]
        else:
            costs = [None, None]
            object.__setattr__(rec.inst, "_sim_costs", (self.m, costs))
        rec.costs = costs
        return costs

    def _derive_costs(self) -> None:
        """Build every instruction's block costs now (``_cost``: kept on the instructions, as
        the blocks would build them) and derive them together
        (:func:`~m100.sim.cost_batch.derive_batch`). A cost that cannot be built is left to
        its block (which reports it there)."""
        costs = []
        add, cost = costs.append, self.model.cost
        for rec in self.recs:  # (_cost inlined: ~1 us a record of calls and lookups)
            inst = rec.inst
            kept = rec.costs
            if kept is None:
                kept = self._kept_costs(rec)
            for b in ((0, 1) if inst.sync.blocks > 1 else (0,)):
                c = kept[b]
                if c is None:
                    try:
                        c = kept[b] = cost(inst, b)
                    except (ValueError, KeyError):  # pragma: no cover - defensive (as _cost)
                        continue  # (left to its block, which reports it)
                add(c)
        cost_batch.derive_batch(costs, self.cap, self.columns.col, self._grown_caps,
                                self.columns.token, self.m.hbsm_banks)
        self._grown_caps()  # (the registry only grows: links another run registered)

    def _start_block(self, u: int) -> None:
        us = self.units[u]
        rec, b = us.cur, us.block
        self._unstall(us)
        us.state = "run"
        us.block_start = self.now
        if rec.start is None:
            rec.start = self.now
        if self.functional:
            ex = rec.ex
            try:
                if self.cert_units is not None:  # (its clock row only: sim/clock_cert.py)
                    rb = self.rbatch
                    self.race_clock[u] = rb.buf[rb.keep(self.vc[u])]
                    self.cert_units.append(u)
                elif self.races is not None:
                    self._race_block(u, rec, b, False)
                if self.defer is None:
                    us.pending = ex.run(b)
                else:
                    self.defer.append((rec.index, b))
            except SimError as e:
                self.report("fault", str(e), rec)
                raise Aborted from None
        cost = us.cost
        if not self.timed:
            dur = 1.0
            if self.rng is not None:
                dur += float(self.rng.integers(0, 16))
            self.push(self.now + dur, self.ev_block_done, u)
            return
        lat = cost.latency
        if self.rng is not None:
            lat += float(self.rng.integers(0, int(4 * lat) + 64))
        if rec.inst.UNIT in PIPELINED:  # the latency is a drain tail, overlapping the next block
            us.tail, us.alone = lat, 0.0
            self.ev_stream(u)
        else:
            ahead = self.ahead_on and rec.inst.UNIT is Unit.DMA
            if ahead and b == 0:  # what is left of the latency of a transfer issued ahead
                lat = self.ahead_latency(u, lat)
            us.tail, us.alone = 0.0, lat
            if lat > 0:
                us.state = "latency"
                self.push(self.now + lat, self.ev_stream, u)
            else:
                self.ev_stream(u)
            if ahead:
                self.try_ahead(u)

    # --- finishing blocks ---------------------------------------------------------------------
    def ev_block_done(self, u: int) -> None:
        """The block stopped streaming: its data is written; the unit may go on. Its results become
        visible to other units (updates fire) after the pipeline tail (:meth:`ev_visible`)."""
        us = self.units[u]
        rec, b = us.cur, us.block
        inst = rec.inst
        start, end = us.block_start, self.now
        if self.timed and us.cost is not None:
            extra = (end - start) - us.alone
            if extra > 1e-6:
                cause = us.bottleneck or "contention"
                us.stalls[cause] = us.stalls.get(cause, 0.0) + extra
            us.bottleneck = ""
            c = us.cost
            tot = self.bytes
            for k, v in c.bytes.items():
                tot[k] = tot.get(k, 0.0) + v
            if c.macs:
                self.macs[u] = self.macs.get(u, 0.0) + c.macs
                self.peak[u] = c.peak_macs
        if self.functional:
            try:
                if self.races is not None and self.cert_units is None:
                    self._race_block(u, rec, b, True)
                if self.defer is None:
                    rec.ex.apply(us.pending)
                else:
                    self.defer.append((rec.index, -1))
            except SimError as e:
                self.report("fault", str(e), rec)
                raise Aborted from None
            us.pending = []
        if self.rbatch is not None:  # (the block's clock: unchanged since it started)
            snapshot = self.race_clock[u]
        elif self.arr_ids is not None:  # (the arrivals' certificate: the block's number)
            snapshot = b
        else:
            snapshot = self.vc[u].copy() if self.races is not None else None
        if self.arr_ids is None:
            self.vc[u, u] += 1
        flows, us.flows = us.flows, []
        args = (u, rec, b, start, end, snapshot, flows)
        if us.tail > 0:
            self.push(self.now + us.tail, self.ev_visible, *args)
        else:
            self.ev_visible(*args)
        us.block += 1
        us.state = "idle"
        if us.block == inst.sync.blocks:
            us.cur = None
        self.try_start(u)

    def ev_visible(self, u: int, rec: InstRec, b: int, start: float, end: float,
                   snapshot: np.ndarray, flows: list) -> None:
        us = self.units[u]
        inst = rec.inst
        now = self.now
        rec.blocks.append((start, now))
        # (max(0.0, now - max(start, busy_until)) and max(busy_until, now) as comparisons:
        # max returns its first argument unless the second is greater)
        bu = us.busy_until
        x = now - (bu if bu > start else start)
        us.busy += x if x > 0.0 else 0.0
        us.busy_until = now if now > bu else bu
        if self.trace_on:
            self._trace_block(u, rec, b, start, end, flows)
        last = b == inst.sync.blocks - 1
        src_tpb = None if inst.UNIT is Unit.DMA else inst.tpb
        lats = self.upd_lat if self.timed and self.rng is None else None
        heap, seq, ev = self.heap, self.seq, self.ev_counter
        for upd in inst.sync.updates:
            if upd.trigger == 1 or last:
                fid = next(self.flow_ids)
                if self.trace_on:
                    self._trace_flow_start(u, fid, start, end)
                dst = self.mask_tpbs.get(upd.tpb_mask)
                if dst is None:
                    dst = self.mask_tpbs[upd.tpb_mask] = tuple(tpbs_of(upd.tpb_mask))
                if lats is not None:  # (timed, no random latency: _update_latency's table)
                    for t in dst:
                        lat = lats.get((src_tpb, t))
                        if lat is None:
                            lat = self._update_latency(src_tpb, t)
                        heapq.heappush(heap, (now + lat, next(seq), ev,
                                              (t, upd.counter, upd.amount, snapshot, fid,
                                               rec.index, u)))
                    continue
                if self.fifo:  # no latency (untimed): now, in the FIFO of run's untimed loop
                    nq = self.now_q
                    for t in dst:
                        nq.append((ev, (t, upd.counter, upd.amount, snapshot, fid, rec.index,
                                        u)))
                    continue
                for t in dst:  # (self.push inlined; no latency without timing)
                    lat = self._update_latency(src_tpb, t) if self.timed else 0.0
                    heapq.heappush(heap, (now + lat, next(seq), ev,
                                          (t, upd.counter, upd.amount, snapshot, fid, rec.index,
                                           u)))
        if last:
            rec.end = self.now
            self.done_count += 1
            if self.progress is not None:
                self.progress(self.done_count, len(self.recs))
            cost = us.cost if us.cost is not None and us.cost.exclusive is not None else None
            if cost is not None:
                cl = cost.exclusive[1]
                self.cpu_owner[cl] = None
                fifo = self.cpu_fifo.get(cl)
                if fifo:
                    nxt = fifo.popleft()
                    self.cpu_owner[cl] = nxt
                    self.units[nxt].state = "cpu_ready"
                    self.push(self.now, self.ev_cpu_go, nxt)
            if self.races is not None and self.done_count % PRUNE_EVERY == 0:
                self._prune()

    def ev_cpu_go(self, u: int) -> None:
        us = self.units[u]
        if us.state == "cpu_ready":
            self._start_block(u)

    def _update_latency(self, src_tpb: int | None, dst: int) -> float:
        if not self.timed:
            return 0.0
        if self.rng is None:  # a function of the two TPBs: computed once per pair
            lat = self.upd_lat.get((src_tpb, dst))
            if lat is None:
                lat = self.upd_lat[(src_tpb, dst)] = self._pair_latency(src_tpb, dst)
            return lat
        return self._pair_latency(src_tpb, dst) + \
            float(self.rng.integers(0, self.m.remote_update_latency_inter + 1))

    def _pair_latency(self, src_tpb: int | None, dst: int) -> float:
        m = self.m
        if src_tpb == dst:
            lat = 0.0
        elif src_tpb is not None and m.cluster_of(src_tpb) == m.cluster_of(dst):
            lat = float(m.remote_update_latency)
        else:
            lat = float(m.remote_update_latency_inter)
        return lat

    def ev_counter(self, tpb: int, c: int, amount: int, vc: np.ndarray, fid: int, src: int,
                   su: int) -> None:
        """An update of ``amount`` from instruction ``src`` (unit ``su``, the clock ``vc`` of
        its block) arrives at counter ``c`` of TPB ``tpb``.

        The join of the arrivals' clocks is computed only when neither clock is below the other
        by what is known without comparing them: a block's clock ``B`` (unit ``s``, epoch ``k
        = B[s]``) is below every clock ``C`` with ``C[s] >= k``, since a clock learns ``s``'s
        epoch ``k' >= k`` only by joins that carry ``s``'s clock of a block of epoch ``k'``,
        and ``s``'s clocks grow with its epochs (its row only grows). So ``max(prev, vc)`` is
        ``vc`` itself when ``prev`` is such a clock and ``vc`` knows its epoch, ``prev`` when
        ``prev`` knows the epoch of ``vc`` (always a block's clock) -- the same values, no new
        array; ``try_start`` skips a join of such a clock into a row that knows its epoch."""
        key = (tpb, c)
        row = self.counters[tpb]
        val = row[c] + amount
        if val > self.counter_max:
            self.reports.append(Report("overflow", f"counter c{c} of TPB {tpb} overflows "
                                       f"({val} > {self.counter_max}) on the update by "
                                       f"instruction #{src}", inst=src, tpb=tpb))
            val = self.counter_max
        row[c] = val
        if self.arr_log is not None:  # (the arrivals' certificate: ``vc`` is the block)
            self.arr_log.append((tpb, c, val, src, vc))
        if self.joins_on:  # (the race checker's clocks, the trace's flows)
            h = self.hist.get(key)
            if h is None:
                h = self.hist[key] = ([], [], [], [])
            h[0].append(val)
            if self.races is not None:  # clocks matter only to the race checker
                joins, known = h[1], h[3]
                if not joins:
                    joins.append(vc)
                    known.append((su, vc.item(su)))
                elif not KNOWN_CLOCKS:
                    joins.append(np.maximum(joins[-1], vc))
                    known.append(None)
                else:
                    prev, psrc = joins[-1], known[-1]
                    if psrc is not None and vc.item(psrc[0]) >= psrc[1]:  # prev <= vc
                        joins.append(vc)
                        known.append((su, vc.item(su)))
                    elif prev.item(su) >= vc.item(su):  # vc <= prev
                        joins.append(prev)
                        known.append(psrc)
                    else:
                        joins.append(np.maximum(prev, vc))
                        known.append(None)
            if self.trace_on:
                h[2].append((fid, self.now))
                self.events.append({"ph": "C", "name": f"c{c}", "pid": tpb + 1,
                                    "ts": self._us(self.now), "args": {"value": val}})
            else:  # (with races: the arrival's identity, Engine.race_log)
                h[2].append((su, vc.item(su)) if self.races is not None else None)
        ws = self.waiters.pop(key, None)
        if ws:
            units = self.units
            for u in (sorted(ws) if len(ws) > 1 else ws):
                if units[u].state == "wait":
                    units[u].state = "idle"
                    self.try_start(u)
        if self.ahead_waiters:
            for u in sorted(self.ahead_waiters.pop(key, ())):
                self.try_ahead(u)
