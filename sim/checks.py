"""Correctness checks of a simulated run: reports, data races (vector clocks), deadlock (wait-for).

Race detection
--------------
Every unit (a TPB's TCU/CVU/DTDU/CSU, a CCB DMA engine) has a vector clock. A block of an instruction
is one *epoch* of its unit: its reads are recorded when the block starts and its writes when it ends,
both stamped ``(unit, epoch)``; the unit's clock then ticks. A counter update carries the updater's
clock; the counter keeps, per arrival, the running join of the clocks that arrived so far. A monitor
released at ``counter >= T`` joins the running join of the *first arrivals that reached T* (not of
everything that happened to arrive before the consumer looked), so happens-before is what the program
guarantees, not what one timing produced. Two accesses to the same bytes (at least one a write) from
different units race unless the earlier one happens-before the later (``epoch <= clock[unit]``).
Records that happen-before every unit that still has work are pruned.

Deadlock
--------
When no event is left but some unit still has instructions, every such unit waits on a monitor. The
wait-for graph has an edge from a waiting unit to every unit whose remaining instructions update the
awaited counter; :func:`deadlock_message` prints a cycle of it (networkx), or the waits that nobody
will ever satisfy.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from . import twu
from .memory import element_byte_set
from .twu import box, box_mask, per_levels


@dataclass
class Report:
    """One finding: ``kind`` is race | deadlock | out-of-bounds | overflow | malformed | fault."""
    kind: str
    message: str
    inst: int | None = None
    tpb: int | None = None
    unit: str | None = None
    address: int | None = None

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None}


class ByteSet:
    """A set of byte addresses: a dense interval, or a sorted unique array within [lo, hi).

    The array may be *lazy* (:meth:`lazy`): ``lo``/``hi`` are exact at once, the member array is
    built on first use -- the race checker needs it only for two accesses whose bounding intervals
    overlap and that no counter orders, i.e. almost never in a synchronized program. A lazy set
    may instead be a *bitmap* over [lo, hi) (:meth:`lazy_mask`): two of those (or one and an
    interval) meet on their common window without building member arrays."""
    __slots__ = ("lo", "hi", "_arr", "_make", "_mask", "_mmake")

    def __init__(self, addrs: np.ndarray):
        self._make = self._mask = self._mmake = None
        if addrs.size == 0:
            self.lo = self.hi = 0
            self._arr = None
            return
        lo, hi = int(addrs.min()), int(addrs.max()) + 1
        self.lo, self.hi = lo, hi
        if hi - lo <= 8 * addrs.size + 4096:  # a bitmap over the span: no sort
            mask = np.zeros(hi - lo, dtype=bool)
            mask[addrs - lo] = True
            self._arr = None if mask.all() else np.flatnonzero(mask) + lo
        else:
            a = np.sort(addrs, kind="stable")
            keep = np.empty(a.size, dtype=bool)
            keep[0] = True
            np.not_equal(a[1:], a[:-1], out=keep[1:])
            self._arr = a[keep]

    @property
    def arr(self) -> np.ndarray | None:
        """The sorted member addresses, None when the set is all of [lo, hi)."""
        if self._make is not None:
            self._arr, self._make = self._make(), None
        elif self._mmake is not None or self._mask is not None:
            m = self.mask
            self._arr, self._mask = (None if m is None else np.flatnonzero(m) + self.lo), None
        return self._arr

    @arr.setter
    def arr(self, value: np.ndarray | None) -> None:
        self._arr, self._make, self._mask, self._mmake = value, None, None, None

    @property
    def mask(self) -> np.ndarray | None:
        """A bitmap form's members over [lo, hi) (bool), None when the set is dense."""
        if self._mmake is not None:
            m = self._mmake()
            self._mask, self._mmake = (None if m.all() else m), None
        return self._mask

    @classmethod
    def lazy(cls, lo: int, hi: int, make) -> ByteSet:
        """The set with bounds [lo, hi) (its lowest and highest member + 1) whose member array
        ``make()`` returns (None: dense) when first needed."""
        bs = cls.__new__(cls)
        bs.lo, bs.hi, bs._arr, bs._make, bs._mask, bs._mmake = lo, hi, None, make, None, None
        return bs

    @classmethod
    def lazy_mask(cls, lo: int, hi: int, make) -> ByteSet:
        """The set with bounds [lo, hi) whose members are the True entries of the bool bitmap
        over [lo, hi) that ``make()`` returns when first needed."""
        bs = cls.__new__(cls)
        bs.lo, bs.hi, bs._arr, bs._make, bs._mask, bs._mmake = lo, hi, None, None, None, make
        return bs

    @classmethod
    def interval(cls, lo: int, hi: int) -> ByteSet:
        bs = cls.__new__(cls)
        bs.lo, bs.hi, bs._arr, bs._make, bs._mask, bs._mmake = lo, hi, None, None, None, None
        return bs

    def _bitmap(self) -> bool:
        """True when the members are (or will be) a bitmap, or the set is dense."""
        return self._make is None and (self._arr is None or self._mask is not None
                                       or self._mmake is not None)

    def first_overlap(self, other: ByteSet) -> int | None:
        lo, hi = max(self.lo, other.lo), min(self.hi, other.hi)
        if lo >= hi:
            return None
        if self._bitmap() and other._bitmap():  # bitmaps / intervals: the common window
            a, b = self.mask, other.mask
            if a is None and b is None:
                return lo
            if a is None or b is None:
                m = (a if a is not None else b)
                base = self.lo if a is not None else other.lo
                w = m[lo - base:hi - base]
            else:
                w = a[lo - self.lo:hi - self.lo] & b[lo - other.lo:hi - other.lo]
            k = int(np.argmax(w))
            return lo + k if w[k] else None
        if self.arr is None and other.arr is None:
            return lo
        if self.arr is None or other.arr is None:
            arr, dense = (self.arr, other) if self.arr is not None else (other.arr, self)
            i = np.searchsorted(arr, dense.lo)
            return int(arr[i]) if i < arr.size and arr[i] < dense.hi else None
        a, b = self.arr, other.arr  # both sorted: their parts in [lo, hi) meet on a bitmap
        a = a[np.searchsorted(a, lo):np.searchsorted(a, hi)]
        b = b[np.searchsorted(b, lo):np.searchsorted(b, hi)]
        if not a.size or not b.size:
            return None
        if hi - lo > 8 * (a.size + b.size) + 4096:  # a wide window: no bitmap
            common = np.intersect1d(a, b, assume_unique=True)
            return int(common[0]) if common.size else None
        mark = np.zeros(hi - lo, dtype=bool)
        mark[a - lo] = True
        hit = mark[b - lo]
        k = int(np.argmax(hit))
        return int(b[k]) if hit[k] else None


