"""The fluid timing model of the engine: streaming blocks are jobs that share HBSM banks and links
by max-min fair rates (:func:`~m100.sim.timing.share`), recomputed whenever a job starts or ends;
the per-column demand sums let the engine skip ``share`` when nobody is limited. A mixin of
:class:`~m100.sim.engine.Engine` (its state is created in ``Engine.__init__``)."""

from __future__ import annotations

import heapq
import itertools
import math
import weakref
from dataclasses import dataclass
from operator import attrgetter

import numpy as np

from .share_near import near_rates_entries
from .share_pack import SharePack
from .timing import Cost, alone_on_entries, alone_rate, bank_terms, capacity


@dataclass(slots=True)
class Job:
    """A streaming block; its remaining work is ``Engine.j_rem[unit]``, its rate in
    ``Fluid.fl_rates`` (the last ``_rates``, in the order of ``fl_idx``)."""
    unit: int
    cost: Cost
    cols: np.ndarray | None = None  # the resource columns it puts demand on (Engine._col)
    use: np.ndarray | None = None  # that demand per cycle at its alone rate
    crit: bool = False  # on some column alone its demand rounds above the capacity
    serial: int = 0  # jobs are numbered in start order (the order of ``Engine.jobs``)


class Columns:
    """The resource columns of one machine: the HBSM banks of every TPB (``tpb * hbsm_banks +
    bank``), then the links in the order they first appear, with their capacities. One registry
    per machine object (:func:`columns_of`), so the columns a cost's demands map to
    (``Cost.cols``) are computed once and serve every later run on that machine; an engine's
    per-column sums are arrays over it (grown when a link appears). The column numbers never
    change a result: only per-column sums and a test over all columns use them."""

    def __init__(self, machine):
        self.machine = weakref.ref(machine)
        self.ids: dict[tuple, int] = {}
        self.caps: list[float] = [1.0] * (machine.num_tpbs * machine.hbsm_banks)
        self.nbank = len(self.caps)  # (the bank columns: 0 .. nbank - 1)
        self.keys: list = [None] * self.nbank  # a link column's key (None: a bank's)
        self.link_caps: dict[tuple, float] = {}  # capacity per link key (what share reads)
        self.token = next(_TOKENS)

    def col(self, key: tuple) -> int:
        i = self.ids.get(key)
        if i is None:
            i = self.ids[key] = len(self.caps)
            c = self.link_caps[key] = capacity(self.machine(), key)
            self.caps.append(c)
            self.keys.append(key)
        return i


_TOKENS = itertools.count(1)
_COLUMNS: dict[int, Columns] = {}  # by id(machine), dropped when the machine object goes


def columns_of(machine) -> Columns:
    c = _COLUMNS.get(id(machine))
    if c is None or c.machine() is not machine:
        c = _COLUMNS[id(machine)] = Columns(machine)
        weakref.finalize(machine, _COLUMNS.pop, id(machine), None)
    return c


#: Skip :func:`~m100.sim.timing.share` when it would give every job its alone rate
#: (``Engine._unlimited``). False: always call it (tests compare the two bit for bit).
SHARE_SHORTCUT = True

#: Compute the rates once per time at which the streaming jobs change, for the jobs as they are
#: after the last change at that time (``Fluid._reshare``), not after every change: rates that
#: hold for no time are never used (ResNet-18 224: 11 734 -> 6 373 computations, 3 662 -> 1 855
#: ``share`` calls). Cycles are the same by construction (the same rates for every interval of
#: time, every event keeps its number and order); what can differ is only a block's stall
#: cause (``bottleneck``) when a resource limited it in a state of no duration alone. False:
#: after every change (tests compare whole runs).
DEFER_RESHARE = True

#: Share the resources from the columns whose running demand sum is near their capacity
#: (:func:`~m100.sim.share_near.near_rates`: the same rates and causes). False: ``share`` on
#: every demand entry (``sim/share_pack.py``; the tests compare the two).
NEAR = True

#: The candidates of ``near_rates``: a running sum over ``(1 - NEAR_MARGIN)`` of the capacity
#: (``share``'s near test is ``1 - 1e-6`` of the job-order sum; the running sums drift by ~1e-11).
NEAR_MARGIN = 2e-6

#: At most this many columns over the margin are summed exactly by
#: ``Fluid._alone_at_capacity`` (more: ``share`` decides).
ALONE_COLUMNS = 8


_INF = math.inf
_FINITE = math.isfinite
_SERIAL = attrgetter("serial")
_ALL = np.logical_and.reduce  # (ndarray.all without its Python layer: the same reduction)


