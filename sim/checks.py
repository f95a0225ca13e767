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

from dataclasses import dataclass, field

import networkx as nx
import numpy as np


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
    overlap and that no counter orders, i.e. almost never in a synchronized program."""
    __slots__ = ("lo", "hi", "_arr", "_make")

    def __init__(self, addrs: np.ndarray):
        self._make = None
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
        return self._arr

    @arr.setter
    def arr(self, value: np.ndarray | None) -> None:
        self._arr, self._make = value, None

    @classmethod
    def lazy(cls, lo: int, hi: int, make) -> ByteSet:
        """The set with bounds [lo, hi) (its lowest and highest member + 1) whose member array
        ``make()`` returns (None: dense) when first needed."""
        bs = cls.__new__(cls)
        bs.lo, bs.hi, bs._arr, bs._make = lo, hi, None, make
        return bs

    @classmethod
    def interval(cls, lo: int, hi: int) -> ByteSet:
        bs = cls.__new__(cls)
        bs.lo, bs.hi, bs._arr, bs._make = lo, hi, None, None
        return bs

    def first_overlap(self, other: ByteSet) -> int | None:
        lo, hi = max(self.lo, other.lo), min(self.hi, other.hi)
        if lo >= hi:
            return None
        if self.arr is None and other.arr is None:
            return lo
        if self.arr is None or other.arr is None:
            arr, dense = (self.arr, other) if self.arr is not None else (other.arr, self)
            i = np.searchsorted(arr, dense.lo)
            return int(arr[i]) if i < arr.size and arr[i] < dense.hi else None
        common = np.intersect1d(self.arr, other.arr, assume_unique=True)
        return int(common[0]) if common.size else None


def walk_byte_set(walk, offsets: np.ndarray | None = None) -> ByteSet | None:
    """The bytes the beats of ``walk`` touch (``offsets``: a subset of its elements), None when
    empty. The bounds are computed at once, the members lazily (:meth:`ByteSet.lazy`): an affine
    box of whole-byte elements with a dense enough span is marked through a strided view of a
    bitmap (no index array); anything else goes element by element."""
    from .memory import element_byte_set
    from .twu import box, strided_bytes

    bx = box(walk) if offsets is None else None
    if bx is not None:
        lo, hi = bx[0], bx[1]
        sz = walk.dtype.bits // 8
        span = (hi - lo + 1) * sz
        if span <= 8 * walk.num_elements * sz + 4096:  # ByteSet's bitmap rule
            a = walk.base + lo * sz

            def members() -> np.ndarray | None:
                mask = np.zeros(span, dtype=np.uint8)
                strided_bytes(mask, walk, lo)[...] = 1
                return None if mask.all() else np.flatnonzero(mask) + a
            return ByteSet.lazy(a, a + span, members)
    addrs = element_byte_set(walk, offsets)
    if not addrs.size:
        return None
    return ByteSet.lazy(int(addrs.min()), int(addrs.max()) + 1, lambda: ByteSet(addrs).arr)


@dataclass
class Record:
    unit: int
    epoch: int
    write: bool
    bytes: ByteSet
    inst: int
    block: int
    operand: str
    seq: int = -1  # arrival number (RaceDetector)


#: The race checker indexes records by address buckets of 2**BUCKET_BITS bytes; a record (or a
#: query) spanning more than WIDE buckets is kept in (or scans) the space's whole list instead.
BUCKET_BITS = 16
WIDE = 16


@dataclass
class RaceDetector:
    max_reports: int = 20
    records: dict[tuple, list[Record]] = field(default_factory=dict)
    reported: set = field(default_factory=set)
    count: int = 0
    # per space: {bucket: [Record]} and the wide records [Record], in arrival order
    _buckets: dict[tuple, dict[int, list]] = field(default_factory=dict)
    _wide: dict[tuple, list] = field(default_factory=dict)
    _prunes: int = 0

    def _index(self, space: tuple, rec: Record) -> None:
        b0, b1 = rec.bytes.lo >> BUCKET_BITS, (rec.bytes.hi - 1) >> BUCKET_BITS
        if b1 - b0 >= WIDE:
            self._wide.setdefault(space, []).append(rec)
            return
        bk = self._buckets.setdefault(space, {})
        for k in range(b0, b1 + 1):
            lst = bk.get(k)
            if lst is None:
                bk[k] = [rec]
            else:
                lst.append(rec)

    def _candidates(self, space: tuple, lo: int, hi: int) -> list[Record]:
        """The records whose byte bounds may overlap [lo, hi), in arrival order."""
        b0, b1 = lo >> BUCKET_BITS, (hi - 1) >> BUCKET_BITS
        if b1 - b0 >= WIDE:
            return self.records.get(space, [])
        bk = self._buckets.get(space, {})
        parts = [bk[k] for k in range(b0, b1 + 1) if k in bk]
        wide = self._wide.get(space)
        if wide:
            parts.append(wide)
        if not parts:
            return []
        if len(parts) == 1:
            return parts[0]
        seen = {r.seq: r for part in parts for r in part}
        return [seen[k] for k in sorted(seen)]

    def access(self, space: tuple, rec: Record, vc: np.ndarray) -> list[tuple[Record, int]]:
        """Record an access; return the earlier records it races with (and an address)."""
        out = []
        lst = self.records.setdefault(space, [])
        lo, hi, unit, write = rec.bytes.lo, rec.bytes.hi, rec.unit, rec.write
        for r in self._candidates(space, lo, hi) if hi > lo else ():
            if r.unit == unit or not (r.write or write):
                continue
            b = r.bytes
            if b.lo >= hi or lo >= b.hi:
                continue  # bounding intervals apart
            if r.epoch <= vc[r.unit]:
                continue  # happens-before
            addr = b.first_overlap(rec.bytes)
            if addr is not None:
                out.append((r, addr))
        lst.append(rec)
        rec.seq = self.count
        if hi > lo:
            self._index(space, rec)
        self.count += 1
        return out

    def prune(self, min_vc: np.ndarray) -> None:
        """Drop the records that happen-before every unit still running (``min_vc``). The bucket
        index is swept only every 8th time: a pruned record left there is harmless, since it
        happens-before every unit that can still access (clocks only grow)."""
        for k, lst in self.records.items():
            self.records[k] = [r for r in lst if r.epoch > min_vc[r.unit]]
        self._prunes += 1
        if self._prunes % 8:
            return
        for idx in (*self._buckets.values(), self._wide):
            for k in list(idx):
                kept = [r for r in idx[k] if r.epoch > min_vc[r.unit]]
                if kept:
                    idx[k] = kept
                else:
                    del idx[k]

    def clear(self) -> None:
        self.records.clear()
        self._buckets.clear()
        self._wide.clear()


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
