"""Static HBSM allocation by liveness (the algorithm behind the ``hbsm-allocate`` pass; no xDSL).

Every buffer has a TPB, a size (``slot_bytes x slots``), a lifetime ``[start, end)`` (predicted
cycles, or program positions) and the unit that uses it. Per TPB, buffers are packed into the
address space ``[0, hbsm_bytes)``:

* **largest first** (then earliest first): each buffer takes the lowest bank-aligned offset where it
  overlaps no already placed buffer that is live at the same time (interval packing on the
  offset axis, the classic greedy behind minimalloc-style allocators);
* **same-unit reuse preferred**: among the feasible offsets that do not raise the TPB's high-water
  mark, one whose bytes were last used by the *same* unit (the unit of the old buffer's *last*
  use -- its reader -- against the new buffer's first use -- its writer) wins over one that reuses
  another unit's bytes, so reuse adds no cross-unit write-after-read dependency (in-order units
  already order their own accesses);
* **planned concurrency kept**: lifetimes are program positions, but buffers whose predicted spans
  (``pred``) overlap are not packed onto the same bytes either -- otherwise a load the plan runs
  while the previous piece computes (double buffering) would take that piece's bytes and wait for
  it (the checker still verifies program-order liveness only, the correctness condition);
* offsets (and the sizes reserved) are multiples of the bank width (``machine.hbsm_bank_width``),
  so every buffer starts on a bank boundary (slots inside a buffer follow its type's slot stride).

On overflow :class:`HbsmOverflow` names the TPB, the peak instant, the live buffers there with their
sizes, and what would fit (how many bytes must go, which buffer could shrink or lose a slot).
:func:`check_allocation` is an independent checker used by tests and the pass's ``verify`` option.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass, replace

from m100.errors import M100Error


class HbsmOverflow(M100Error, ValueError):
    """The live buffers of a TPB do not fit its HBSM (message lists them)."""


class HbsmCheckError(AssertionError):
    """The independent checks reject an allocation (``check_allocation``,
    ``hbsm_allocate.check_receivers``): an internal error of the allocator -- not an
    :class:`HbsmOverflow`, which ``m100-pipeline`` answers by scheduling again with a smaller
    prefetch share (that would hide the wrong allocation behind another plan), nor an
    ``M100Error``, which the fuzzer counts as a clean refusal (``fuzz_onnx.differential``)."""


class _Overflow(HbsmOverflow):
    """An :class:`HbsmOverflow` whose message (:func:`_overflow_message`, a scan of every
    instant) is made only when read: ``allocate`` catches the first overflow of a TPB and packs
    it again by program order alone, and that message was never shown."""

    def __init__(self, *args):
        super().__init__()
        self._margs = args
        self._msg: str | None = None

    def __str__(self) -> str:
        if self._msg is None:
            self._msg = _overflow_message(*self._margs)
        return self._msg


@dataclass(frozen=True)
class Buf:
    name: str
    tpb: int
    slot_bytes: int
    slots: int
    start: float
    end: float
    unit: str = ""  # the unit of its first use (the writer of a fresh buffer)
    last_unit: str = ""  # the unit of its last use (who reads its bytes last); "" = ``unit``
    # predicted cycles [first use starts, last use ends) (the scheduler's pred_start/pred_end), or
    # None: two buffers whose predicted spans overlap are kept apart even if their program
    # positions do not overlap (program order linearizes units that the plan runs concurrently)
    pred: tuple[float, float] | None = None

    @property
    def released_by(self) -> str:
        """The unit whose access a later buffer at these bytes must wait for (write after read)."""
        return self.last_unit or self.unit

    @property
    def size(self) -> int:
        return self.slot_bytes * self.slots


def _align(n: int, a: int) -> int:
    return -(-n // a) * a


def _overlap_t(a: Buf, b: Buf) -> bool:
    if a.start < b.end and b.start < a.end:
        return True
    return a.pred is not None and b.pred is not None and \
        a.pred[0] < b.pred[1] and b.pred[0] < a.pred[1]


def peak(bufs: list[Buf], align: int = 1) -> tuple[float, int, list[Buf]]:
    """(instant, bytes, live buffers) of the highest total live size (sizes aligned)."""
    events = sorted({b.start for b in bufs})
    best = (0.0, 0, [])
    for t in events:
        live = [b for b in bufs if b.start <= t < b.end]
        tot = sum(_align(b.size, align) for b in live)
        if tot > best[1]:
            best = (t, tot, live)
    return best


def _overflow_message(tpb: int, bufs: list[Buf], capacity: int, align: int, reason: str) -> str:
    t, tot, live = peak(bufs, align)
    live = sorted(live, key=lambda b: -b.size)
    listing = ", ".join(f"{b.name} {b.size} B" + (f" ({b.slots} slots)" if b.slots > 1 else "")
                        for b in live[:8])
    if len(live) > 8:
        listing += f", ... ({len(live) - 8} more)"
    excess = tot - capacity
    hints = []
    if excess > 0:
        big = live[0]
        if big.size - excess > 0:
            hints.append(f"shrink {big.name} to <= {big.size - excess} B (a smaller tile)")
        for b in live:
            if b.slots > 1 and b.slot_bytes * (b.slots - 1) >= excess:
                hints.append(f"give {b.name} {b.slots - 1} slot{'s' if b.slots > 2 else ''} "
                             f"instead of {b.slots} (saves {b.slot_bytes * (b.slots - 1)} B)")
                break
        need = f"{excess} B too many"
    else:
        need = "the live total fits but the free space is fragmented"
    hint = ("; to fit: " + " or ".join(hints)) if hints else ""
    return (f"hbsm-allocate: TPB {tpb}: {reason}: at cycle {t:g} the live buffers need {tot} B of "
            f"the HBSM's {capacity} B ({need}): {listing}{hint}")


def allocate(bufs: list[Buf], capacity: int, align: int,
             groups: list[list[str]] | None = None, strict: bool = False,
             largest_first: bool = False) -> dict[str, int]:
    """Offsets (bytes) of every buffer, per TPB; raises :class:`HbsmOverflow` when one does not fit.

    ``groups``: lists of buffer names (on different TPBs) that must share one offset -- the
    receivers of one DRB broadcast, which writes the same addresses on every TPB of its mask. A
    group is placed first, at the lowest offset free on all of its TPBs.
    ``strict``: where keeping the planned concurrency apart (``Buf.pred``) does not fit, raise
    :class:`HbsmOverflow` instead of packing by program order alone.

    When keeping the planned concurrency apart does not fit that way (groups largest first,
    then each TPB's own buffers), the groups and the own buffers are packed again in one order
    (:func:`_allocate_joint`: the groups of the most TPBs first, then the largest): ResNet-18 224
    with weights prefetched into 90 % of the HBSM left TPB 0 no hole for a 170 KB weight chunk
    of its own among the groups placed before it (1.5 of the 2 MB live); jointly it packs. When
    that fails and ``largest_first`` is asked for, the joint packing is tried largest first
    whatever a group spans (off by default: the LLaMA2-7B W4A16 decode layer's 90 % plan then
    packs strictly and runs 16.092 ms/token against its 75 % plan's 15.991): the LLaMA2-7B
    W8A8 prefill layer with ``wo``'s residual add in its epilogue, planned at a 100 % share,
    left a 9 KB chunk no hole either way on some TPB and packs so. Only when that fails too
    does a non-strict allocation pack by program order alone."""
    try:
        return _allocate_split(bufs, capacity, align, groups, True)
    except HbsmOverflow as first:
        for by_size in ((False, True) if largest_first else (False,)):
            try:
                return _allocate_joint(bufs, capacity, align, groups or [], by_size)
            except HbsmOverflow:
                pass
        if strict:
            raise first from None
    return _allocate_split(bufs, capacity, align, groups, False)


def _allocate_joint(bufs: list[Buf], capacity: int, align: int,
                    groups: list[list[str]], by_size: bool = False) -> dict[str, int]:
    """The groups and the buffers of each TPB in one order: the groups spanning the most TPBs
    first (a common offset is the hardest to find), then the largest, then the earliest (with
    ``by_size``: the largest first, a group by its buffers' size like a single buffer); a single
    buffer as in :func:`_allocate_tpb`, a group at the lowest offset free on all its TPBs. Planned
    concurrency (``Buf.pred``) kept apart."""
    by_name = {b.name: b for b in bufs}
    grouped = {n for grp in groups for n in grp}
    items = [[by_name[n] for n in grp] for grp in groups] + \
        [[b] for b in bufs if b.name not in grouped]
    items.sort(key=lambda it: (0 if by_size else -len(it), -_align(max(b.size for b in it), align),
                               min(b.start for b in it), it[0].name))
    by_tpb: dict[int, list[Buf]] = defaultdict(list)
    for b in bufs:
        by_tpb[b.tpb].append(b)
    placed: dict[int, list[tuple[int, int, Buf]]] = defaultdict(list)
    cols: dict[int, _Columns] = {}
    high: dict[int, int] = defaultdict(int)  # per TPB: the highest placed byte (0: none)
    out: dict[str, int] = {}
    for it in items:
        if len(it) == 1:
            b = it[0]
            out[b.name] = _place_one(b, capacity, align, placed[b.tpb], by_tpb[b.tpb], cols,
                                     high)
            continue
        size = _align(max(b.size for b in it), align)
        ok = _group_offset(it, size, placed, capacity, align, cols)
        if ok is None:
            b = it[0]
            raise _Overflow(b.tpb, by_tpb[b.tpb], capacity, align,
                            f"broadcast buffer {b.name} ({size} B) finds no offset free on TPBs "
                            f"{sorted(m.tpb for m in it)}")
        for b in it:
            out[b.name] = ok
            placed[b.tpb].append((ok, size, b))
            if ok + size > high[b.tpb]:
                high[b.tpb] = ok + size
    return out


def _place_one(b: Buf, capacity: int, align: int, placed: list[tuple[int, int, Buf]],
               everything: list[Buf], cols: dict[int, _Columns], high: dict[int, int]) -> int:
    """:func:`_allocate_tpb` of the one buffer ``b`` on its TPB (``placed``: that TPB's placed
    list, appended to), for the joint packing's one buffer at a time: the same choice, with the
    TPB's :class:`_Columns` kept in ``cols`` across the calls (synced with ``placed``; a TPB with
    fewer than :data:`VECTOR_MIN` placed buffers loops) and its high-water mark kept in ``high``
    (the joint packing of the 1024-token LLaMA2-7B W8A8 prefill layer, ~20 000 buffers, up to
    450 a TPB, re-scanned every placed buffer of the TPB per buffer: ~4 of its ~5.6 CPU-s)."""
    size = _align(b.size, align)
    if size > capacity:
        raise _Overflow(b.tpb, everything, capacity, align,
                        f"buffer {b.name} alone ({size} B) exceeds it")
    if len(placed) >= VECTOR_MIN:
        cands, live, other = _Columns.synced(cols, b.tpb, placed).split(b)
    else:
        cands, live, other = _split(b, placed)
    best = _choose(cands, live, other, high[b.tpb], size, capacity, align)
    if best is None:
        raise _Overflow(b.tpb, everything, capacity, align,
                        f"buffer {b.name} ({size} B) does not fit")
    placed.append((best, size, b))
    if best + size > high[b.tpb]:
        high[b.tpb] = best + size
    return best


def _allocate_split(bufs: list[Buf], capacity: int, align: int,
                    groups: list[list[str]] | None, strict: bool) -> dict[str, int]:
    """:func:`allocate`'s first way: the broadcast groups largest first, then each TPB's own
    buffers (``strict`` False: a group or TPB that does not fit apart from the planned
    concurrency is packed by program order alone)."""
    by_tpb: dict[int, list[Buf]] = defaultdict(list)
    for b in bufs:
        by_tpb[b.tpb].append(b)
    by_name = {b.name: b for b in bufs}
    placed: dict[int, list[tuple[int, int, Buf]]] = defaultdict(list)
    cols: dict[int, _Columns] = {}
    out: dict[str, int] = {}
    grouped = set()
    for grp in sorted(groups or [], key=lambda g: -max(by_name[n].size for n in g)):
        members = [by_name[n] for n in grp]
        size = _align(max(b.size for b in members), align)
        ok = _group_offset(members, size, placed, capacity, align, cols)
        if ok is None and strict:
            b = members[0]
            raise HbsmOverflow(_overflow_message(
                b.tpb, by_tpb[b.tpb], capacity, align, f"broadcast buffer {b.name} ({size} B) "
                f"finds no offset free on TPBs {sorted(m.tpb for m in members)} apart from the "
                "buffers the plan runs at the same time (strict)"))
        if ok is None and any(b.pred is not None for b in members):
            # keeping the planned concurrency apart leaves no common offset: program order alone
            members = [replace(b, pred=None) for b in members]
            ok = _group_offset(members, size, placed, capacity, align, cols)
        if ok is None:
            b = members[0]
            raise HbsmOverflow(_overflow_message(b.tpb, by_tpb[b.tpb], capacity, align,
                                                 f"broadcast buffer {b.name} ({size} B) finds no "
                                                 f"offset free on TPBs {sorted(m.tpb for m in members)}"))
        for b in members:
            out[b.name] = ok
            placed[b.tpb].append((ok, size, b))
            grouped.add(b.name)
    for tpb, group in sorted(by_tpb.items()):
        own = [b for b in group if b.name not in grouped]
        try:
            out.update(_allocate_tpb(tpb, own, capacity, align, list(placed[tpb]), group))
        except HbsmOverflow:
            if strict or not any(b.pred is not None for b in own):
                raise
            # keeping the planned concurrency apart fragments this TPB's HBSM too much: pack by
            # program order alone (correct; loads may then wait for the piece they overwrite)
            own = [replace(b, pred=None) for b in own]
            out.update(_allocate_tpb(tpb, own, capacity, align, list(placed[tpb]), group))
    return out


def _group_offset(members: list[Buf], size: int, placed, capacity: int, align: int,
                  cols: dict[int, _Columns] | None = None) -> int | None:
    """The lowest offset free on every TPB of a broadcast group (None: there is none).

    The placed buffers live with a member (``_overlap_t``) are found once, as byte intervals
    ``[o, o + sz)``; the answer is the lowest aligned candidate (0 or the end of one of them)
    that meets none of them: :func:`_lowest_gap` (ResNet-50 224: 3.4 M pair tests of ~4 000
    groups were the pass's hot loop). ``cols``: the caller's :class:`_Columns` of each TPB's
    placed list (kept while the lists only grow), so a TPB with :data:`VECTOR_MIN` placed
    buffers or more is scanned by a few vector operations (the same spans)."""
    live: list[tuple[int, int]] = []
    for b in members:
        bs, be, bp = b.start, b.end, b.pred
        lst = placed[b.tpb]
        if cols is not None and len(lst) >= VECTOR_MIN:
            c = _Columns.synced(cols, b.tpb, lst)
            n = c.n
            hit = (c.start[:n] < be) & (bs < c.end[:n])
            if bp is not None:
                hit |= c.has_pred[:n] & (c.p0[:n] < bp[1]) & (bp[0] < c.p1[:n])
            o = c.off[:n][hit]
            live.extend(zip(o.tolist(), (o + c.size[:n][hit]).tolist()))
            continue
        for o, sz, p in lst:
            pp = p.pred  # _overlap_t(p, b), inline
            if (p.start < be and bs < p.end) or (bp is not None and pp is not None and
                                                 pp[0] < bp[1] and bp[0] < pp[1]):
                live.append((o, o + sz))
    return _lowest_gap(live, size, capacity, align)


def _lowest_gap(spans: list[tuple[int, int]], size: int, capacity: int,
                align: int) -> int | None:
    """The lowest aligned candidate -- 0 or the end of one of the byte ``spans`` ``[o, e)``
    (sorted here, in place) -- where ``size`` bytes fit below ``capacity`` and meet no span.

    Walked as the spans' free gaps in increasing order: a candidate that meets no span lies in
    a gap ``[g0, g1)``, and every candidate there is at least ``g0`` (the spans it is an end of
    end at or before ``g0``) while ``g0`` (0 or the end of a run of spans) is one too, so the
    gap's least aligned candidate is ``g0`` aligned: the first gap where that fits is the
    answer; once it is past the capacity, every later one is too."""
    spans.sort()
    top = capacity - size
    g0, i, m = 0, 0, len(spans)
    while True:
        while i < m and spans[i][0] <= g0:  # the gap at g0: past every span starting there
            if spans[i][1] > g0:
                g0 = spans[i][1]
            i += 1
        c = -(-g0 // align) * align
        if c > top:
            return None
        if i == m or c + size <= spans[i][0]:
            return c
        g0 = spans[i][0]


def _reach(spans: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """Byte spans ``(offset, size)`` sorted by offset, as (their offsets, the largest end of each
    prefix): some span meets bytes ``[lo, hi)`` (``lo < o + s and o < hi``) when, of the spans
    that start below ``hi`` (a prefix, by bisection), one ends above ``lo``."""
    spans.sort()
    reach: list[int] = []
    m = -1
    for o, s in spans:
        if o + s > m:
            m = o + s
        reach.append(m)
    return [o for o, _ in spans], reach


#: a TPB's own buffers of a group of this many or more (and the joint packing's TPBs with this
#: many placed) are packed with the placed buffers as numpy columns (one vector test per buffer
#: instead of a Python loop over every placed buffer: ResNet-50 224 packs ~340 buffers a TPB, the
#: pass's hot loop; a TPB's own buffers choose through the live spans' free gaps,
#: ``hbsm_gaps.Gaps``); smaller ones loop (``_split``). Same offsets either way
#: (``test_vector_packing_is_the_loop`` sets it to 0 and to "never").
VECTOR_MIN = 24


def _choose(cands, live: tuple[list[int], list[int]], other: tuple[list[int], list[int]],
            high: int, size: int, capacity: int, align: int) -> int | None:
    """The offset for a buffer of ``size`` bytes: of the aligned candidates where it meets no
    live span, the one that does not grow the footprint (``high``), then reuses no other unit's
    bytes (``other`` spans: a cross-unit write-after-read costs extra), then the lowest.

    The candidates in increasing order (aligning keeps it):
    past the capacity every later one is too; the first feasible one is kept unless it grows
    the footprint or reuses another unit's bytes, and then only a later feasible one that grows
    it no more (growth only rises with the offset) and reuses no other unit's bytes replaces it
    (``test_choice_is_the_definition`` compares it with the least key of all candidates)."""
    live_at, live_reach = live
    other_at, other_reach = other
    top = capacity - size
    best = None
    best_grow = False
    for c in sorted(cands):
        c = -(-c // align) * align
        if c > top:
            break  # and so is every later candidate
        hi = c + size
        k = bisect_left(live_at, hi)
        if k and live_reach[k - 1] > c:
            continue  # meets a live span
        grow = hi > high
        if best is not None and grow > best_grow:
            break
        k = bisect_left(other_at, hi)
        if not k or other_reach[k - 1] <= c:
            return c  # no other unit's bytes, growth no more than the best so far: the answer
        if best is None:
            best, best_grow = c, grow
    return best


def _allocate_tpb(tpb: int, group: list[Buf], capacity: int, align: int,
                  placed: list[tuple[int, int, Buf]] | None = None,
                  everything: list[Buf] | None = None) -> dict[str, int]:
    placed = [] if placed is None else placed  # (offset, size, buf)
    everything = group if everything is None else everything
    out: dict[str, int] = {}
    order = sorted(group, key=lambda b: (-_align(b.size, align), b.start, b.name))
    cols = None
    if len(order) >= VECTOR_MIN:  # (the columns with the free gaps: ``hbsm_gaps``)
        from .hbsm_gaps import Gaps
        cols = Gaps(placed, len(order), align)
    high = max((o + s for o, s, _ in placed), default=0)
    for b in order:
        size = _align(b.size, align)
        if size > capacity:
            raise _Overflow(tpb, everything, capacity, align,
                            f"buffer {b.name} alone ({size} B) exceeds it")
        if cols is not None:
            best = cols.choose(b, high, size, capacity, align)
        else:
            best = _choose(*_split(b, placed), high, size, capacity, align)
        if best is None:
            raise _Overflow(tpb, everything, capacity, align,
                            f"buffer {b.name} ({size} B) does not fit")
        out[b.name] = best
        placed.append((best, size, b))
        if cols is not None:
            cols.add(best, size, b)
        if best + size > high:
            high = best + size
    return out


def _split(b: Buf, placed: list[tuple[int, int, Buf]]):
    """(candidate offsets, live spans, other units' spans) of ``b`` against the placed buffers:
    a placed buffer live with ``b`` (``_overlap_t``) is a span to avoid and its end a candidate;
    one released by ``b``'s unit offers its offset; any other is bytes of another unit."""
    live, other = [], []
    cands = {0}
    bs, be, bp, unit = b.start, b.end, b.pred, b.unit
    for o, s, p in placed:
        pp = p.pred  # _overlap_t(p, b), inline (the hot loop of the pass)
        if (p.start < be and bs < p.end) or (bp is not None and pp is not None and
                                             pp[0] < bp[1] and bp[0] < pp[1]):
            live.append((o, s))
            cands.add(o + s)
        elif (p.last_unit or p.unit) == unit:  # p.released_by
            cands.add(o)
        else:
            other.append((o, s))
    return cands, _reach(live), _reach(other)


class _Columns:
    """The placed buffers of one TPB as numpy columns, for :func:`_split` in a few vector
    operations (the same sets and spans)."""

    def __init__(self, placed: list[tuple[int, int, Buf]], more: int):
        import numpy as np
        self.np = np
        cap = len(placed) + more
        self.n = 0
        self.off = np.zeros(cap, np.int64)
        self.size = np.zeros(cap, np.int64)
        self.start = np.zeros(cap, np.float64)
        self.end = np.zeros(cap, np.float64)
        self.has_pred = np.zeros(cap, bool)
        self.p0 = np.zeros(cap, np.float64)
        self.p1 = np.zeros(cap, np.float64)
        self.rel = np.zeros(cap, np.int64)
        self.units: dict[str, int] = {}
        self.last = None  # the placed entry added last (:meth:`synced`)
        for o, s, p in placed:
            self.add(o, s, p)
        self.last = placed[-1] if placed else None

    @classmethod
    def synced(cls, cols: dict[int, _Columns], key: int,
               placed: list[tuple[int, int, Buf]]) -> _Columns:
        """``cols[key]`` brought up to ``placed`` (a list that only grows while ``cols`` is
        kept: its new tail is added; a list that changed otherwise is taken anew)."""
        c = cols.get(key)
        if c is None or c.n > len(placed) or (c.n and placed[c.n - 1] is not c.last):
            c = cols[key] = cls(placed, 16)
        else:
            for o, s, p in placed[c.n:]:
                c.add(o, s, p)
        c.last = placed[-1] if placed else None
        return c

    def _grow(self) -> None:
        np = self.np
        for k in ("off", "size", "start", "end", "has_pred", "p0", "p1", "rel"):
            a = getattr(self, k)
            setattr(self, k, np.concatenate([a, np.zeros(max(16, len(a)), a.dtype)]))

    def add(self, o: int, s: int, p: Buf) -> None:
        i = self.n
        if i == len(self.off):
            self._grow()
        self.off[i], self.size[i], self.start[i], self.end[i] = o, s, p.start, p.end
        if p.pred is not None:
            self.has_pred[i] = True
            self.p0[i], self.p1[i] = p.pred
        self.rel[i] = self.units.setdefault(p.last_unit or p.unit, len(self.units))
        self.n = i + 1

    def split(self, b: Buf):
        np, n = self.np, self.n
        off, size = self.off[:n], self.size[:n]
        live = (self.start[:n] < b.end) & (b.start < self.end[:n])
        if b.pred is not None:
            live |= self.has_pred[:n] & (self.p0[:n] < b.pred[1]) & (b.pred[0] < self.p1[:n])
        code = self.units.get(b.unit)
        dead = ~live
        same = dead & (self.rel[:n] == code) if code is not None else np.zeros(n, bool)
        cands = {0}
        cands.update((off[live] + size[live]).tolist())
        cands.update(off[same].tolist())
        return cands, self._reach(off[live], size[live]), \
            self._reach(off[dead & ~same], size[dead & ~same])

    def _reach(self, o, s) -> tuple[list[int], list[int]]:
        """:func:`_reach` of the spans ``(o[i], s[i])``."""
        np = self.np
        if not len(o):
            return [], []
        k = np.lexsort((s, o))
        o, e = o[k], o[k] + s[k]
        return o.tolist(), np.maximum.accumulate(e).tolist()


def check_allocation(bufs: list[Buf], offsets: dict[str, int], capacity: int,
                     align: int = 1) -> list[str]:
    """Independent check: every buffer aligned and inside ``[0, capacity)``, and no two buffers of
    one TPB that are live at the same time share a byte. Returns the problems (empty: valid)."""
    errs = []
    for b in bufs:
        if b.name not in offsets:
            errs.append(f"{b.name}: no offset")
            continue
        o = offsets[b.name]
        if o % align:
            errs.append(f"{b.name}: offset {o} not aligned to {align}")
        if o < 0 or o + b.size > capacity:
            errs.append(f"{b.name}: bytes [{o}, {o + b.size}) outside [0, {capacity})")
    by_tpb: dict[int, list[Buf]] = defaultdict(list)
    for b in bufs:
        if b.name in offsets:
            by_tpb[b.tpb].append(b)
    for tpb, group in by_tpb.items():
        if not _any_live_overlap(group, offsets):
            continue  # no pair to report (the loop below would find none): skip it
        # by start: a buffer after ``a`` that starts at or after ``a``'s end is not live with it,
        # nor is any later one (each pair is still tested once, in the other order at worst)
        order = sorted(range(len(group)), key=lambda k: group[k].start)
        for i, ka in enumerate(order):
            for kc in order[i + 1:]:
                a, c = group[ka], group[kc]
                if c.start >= a.end:
                    break
                if kc < ka:  # named in the order of the buffers
                    a, c = c, a
                if a.start < c.end and c.start < a.end:
                    oa, oc = offsets[a.name], offsets[c.name]
                    if oa < oc + c.size and oc < oa + a.size:
                        errs.append(f"TPB {tpb}: {a.name} [{oa}, {oa + a.size}) and {c.name} "
                                    f"[{oc}, {oc + c.size}) overlap while both are live")
    return errs


#: :func:`check_allocation` first asks :func:`_any_live_overlap` per TPB (numpy, in blocks of
#: ``CHECK_BLOCK`` rows) and runs its pair loop (which words the messages) only where that finds
#: a pair. ``test_vector_check_is_the_loop`` compares the reports with every pair tested.
CHECK_BLOCK = 256


def _any_live_overlap(group: list[Buf], offsets: dict[str, int]) -> bool:
    """Some two buffers of ``group`` are live at the same time (``[start, end)`` meet) and share
    a byte (``[offset, offset + size)`` meet): the condition of :func:`check_allocation`'s pair
    loop, tested for every pair at once."""
    import numpy as np
    n = len(group)
    if n < 2:
        return False
    st = np.array([b.start for b in group], np.float64)
    en = np.array([b.end for b in group], np.float64)
    lo = np.array([offsets[b.name] for b in group], np.int64)
    hi = lo + np.array([b.size for b in group], np.int64)
    for i in range(0, n - 1, CHECK_BLOCK):
        j = min(i + CHECK_BLOCK, n)
        # rows i..j-1 against every later column (each pair once: column > row)
        meet = (st[i:j, None] < en[None, i + 1:]) & (st[None, i + 1:] < en[i:j, None]) & \
            (lo[i:j, None] < hi[None, i + 1:]) & (lo[None, i + 1:] < hi[i:j, None])
        later = np.arange(i + 1, n)[None, :] > np.arange(i, j)[:, None]
        if (meet & later).any():
            return True
    return False


__all__ = ["Buf", "HbsmCheckError", "HbsmOverflow", "allocate", "check_allocation", "peak"]
