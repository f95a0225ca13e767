"""The race checker in bulk: a run's accesses are recorded as byte intervals with their unit's clock
and checked together with numpy once, at the end of the run, instead of one Python scan per access
(:class:`~m100.sim.checks.RaceDetector`, ~10 us per access, ~45 % of a functional ResNet run).

What it decides is only *whether* the run has a race: a race found raises :class:`RaceFound`, and
the simulator runs the program again from the start with the per-access checker, which writes the
reports (``Simulator._run``). A race-free run -- every run of a synchronized program -- is never
run twice; a racy one (the tests' mutants) costs two runs.

The engine records one entry per block's reads or writes (the block's items packed once per
instruction: space codes, byte bounds, the sources of their byte sets; its unit, epoch and clock
row) and nothing is checked until the run's end, where :meth:`RaceBatch.sweep` checks every access
at once by address (sort by (space, first byte), two ``searchsorted`` per access: the pairs of a
write and an access whose bounding intervals meet, then the epoch test and the byte test below).
No Python per access in the loop.

Exactness. The per-access checker reports a race at access ``X`` (unit ``u``, clock ``C``) iff
some earlier access ``Y`` (unit ``v != u``, epoch ``e``, same space, one of the two a write) has
``e > C[v]`` and a byte in common with ``X``, among the records not pruned yet. Pruning drops only
records with ``e <= C'[v]`` for the clock ``C'`` of every unit that still runs; clocks only grow,
so a pruned record never satisfies ``e > C[v]`` for a later access: race or no race does not
depend on pruning. The sweep enumerates every pair with meeting bounds (its doc); its fallback
(:meth:`RaceBatch._one_batch`, when the pairs would be too many) enumerates exactly the pairs
``(Y, X)`` with ``Y`` earlier (by arrival), the same space, ``v != u``, one a write and ``e >
C[v]``: a unit's records in a space, in arrival order, have non-decreasing epochs, so for each
``X`` and unit ``v`` they are one index range of ``v``'s records there (``e > C[v]`` and arrived
before ``X``), found by two ``searchsorted`` over keys ``(space, unit, epoch)`` and ``(space,
unit, arrival)``. The pairs whose bounding intervals meet (a handful per run) are then tested
byte-exactly (:meth:`~m100.sim.checks.ByteSet.first_overlap`, the per-access checker's own test).
So it finds a race iff the per-access checker would report one. An access with no bytes is
neither checked nor recorded, as there. ``test/unit/sim/test_race_index.py`` compares the sweep
and its fallback with a brute-force scan and with :class:`~m100.sim.checks.RaceDetector` on random
access sequences; the e2e tests compare whole runs (outputs, stats, reports) with the per-access
checker, mutants included. (Session 32: the in-run batches with pruning, ``BULK = False``, were
dropped -- the bulk sweep had replaced them since session 28.)
"""

from __future__ import annotations

import itertools
import operator

import numpy as np

#: Check races in batches (False: the per-access checker for every run; tests compare).
BATCH = True

#: The bulk check enumerates at most this many (write, access) pairs per access on average;
#: beyond it (many writes over one region) it checks by unit and epoch instead
#: (:meth:`RaceBatch._pairs` on the whole run, bounded by the number of units).
BULK_PAIRS_PER_ACCESS = 64

#: The sweep's (write, access) pairs are tested in chunks of about this many (a chunk's
#: temporaries, a few MB, reuse the pages of the one before instead of faulting in new ones).
SWEEP_CHUNK = 1 << 18

_ADDR = 1 << 40  # sweep keys: space code * 2**40 + byte address

#: :func:`space_code`'s factor: a space code is ``space * SPACE_TPBS + tpb`` (the TPB for HBSM only)
SPACE_TPBS = 65536

_SHIFT = 1 << 31  # keys: group (space code * units + unit) * 2**31 + epoch / arrival

#: :class:`RaceBatch` keeps its clock rows as int32 below this many rows (its ``keep``)
_I32_ROWS = (1 << 31) - 2