def _box_span(levels: tuple, sz: int) -> tuple[int, int, bool]:
    """(lowest element offset, byte span, whether ByteSet's bitmap rule holds) of a box walk of
    these levels and ``sz``-byte elements."""
    lo, hi = twu._box(levels)[:2]
    span = (hi - lo + 1) * sz
    return lo, span, span <= 8 * twu._beats(levels) * sz + 4096


def walk_byte_set(walk, offsets: np.ndarray | None = None) -> ByteSet | None:
    """The bytes the beats of ``walk`` touch (``offsets``: a subset of its elements), None when
    empty. The bounds are computed at once (from the levels of an affine box, else from the
    offsets), the members lazily (:meth:`ByteSet.lazy`): an affine box of whole-byte elements with
    a dense enough span is marked through a strided view of a bitmap (no index array); anything
    else goes element by element."""
    bx = box(walk) if offsets is None else None
    if bx is not None:
        sz = walk.dtype.bits // 8
        lo, span, bitmap = per_levels("byte_set", walk.levels, _box_span, sz)
        a = walk.base + lo * sz
        if bitmap:
            # the bitmap over [a, a + span) is a function of the levels and the element size:
            # one read-only array per geometry, whatever the base (twu.box_mask)
            levels = walk.levels
            return ByteSet.lazy_mask(a, a + span, lambda: box_mask(levels, sz))
        else:  # a sparse box (e.g. a tile of a wide DDR tensor): its sorted addresses

            def members() -> np.ndarray | None:
                return ByteSet(element_byte_set(walk)).arr
        return ByteSet.lazy(a, a + span, members)
    if twu_strided():  # bounds from the offsets (or the levels), members when needed
        if offsets is not None and not offsets.size:
            return None
        bits = walk.dtype.bits
        o_lo, o_hi = walk.offset_range() if offsets is None else (int(offsets.min()),
                                                                  int(offsets.max()))
        if bits >= 8:
            lo, hi = walk.base + o_lo * (bits // 8), walk.base + (o_hi + 1) * (bits // 8)
        else:
            lo, hi = walk.base + (o_lo >> 1), walk.base + (o_hi >> 1) + 1
        return ByteSet.lazy(lo, hi, lambda: ByteSet(element_byte_set(walk, offsets)).arr)
    addrs = element_byte_set(walk, offsets)
    if not addrs.size:
        return None
    return ByteSet.lazy(int(addrs.min()), int(addrs.max()) + 1, lambda: ByteSet(addrs).arr)


def twu_strided() -> bool:
    return twu.STRIDED


@dataclass(slots=True)
class Record:
    unit: int
    epoch: int
    write: bool
    bytes: ByteSet
    inst: int
    block: int
    operand: str
    seq: int = -1  # arrival number (RaceDetector)


class _Log:
    """The records of one unit in one space, in arrival order (so in epoch order: a unit's epoch
    never decreases), all of them and the writes alone, with their epochs for bisection."""
    __slots__ = ("epochs", "recs", "wepochs", "wrecs")

    def __init__(self) -> None:
        self.epochs: list[int] = []
        self.recs: list[Record] = []
        self.wepochs: list[int] = []
        self.wrecs: list[Record] = []

    def add(self, rec: Record) -> None:
        if self.epochs and rec.epoch < self.epochs[-1]:
            raise AssertionError(f"race checker: unit {rec.unit}'s epoch went back from "
                                 f"{self.epochs[-1]} to {rec.epoch}")
        self.epochs.append(rec.epoch)
        self.recs.append(rec)
        if rec.write:
            self.wepochs.append(rec.epoch)
            self.wrecs.append(rec)

    def prune(self, epoch: int) -> None:
        """Drop the records of epoch <= ``epoch``."""
        for ep, rs in ((self.epochs, self.recs), (self.wepochs, self.wrecs)):
            k = bisect.bisect_right(ep, epoch)
            if k:
                del ep[:k], rs[:k]


@dataclass
class RaceDetector:
    """Earlier accesses per space and unit (:class:`_Log`). An access of unit ``u`` races with
    the records of another unit ``v`` whose epoch is above ``u``'s clock entry for ``v`` -- a
    suffix of ``v``'s log, found by bisection (usually empty in a synchronized program) -- whose
    bytes meet its own (and one of the two writes: a read looks only at the writes). A space
    keeps only non-empty logs, and the logs with writes apart, so a read does not visit the
    units that only read there."""
    max_reports: int = 20
    reported: set = field(default_factory=set)
    count: int = 0
    _logs: dict[tuple, dict[int, _Log]] = field(default_factory=dict)
    _wlogs: dict[tuple, dict[int, _Log]] = field(default_factory=dict)  # the logs with writes

    def access(self, space: tuple, rec: Record, vc: np.ndarray) -> list[tuple[Record, int]]:
        """Record an access; return the earlier records it races with (and an address), in
        arrival order."""
        rec.seq = self.count
        self.count += 1
        bs = rec.bytes
        lo, hi = bs.lo, bs.hi
        if hi <= lo:  # no bytes: races with nothing, nothing races with it
            return []
        logs = self._logs.get(space)
        if logs is None:
            logs = self._logs[space] = {}
            self._wlogs[space] = {}
        wlogs = self._wlogs[space]
        unit, write = rec.unit, rec.write
        clock = vc.item  # (a Python int per unit: no numpy scalar per comparison)
        bisect_right = bisect.bisect_right
        out = []
        if write:  # every other unit's records
            for v, log in logs.items():
                ep = log.epochs
                e = clock(v)
                if ep[-1] <= e or v == unit:
                    continue  # every record of v happens-before this access (or v is this unit)
                for r in log.recs[bisect_right(ep, e):]:
                    b = r.bytes
                    if b.lo >= hi or lo >= b.hi:
                        continue  # bounding intervals apart
                    addr = b.first_overlap(bs)
                    if addr is not None:
                        out.append((r, addr))
        else:  # only the writes
            for v, log in wlogs.items():
                ep = log.wepochs
                e = clock(v)
                if ep[-1] <= e or v == unit:
                    continue
                for r in log.wrecs[bisect_right(ep, e):]:
                    b = r.bytes
                    if b.lo >= hi or lo >= b.hi:
                        continue
                    addr = b.first_overlap(bs)
                    if addr is not None:
                        out.append((r, addr))
        log = logs.get(unit)
        if log is None:
            log = logs[unit] = _Log()
        log.add(rec)
        if write and unit not in wlogs:
            wlogs[unit] = log
        if len(out) > 1:
            out.sort(key=lambda x: x[0].seq)
        return out

    def prune(self, min_vc: np.ndarray) -> None:
        """Drop the records that happen-before every unit still running (``min_vc``): no later
        access can race with them (clocks only grow); a log left empty goes."""
        for space, logs in self._logs.items():
            wlogs = self._wlogs[space]
            for v in list(logs):
                log = logs[v]
                log.prune(int(min_vc[v]))
                if not log.wepochs:
                    wlogs.pop(v, None)
                if not log.epochs:
                    del logs[v]

    def clear(self) -> None:
        self._logs.clear()
        self._wlogs.clear()


def space_name(space: tuple) -> str:
    from m100.targets.m100.isa import Space
    sp, tpb = space
    return f"HBSM of TPB {tpb}" if Space(sp) is Space.HBSM else Space(sp).name


@dataclass
class Wait:
    """A unit blocked on a monitor."""
    unit: int
    unit_name: str
    inst: int
    mnemonic: str
    block: int
    tpb: int
    counter: int
    need: int
    value: int


def deadlock_message(now: float, waits: list[Wait], updaters: dict[tuple[int, int], list[tuple[
        int, int, str]]], unit_names: list[str]) -> str:
    """The wait-for cycle (or unsatisfiable waits) as a multi-line message.

    ``updaters[(tpb, counter)]`` lists (unit, instruction index, mnemonic) of the first remaining
    instruction of each unit that would update that counter.
    """
    import networkx as nx  # only here (a deadlock): its import is ~0.2 CPU-s of every run

    g = nx.DiGraph()
    by_unit = {w.unit: w for w in waits}
    for w in waits:
        g.add_node(w.unit)
        for u, idx, mn in updaters.get((w.tpb, w.counter), []):
            g.add_edge(w.unit, u, inst=idx, mnemonic=mn)
    lines = [f"deadlock at cycle {now:.0f}: no unit can make progress"]

    def describe(w: Wait) -> str:
        return (f"{w.unit_name} #{w.inst} {w.mnemonic} (block {w.block}) waits for counter "
                f"c{w.counter} of TPB {w.tpb} >= {w.need} (it is {w.value})")

    try:
        cyc = nx.find_cycle(g)
    except nx.NetworkXNoCycle:
        cyc = None
    if cyc:
        lines.append("  wait-for cycle:")
        for a, b in cyc:
            e = g.edges[a, b]
            lines.append(f"    {describe(by_unit[a])}; it would be updated by {unit_names[b]} "
                         f"#{e['inst']} {e['mnemonic']}")
    for w in waits:
        if not updaters.get((w.tpb, w.counter)):
            lines.append(f"  {describe(w)}, but no remaining instruction updates it")
    if not cyc and all(updaters.get((w.tpb, w.counter)) for w in waits):
        lines.append("  waits:")
        for w in waits:
            ups = ", ".join(f"{unit_names[u]} #{i}" for u, i, _ in updaters[(w.tpb, w.counter)])
            lines.append(f"    {describe(w)}; updaters: {ups}")
    return "\n".join(lines)
