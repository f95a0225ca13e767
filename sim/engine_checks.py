"""The engine's checks: each access of a block goes to the vector-clock race detector as a byte
set (:mod:`~m100.sim.checks`), and a run that stops with instructions left is a deadlock report
(wait-for cycle). A mixin of :class:`~m100.sim.engine.Engine`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from m100.targets.m100.isa import CsuCall, Space, tpbs_of

from . import twu
from .checks import ByteSet, Record, Report, Wait, deadlock_message, space_name, walk_byte_set
from .race_batch import space_code

if TYPE_CHECKING:
    from .engine import InstRec, UnitState


#: Completed instructions between two prunings of the race checker's records (memory only: the
#: checker bisects each unit's records by epoch, so old records cost no time).
PRUNE_EVERY = 1024

#: Make every block's race items and copy view specs before the event loop
#: (:meth:`Checks._derive_blocks`); False: each at its block's start, as they are used (the
#: tests compare the two).
DERIVE_FIRST = True


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


def _keep_items(kept: dict, b: int, write: bool, accesses, bulk: bool) -> None:
    """The pre-pass's entries of block ``b``'s reads or writes in ``kept`` (an instruction's
    ``_sim_race`` table): ``(b, write)`` its :func:`_items`; with ``bulk`` also ``(b, write, 0)``
    their packed form (:func:`_pack`'s), made in the same pass."""
    if bulk:
        nums: list = []
        bss: list = []
        kept[(b, write)] = _items(accesses, nums, bss)
        kept[(b, write, 0)] = (tuple(nums), tuple(bss))
    else:
        kept[(b, write)] = _items(accesses)


def _pack(items: list) -> tuple:
    """(flat (space code, lo, hi) of each item with bytes, their byte sets) (``_race_packed``)."""
    nums, bss = [], []
    for _, bs, code in items:
        if bs.hi > bs.lo:  # (an access with no bytes races with nothing)
            nums += (code, bs.lo, bs.hi)
            bss.append(bs)
    return tuple(nums), tuple(bss)


class Checks:
    def _derive_blocks(self) -> None:
        """Make, before the loop of a run with data, what its blocks derive at their start and
        keep on the (immutable) instructions: every block's race items (:meth:`_race_items`,
        reads and writes; with race checks) and a copy's, broadcast's or DMA's view spec
        (``CopyExec._view_spec``). Each is a function of the instruction, the block and
        :data:`~m100.sim.twu.STRIDED` alone, so making it earlier changes no value -- the
        blocks find it kept. Made in one pass they cost less than interleaved with the blocks'
        data work (a first functional ResNet-18 224 run, docs/speed.md). A CSU routine's
        accesses depend on index data (never kept): left to its blocks, as is whatever raises
        here (its block derives it again and the run reports it there). A block's reads and writes
        are made once for both its race items (filling :meth:`_race_items`' table) and its view
        spec (``test/e2e/test_first_run_paths.py`` compares the table and the specs with each
        block's own derivations)."""
        if not DERIVE_FIRST:
            return
        races = self.races is not None
        bulk = self.rbatch is not None and self.rbatch.bulk  # (their packed form too)
        strided = twu.STRIDED
        for rec in self.recs:
            inst = rec.inst
            if isinstance(inst, CsuCall):
                continue
            ex = rec.ex
            spec = getattr(ex, "_view_spec", None)  # (copies; a recorder forwards it)
            if not races and spec is None:
                continue
            if races:  # (the table of _race_items)
                got = inst.__dict__.get("_sim_race")
                if got is None or got[0] is not strided:
                    got = (strided, {})
                    object.__setattr__(inst, "_sim_race", got)
                kept = got[1]
            for b in range(inst.sync.blocks):
                try:
                    rd = wr = None  # (a block's accesses, made once for both)
                    if races:
                        if (b, False) not in kept:
                            rd = ex.reads(b)
                            _keep_items(kept, b, False, rd, bulk)
                        if (b, True) not in kept:
                            wr = ex.writes(b)
                            _keep_items(kept, b, True, wr, bulk)
                    if spec is not None:
                        spec(b, rd, wr)
                except Exception:  # noqa: BLE001 - left to the block, which raises it again
                    break

    # --- races --------------------------------------------------------------------------------
    def _race_block(self, u: int, rec: InstRec, b: int, write: bool) -> None:
        """Check and record the reads (``write`` False) or writes of block ``b``."""
        rb = self.rbatch
        if rb is not None and rb.bulk:  # one entry per block half, checked after the run
            # (the clock as below: a row of rb.buf, which in bulk mode is one batch)
            if write:
                snap = self.race_snap[u][1]
            else:
                snap = rb.keep(self.vc[u])
                self.race_clock[u] = rb.buf[snap]
                self.race_snap[u] = (rb.gen, snap)
            self._race_log(rec, b, write, (u, self.vc.item(u, u), write, snap))
            return
        if rb is not None:  # recorded with the unit's clock, checked in the batch
            # the reads take a copy of the clock when the block starts; the writes use it too:
            # a unit's clock does not change while its block runs (joins happen in try_start,
            # which leaves a running unit alone; the tick comes after the writes)
            # (the clock is a row of the batch's clock array, rb.buf: written once, never
            # changed, so it is also the clock the block's updates carry; a block whose writes
            # fall in the next batch copies it there)
            if write:
                gen, snap = self.race_snap[u]
                if gen != rb.gen:
                    snap = rb.keep(self.race_clock[u])
            else:
                snap = rb.keep(self.vc[u])
                self.race_clock[u] = rb.buf[snap]
                self.race_snap[u] = (rb.gen, snap)
            epoch = self.vc.item(u, u)
            pend, pend_bs = rb.pending, rb.pending_bs
            for space, bs, code in self._race_items(rec, b, write):
                if bs.hi > bs.lo:  # (an access with no bytes races with nothing)
                    pend.append((code, u, epoch, write, bs.lo, bs.hi, snap))
                    pend_bs.append(bs)
            return
        for space, bs, _ in self._race_items(rec, b, write):
            self._race(u, rec, b, space, bs, write)

    def _race_log(self, rec: InstRec, b: int, write: bool, meta: tuple) -> None:
        """Append block ``b``'s reads or writes that touch bytes to the bulk race log
        (:class:`~m100.sim.race_batch.RaceBatch`'s ``log_nums`` / ``log_bss`` / ``log_meta``) as
        one entry: its packed items (:meth:`_race_packed`) and ``meta`` = (unit, epoch, write,
        clock row number). The bulk branch of :meth:`_race_block` and the functional loop
        (``sim/engine_untimed.py``) both log through it."""
        got = rec.inst.__dict__.get("_sim_race")  # (_race_packed, its kept case inline)
        pk = got[1].get((b, write, 0)) if got is not None and got[0] is twu.STRIDED else None
        if pk is None:
            pk = self._race_packed(rec, b, write)
        if pk[1]:
            rb = self.rbatch
            rb.log_nums.append(pk[0])
            rb.log_bss.append(pk[1])
            rb.log_meta.append(meta)

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
        (:class:`~m100.sim.race_batch.RaceBatch`'s ``log_nums`` / ``log_bss``): the accesses
        that touch bytes, as one flat tuple of (space code, lo, hi) and one of their byte
        sets. Kept next to the items (key ``(b, write, 0)``; the pre-pass makes it with them
        in a bulk run), made from them."""
        inst = rec.inst
        if isinstance(inst, CsuCall):
            return _pack(self._race_items(rec, b, write))
        got = inst.__dict__.get("_sim_race")
        if got is not None and got[0] is twu.STRIDED:
            pk = got[1].get((b, write, 0))
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
        if self.rbatch is not None and self.rbatch.bulk:
            return  # (the bulk check keeps every access until the run's end)
        live = [i for i, us in enumerate(self.units) if us.cur is not None or us.queue]
        if self.rbatch is not None:
            self.rbatch.check(self.vc[live].min(axis=0) if live else None)
            return
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
