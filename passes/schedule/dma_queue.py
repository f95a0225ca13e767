"""One CCB DMA engine with several transfers in flight, as the list scheduler plans it.

The engine model (``Machine.dma_outstanding``, depth ``D`` >= 2; the interpreter's
``sim/dma_ahead.py`` runs the same one): a transfer has a setup of ``S = dma_setup_cycles``, then
a fixed latency ``L`` (``ddr_latency`` / ``hbsm_latency`` of its ends; ``S + L`` is
``Machine.dma_fixed_latency``), then its data phase of ``T`` cycles. With its transfers in queue order ``0, 1, ...`` (setup starts ``s``, data starts
``d``, data ends ``e``)::

    s_i >= ready_i,  s_i >= s_(i-1) + S,  s_i >= e_(i-D)          (setups serial; depth)
    d_i  = max(s_i + S + L_i, e_(i-1)),   e_i = d_i + T_i         (data in queue order)

The interpreter issues each transfer at the earliest such ``s_i``. At depth 1 (``s_i >= e_(i-1)``)
this is the old busy-interval engine of :class:`.busy.BusyBlocks`, which the list scheduler keeps
using there (byte-identical programs).

The list scheduler puts a transfer at the earliest place of the queue (ordered by ``s``) where it
can go *without moving the transfers already there*: at position ``k`` (between transfers ``k-1``
and ``k``) it starts at ``lo = max(ready, s_(k-1) + S, e_(k-D))`` (the three rules above with the
transfers before it), its data at ``max(lo + S + L, e_(k-1))``, and it must leave every later
transfer's times as they are: its setup ends by ``s_k``, its data by ``d_k``, and the transfers
after it still have their ``D``-th predecessor ended before they start (for ``k + j``, ``j < D -
1``, that predecessor is an older one: ``e_(k+j+1-D) <= s_(k+j)``; for ``j = D - 1`` it is the new
transfer). Starting later than ``lo`` only moves its data later, so ``lo`` is the one start to try
per position. Then the queue order is the order of ``s`` (and of ``d`` and ``e``), which the emitter
keeps (the program is in predicted-start order), and each transfer's times are the recurrence's.

Positions whose older neighbours already violate the third rule (``e_(k+j+1-D) > s_(k+j)``: the
engine has ``D`` transfers in flight at ``s_(k+j)``, e.g. inside a back-to-back stream) can hold
nothing; :attr:`DmaQueue.open` lists the others (by the setup start of the transfer after them), so
a search walks only past the places where the engine has room.

Each open position also keeps its *room* (:attr:`DmaQueue.room`, session 33): the longest data phase
it could hold whatever the transfer's ``ready`` and latency, ``min(d_k, s_(k+D-1)) - e_(k-1)`` (its
data starts no earlier than ``e_(k-1)`` and must end by ``d_k`` and by ``s_(k+D-1)``; infinite at
position 0). A search passes an open position whose room is below the transfer's data phase (by a
margin that covers the rounding of those sums, :data:`ROOM_ABS` / :data:`ROOM_REL`) without testing
it: the test would fail. ResNet-50's schedule tested 581 k positions, 468 k of them failing that way.
An insertion changes the room of the positions it re-tests for ``open`` (``[k - D, k + D]``, whose
neighbours within ``D`` changed), no other.
"""

from __future__ import annotations

from bisect import bisect_left, insort

#: a margin for comparing float cycle counts (the scheduler's cycles are floats)
EPS = 1e-9
#: :meth:`DmaQueue.earliest` passes an open position whose room is below ``data - ROOM_ABS -
#: ROOM_REL * (data + e_(n-1))``: the position test (``en > d_k + EPS`` or ``en > s_(k+D-1) +
#: EPS``, with ``en >= e_(k-1) + data``) would fail. The margin is far above the rounding of the
#: sums (a few ulps of times <= ``e_(n-1)``, data ends in queue order) and above EPS
ROOM_ABS = 4 * EPS
ROOM_REL = 1e-12
INF = float("inf")