def finish_min(rem: list[float], idx: list[int], rates: list[float],
               fin: list[bool] | None) -> float:
    """The time until the first of the jobs ``idx`` (units, with ``rates``) finishes: the
    minimum over them of ``max(rem[u], 0) / max(rate, 1e-300)``, 0.0 for a job whose ``fin``
    entry is False (no streaming work; ``fin`` None: every rate is finite). Python floats, the
    same IEEE operations as numpy's elementwise ``maximum`` / ``divide`` and ``minimum.reduce``
    (which this replaced: ~40 jobs stream at once, fewer than pays for numpy's per-call cost);
    a NaN wins as there (none can occur: rates > 0, remaining work <= 1). ``test_fluid_floats``
    compares it with numpy on random and edge values."""
    m = _INF
    if fin is None:  # (the common case: the same operations without the test per job)
        for u, r in zip(idx, rates):
            x = rem[u]
            t = (0.0 if x < 0.0 else x) / (1e-300 if r < 1e-300 else r)
            if t < m:
                m = t
            elif t != t:
                return t
        return m
    for i, u in enumerate(idx):
        if fin[i]:
            x = rem[u]
            r = rates[i]
            t = (0.0 if x < 0.0 else x) / (1e-300 if r < 1e-300 else r)
        else:
            t = 0.0
        if t < m:
            m = t
        elif t != t:
            return t
    return m


def advance(rem: list[float], idx: list[int], rates: list[float], dt: float) -> None:
    """``rem[u] -= rate * dt`` for each job: the product, then the difference (no fused
    multiply-add), as numpy's ``rem[idx] - rates * dt`` did."""
    for u, x in zip(idx, rates):
        rem[u] = rem[u] - x * dt