def space_code(space: tuple) -> int:
    """An integer per race-checker space ``(space, tpb)``."""
    return space[0] * SPACE_TPBS + space[1]


def sorted_unique(a: np.ndarray) -> np.ndarray:
    """``np.unique(a)`` of a sorted, non-empty 1-D array: its first element and every element
    unlike the one before (no sort; ``np.unique`` also imports ``numpy.ma`` on its first call,
    ~0.01 CPU-s of a fresh process)."""
    keep = np.empty(a.size, dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


class RaceRows:
    """Packed race items of many block halves: row ``i`` is one access that touches bytes --
    ``nums[i]`` its (space code, lo, hi) -- and ``src[i]`` what its byte set is: a
    :class:`~m100.sim.checks.ByteSet`, or an access whose byte set ``make(src[i])`` returns
    (made only for the sweep's few candidate pairs; ``engine_checks._pack_halves``). A block
    half's packed items are a *handle* ``(rows, first, end)``: rows ``[first, end)``."""
    __slots__ = ("nums", "src", "make", "geo")

    def __init__(self, nums: np.ndarray, src: list, make=None, geo: np.ndarray | None = None):
        self.nums, self.src, self.make = nums, src, make
        # (optional) per row: its walk's (levels, element type) as one integer and its base --
        # an ``(n, 2)`` int64 array, geometry -1 for a row that is not a whole walk's access
        # (:func:`first_meeting`'s keys for the rows at once)
        self.geo = geo

    def byte_set(self, i: int):
        """Row ``i``'s byte set (``make`` None: ``src`` holds the byte sets)."""
        return self.src[i] if self.make is None else self.make(self.src[i])


def unpack(pk: tuple) -> tuple[tuple, list]:
    """A handle's (flat (space code, lo, hi) of its rows, their byte sets): the form the bulk
    log had before the rows (tests compare with ``engine_checks._pack``)."""
    rows, first, end = pk
    return tuple(rows.nums[first:end].ravel().tolist()), \
        [rows.byte_set(i) for i in range(first, end)]


def rows_of(items_nums: list, bss: list) -> RaceRows:
    """A :class:`RaceRows` of flat (code, lo, hi) numbers and their byte sets."""
    return RaceRows(np.array(items_nums, dtype=np.int64).reshape(-1, 3), list(bss))


class RaceFound(Exception):
    """The batch found two unordered accesses with a common byte (one a write)."""


class RaceBatch:
    """A run's accesses, checked once at its end (:meth:`sweep`). The engine logs one entry per
    block's reads or writes that touch bytes (:meth:`~m100.sim.engine_checks.Checks._race_log`),
    in arrival order, in two lists: ``log_rows`` its packed items (a :class:`RaceRows` handle
    ``(rows, first, end)``) and ``log_meta`` (unit, epoch, write, clock row). The clock rows are
    rows ``[0, used)`` of ``buf`` (:meth:`keep`: a row is written once and never changed, so the
    engine hands ``buf[i]`` on as the block's clock, and the sweep indexes ``buf`` without
    stacking rows)."""

    def __init__(self, units: int, rows: int | None = None):
        self.n = units
        self.log_rows: list[tuple] = []
        self.log_meta: list[tuple] | np.ndarray = []
        # the log made at once (set_log): (rows, each entry's first row, its row count)
        self.log_arrays: tuple | None = None
        # rows: a capacity, grown when full; gen: the engine's clock handles (gen, row) name it
        # rows: the engine's block count, which bounds every clock entry (below): int32 rows
        # (half the pages; the sweep gathers them without a copy)
        dt = np.int32 if rows is not None and rows < _I32_ROWS else np.int64
        self.buf = np.empty((max(64, rows or 0), units), dtype=dt)
        self.used = 0
        self.gen = 0

    def set_log(self, rows: RaceRows, first: np.ndarray, cnt: np.ndarray,
                meta: np.ndarray) -> None:
        """The whole log at once, in place of the lists (the functional loop's, made after it:
        ``Checks._race_log_after``): entry ``i`` is rows ``[first[i], first[i] + cnt[i])`` of the
        store ``rows`` (``cnt[i] > 0``) and ``meta[i]`` = (unit, epoch, write, clock row), an
        ``(m, 4)`` int64 array -- ``log_meta`` (``Engine.race_log`` hands it to
        :func:`~m100.sim.clock_cert.same`)."""
        self.log_rows = []
        self.log_meta = meta
        self.log_arrays = (rows, first, cnt)

    def entries(self) -> tuple[list, list]:
        """The log as lists whatever its form: each entry's flat (space code, lo, hi) numbers
        (:func:`unpack`) and its (unit, epoch, write, clock row) (tests compare logs)."""
        if self.log_arrays is None:
            return [unpack(pk)[0] for pk in self.log_rows], \
                [tuple(int(v) for v in m) for m in self.log_meta]
        rows, first, cnt = self.log_arrays
        return [unpack((rows, f, f + c))[0] for f, c in zip(first.tolist(), cnt.tolist())], \
            [tuple(m) for m in self.log_meta.tolist()]

    def snapshot(self, row: np.ndarray) -> int:
        """Keep a copy of a clock row; its number for an access."""
        return self.keep(row)

    def keep(self, clock: np.ndarray) -> int:
        """Keep a copy of a clock row as the next row of ``buf``; its number for an access
        (``buf[number]`` is the copy: never changed).

        The rows are int32 when the engine gives its block count ``rows`` below
        :data:`_I32_ROWS` (and while fewer rows than that are kept): the engine keeps the
        clock of every block it starts, and a clock's entry for a unit is at most 1 + the
        number of that unit's blocks that ended -- each kept at its start, before this keep --
        so no entry reaches ``used + 1`` and none is cut. Without ``rows`` (the tests' own
        clocks) they are int64."""
        i = self.used
        buf = self.buf
        if i == buf.shape[0]:  # full: a larger array (views of the old rows stay valid)
            new = np.empty((2 * i, self.n),
                           dtype=buf.dtype if 2 * i < _I32_ROWS else np.int64)
            new[:i] = buf
            buf = self.buf = new
        buf[i] = clock
        self.used = i + 1
        return i

    def add(self, space: tuple, unit: int, epoch: int, write: bool, bs, snap: int) -> None:
        """Record an access of ``unit`` in its ``epoch`` to the byte set ``bs`` of ``space``;
        ``snap``: the access's clock (:meth:`snapshot`). (The engine logs whole block halves.)"""
        if bs.hi > bs.lo:  # no bytes: races with nothing, nothing races with it
            self.log_rows.append((rows_of([space_code(space), bs.lo, bs.hi], [bs]), 0, 1))
            self.log_meta.append((unit, epoch, write, snap))

    def check(self, min_vc: np.ndarray | None) -> None:
        """At the run's end (``min_vc`` None): check every access it logged (:meth:`sweep`,
        raise :class:`RaceFound`); before it (the engine's prunings) nothing."""
        if min_vc is None:
            self.sweep()

    def _one_batch(self, code, unit, epoch, write, lo, hi, snap, bss) -> None:
        """The sweep's fallback: each access against every earlier one of its space, by unit
        and epoch (:meth:`_pairs`; raise :class:`RaceFound`)."""
        tot = code.size
        n = self.n
        pg = code * n + unit
        arr = np.arange(tot, dtype=np.int64)
        if int(epoch.max()) >= _SHIFT or tot >= _SHIFT or int(pg.max()) >= 1 << 31:
            raise AssertionError("race batch: an epoch, arrival or group too large for its keys")
        pbs = np.empty(tot, dtype=object)
        pbs[:] = [bss[i] for i in range(tot)]
        pw = write.astype(bool)
        order = np.argsort(pg, kind="stable")  # by group, then arrival
        g, e, w, glo, ghi, ar, bs = pg[order], epoch[order], pw[order], lo[order], hi[order], \
            arr[order], pbs[order]
        snaps = self.buf[:self.used]
        # every access as X: writes against every access, reads against the writes
        for x_write in (True, False):
            sel = pw == x_write
            if not sel.any():
                continue
            ys = slice(None) if x_write else w
            self._pairs(g[ys], e[ys], glo[ys], ghi[ys], ar[ys], bs[ys],
                        pg[sel], lo[sel], hi[sel], arr[sel], pbs[sel], snaps[snap[sel]])

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

    def sweep(self) -> None:
        """Check every access the run recorded, once, by address: raise :class:`RaceFound` iff
        the per-access checker finds a race, then forget them.

        Exactness. The per-access checker reports a race at ``X`` iff some access ``Y`` that
        arrived before it (another unit ``v``, the same space, one of the two a write) has
        ``e_Y > C_X[v]`` and a byte in common with ``X`` (pruning decides nothing: see the
        module doc). Two accesses with a common byte have meeting bounding intervals, and of
        two meeting intervals one starts inside the other: sorted by (space, first byte), the
        accesses that start inside a write ``W`` are one index range, and so are the writes that
        start strictly inside a read ``A`` -- two ``searchsorted`` each (:func:`_meeting`; a
        write that starts strictly inside a write is in the first range of that write). So
        every pair (a write, an access) with meeting intervals in one space is enumerated (a
        pair of writes with the same first byte twice, a write with itself once); of each pair
        the one that arrived first (arrival = the order of recording) is ``Y`` and the
        condition is tested with ``X``'s clock row. A pair of one unit never passes it: ``X``'s clock holds its unit's epoch
        ``C_X[u] = e_X`` (the row is the unit's clock when its block started, its epoch is
        that clock's own entry) and a unit's epochs do not decrease by arrival, so ``e_Y <=
        C_X[u]`` -- the per-access checker's "another unit" is implied. The pairs that pass (a
        handful: ``sorted_unique``) get the per-access checker's byte test
        (:meth:`~m100.sim.checks.ByteSet.first_overlap`; for two whole walks once per geometry and base
        difference, :func:`first_meeting`, and for two bitmaps once per bitmap pair, :func:`meet`).
        Where the pairs would be too many (:data:`BULK_PAIRS_PER_ACCESS`) or the keys do not fit,
        the run is checked as one batch instead (:meth:`_one_batch`: the same verdict)."""
        ents, meta, arrays = self.log_rows, self.log_meta, self.log_arrays
        self.log_rows, self.log_meta, self.log_arrays = [], [], None
        m = len(meta)
        if not m:
            return
        if arrays is None:
            nums, cnt, bss = _gather(ents)
            md = np.fromiter(itertools.chain.from_iterable(meta), dtype=np.int64,
                             count=4 * m).reshape(m, 4)
        else:  # (set_log: one store, the entries' rows as index ranges)
            rows, first, cnt = arrays
            index = _ranges(first, cnt).astype(np.int64)
            nums, bss, md = rows.nums[index], _ByteSets([(rows, 0)], index), meta
        tot = nums.shape[0]
        code, lo, hi = nums[:, 0], nums[:, 1], nums[:, 2]
        unit, epoch, write, snap = (np.repeat(md[:, i], cnt) for i in range(4))
        clocks = self.buf[:self.used]
        n = self.n
        if int(hi.max()) >= _ADDR or int(code.max()) >= (1 << 62) // _ADDR \
                or int(lo.min()) < 0 or tot >= 1 << 31 or self.used * n >= 1 << 31 \
                or int(epoch.max()) >= 1 << 31:
            return self._one_batch(code, unit, epoch, write, lo, hi, snap, bss)
        parts = _meeting(code * _ADDR + lo, code * _ADDR + hi, write.astype(bool))
        if sum(int(p[2].sum()) for p in parts) > BULK_PAIRS_PER_ACCESS * tot:
            return self._one_batch(code, unit, epoch, write, lo, hi, snap, bss)
        # the pairs in chunks of about SWEEP_CHUNK (their temporaries reuse the same pages)
        i32 = np.int32
        snapn = snap.astype(i32) * i32(n)  # X's clock row, in clocks.ravel()
        unit32, epoch32 = unit.astype(i32), epoch.astype(i32)
        flat = (clocks if clocks.dtype == i32 else clocks.astype(i32)).ravel()
        found = []
        for av, first, cnt, src in parts:
            cuts = np.searchsorted(np.cumsum(cnt), np.arange(1, int(cnt.sum()) // SWEEP_CHUNK + 1)
                                   * SWEEP_CHUNK, "right").tolist()
            for s, e in zip([0] + cuts, cuts + [cnt.size]):
                if s == e:
                    continue
                a = np.repeat(av[s:e], cnt[s:e])
                b = src[_ranges(first[s:e], cnt[s:e])]
                y = np.minimum(a, b)  # arrived first
                x = np.maximum(a, b)
                at = snapn[x]  # X's clock entry for Y's unit
                at += unit32[y]
                unknown = epoch32[y] > flat[at]  # Y not before X
                if unknown.any():
                    found.append(y[unknown].astype(np.int64) * tot + x[unknown])
        if not found:
            return
        cand = sorted_unique(np.sort(np.concatenate(found)))
        if first_meeting(cand.tolist(), tot, bss) >= 0:
            raise RaceFound


def _meeting(key: np.ndarray, hkey: np.ndarray, w: np.ndarray) -> tuple:
    """The sweep's pairs of meeting bounding intervals, as index ranges: rows sorted by
    ``key`` (space code * 2**40 + first byte; ``hkey`` the end), ``w`` the writes. Returns two
    parts ``(av, first, cnt, src)``: row ``av[j]`` meets the rows ``src[first[j]:first[j] +
    cnt[j]]`` -- (i) each write (``av`` the writes by key) the rows that start inside it
    (``src`` the rows by key), (ii) each read (``av`` the reads by key) the writes that start
    strictly inside it (``src`` the writes by key).

    Every pair of a write and an access with meeting intervals is among them: of two meeting
    intervals one starts inside the other (i, or ii when the write starts strictly inside the
    access). (ii) takes the reads only: a write ``A`` with a write ``W`` starting strictly
    inside it is the pair (``A``, ``W``) of (i) already -- R50: 458 045 of the 2 091 844 pairs
    the sweep enumerated before were such duplicates (session 36; the candidates are sorted and
    made unique at the end: the same set).

    The queries are in key order (the writes' keys, the rows' keys: ascending; their ends nearly
    so): numpy's binary search keeps the lower bound of the query before when the queries
    ascend, and its probes stay in cache, so the searches cost about a third of the same
    searches in arrival order (R50: 63 327 rows, 33 900 writes; session 36) -- the same ranges,
    listed by key instead of by arrival."""
    order = np.argsort(key, kind="stable").astype(np.int32)
    ks = key[order]
    wo = w[order]
    ow = order[wo]
    kw = ks[wo]
    f1 = np.searchsorted(ks, kw, "left")
    n1 = np.searchsorted(ks, hkey[ow], "left") - f1
    ro = ~wo
    rd = order[ro]
    f2 = np.searchsorted(kw, ks[ro], "right")
    n2 = np.maximum(np.searchsorted(kw, hkey[rd], "left") - f2, 0)
    return (ow, f1, n1, order), (rd, f2, n2, ow)


class _ByteSets:
    """The byte sets of the sweep's rows (arrival order), made when first asked for: ``[i]``
    (a row's :meth:`RaceRows.byte_set`, kept)."""
    __slots__ = ("stores", "index", "made")

    def __init__(self, stores: list, index: np.ndarray):
        # stores: (rows, its first row in the concatenation); index: per sweep row, its row in
        # the concatenation of the stores' rows
        self.stores, self.index, self.made = stores, index, {}

    def __len__(self) -> int:
        return self.index.size

    def __getitem__(self, i: int):
        bs = self.made.get(i)
        if bs is None:
            rows, j = self._row(i)
            bs = self.made[i] = rows.byte_set(j)
        return bs

    def _row(self, i: int) -> tuple:
        """(the store, the row's index in it) of sweep row ``i``."""
        j = int(self.index[i])
        k = len(self.stores) - 1
        while self.stores[k][1] > j:
            k -= 1
        rows, off = self.stores[k]
        return rows, j - off

    def geometry(self) -> np.ndarray | None:
        """Per row (arrival order): its store's ``geo`` row ((levels, type) key or -1, base),
        when the rows are of one store that has them; else None."""
        if len(self.stores) != 1 or self.stores[0][0].geo is None:
            return None
        return self.stores[0][0].geo[self.index]

    def whole_walk(self, i: int):
        """The walk of row ``i`` when its byte set is that of a whole walk's access (a packed
        access without offsets, :func:`~m100.sim.engine_checks.access_byte_set`), else None."""
        rows, j = self._row(i)
        if rows.make is None:
            return None
        a = rows.src[j]
        return a.walk if a.offsets is None else None


def _gather(ents: list) -> tuple[np.ndarray, np.ndarray, _ByteSets]:
    """The (space code, lo, hi) rows of the bulk log's handles ``ents`` in their order (an
    ``(n, 3)`` int64 array), each handle's row count and the rows' byte sets (made when asked
    for). No Python per entry: C iterators over the handles."""
    m = len(ents)
    fe = np.fromiter(itertools.chain.from_iterable(map(_FIRST_END, ents)), dtype=np.int64,
                     count=2 * m).reshape(m, 2)
    first, cnt = fe[:, 0], fe[:, 1] - fe[:, 0]
    stores: list = []  # (rows, its first row in the concatenation), in first-seen order
    off = 0
    for rows in dict.fromkeys(map(_ROWS, ents)):  # (a handful of stores: usually one)
        stores.append((rows, off))
        off += rows.nums.shape[0]
    if len(stores) > 1:
        where = {id(rows): o for rows, o in stores}
        first = first + np.fromiter(map(where.__getitem__, map(id, map(_ROWS, ents))),
                                    dtype=np.int64, count=m)
        allnums = np.concatenate([r.nums for r, _ in stores])
    else:
        allnums = stores[0][0].nums
    tot = int(cnt.sum())
    index = np.repeat(first - (np.cumsum(cnt) - cnt), cnt) + np.arange(tot, dtype=np.int64)
    return allnums[index], cnt, _ByteSets(stores, index)


_ROWS = operator.itemgetter(0)
_FIRST_END = operator.itemgetter(1, 2)


def first_meeting(pairs: list, tot: int, bss: _ByteSets) -> int:
    """The index in ``pairs`` (``y * tot + x``: rows ``y``, ``x`` of ``bss``) of the first pair
    whose byte sets meet (:func:`meet`), -1 when none does.

    Two rows that are whole walks' accesses are tested once per (each walk's levels and element
    type, the difference of their bases): such an access's byte set is its walk's byte set at
    base 0 moved by the base (``engine_checks._items``: every path -- one interval, a box's
    bitmap, the element offsets -- adds the base to a set of the levels and type), so two of
    them meet iff the two sets at base 0 meet with one moved by the bases' difference. Most of
    a sweep's candidates repeat a few such keys (ResNet-50: 4 420 pairs): their byte sets are
    not made again. The key holds the levels tuples (an id names no other tuple while it is
    kept); the table lives for one call."""
    memo: dict = {}
    g = bss.geometry()
    if g is not None and pairs:  # (the rows' keys at once: _first_meeting_rows)
        return _first_meeting_rows(pairs, tot, bss, g, memo)
    geo: dict = {}
    for n, yx in enumerate(pairs):
        y, x = divmod(yx, tot)
        wy = bss.whole_walk(y)
        wx = bss.whole_walk(x) if wy is not None else None
        if wx is not None:
            key = (id(wy.levels), wy.dtype, id(wx.levels), wx.dtype, wx.base - wy.base)
            got = geo.get(key)
            if got is None:
                got = geo[key] = (meet(bss[y], bss[x], memo), wy.levels, wx.levels)
            if got[0]:
                return n
        elif meet(bss[y], bss[x], memo):
            return n
    return -1


def _first_meeting_rows(pairs: list, tot: int, bss: _ByteSets, g: np.ndarray,
                        memo: dict) -> int:
    """:func:`first_meeting` with each row's (levels, type) key and base given (``g``:
    :meth:`_ByteSets.geometry`): the pairs of two whole walks' accesses grouped by (both keys,
    the bases' difference) with numpy, each group tested once (by its first pair), every other
    pair alone, in the order of each group's first pair -- the first pair that meets is the
    first pair of the first group or single pair, in that order, that meets: the loop's
    answer. The key integers name (levels tuple, type) by the tuple's identity: the rows'
    accesses hold their walks (and levels) while the sweep runs."""
    p = np.array(pairs, dtype=np.int64)
    y, x = p // tot, p % tot
    gy, gx = g[y, 0], g[x, 0]
    whole = (gy >= 0) & (gx >= 0)
    wi = np.flatnonzero(whole)
    # each whole pair's group: its first pair's index (a lexsort of the keys, first in order)
    firsts = np.flatnonzero(~whole)  # (the other pairs: alone)
    if wi.size:
        d = g[x[wi], 1] - g[y[wi], 1]
        order = np.lexsort((wi, d, gx[wi], gy[wi]))
        ks = np.stack((gy[wi], gx[wi], d), axis=1)[order]
        new = np.ones(wi.size, dtype=bool)
        new[1:] = (ks[1:] != ks[:-1]).any(axis=1)
        firsts = np.sort(np.concatenate((firsts, wi[order[new]])))
    for n in firsts.tolist():
        yy, xx = int(y[n]), int(x[n])
        if meet(bss[yy], bss[xx], memo):
            return n
    return -1


def meet(a, b, memo: dict) -> bool:
    """``a.first_overlap(b) is not None`` (:meth:`~m100.sim.checks.ByteSet.first_overlap`), the
    answer for two bitmap-form sets kept in ``memo`` by (their bitmaps' identity, the offset
    ``b.lo - a.lo`` and both spans). Two such sets meet iff their bitmaps do on their common
    window, which is a function of those alone: the base of either only moves the window. A box
    walk's bitmap is one read-only array per geometry (:func:`~m100.sim.twu.box_mask`), so the
    pairs of one sweep repeat a few geometries at a few offsets (ResNet-50: 4 420 byte tests,
    242 distinct keys). ``memo`` lives for one sweep, in which nothing changes a bitmap, and
    holds the bitmaps it names (an id names no other array while the entry lives)."""
    if a._bitmap() and b._bitmap():
        ma, mb = a.mask, b.mask
        if ma is not None and mb is not None:
            key = (id(ma), id(mb), b.lo - a.lo, a.hi - a.lo, b.hi - b.lo)
            got = memo.get(key)
            if got is None:
                got = memo[key] = (a.first_overlap(b) is not None, ma, mb)
            return got[0]
    return a.first_overlap(b) is not None


def _ranges(first: np.ndarray, cnt: np.ndarray) -> np.ndarray:
    """The concatenated index ranges ``[first[i], first[i] + cnt[i])`` (int32: the bulk
    check's indices are below 2**31)."""
    tot = int(cnt.sum())
    return np.repeat((first - (np.cumsum(cnt) - cnt)).astype(np.int32), cnt) + \
        np.arange(tot, dtype=np.int32)
