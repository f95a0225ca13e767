"""The race checker in batches: accesses are recorded as byte intervals with their unit's clock,
and checked together with numpy every :data:`~m100.sim.engine_checks.PRUNE_EVERY` completed
instructions and at the end of a run, instead of one Python scan per access
(:class:`~m100.sim.checks.RaceDetector`, ~10 us per access, ~45 % of a functional ResNet run).

What it decides is only *whether* the run has a race: a race found raises :class:`RaceFound`, and
the simulator runs the program again from the start with the per-access checker, which writes the
reports (``Simulator._run``). A race-free run -- every run of a synchronized program -- is never
run twice; a racy one (the tests' mutants) costs two runs.

Exactness. The per-access checker reports a race at access ``X`` (unit ``u``, clock ``C``) iff
some earlier access ``Y`` (unit ``v != u``, epoch ``e``, same space, one of the two a write) has
``e > C[v]`` and a byte in common with ``X``, among the records not pruned yet. Pruning drops only
records with ``e <= C'[v]`` for the clock ``C'`` of every unit that still runs; clocks only grow,
so a pruned record never satisfies ``e > C[v]`` for a later access: race or no race does not
depend on pruning. This checker enumerates exactly the pairs ``(Y, X)`` with ``Y`` earlier (by
arrival), the same space, ``v != u``, one a write and ``e > C[v]``: a unit's records in a space,
in arrival order, have non-decreasing epochs, so for each ``X`` and unit ``v`` they are one
index range of ``v``'s records there (``e > C[v]`` and arrived before ``X``), found by two
``searchsorted`` over keys ``(space, unit, epoch)`` and ``(space, unit, arrival)``. The pairs
whose bounding intervals meet (a handful per run) are then tested byte-exactly
(:meth:`~m100.sim.checks.ByteSet.first_overlap`, the per-access checker's own test). So it finds
a race iff the per-access checker would report one. An access with no bytes is neither checked nor
recorded, as there. ``test/unit/sim/test_race_batch.py`` compares it with a brute-force scan and
with :class:`~m100.sim.checks.RaceDetector` on random access sequences; the e2e tests compare
whole runs (outputs, stats, reports) with batching on and off, mutants included.
"""

from __future__ import annotations

import itertools

import numpy as np

#: Check races in batches (False: the per-access checker for every run; tests compare).
BATCH = True

_SHIFT = 1 << 31  # keys: group (space code * units + unit) * 2**31 + epoch / arrival


def space_code(space: tuple) -> int:
    """An integer per race-checker space ``(space, tpb)``."""
    return space[0] * 65536 + space[1]


