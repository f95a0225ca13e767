"""A TPB's own HBSM buffers placed through the free gaps of the live ones (``hbsm_pack``'s hot path).

What: :class:`Gaps` is :class:`.hbsm_pack._Columns` (the placed buffers of one TPB as numpy columns)
that also keeps, per releasing unit, the sorted offsets of the placed buffers it released and the
merged byte spans of the placed buffers any *other* unit released. :meth:`Gaps.choose` answers what
``_choose(*columns.split(b), ...)`` answers -- the offset of buffer ``b`` by the packer's rule (of
the aligned candidates clear of every live placed buffer and inside the HBSM: one that does not
grow the footprint, then one that reuses no other unit's bytes, then the lowest) -- without
listing every candidate:

* the candidates clear of the live buffers are exactly the starts of the live spans' free gaps
  (0 or a live buffer's end) and the same-unit offsets inside a gap, each where ``size`` bytes
  still fit before the gap ends -- any other candidate meets a live buffer (a gap's start is the
  end of a merged run of live spans, and a live same-unit buffer's own offset lies in its span);
* a candidate clear of the live buffers reuses no other unit's bytes exactly when it meets no
  placed buffer of another unit at all (the live ones it already misses): a test against one
  merged span list per unit, kept as the TPB's buffers are placed, not rebuilt per buffer.

Why: ResNet-50 224 packs ~7 600 own buffers against ~300 placed ones a TPB; the columns' split
(numpy masks, two sorts of the live and other units' spans, the candidate set as Python ints) and
the loop over ~75 candidates (~60 tested, ~43 of them meeting a live buffer) were ~0.4 CPU-s of
hbsm-allocate's ~1.1. Here only the live mask is numpy; the loop visits the ~18 candidates that
are clear of the live buffers.

Pre: every placed offset and end is a multiple of the alignment asked for (the packer places
aligned offsets and aligned sizes); otherwise :meth:`Gaps.choose` answers through the columns'
``split`` and ``_choose`` (the same rule, every candidate aligned one by one). Post: the offset
``_choose`` gives, or None (``test_hbsm_gaps`` compares the two on random placed lists).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort

from .hbsm_pack import Buf, _choose, _Columns


class Gaps(_Columns):
    """:class:`._Columns` of one TPB's placed buffers plus, per releasing unit, the offsets it
    released (sorted) and the merged spans of every other unit's placed buffers (made when a
    unit is first asked, kept up to date by :meth:`add`)."""

    def __init__(self, placed: list[tuple[int, int, Buf]], more: int, align: int):
        self.align = align
        self.aligned = True  # every placed offset and end a multiple of ``align``
        self.released: dict[str, list[int]] = {}  # releasing unit -> sorted offsets
        self.spans: list[tuple[int, int, str]] = []  # (offset, end, releasing unit)
        # releasing unit (None: one no placed buffer has) -> (starts, ends) of the merged spans
        # of the placed buffers of every other unit
        self.unions: dict[str | None, tuple[list[int], list[int]]] = {}
        super().__init__(placed, more)

    def add(self, o: int, s: int, p: Buf) -> None:
        super().add(o, s, p)
        u = p.last_unit or p.unit  # p.released_by
        e = o + s
        if o % self.align or e % self.align:
            self.aligned = False
        insort(self.released.setdefault(u, []), o)
        self.spans.append((o, e, u))
        for k, (us, ue) in self.unions.items():
            if k != u:
                _merge(us, ue, o, e)

    def _others(self, unit: str | None) -> tuple[list[int], list[int]]:
        got = self.unions.get(unit)
        if got is None:
            us: list[int] = []
            ue: list[int] = []
            for o, e, u in sorted(self.spans):
                if u == unit:
                    continue
                if ue and o <= ue[-1]:
                    if e > ue[-1]:
                        ue[-1] = e
                else:
                    us.append(o)
                    ue.append(e)
            got = self.unions[unit] = (us, ue)
        return got

    def choose(self, b: Buf, high: int, size: int, capacity: int, align: int) -> int | None:
        """``_choose(*self.split(b), high, size, capacity, align)``."""
        if not self.aligned or align != self.align:
            return _choose(*self.split(b), high, size, capacity, align)
        n = self.n
        live = (self.start[:n] < b.end) & (b.start < self.end[:n])
        bp = b.pred
        if bp is not None:
            live |= self.has_pred[:n] & (self.p0[:n] < bp[1]) & (bp[0] < self.p1[:n])
        lo = self.off[:n][live]
        spans = sorted(zip(lo.tolist(), (lo + self.size[:n][live]).tolist()))
        unit = b.unit if b.unit in self.units else None  # (``split``'s code: None, no same)
        same = self.released.get(b.unit, []) if unit is not None else []
        us, ue = self._others(unit)
        nu, ns = len(us), len(same)
        top = capacity - size
        best = None
        flat = None  # once the first candidate does not grow the footprint: the last one that
        g0, i, m = 0, 0, len(spans)  # does not either (growth only rises with the offset)
        while True:
            while i < m and spans[i][0] <= g0:  # the gap starting at g0: past every live span
                if spans[i][1] > g0:  # that starts at or before it
                    g0 = spans[i][1]
                i += 1
            if g0 > top or (flat is not None and g0 > flat):
                return best  # every later candidate is past the capacity or grows
            g1 = spans[i][0] if i < m else None  # the gap is [g0, g1)
            lim = top if g1 is None else min(top, g1 - size)
            if flat is not None and flat < lim:
                lim = flat
            if g0 <= lim:
                c, j = g0, bisect_right(same, g0)
                while True:  # g0, then the same-unit offsets inside the gap, in order
                    if best is None:
                        best = c
                        if c + size <= high:
                            flat = high - size
                            if flat < lim:
                                lim = flat
                    k = bisect_right(ue, c)  # the first other-unit span ending after c
                    if k == nu or us[k] >= c + size:
                        return c  # clear of every other unit's bytes
                    if j < ns and same[j] <= lim:
                        c = same[j]
                        j += 1
                    else:
                        break
            if g1 is None:
                return best
            g0 = g1


def _merge(us: list[int], ue: list[int], o: int, e: int) -> None:
    """Bytes ``[o, e)`` added to the merged, sorted spans ``(us, ue)`` (touching ones merge)."""
    j = bisect_left(ue, o)  # the first span ending at or after o
    k = bisect_right(us, e)  # past the last span starting at or before e
    if j < k:
        if us[j] < o:
            o = us[j]
        if ue[k - 1] > e:
            e = ue[k - 1]
    us[j:k] = [o]
    ue[j:k] = [e]


__all__ = ["Gaps"]
