"""The engine's checks: each access of a block goes to the vector-clock race detector as a byte
set (:mod:`~m100.sim.checks`), and a run that stops with instructions left is a deadlock report
(wait-for cycle). A mixin of :class:`~m100.sim.engine.Engine`."""

from __future__ import annotations

from itertools import chain, repeat
from operator import attrgetter, is_not
from typing import TYPE_CHECKING

import numpy as np

from m100.targets.m100.isa import CsuCall, DType, Space, tpbs_of

from . import twu
from .checks import ByteSet, Record, Report, Wait, deadlock_message, space_name, walk_byte_set
from . import race_clocks
from .race_batch import SPACE_TPBS, RaceRows, rows_of, space_code

if TYPE_CHECKING:
    from .engine import InstRec, UnitState


#: Completed instructions between two prunings of the race checker's records (memory only: the
#: checker bisects each unit's records by epoch, so old records cost no time).
PRUNE_EVERY = 1024

#: Make every block's race items and copy view specs before the event loop
#: (:meth:`Checks._derive_blocks`); False: each at its block's start, as they are used (the
#: tests compare the two).
DERIVE_FIRST = True

#: The key of the bulk pre-pass's handle table in an instruction's ``_sim_race`` dict (an
#: instruction whose every block half it packed, :meth:`Checks._derive_blocks`): ``(rows, hf,
#: he, h)`` -- block ``b``'s reads are the store's half ``h + 2 b``, its writes half ``h + 2 b +
#: 1``, half ``i`` rows ``[hf[i], he[i])`` of ``rows`` (lists shared by the store's
#: instructions). One entry per instruction instead of a handle per block half (R50: 34 180).
_TABLE = "halves"


def kept_handle(kept: dict, b: int, write: bool) -> tuple | None:
    """The packed race items' handle (:func:`_pack`'s form) of block ``b``'s reads or writes in
    an instruction's ``_sim_race`` dict ``kept``: its own entry ``(b, write, 0)`` or its place in
    the instruction's :data:`_TABLE`; None when neither is kept."""
    pk = kept.get((b, write, 0))
    if pk is None:
        t = kept.get(_TABLE)
        if t is not None:
            rows, hf, he, h = t
            h += 2 * b + write
            pk = (rows, hf[h], he[h])
    return pk


def _race_key(w) -> tuple:
    """(space, is HBSM, element bytes, first offset if the beats are contiguous whole-byte
    elements, the whole walk's byte set when that is one interval (False: no elements)), stored
    on the (immutable) walk; an interval byte set is never changed, so records share it. The
    first offset and the beat count are functions of the levels (:func:`twu.per_levels`)."""
    sp = int(w.space)
    bits = w.dtype.bits
    sz = bits // 8
    start = whole = None
    if bits >= 8:
        start, n = twu.per_levels("race", w.levels, _start_and_beats)
        if start is not None:
            whole = ByteSet.interval(w.base + start * sz, w.base + (start + n) * sz) if n \
                else False
    key = (sp, w.space is Space.HBSM, sz, start, whole, (sp, 0), space_code((sp, 0)))
    object.__setattr__(w, "_race_key", key)
    return key


def _start_and_beats(levels: tuple) -> tuple[int | None, int]:
    return twu._contiguous_start(levels), twu._beats(levels)


def _items(accesses, nums: list | None = None, bss: list | None = None) \
        -> list[tuple[tuple, ByteSet, int]]:
    """(space, byte set, :func:`~m100.sim.race_batch.space_code`) of each access that touches
    bytes, in order (see ``Checks._race``). ``nums`` / ``bss`` (lists, the pre-pass's): filled
    with their packed form in the same pass -- :func:`_pack`'s lists, without a second loop."""
    out = []
    packing = nums is not None
    for a in accesses:
        w = a.walk
        key = w.__dict__.get("_race_key")  # a walk is immutable: computed once per walk object
        if key is None:
            key = _race_key(w)
        sp, hbsm, sz, start, whole, space, code = key
        if hbsm:  # (else the walk's space (sp, 0) and its code, kept in the key)
            space = (sp, a.tpb)
            code += a.tpb  # (space_code)
        offs = a.offsets
        if offs is None and whole is not None:  # the whole walk is one byte interval
            if whole is False:
                continue  # no elements
            bs = whole
        elif start is not None and (offs is None or offs.size == 0 or
                                    offs[-1] - offs[0] == offs.size - 1):
            first = start if offs is None else int(offs[0]) if offs.size else 0
            n = w.num_elements if offs is None else offs.size
            if n == 0:
                continue
            bs = ByteSet.interval(w.base + first * sz, w.base + (first + n) * sz)
        else:
            bs = walk_byte_set(w, offs)
            if bs is None:
                continue
        out.append((space, bs, code))
        if packing and bs.hi > bs.lo:  # (as _pack)
            nums += (code, bs.lo, bs.hi)
            bss.append(bs)
    return out