def sorted_unique(a: np.ndarray) -> np.ndarray:
    """``np.unique(a)`` of a sorted, non-empty 1-D array: its first element and every element
    unlike the one before (no sort; ``np.unique`` also imports ``numpy.ma`` on its first call,
    ~0.01 CPU-s of a fresh process)."""
    keep = np.empty(a.size, dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


class RaceFound(Exception):
    """The batch found two unordered accesses with a common byte (one a write)."""


class RaceBatch:
    """Accesses of the current batch (``pending``: one tuple per access, its byte set in
    ``pending_bs``; their clocks are rows of ``buf``, one 2-D array per batch: a row is written
    once and never changed, so the engine hands ``buf[i]`` on as the block's clock, and the
    check indexes ``buf`` without stacking rows) and the records of earlier batches not
    pruned yet (numpy arrays sorted by (group, arrival)). The engine appends to ``pending`` and
    ``pending_bs`` itself (:meth:`~m100.sim.engine_checks.Checks._race_block`): per access
    ``(space code, unit, epoch, write, lo, hi, snapshot number)`` with the space code of
    :func:`space_code`, and only accesses with bytes (``hi > lo``)."""

    def __init__(self, units: int):
        self.n = units
        self.count = 0  # accesses checked so far (arrival numbers)
        self.pending: list[tuple] = []
        self.pending_bs: list = []
        # clock rows of this batch: rows [0, used) of buf (a new array per batch: the engine
        # keeps views of rows as clocks of counter arrivals); gen numbers the batches
        self.buf = np.empty((64, units), dtype=np.int64)
        self.used = 0
        self.gen = 0
        z = np.zeros(0, dtype=np.int64)
        # history: group (space code * units + unit), epoch, write, lo, hi, arrival; byte sets
        self.h = (z, z, np.zeros(0, dtype=bool), z, z, z)
        self.h_bs = np.zeros(0, dtype=object)

    def snapshot(self, row: np.ndarray) -> int:
        """Keep a copy of a clock row; its number for an access."""
        return self.keep(row)

    def keep(self, clock: np.ndarray) -> int:
        """Keep a copy of a clock row as the next row of ``buf``; its number for an access of
        this batch (``buf[number]`` is the copy: never changed)."""
        i = self.used
        buf = self.buf
        if i == buf.shape[0]:  # full: a larger array (views of the old rows stay valid)
            new = np.empty((2 * i, self.n), dtype=np.int64)
            new[:i] = buf
            buf = self.buf = new
        buf[i] = clock
        self.used = i + 1
        return i

    def add(self, space: tuple, unit: int, epoch: int, write: bool, bs, snap: int) -> None:
        """Record an access of ``unit`` in its ``epoch`` to the byte set ``bs`` of ``space``;
        ``snap``: the access's clock (:meth:`snapshot`). (The engine appends directly.)"""
        if bs.hi > bs.lo:  # no bytes: races with nothing, nothing races with it
            self.pending.append((space_code(space), unit, epoch, write, bs.lo, bs.hi, snap))
            self.pending_bs.append(bs)

    def check(self, min_vc: np.ndarray | None) -> None:
        """Check this batch's accesses against every earlier record (raise :class:`RaceFound`),
        then keep them as records and prune with ``min_vc`` (the lowest clock of the units still
        running; None: nothing runs any more, drop every record)."""
        k = len(self.pending)
        if k:
            n = self.n
            p = np.fromiter(itertools.chain.from_iterable(self.pending), dtype=np.int64,
                            count=7 * k).reshape(k, 7)
            arr = np.arange(self.count, self.count + k, dtype=np.int64)
            self.count += k
            pg = p[:, 0] * n + p[:, 1]
            pe, pw, plo, phi, psnap = p[:, 2], p[:, 3].astype(bool), p[:, 4], p[:, 5], p[:, 6]
            if int(pe.max()) >= _SHIFT or self.count >= _SHIFT or int(pg.max()) >= 1 << 31:
                raise AssertionError("race batch: an epoch, arrival or group too large for "
                                     "its keys")
            pbs = np.empty(k, dtype=object)
            pbs[:] = self.pending_bs
            hg, he, hw, hlo, hhi, harr = self.h
            g = np.concatenate([hg, pg])
            e = np.concatenate([he, pe])
            w = np.concatenate([hw, pw])
            lo = np.concatenate([hlo, plo])
            hi = np.concatenate([hhi, phi])
            ar = np.concatenate([harr, arr])
            bs = np.concatenate([self.h_bs, pbs])
            order = np.argsort(g, kind="stable")  # by group, then arrival (concatenated in order)
            g, e, w, lo, hi, ar, bs = g[order], e[order], w[order], lo[order], hi[order], \
                ar[order], bs[order]
            snaps = self.buf[:self.used]
            # this batch's accesses as X: writes against every record, reads against the writes
            for x_write in (True, False):
                sel = pw == x_write
                if not sel.any():
                    continue
                if x_write:
                    ys = slice(None)
                else:
                    ys = w
                self._pairs(g[ys], e[ys], lo[ys], hi[ys], ar[ys], bs[ys],
                            pg[sel], plo[sel], phi[sel], arr[sel], pbs[sel],
                            snaps[psnap[sel]])
            self.h, self.h_bs = (g, e, w, lo, hi, ar), bs
            self.pending, self.pending_bs = [], []
        # the next batch's rows in a new array: this one's rows may be referenced as clocks
        self.buf = np.empty((max(64, self.used + self.used // 4), self.n), dtype=np.int64)
        self.used = 0
        self.gen += 1
        if min_vc is None:
            z = np.zeros(0, dtype=np.int64)
            self.h, self.h_bs = (z, z, np.zeros(0, dtype=bool), z, z, z), np.zeros(0, dtype=object)
            return
        g = self.h[0]
        if g.size:
            keep = self.h[1] > min_vc[g % self.n]
            self.h = tuple(a[keep] for a in self.h)
            self.h_bs = self.h_bs[keep]

    def _pairs(self, g, e, lo, hi, ar, bs, xg, xlo, xhi, xar, xbs, xclock) -> None:
        """Raise :class:`RaceFound` if some record (``g``.. sorted by group then arrival) races
        with some access ``x*`` (clock rows ``xclock``)."""
        if not g.size or not xg.size:
            return
        n = self.n
        # the groups (space, unit) present, per space: each X is queried against its space's
        groups = sorted_unique(g)
        gspace = groups // n
        xspace = xg // n
        first = np.searchsorted(gspace, xspace, "left")
        cnt = np.searchsorted(gspace, xspace, "right") - first
        tot = int(cnt.sum())
        if not tot:
            return
        xi = np.repeat(np.arange(xg.size), cnt)
        within = np.arange(tot) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        gi = np.repeat(first, cnt) + within  # the group's index in groups
        qg = groups[gi]
        qv = qg % n
        other = qv != (xg[xi] % n)  # another unit
        xi, qg, qv, gi = xi[other], qg[other], qv[other], gi[other]
        if not xi.size:
            return
        thr = xclock[xi, qv]  # X's clock entry for the record's unit
        # a group whose latest epoch (its last record: epochs do not decrease by arrival) is
        # <= X's clock entry has no record X does not know (the search below would find an
        # empty range): dropped before the searches
        live = thr < e[np.searchsorted(g, groups, "right") - 1][gi]
        xi, qg, thr = xi[live], qg[live], thr[live]
        if not xi.size:
            return
        key_e = g * np.int64(_SHIFT) + e
        key_a = g * np.int64(_SHIFT) + ar
        k1 = np.searchsorted(key_e, qg * np.int64(_SHIFT) + thr, "right")  # first epoch > clock
        k2 = np.searchsorted(key_a, qg * np.int64(_SHIFT) + xar[xi], "left")  # arrived before X
        ln = k2 - k1
        pos = ln > 0
        if not pos.any():
            return
        xi, k1, ln = xi[pos], k1[pos], ln[pos]
        tot = int(ln.sum())
        yi = np.repeat(k1, ln) + (np.arange(tot) - np.repeat(np.cumsum(ln) - ln, ln))
        xr = np.repeat(xi, ln)
        meet = (lo[yi] < xhi[xr]) & (xlo[xr] < hi[yi])  # bounding intervals meet
        for y, x in zip(yi[meet].tolist(), xr[meet].tolist()):
            if bs[y].first_overlap(xbs[x]) is not None:
                raise RaceFound
