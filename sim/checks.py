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
    """A set of byte addresses: a dense interval, or a sorted unique array within [lo, hi)."""
    __slots__ = ("lo", "hi", "arr")

    def __init__(self, addrs: np.ndarray):
        if addrs.size == 0:
            self.lo = self.hi = 0
            self.arr = None
            return
        lo, hi = int(addrs.min()), int(addrs.max()) + 1
        self.lo, self.hi = lo, hi
        if hi - lo <= 8 * addrs.size + 4096:  # a bitmap over the span: no sort
            mask = np.zeros(hi - lo, dtype=bool)
            mask[addrs - lo] = True
            self.arr = None if mask.all() else np.flatnonzero(mask) + lo
        else:
            a = np.sort(addrs, kind="stable")
            keep = np.empty(a.size, dtype=bool)
            keep[0] = True
            np.not_equal(a[1:], a[:-1], out=keep[1:])
            self.arr = a[keep]

    @classmethod
    def interval(cls, lo: int, hi: int) -> ByteSet:
        bs = cls.__new__(cls)
        bs.lo, bs.hi, bs.arr = lo, hi, None
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
    empty. An affine box of whole-byte elements with a dense enough span is marked through a
    strided view of a bitmap (no index array); anything else goes element by element."""
    from .memory import element_byte_set
    from .twu import box, strided_bytes

    bx = box(walk) if offsets is None else None
    if bx is not None:
        lo, hi = bx[0], bx[1]
        sz = walk.dtype.bits // 8
        span = (hi - lo + 1) * sz
        if span <= 8 * walk.num_elements * sz + 4096:  # ByteSet's bitmap rule
            mask = np.zeros(span, dtype=np.uint8)
            strided_bytes(mask, walk, lo)[...] = 1
            a = walk.base + lo * sz
            if mask.all():
                return ByteSet.interval(a, a + span)
            arr = np.flatnonzero(mask) + a
            bs = ByteSet.interval(int(arr[0]), int(arr[-1]) + 1)
            bs.arr = arr
            return bs
    addrs = element_byte_set(walk, offsets)
    return ByteSet(addrs) if addrs.size else None


@dataclass
class Record:
    unit: int
    epoch: int
    write: bool
    bytes: ByteSet
    inst: int
    block: int
    operand: str


@dataclass
class RaceDetector:
    max_reports: int = 20
    records: dict[tuple, list[Record]] = field(default_factory=dict)
    reported: set = field(default_factory=set)
    count: int = 0

    def access(self, space: tuple, rec: Record, vc: np.ndarray) -> list[tuple[Record, int]]:
        """Record an access; return the earlier records it races with (and an address)."""
        out = []
        lst = self.records.setdefault(space, [])
        lo, hi, unit, write = rec.bytes.lo, rec.bytes.hi, rec.unit, rec.write
        for r in lst:
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
        self.count += 1
        return out

    def prune(self, min_vc: np.ndarray) -> None:
        for k, lst in self.records.items():
            self.records[k] = [r for r in lst if r.epoch > min_vc[r.unit]]


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