def _keep_items(kept: dict, b: int, write: bool, accesses) -> None:
    """The pre-pass's entry of block ``b``'s reads or writes in ``kept`` (an instruction's
    ``_sim_race`` table) without the bulk check: ``(b, write)`` its :func:`_items`."""
    kept[(b, write)] = _items(accesses)


def _pack(items: list) -> tuple:
    """The packed form of race items (``_race_packed``): a
    :class:`~m100.sim.race_batch.RaceRows` handle of the items with bytes."""
    nums, bss = [], []
    for _, bs, code in items:
        if bs.hi > bs.lo:  # (an access with no bytes races with nothing)
            nums += (code, bs.lo, bs.hi)
            bss.append(bs)
    return rows_of(nums, bss), 0, len(bss)


def access_byte_set(a):
    """The byte set of access ``a`` (:func:`_items`' for it; None when it has no elements)."""
    it = _items((a,))
    return it[0][1] if it else None


_WALK, _OFFSETS, _TPB = attrgetter("walk"), attrgetter("offsets"), attrgetter("tpb")
_FIELDS = attrgetter("base", "space", "dtype", "levels")
_HBSM = int(Space.HBSM)
_DTYPES = {int(t): t for t in DType}
_NTYPES = max(_DTYPES) + 1


def _relative(levels: tuple, dtype: DType) -> tuple[int, int]:
    """(lo, hi) of :func:`_items`' byte set of a whole walk of these levels and element type
    at base 0 ((0, 0): no bytes); at base ``a`` it is ``(a + lo, a + hi)`` whatever the
    space or TPB. Each of ``_items``' paths bounds the walk's element offsets ``[o_lo, o_hi]``
    (``Walk.offset_range``: the lowest and highest beat, when it has one): a contiguous run
    ``[start, start + n)``, a box's ``[lo, hi]`` and the strided bounds are all that range, in
    bytes ``[o_lo * sz, (o_hi + 1) * sz)`` -- for packed 4-bit elements ``[o_lo >> 1, (o_hi >> 1)
    + 1)``. (``test/unit/sim/test_race_rows.py`` compares it with ``_items`` at random bases.)"""
    lo = hi = 0
    for lv in levels:
        if lv.count == 0:  # (no beats: a level no checked instruction has) _items' own answer
            from m100.targets.m100.isa import Walk
            from .semantics_base import Access
            it = _items((Access(Walk(Space.DDR, 0, 0, dtype, levels), 0),))
            return (it[0][1].lo, it[0][1].hi) if it and it[0][1].hi > it[0][1].lo else (0, 0)
        a, b = lv.initial, lv.last
        lo += min(a, b)
        hi += max(a, b)
    bits = dtype.bits
    if bits >= 8:
        return lo * (bits // 8), (hi + 1) * (bits // 8)
    return lo >> 1, (hi >> 1) + 1


_ACC = attrgetter("walk", "tpb", "offsets")
_RW = (False, True)  # (a block's two halves: reads, writes)


def _pack_halves(halves: list, keys: list) -> tuple[RaceRows, np.ndarray]:
    """Pack the race items of many block halves at once (:func:`_pack_rows`): ``halves[i]`` a
    half's accesses (``reads(b)`` / ``writes(b)``), ``keys[i]`` = (its instruction's
    ``_sim_race`` table, its key ``(b, write, 0)``), which gets the half's
    :class:`~m100.sim.race_batch.RaceRows` handle: the same rows as :func:`_pack` of its
    :func:`_items`. Returns :func:`_pack_rows`' answer."""
    rows, cnt = _pack_rows(halves)
    end = np.cumsum(cnt)
    for (kept, key), f, e in zip(keys, (end - cnt).tolist(), end.tolist()):
        kept[key] = (rows, f, e)
    return rows, cnt


def _pack_rows(halves: list) -> tuple[RaceRows, np.ndarray]:
    """The packed race items of many block halves at once (the bulk pre-pass): ``halves[i]`` a
    half's accesses; the rows of half ``i`` are the rows :func:`_pack` makes of its
    :func:`_items`. An access of a whole walk (no offsets) has the bounds ``base +``
    :func:`_relative` of its (levels, element type) -- one probe per geometry, the rest numpy
    --, an access of some elements :func:`_items`' own; the byte sets are made only when the
    sweep asks (:func:`access_byte_set`). The walks' fields are read once per walk object (R50:
    25 836 walks of 63 327 accesses), the accesses' own in one pass. Returns the rows (one
    store) and each half's row count (in ``halves``' order: the halves' rows one after the
    other)."""
    m = len(halves)
    cnt = np.fromiter(map(len, halves), dtype=np.int64, count=m)
    accs = list(chain.from_iterable(halves))
    n = len(accs)
    if not n:  # (no accesses: every half empty)
        return RaceRows(np.zeros((0, 3), dtype=np.int64), []), np.zeros(m, dtype=np.int64)
    walks, tpb, offs = zip(*map(_ACC, accs))
    # each walk object's fields once (a walk is immutable; ids: the accesses hold their walks)
    _, wfirst, winv = np.unique(np.fromiter(map(id, walks), dtype=np.int64, count=n),
                                return_index=True, return_inverse=True)
    k = wfirst.size
    base, sp, dtypes, levels = zip(*map(_FIELDS, [walks[i] for i in wfirst.tolist()]))
    base = np.fromiter(base, dtype=np.int64, count=k)
    sp = np.fromiter(sp, dtype=np.int64, count=k)  # (IntEnums)
    dtypes = np.fromiter(dtypes, dtype=np.int64, count=k)
    # one _relative per (levels, element type): the levels tuples by identity (a decoded
    # program's walks of equal levels share one; the walks hold them while this runs)
    geo = np.fromiter(map(id, levels), dtype=np.int64, count=k) * _NTYPES + dtypes
    _, first, inv = np.unique(geo, return_index=True, return_inverse=True)
    rel = np.array([_relative(levels[i], _DTYPES[t]) for i, t in
                    zip(first.tolist(), dtypes[first].tolist())],
                   dtype=np.int64).reshape(-1, 2)[inv[winv]]
    base, sp, geo = base[winv], sp[winv], geo[winv]
    nums = np.empty((n, 3), dtype=np.int64)
    np.add(base, rel[:, 0], out=nums[:, 1])
    np.add(base, rel[:, 1], out=nums[:, 2])
    np.multiply(sp, SPACE_TPBS, out=nums[:, 0])  # (space_code: the TPB for HBSM only)
    nums[:, 0] += np.where(sp == _HBSM, np.fromiter(tpb, dtype=np.int64, count=n), 0)
    with_bytes = rel[:, 1] > rel[:, 0]
    gb = np.empty((n, 2), dtype=np.int64)  # (first_meeting's keys: geometry, base)
    gb[:, 0] = geo
    gb[:, 1] = base
    if any(map(is_not, offs, repeat(None))):  # (an access of some elements: its own items)
        some = np.fromiter(map(is_not, offs, repeat(None)), dtype=bool, count=n)
        gb[some, 0] = -1
        for i in np.flatnonzero(some).tolist():
            it = _items((accs[i],))
            bs = it[0][1] if it else None
            with_bytes[i] = bs is not None and bs.hi > bs.lo
            if with_bytes[i]:
                nums[i] = (it[0][2], bs.lo, bs.hi)
    if not with_bytes.all():
        keep = np.flatnonzero(with_bytes)
        nums = nums[keep]
        gb = gb[keep]
        accs = [accs[i] for i in keep.tolist()]
        cnt = np.bincount(np.repeat(np.arange(m), cnt)[keep], minlength=m)
    return RaceRows(nums, accs, access_byte_set, gb), cnt


class Checks:
    def _derive_blocks(self) -> None:
        """Make, before the loop of a run with data, what its blocks derive at their start and
        keep on the (immutable) instructions: every block's race items (:meth:`_race_items`,
        reads and writes; with race checks) and a copy's, broadcast's or DMA's op or view spec
        (``CopyExec._derive_views``). Each is a function of the instruction, the block and
        :data:`~m100.sim.twu.STRIDED` alone, so making it earlier changes no value -- the
        blocks find it kept. Made in one pass they cost less than interleaved with the blocks'
        data work (a first functional ResNet-18 224 run, docs/speed.md). A CSU routine's
        accesses depend on index data (never kept): left to its blocks, as is whatever raises
        here (its block derives it again and the run reports it there). A block's reads and writes
        are made once for both its race items (filling :meth:`_race_items`' table) and its view
        spec (``test/e2e/test_first_run_paths.py`` compares the table and the specs with each
        block's own derivations). With the bulk check, the HBSM pages of the bytes the blocks
        will write are backed at once from the packed rows (``Memory.prefault``: no byte
        changes). An instruction with nothing kept yet (every instruction of a first run) gets
        one entry for all its halves (:data:`_TABLE`, read by :func:`kept_handle`), made
        without a test or a key per half; an instruction whose items an earlier run kept, in
        part or whole, is derived block by block as before (session 36)."""
        self.race_halves = None
        if not DERIVE_FIRST:
            return
        races = self.races is not None
        bulk = self.rbatch is not None  # (their packed form only)
        strided = twu.STRIDED
        halves: list = []  # bulk: the block halves' accesses, packed at once (_pack_rows)
        wflags: list = []  # (each half's write flag: the HBSM prefault)
        tables: list = []  # (kept, first half, blocks): instructions packed whole (_TABLE)
        keys: list = []  # (kept, key, half): halves packed one by one (kept by an earlier run)
        # (bulk) each record's first half in ``halves`` when every half of every record is
        # packed here, in (block, reads / writes) order -- the table of _race_log_after
        hfirst: list | None = [] if bulk else None
        for rec in self.recs:
            inst = rec.inst
            if isinstance(inst, CsuCall):
                hfirst = None  # (its items depend on index data: logged by its blocks)
                continue
            if hfirst is not None:
                hfirst.append((rec.index, len(halves)))
            ex = rec.ex
            spec = getattr(ex, "_derive_views", None)  # (copies; a recorder forwards it)
            if not races and spec is None:
                continue
            if races:  # (the table of _race_items)
                got = inst.__dict__.get("_sim_race")
                if got is None or got[0] is not strided:
                    got = (strided, {})
                    object.__setattr__(inst, "_sim_race", got)
                kept = got[1]
            nb = inst.sync.blocks
            if bulk and not kept:  # nothing kept yet (a first run): every half, one table
                h0 = len(halves)
                try:
                    for b in range(nb):
                        rd = ex.reads(b)
                        wr = ex.writes(b)
                        halves += (rd, wr)
                        if spec is not None:
                            spec(b, rd, wr)
                except Exception:  # noqa: BLE001 - left to its blocks, which raise it again
                    del halves[h0:]  # (its blocks make their own items: the same)
                    hfirst = None
                    continue
                wflags += _RW * nb
                tables.append((kept, h0, nb))
                continue
            for b in range(nb):
                try:
                    rd = wr = None  # (a block's accesses, made once for both)
                    if bulk:
                        if kept_handle(kept, b, False) is None:
                            rd = ex.reads(b)
                            keys.append((kept, (b, False, 0), len(halves)))
                            halves.append(rd)
                            wflags.append(False)
                        else:
                            hfirst = None  # (kept by an earlier run: not in this table)
                        if kept_handle(kept, b, True) is None:
                            wr = ex.writes(b)
                            keys.append((kept, (b, True, 0), len(halves)))
                            halves.append(wr)
                            wflags.append(True)
                        else:
                            hfirst = None
                    elif races:
                        if (b, False) not in kept:
                            rd = ex.reads(b)
                            _keep_items(kept, b, False, rd)
                        if (b, True) not in kept:
                            wr = ex.writes(b)
                            _keep_items(kept, b, True, wr)
                    if spec is not None:
                        spec(b, rd, wr)
                except Exception:  # noqa: BLE001 - left to the block, which raises it again
                    hfirst = None
                    break
        if halves:
            try:
                rows, cnt = _pack_rows(halves)
            except Exception:  # noqa: BLE001 - half by half; what raises is left to its block
                for kept, h0, nb in tables:
                    keys += [(kept, (b, w, 0), h0 + 2 * b + w)
                             for b in range(nb) for w in (False, True)]
                for kept, key, i in keys:
                    try:
                        kept[key] = _pack(_items(halves[i]))
                    except Exception:  # noqa: BLE001
                        pass
            else:
                end = np.cumsum(cnt)
                hf, he = (end - cnt).tolist(), end.tolist()
                for kept, key, i in keys:
                    kept[key] = (rows, hf[i], he[i])
                for kept, h0, _ in tables:
                    kept[_TABLE] = (rows, hf, he, h0)
                nums = rows.nums
                if hfirst is not None and self.recs:
                    idx, first = zip(*hfirst)
                    hbase = np.full(max(idx) + 1, -1, dtype=np.int64)
                    hbase[list(idx)] = first
                    self.race_halves = (rows, end - cnt, end, hbase)
                if self.mem is not None:  # the HBSM pages the blocks write, backed at once
                    wr = np.fromiter(wflags, dtype=bool, count=len(wflags))
                    rows = nums[np.repeat(wr, cnt)]
                    # (an HBSM is a few MiB; a write to DDR or SRAM may be a sparse walk whose
                    # bounds span far more pages than it touches: left to the page faults)
                    self.mem.prefault(rows[rows[:, 0] // SPACE_TPBS == _HBSM])

    # --- races --------------------------------------------------------------------------------
    def _race_block(self, u: int, rec: InstRec, b: int, write: bool) -> None:
        """Check and record the reads (``write`` False) or writes of block ``b``."""
        rb = self.rbatch
        if rb is not None:  # one entry per block half, checked after the run
            # the reads take a copy of the clock when the block starts (a row of rb.buf: never
            # changed, so it is also the clock the block's updates carry); the writes use it
            # too: a unit's clock does not change while its block runs (joins happen in
            # try_start, which leaves a running unit alone; the tick comes after the writes)
            if write:
                snap = self.race_snap[u][1]
            else:
                snap = rb.keep(self.vc[u])
                self.race_clock[u] = rb.buf[snap]
                self.race_snap[u] = (rb.gen, snap)
            self._race_log(rec, b, write, (u, self.vc.item(u, u), write, snap))
            return
        for space, bs, _ in self._race_items(rec, b, write):
            self._race(u, rec, b, space, bs, write)

    def _race_log(self, rec: InstRec, b: int, write: bool, meta: tuple) -> None:
        """Append block ``b``'s reads or writes that touch bytes to the bulk race log
        (:class:`~m100.sim.race_batch.RaceBatch`'s ``log_rows`` / ``log_meta``) as
        one entry: its packed items' handle (:meth:`_race_packed`) and ``meta`` = (unit, epoch, write,
        clock row number). The bulk branch of :meth:`_race_block` and the functional loop
        (``sim/engine_untimed.py``) both log through it."""
        got = rec.inst.__dict__.get("_sim_race")  # (_race_packed, its kept case inline)
        pk = kept_handle(got[1], b, write) if got is not None and got[0] is twu.STRIDED \
            else None
        if pk is None:
            pk = self._race_packed(rec, b, write)
        if pk[2] > pk[1]:
            rb = self.rbatch
            rb.log_rows.append(pk)
            rb.log_meta.append(meta)

    def _race_log_after(self, calls: list, arrivals: tuple | None = None) -> None:
        """The bulk race log of a functional loop that did not log (``Engine.defer`` on and
        :meth:`_derive_blocks`' table ``race_halves``: every block half of every record packed
        by the pre-pass, in (block, reads / writes) order), made after the loop from its
        executor-call log ``calls`` -- (record index, block) at each block's start, (record
        index, -1) at its end, where the loop would log the block's reads and its writes -- and
        the clock rows it kept, one per block start in start order (``RaceBatch.keep``): the
        same entries in the same order as :meth:`_race_log`'s. An entry's unit is its record's;
        its clock row the number of its block's start among the starts; its epoch that row's
        own entry (:meth:`_race_block`: the epoch is read when the row is kept, and a unit's
        own entry does not change until its block ends); an end's block and row are those of
        its unit's start just before it (a unit runs one block at a time: its calls alternate
        start, end); a half without bytes is no entry. Sets ``RaceBatch.set_log``. With
        ``arrivals`` -- the loop's counter arrivals, each start's monitors and the call log's
        length at each time step (it kept no clock rows) -- the rows are made first
        (:func:`~m100.sim.race_clocks.clock_rows`)."""
        rows, hf, he, hbase = self.race_halves
        rb = self.rbatch
        k = len(calls)
        if not k:
            return
        d = np.fromiter(chain.from_iterable(calls), dtype=np.int64, count=2 * k).reshape(k, 2)
        ri, blk = d[:, 0], d[:, 1].copy()
        end = blk < 0
        units = np.full(hbase.size, -1, dtype=np.int64)
        for r in self.recs:
            if r.index < hbase.size:
                units[r.index] = r.unit
        u = units[ri]
        start = ~end
        if arrivals is not None:  # (the rows: made here from the loop's arrivals)
            arrivals, mons, marks = arrivals
            self.arrivals = arrivals
            if (hbase[ri] < 0).any():
                raise AssertionError("race log: a call of a record the pre-pass did not pack")
            sri, sb = ri[start], blk[start]
            sid = np.full(hf.size, -1, dtype=np.int64)
            sid[hbase[sri] + 2 * sb] = np.arange(sri.size, dtype=np.int64)
            # a call's time: the time steps before it (marks: the log's length at each step)
            times = np.searchsorted(np.array(marks, dtype=np.int64),
                                    np.flatnonzero(start), "right").astype(np.float64)
            race_clocks.clock_rows(rb, u[start], mons, d, times, arrivals,
                                   lambda r, b: sid[hbase[r] + 2 * b])
        snap = np.empty(k, dtype=np.int64)
        snap[start] = np.arange(int(start.sum()), dtype=np.int64)
        by_unit = np.argsort(u, kind="stable")
        e = np.flatnonzero(end[by_unit])  # (an end is never a unit's first call)
        before = by_unit[e - 1]
        if e.size and (e[0] == 0 or end[before].any() or (u[before] != u[by_unit[e]]).any()):
            raise AssertionError("race log: a unit's calls do not alternate start / end")
        if (hbase[ri] < 0).any():
            raise AssertionError("race log: a call of a record the pre-pass did not pack")
        snap[by_unit[e]] = snap[before]
        blk[by_unit[e]] = blk[before]
        if rb.used != int(start.sum()):
            raise AssertionError("race log: a clock row per block start")
        h = hbase[ri] + 2 * blk + end
        f, cnt = hf[h], he[h] - hf[h]
        keep = cnt > 0  # (_race_log: a half that touches bytes)
        meta = np.stack((u, rb.buf[snap, u], end, snap), axis=1)[keep]
        rb.set_log(rows, f[keep], cnt[keep], meta)

    def _race_items(self, rec: InstRec, b: int, write: bool) -> list:
        """The (space, byte set) of every access of block ``b``'s reads or writes, in their
        order. They are a function of the (immutable) instruction, ``b`` and
        :data:`~m100.sim.twu.STRIDED` -- except a CSU routine's, which depend on index data
        -- so they are kept on the instruction: a program run again builds none of them (the
        byte sets are never changed, records share them)."""
        inst = rec.inst
        if isinstance(inst, CsuCall):
            return _items(rec.ex.writes(b) if write else rec.ex.reads(b))
        strided = twu.STRIDED
        got = inst.__dict__.get("_sim_race")
        if got is None or got[0] is not strided:
            got = (strided, {})
            object.__setattr__(inst, "_sim_race", got)
        key = (b, write)
        items = got[1].get(key)
        if items is None:
            items = got[1][key] = _items(rec.ex.writes(b) if write else rec.ex.reads(b))
        return items

    def _race_packed(self, rec: InstRec, b: int, write: bool) -> tuple:
        """:meth:`_race_items` of block ``b``'s reads or writes packed for the bulk check
        (:class:`~m100.sim.race_batch.RaceBatch`'s ``log_rows``): the accesses that touch
        bytes, as a :class:`~m100.sim.race_batch.RaceRows` handle (their (space code, lo, hi)
        rows and byte sets). Kept next to the items (key ``(b, write, 0)``; the bulk pre-pass
        makes it alone, :func:`_pack_halves`), else made from them."""
        inst = rec.inst
        if isinstance(inst, CsuCall):
            return _pack(self._race_items(rec, b, write))
        got = inst.__dict__.get("_sim_race")
        if got is not None and got[0] is twu.STRIDED:
            pk = kept_handle(got[1], b, write)
            if pk is not None:
                return pk
        items = self._race_items(rec, b, write)  # (fills _sim_race)
        pk = inst.__dict__["_sim_race"][1][(b, write, 0)] = _pack(items)
        return pk

    def _race(self, u: int, rec: InstRec, b: int, space: tuple, bs: ByteSet, write: bool) -> None:
        r = Record(u, self.vc.item(u, u), write, bs, rec.index, b, "write" if write else "read")
        races = self.races.access(space, r, self.vc[u])
        if not races:
            return
        for old, addr in races:
            pair = (old.inst, rec.index, space)
            if pair in self.races.reported or len(self.races.reported) >= self.races.max_reports:
                continue
            self.races.reported.add(pair)
            orec = self.recs_by_index[old.inst]
            kinds = f"{'write' if old.write else 'read'}-{'write' if write else 'read'}"
            self.report("race", f"{kinds} race on {space_name(space)} at byte {addr:#x}: "
                        f"{self.where(rec)} (block {b}) {'writes' if write else 'reads'} bytes that "
                        f"{self.where(orec)} (block {old.block}) "
                        f"{'wrote' if old.write else 'read'} with no counter ordering them",
                        rec, address=addr)

    def _prune(self) -> None:
        if self.rbatch is not None:
            return  # (the bulk check keeps every access until the run's end)
        live = [i for i, us in enumerate(self.units) if us.cur is not None or us.queue]
        if not live:
            self.races.clear()
            return
        self.races.prune(self.vc[live].min(axis=0))

    # --- deadlock -----------------------------------------------------------------------------
    def deadlock(self, left: list[UnitState]) -> None:
        waits = []
        for us in left:
            i = self.unit_id[us.key]
            if us.state == "wait" and us.wait is not None:
                mon, need = us.wait
                waits.append(Wait(i, us.name, us.cur.index, us.cur.inst.MNEMONIC, us.block,
                                  mon.tpb, mon.counter, need, self.counters[mon.tpb][mon.counter]))
        updaters: dict[tuple[int, int], list] = {}
        for us in left:
            i = self.unit_id[us.key]
            seen: set = set()
            pending = ([us.cur] if us.cur is not None else []) + list(us.queue)
            for r in pending:
                for upd in r.inst.sync.updates:
                    for t in tpbs_of(upd.tpb_mask):
                        k = (t, upd.counter)
                        if k not in seen:
                            seen.add(k)
                            updaters.setdefault(k, []).append((i, r.index, r.inst.MNEMONIC))
        msg = deadlock_message(self.now, waits, updaters, [u.name for u in self.units])
        first = waits[0] if waits else None
        self.reports.append(Report("deadlock", msg, inst=first.inst if first else None,
                                   tpb=first.tpb if first else None,
                                   unit=first.unit_name if first else None))