class DmaQueue:
    """The planned transfers of one CCB DMA engine of depth ``depth`` >= 2 (module doc)."""

    __slots__ = ("depth", "setup", "s", "d", "e", "open", "room")
    # (:meth:`insert`'s and :meth:`earliest`'s shortcuts for distinct setup starts, ``setup`` >=
    # 1: test_dma_queue compares them with the plain definitions, written out there)

    def __init__(self, depth: int, setup: float) -> None:
        assert depth >= 2
        self.depth = depth
        self.setup = float(setup)
        self.s: list[float] = []  # setup starts, ascending (queue order)
        self.d: list[float] = []  # data starts
        self.e: list[float] = []  # data ends
        self.open: list[float] = []  # s_k of every position k < n that may hold a transfer
        self.room: list[float] = []  # per ``open`` entry, its position's room (module doc)

    def __len__(self) -> int:
        return len(self.s)

    def copy(self) -> "DmaQueue":
        c = DmaQueue(self.depth, self.setup)
        c.s, c.d, c.e, c.open = list(self.s), list(self.d), list(self.e), list(self.open)
        c.room = list(self.room)
        return c

    def _free(self, k: int) -> bool:
        """Position ``k`` (< n) leaves the later transfers' depth rule intact for older ones."""
        s, e, D = self.s, self.e, self.depth
        n = len(s)
        for j in range(D - 1):
            p = k + j + 1 - D
            if k + j >= n:
                break
            if p >= 0 and e[p] > s[k + j] + EPS:
                return False
        return True

    def _room(self, k: int) -> float:
        """The room of position ``k`` < n (module doc): ``min(d_k, s_(k+D-1)) - e_(k-1)``."""
        s, D = self.s, self.depth
        m = self.d[k]
        if k + D - 1 < len(s) and s[k + D - 1] < m:
            m = s[k + D - 1]
        return m - self.e[k - 1] if k > 0 else INF

    def _at(self, k: int, ready: float, lat: float, data: float) -> tuple[float, float] | None:
        """(setup start, data start) of a transfer put at position ``k``, or None if it would
        move a later transfer."""
        s, d, e, S, D = self.s, self.d, self.e, self.setup, self.depth
        n = len(s)
        lo = ready
        if k > 0 and s[k - 1] + S > lo:
            lo = s[k - 1] + S
        if k - D >= 0 and e[k - D] > lo:
            lo = e[k - D]
        dn = lo + S + lat
        if k > 0 and e[k - 1] > dn:
            dn = e[k - 1]
        if k < n:
            en = dn + data
            if lo + S > s[k] + EPS or en > d[k] + EPS:
                return None
            if k + D - 1 < n and en > s[k + D - 1] + EPS:
                return None
        return lo, dn

    def earliest(self, ready: float, lat: float, data: float) -> tuple[float, float, int]:
        """The earliest (setup start, data start, position) of a transfer ready at ``ready``
        whose latency after the setup is ``lat`` and data phase ``data`` cycles."""
        s, op = self.s, self.open
        n = len(s)
        i = bisect_left(op, ready + self.setup - EPS)
        nop = len(op)
        if i < nop:
            d, e, S, D = self.d, self.e, self.setup, self.depth
            # the open positions whose room can not hold ``data`` are passed (module doc)
            room = self.room
            lim = data - (ROOM_ABS + ROOM_REL * (data + e[n - 1]))
            while room[i] < lim:
                i += 1
                if i >= nop:
                    break
            k = bisect_left(s, op[i]) if i < nop else n
            while i < nop:
                # :meth:`_at` (k < n) written out: the list scheduler asks ~2 positions a query
                lo = ready
                if k > 0 and s[k - 1] + S > lo:
                    lo = s[k - 1] + S
                if k - D >= 0 and e[k - D] > lo:
                    lo = e[k - D]
                dn = lo + S + lat
                if k > 0 and e[k - 1] > dn:
                    dn = e[k - 1]
                en = dn + data
                if not (lo + S > s[k] + EPS or en > d[k] + EPS or
                        (k + D - 1 < n and en > s[k + D - 1] + EPS)):
                    return lo, dn, k
                i += 1
                while i < nop and room[i] < lim:
                    i += 1
                if i >= nop:
                    break
                # ``open`` is sorted and its values are distinct setup starts (S >= 1: each is
                # S after the one before) of positions after k: the next one's is past k
                k = bisect_left(s, op[i], k + 1) if S >= 1.0 else bisect_left(s, op[i])
        # at the end (:meth:`_at` with ``k == n``, written out: most queries end here)
        S, D = self.setup, self.depth
        lo = ready
        if n:
            e = self.e
            if s[n - 1] + S > lo:
                lo = s[n - 1] + S
            if n >= D and e[n - D] > lo:
                lo = e[n - D]
            dn = lo + S + lat
            if e[n - 1] > dn:
                dn = e[n - 1]
            return lo, dn, n
        return lo, lo + S + lat, n

    def insert(self, k: int, s0: float, d0: float, e0: float) -> None:
        """Add the transfer at position ``k`` (from :meth:`earliest`)."""
        s, op, D = self.s, self.open, self.depth
        if self.setup >= 1.0:
            self._insert_fast(k, s0, d0, e0)
            return
        # the positions whose rule reads the neighbourhood of k: forget, then recompute them
        lo_k, hi_k = max(0, k - D), min(len(s), k + D)
        for j in range(lo_k, hi_k):
            x = s[j]
            i = bisect_left(op, x)
            if i < len(op) and op[i] == x:
                del op[i]
        s.insert(k, s0)
        self.d.insert(k, d0)
        self.e.insert(k, e0)
        n = len(s)
        for j in range(lo_k, min(n, hi_k + 1)):
            if self._free(j):
                x = s[j]
                i = bisect_left(op, x)
                if i >= len(op) or op[i] != x:
                    insort(op, x)
        self.room = [self._room(bisect_left(s, x)) for x in op]  # (``earliest``'s positions)

    def _insert_fast(self, k: int, s0: float, d0: float, e0: float) -> None:
        """:meth:`insert` when the setup starts are distinct (``setup`` >= 1: each is at least
        ``setup`` after the one before): the ``open`` entries of positions ``[k - D, k + D)``
        are one slice of it (``open`` is sorted), replaced by the positions that are free after
        the insertion -- the same list as removing and re-inserting them one by one."""
        s, op, D = self.s, self.open, self.depth
        n0 = len(s)
        if k == n0 and D == 2 and n0:
            # (session 34) at the end of the queue (two thirds of ResNet-50's insertions), depth
            # 2: of the re-tested positions ``[n0 - 2, n0]`` only the last old one's room changes
            # (``s_(n0)`` is new: ``min(d, s_(n0)) - e``) and the new position ``n0`` comes in if
            # the transfer before it ends by its setup start (its room ``d0 - e_(n0-1)``); the
            # freedom of ``n0 - 2`` and ``n0 - 1`` reads no transfer after them, and ``n0 - 2``'s
            # room reads ``s_(n0-1)`` at most. The same lists as the slice below
            # (test_dma_room compares them after every insertion)
            e = self.e
            s.append(s0)
            self.d.append(d0)
            e.append(e0)
            j = n0 - 1
            if j and op and op[-1] == s[j]:  # position n0 - 1 is open (the last entry)
                m = self.d[j]
                if s0 < m:
                    m = s0
                self.room[-1] = m - e[j - 1]
            if not e[j] > s0 + EPS:
                op.append(s0)
                self.room.append(d0 - e[j])
            return
        # ``max(0, k - D), min(n0, k + D)`` without the two calls (~0.5 % of a schedule)
        lo_k = k - D if k > D else 0
        hi_k = k + D if k + D < n0 else n0
        if lo_k < hi_k:
            i0 = bisect_left(op, s[lo_k])
            i1 = bisect_left(op, s[hi_k - 1], i0)
            if i1 < len(op) and op[i1] == s[hi_k - 1]:
                i1 += 1
        else:
            i0 = i1 = bisect_left(op, s0)
        s.insert(k, s0)
        self.d.insert(k, d0)
        self.e.insert(k, e0)
        d, e, n = self.d, self.e, n0 + 1
        free: list[float] = []
        rooms: list[float] = []  # their rooms (:meth:`_room` written out)
        if D == 2:  # :meth:`_free` at depth 2: the transfer before ``k`` ends by ``s_k``
            # (a loop, not a list comprehension: its frame cost ~1 % of ResNet-50's schedule)
            k = lo_k
            hi = n if hi_k + 1 > n else hi_k + 1
            if k == 0 and k < hi:
                free.append(s[0])
                rooms.append(INF)
                k = 1
            while k < hi:
                x = s[k]
                if not e[k - 1] > x + EPS:
                    free.append(x)
                    m = d[k]
                    if k + 1 < n and s[k + 1] < m:
                        m = s[k + 1]
                    rooms.append(m - e[k - 1])
                k += 1
        else:
            for k in range(lo_k, min(n, hi_k + 1)):  # :meth:`_free` written out
                ok = True
                for j in range(D - 1):
                    if k + j >= n:
                        break
                    p = k + j + 1 - D
                    if p >= 0 and e[p] > s[k + j] + EPS:
                        ok = False
                        break
                if ok:
                    free.append(s[k])
                    rooms.append(self._room(k))
        op[i0:i1] = free
        self.room[i0:i1] = rooms


__all__ = ["DmaQueue"]