class Fluid:
    # The streaming jobs' units as of the last _reshare (every change of ``jobs`` is followed
    # by one), and those with a finite rate with their rates (what _advance moves).
    fl_idx: list = []  # (never mutated: a new list per _rates)
    fl_adv: tuple[list, list] = ([], [])
    fl_rates: list = []  # the rates of the jobs fl_idx (the last _rates)
    # share's packed demand entries of the jobs of its last call (sim/share_pack.py)
    share_pack: SharePack | None = None
    # a change of the jobs whose rates are not computed yet (_reshare), and the event number
    # their ev_fluid takes
    fluid_dirty = False
    fl_fin = True  # every rate of the last _rates is finite
    fluid_seq = 0
    job_serial = 0  # the last job's number (Job.serial)
    # the streaming jobs with a finite alone rate by unit, per TPB of their bank histograms and
    # per link of their costs (in start order: the order of ``jobs``): where a column's jobs are
    # found (_cand_entries)
    on_tpb: dict | None = None
    on_link: dict | None = None
    # _unlimited's last answer (None: none that holds now) and which updates of the column sums
    # came since (1: a job added, 2: one removed)
    unl_last: bool | None = None
    unl_moves = 0

    # --- fluid streaming ----------------------------------------------------------------------
    def _advance(self) -> None:
        dt = self.now - self.fluid_t
        if dt > 0:
            idx, r = self.fl_adv  # the finite rates _rates set and their units
            advance(self.j_rem, idx, r, dt)
        self.fluid_t = self.now

    def _grow(self) -> None:
        """Extend the per-column arrays to every column of the machine's registry."""
        caps = self.columns.caps
        n = len(caps) - self.col_cap.size
        if n > 0:
            self.col_cap = np.append(self.col_cap, caps[self.col_cap.size:])
            self.col_lim = self.col_cap * (1.0 - 1e-7)
            self.col_near = self.col_cap * (1.0 - NEAR_MARGIN)
            self.col_use = np.append(self.col_use, np.zeros(n))
            self.col_cnt = np.append(self.col_cnt, np.zeros(n, dtype=np.int64))
            self.col_b1, self.col_b2 = np.empty(self.col_cap.size, dtype=bool), \
                np.empty(self.col_cap.size, dtype=bool)
            self.col_one = np.ones(self.col_cap.size, dtype=np.int64)

    def _grown_caps(self) -> np.ndarray:
        """The column capacities, grown first to every column of the registry: the cost batch
        registers its links with ``Columns.col`` and grows the arrays once, here (one growth
        per new link was ~1 500 ``np.append`` rounds of a first full ResNet-50 run)."""
        if len(self.columns.caps) > self.col_cap.size:
            self._grow()
        return self.col_cap

    def _col(self, key: tuple) -> int:
        i = self.columns.col(key)
        if i >= self.col_cap.size:
            self._grow()
        return i

    def _add_use(self, job: Job, sign: int) -> None:
        """Add (sign 1) or remove (-1) a streaming job's demands to the column sums."""
        if job.cols is None and job.cost.cols_of == self.columns.token:  # computed before
            job.cols, job.use, job.crit = job.cost.cols, job.cost.use, job.cost.crit
            if len(self.columns.caps) > self.col_cap.size:  # a link another run registered
                self._grow()
        if job.cols is None:
            cost = job.cost
            w = cost.alone
            if not math.isfinite(w):  # no streaming work: no demand (share freezes it)
                job.cols, job.use = np.zeros(0, dtype=np.int64), np.zeros(0)
            else:
                nzb = bank_terms(cost, self.m.hbsm_banks)
                links = [(self._col(k), w * v) for k, v in cost.links.items() if v != 0]
                if len(nzb) == 1 and not links:  # one TPB, no links: its bank columns
                    job.cols, job.use = nzb[0][1], w * nzb[0][2]
                else:
                    cols = [code for _, code, _ in nzb]
                    use = [w * dem for _, _, dem in nzb]
                    cols.append(np.array([c for c, _ in links], dtype=np.int64))
                    use.append(np.array([u for _, u in links], dtype=np.float64))
                    job.cols, job.use = np.concatenate(cols), np.concatenate(use)
            cap = self.col_cap[job.cols]
            inc = np.divide(cap, job.use, out=np.full(cap.shape, np.inf), where=job.use > 1e-12)
            job.crit = bool((inc < 1.0).any())
            cost.cols, cost.use, cost.crit, cost.cols_of = job.cols, job.use, job.crit, \
                self.columns.token
            cost.neg_use = None
        cols = job.cols
        if cols.size:  # (distinct columns per job: a gather, a sum and a scatter are the
            # in-place fancy update, which costs more)
            cu, cc = self.col_use, self.col_cnt
            if sign > 0:
                cu[cols] = cu[cols] + job.use
                cc[cols] = cc[cols] + self.col_one[:cols.size]
            else:  # -use kept on the cost: the same values as -1 * use
                neg = job.cost.neg_use
                if neg is None:  # (reset wherever the cost's cols / use are set)
                    neg = job.cost.neg_use = -job.use
                cu[cols] = cu[cols] + neg
                cc[cols] = cc[cols] - self.col_one[:cols.size]
        self.unl_moves |= 1 if sign > 0 else 2
        self.crit_jobs += sign * job.crit
        self.col_updates += 1

    def _unlimited(self, jobs: list[Job]) -> bool:
        """True when :func:`share` would give every job exactly its alone rate.

        ``share``'s first step raises every job by ``d = min(1, min over columns of capacity /
        demand)`` and stops with rates ``d * alone`` if ``d >= 1 - 1e-12``; ``d`` is exactly 1
        when no ratio is below 1. A column used by several jobs whose running demand sum is under
        its capacity by a 1e-7 margin (far more than the rounding of either sum: each job's own
        demand is at most the capacity) has a ratio above 1; a column used by one job has that
        job's own ratio (``crit``: one below 1, from rounding, sends the case to ``share``).

        Its last answer holds again without the tests (``unl_last``) when no recomputation of
        the sums came between and only jobs were removed since a True (each sum is ``fl(x -
        u) <= x`` for a demand ``u >= 0``, each count lower, ``crit_jobs`` still 0), only added
        since a False (each sum ``fl(x + u) >= x``, each count higher, ``crit_jobs`` no lower)
        or nothing moved (ResNet-50: ~4 400 of 13 647 calls)."""
        moves, self.unl_moves = self.unl_moves, 0
        if not self.jobs:
            self.col_use[:] = 0.0  # no drift carried over
            self.unl_last = True
            return True
        if self.col_updates < 4096:  # (no _resum below: the sums moved by those updates only)
            last = self.unl_last
            if last is not None and (moves == 0 or moves == (2 if last else 1)):
                return last
        self._resum(jobs)
        self.unl_moves = 0  # (_resum's own additions come before this answer)
        if self.crit_jobs:
            self.unl_last = False
            return False
        # every column used by two jobs or more is under its capacity by the margin (a column
        # used by fewer passes; a NaN sum does not)
        # ((use <= lim) | (cnt < 2)).all() in the engine's two boolean buffers: the same
        # elementwise comparisons, no temporary arrays
        ok = np.less_equal(self.col_use, self.col_lim, out=self.col_b1)
        np.logical_or(ok, np.less(self.col_cnt, 2, out=self.col_b2), out=ok)
        r = self.unl_last = bool(_ALL(ok))
        return r

    def _resum(self, jobs) -> None:
        """Recompute the running column sums now and then (drift: at most 4096 updates of
        each sum between two recomputations)."""
        if self.col_updates >= 4096:
            self.col_use[:] = 0.0
            self.col_cnt[:] = 0
            self.crit_jobs = 0
            for j in jobs:
                self._add_use(j, 1)
            self.col_updates = 0
            self.unl_last = None  # (other sums: _unlimited tests them again)

    def _alone_at_capacity(self, jobs: list[Job]) -> bool:
        """True when :func:`share` would give every job exactly its alone rate although
        :meth:`_unlimited` could not tell (called right after it returned False): no job is
        ``crit`` and, on each of the few columns whose running demand sum is within the margin
        of their capacity or above with two jobs or more, the definition's job-order sum has
        ``cap / use >= 1`` (:func:`~m100.sim.timing.alone_on_entries`; typically two DMAs, each
        at its own AXI master's capacity, on a DRB of exactly twice that). Every other column
        passes as in :meth:`_unlimited`: one job (not ``crit``: its own ratio is >= 1) or a
        running sum under the capacity by a margin far above its rounding."""
        if self.crit_jobs:
            return False
        over = np.greater(self.col_use, self.col_lim, out=self.col_b1)  # (as _unlimited)
        np.logical_and(over, np.greater_equal(self.col_cnt, 2, out=self.col_b2), out=over)
        cand = over.nonzero()[0]
        if cand.size > ALONE_COLUMNS:
            return False
        # a running sum over its capacity by the margin: the exact sum is over it too (the
        # margin is far above the sums' rounding), share's step there is < 1
        cap = self.col_cap[cand]
        if (self.col_use[cand] > cap * (1.0 + 1e-7)).any():
            return False
        cl = cand.tolist()
        _, ec, ep = self._cand_entries(cl)
        return alone_on_entries(ec, ep, list(zip(cl, cap.tolist())))

    def _cand_entries(self, cands: list[int]) -> tuple[list, list, list]:
        """The streaming jobs' demands at their alone rates on the columns ``cands``
        (ascending): (job, column, demand) lists in job order, within a job in column order --
        the entries of each job's ``{column: use}`` on those columns, without the other jobs.
        The jobs with a demand on a bank column are among those with a histogram on its TPB, on
        a link among those with the link (``on_tpb`` / ``on_link``); a demand is the product
        of the job's alone rate and its cost's bank accesses or link bytes when nonzero: the
        same IEEE product as its ``use`` entry (``Fluid._add_use``, ``cost_batch``)."""
        cols = self.columns
        nbank, keys, banks = cols.nbank, cols.keys, self.m.hbsm_banks
        found: dict = {}
        where = []
        for c in cands:
            if c < nbank:
                t, b = divmod(c, banks)
                where.append((c, t, b))
                d = self.on_tpb.get(t) if self.on_tpb is not None else None
            else:
                where.append((c, None, keys[c]))
                d = self.on_link.get(keys[c]) if self.on_link is not None else None
            if d:
                found.update(d)
        ej, ec, ep = [], [], []
        for job in sorted(found.values(), key=_SERIAL):
            cost = job.cost
            w = cost.alone
            for c, t, b in where:
                if t is not None:
                    h = cost.banks.get(t)
                    if h is None:
                        continue
                    v = float(h[b])
                else:
                    v = cost.links.get(b)
                    if v is None:
                        continue
                if v != 0:
                    ej.append(job)
                    ec.append(c)
                    ep.append(w * v)
        return ej, ec, ep

    def _reshare(self) -> None:
        """The jobs changed: the rates are recomputed for the jobs as they are after the last
        change at this time (:data:`DEFER_RESHARE`; the engine's loop calls :meth:`_rates`
        before it handles an event pushed after this call or of a later time)."""
        self.fluid_version += 1  # (an ev_fluid pushed before is stale from now on)
        # the number the rates' ev_fluid is pushed with: the one an immediate push would take,
        # so every event has the number and the order it has without deferring
        self.fluid_seq = next(self.seq)
        if DEFER_RESHARE:
            self.fluid_dirty = True
        else:
            self._rates()

    def _rates(self) -> None:
        """Share the resources among the streaming jobs and push the next ev_fluid."""
        self.fluid_dirty = False
        jobs = self.jobs.values()  # (a view: the jobs do not change in here)
        if not jobs:
            self._unlimited(jobs)
            self.fl_idx, self.fl_adv, self.fl_rates = [], ([], []), []
            return
        idx = self.fl_idx = list(self.jobs)  # (their units, in job order)
        ja = self.j_alone
        if SHARE_SHORTCUT and (self._unlimited(jobs) or self._alone_at_capacity(jobs)):
            rates = [ja[u] for u in idx]
        elif NEAR:
            causes = []
            self._resum(jobs)  # (SHARE_SHORTCUT off: not done by _unlimited)
            cands = np.greater(self.col_use, self.col_near, out=self.col_b1).nonzero()[0]
            cl = cands.tolist()
            ej, ec, ep = self._cand_entries(cl)
            if ej:
                pos = {u: i for i, u in enumerate(idx)}
                ej = [pos[j.unit] for j in ej]
            cols = self.columns
            w = np.array([ja[u] for u in idx], dtype=np.float64)
            rates = near_rates_entries(ej, ec, ep, w, cl, cols.caps, cols.nbank, cols.keys,
                                       causes).tolist()
            for j, cause in zip(jobs, causes):
                if cause:
                    self.units[j.unit].bottleneck = cause
        else:
            causes: list[str] = []
            # every streaming job's nonzero links are in the registry (_add_use) and its alone
            # rate is set (ev_stream)
            pack = self.share_pack
            if pack is None:
                pack = self.share_pack = SharePack()
            serials = np.fromiter([j.serial for j in jobs], dtype=np.int64, count=len(jobs))
            rates = np.asarray(pack.share(serials, [j.cost for j in jobs],
                                          self.columns.link_caps, self.m.hbsm_banks, causes),
                               dtype=np.float64).tolist()
            for j, cause in zip(jobs, causes):
                if cause:
                    self.units[j.unit].bottleneck = cause
        self.fl_rates = rates  # (the rates of the jobs fl_idx, in its order)
        self.fl_fin = fin_all = all(map(_FINITE, rates))
        if fin_all:
            self.fl_adv = (idx, rates)
            m = finish_min(self.j_rem, idx, rates, None)
        else:  # jobs with no streaming work: 0 (they finish now)
            fin = [_FINITE(r) for r in rates]
            self.fl_adv = ([u for u, f in zip(idx, fin) if f], [r for r, f in zip(rates, fin)
                                                                if f])
            m = finish_min(self.j_rem, idx, rates, fin)
        heapq.heappush(self.heap, (self.now + m, self.fluid_seq, self.ev_fluid,
                                   (self.fluid_version,)))

    def ev_stream(self, u: int) -> None:
        us = self.units[u]
        us.state = "run"
        cost = us.cost
        r = cost.alone
        if r is None:
            r = alone_rate(cost, {k: self.cap(k) for k in cost.links})
        us.alone += 0.0 if not math.isfinite(r) else 1.0 / r
        if self.now != self.fluid_t:  # (else _advance has nothing to do)
            self._advance()
        self.job_serial += 1
        job = self.jobs[u] = Job(u, cost, serial=self.job_serial)
        self.j_rem[u], self.j_alone[u] = 1.0, float(cost.alone)
        self._add_use(job, 1)
        if math.isfinite(cost.alone):  # (no streaming work: no demand anywhere)
            on_tpb, on_link = self.on_tpb, self.on_link
            if on_tpb is None:
                on_tpb, on_link = self.on_tpb, self.on_link = {}, {}
            for t in cost.banks:
                d = on_tpb.get(t)
                if d is None:
                    d = on_tpb[t] = {}
                d[u] = job
            for k in cost.links:
                d = on_link.get(k)
                if d is None:
                    d = on_link[k] = {}
                d[u] = job
        self._reshare()

    def ev_fluid(self, version: int) -> None:
        if version != self.fluid_version:
            return
        self._advance()
        idx = self.fl_idx  # the jobs did not change since the last _reshare
        jr = self.j_rem
        if self.fl_fin:  # every rate finite (_rates)
            done = [u for u in idx if jr[u] <= 1e-9]
        else:  # (the last _rates' rates, in the order of idx)
            done = [u for u, r in zip(idx, self.fl_rates) if not _FINITE(r) or jr[u] <= 1e-9]
        if not done:  # float drift: finish the closest
            self._reshare()
            return
        for u in done:
            job = self.jobs.pop(u)
            self._add_use(job, -1)
            cost = job.cost
            if math.isfinite(cost.alone):
                for t in cost.banks:
                    del self.on_tpb[t][u]
                for k in cost.links:
                    del self.on_link[k][u]
        self._reshare()
        for u in done:
            self.ev_block_done(u)
