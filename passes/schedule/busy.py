"""Busy intervals of one in-order resource, with an indexed search for the earliest idle gap.

The list scheduler (:mod:`.timeline`) places a transfer on a CCB DMA engine (and a copy from a kept
activation on a TPB's DTDU) in the *earliest idle gap* that can hold it: the engine's queue is
ordered by predicted start. :class:`BusyBlocks` holds the resource's busy time as merged, sorted
intervals ``[start, end)`` and answers that query.

The definition (the linear walk this module replaced): starting at the first interval that ends
after ``ready``, with ``t = ready``, stop at the first interval ``i`` whose start is ``>= t + dur``
(the transfer fits before it) and otherwise set ``t = max(t, end_i)`` and go on; past the last
interval the transfer goes at the end. On a big segment (a 7B prefill layer: thousands of
transfers, a weight chunk ready at 0 walking past every small gap the activations left) that walk
was a third of the compile.

Index: the intervals are kept in chunks of at most ``2 * CHUNK``; each chunk records its last end
(ends are non-decreasing: the intervals are disjoint and sorted, so the first interval ending after
``ready`` is found by bisection over chunks, then inside one) and an upper bound of its *internal*
gaps (``start_k - end_(k-1)`` for k >= 1). A chunk whose largest internal gap is smaller than
``dur`` (with a margin that covers the rounding of ``end + dur``) cannot hold the transfer
anywhere but before its first interval, which is checked on its own; such a chunk is passed in one
step (``t`` becomes its last end). Every interval the walk does look at is tested with the
definition's own comparison, so the result -- start and position -- is exactly the linear walk's
(``test/unit/schedule/test_busy.py`` checks it against the walk on random sequences; the emitted
programs of the e2e models are byte-identical, ``bench/compile_same.py``).

Adding busy time to an interval (merging) only shrinks gaps, so a chunk's bound stays an upper
bound (the chunk is marked and its bound recomputed only when a search would otherwise look inside
it); a new interval raises the bound by its own gaps inside the chunk (a part of the gap before the
chunk or of the idle tail may become internal).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

#: intervals per chunk (a chunk is split in two past 2 * CHUNK)
CHUNK = 48
#: intervals closer than this are merged (the scheduler's cycles are floats)
TOUCH = 1e-9
#: relative margin of the skip test: fl(s - e) < dur - margin implies s < fl(e + dur)
_REL = 1e-9



def _walk(S: list, E: list, k: int, t: float, dur: float) -> tuple[float, int | None]:
    """The linear walk over one chunk's intervals from index ``k``: the start ``t`` (pushed past
    each interval that ends after it) and the index of the first interval that starts at or after
    ``t + dur`` (None: none in this chunk; ``t`` is then past all of them)."""
    n = len(S)
    while k < n:
        if S[k] >= t + dur:
            return t, k
        x = E[k]
        if x > t:
            t = x
        k += 1
    return t, None

class BusyBlocks:
    """Merged sorted busy intervals ``[start, end)`` of one resource (see the module doc)."""

    __slots__ = ("s", "e", "gap", "last", "stale")

    def __init__(self) -> None:
        self.s: list[list[float]] = []  # chunk -> starts
        self.e: list[list[float]] = []  # chunk -> ends
        self.gap: list[float] = []  # chunk -> an upper bound of its internal gaps (-inf: none)
        self.last: list[float] = []  # chunk -> its last end
        self.stale: list[bool] = []  # chunk -> its gap bound may be above its largest gap

    def __len__(self) -> int:
        return sum(len(s) for s in self.s)

    def intervals(self) -> list[tuple[float, float]]:
        return [(a, b) for S, E in zip(self.s, self.e) for a, b in zip(S, E)]

    # ------------------------------------------------------------------ query
    def earliest(self, ready: float, dur: float) -> tuple[float, tuple[int, int]]:
        """The earliest start >= ``ready`` of a ``dur`` long interval in an idle gap, and the
        position to :meth:`insert` it at (valid until the next insertion)."""
        last = self.last
        nc = len(last)
        c = bisect_right(last, ready)  # first chunk holding an interval that ends after ready
        if c == nc:
            return ready, self._end()
        t, k = _walk(self.s[c], self.e[c], bisect_right(self.e[c], ready), ready, dur)
        if k is not None:
            return t, (c, k)
        gap = self.gap
        c += 1
        while c < nc:
            S = self.s[c]
            if S[0] >= t + dur:
                return t, (c, 0)
            lc = last[c]
            lim = dur - _REL * (abs(lc) + abs(dur))
            if gap[c] >= lim and self.stale[c]:
                self._regap(c)
            if gap[c] < lim:
                if lc > t:  # no internal gap holds it: t = max(t, every end of the chunk)
                    t = lc
                c += 1
                continue
            t, k = _walk(S, self.e[c], 0, t, dur)
            if k is not None:
                return t, (c, k)
            c += 1
        return t, self._end()

    def _end(self) -> tuple[int, int]:
        if not self.s:
            return (0, 0)
        return (len(self.s) - 1, len(self.s[-1]))

    # ------------------------------------------------------------------ update
    def append(self, a: float, e: float) -> None:
        """Add busy ``[a, e)`` after every interval (``a`` >= the last end, up to merging).
        :meth:`insert` at :meth:`_end` written out for that position (no next interval): the
        list scheduler appends every DTDU instruction of a TPB this way."""
        if not self.s:
            self.insert((0, 0), a, e)
            return
        c = len(self.s) - 1
        E = self.e[c]
        old = E[-1]
        if old >= a - TOUCH:  # merged into the last interval
            if e > old:
                E[-1] = e
            self.last[c] = E[-1]
            self.stale[c] = True
            return
        S = self.s[c]
        S.append(a)
        E.append(e)
        if a - old > self.gap[c]:  # the new internal gap before it
            self.gap[c] = a - old
        self.last[c] = e
        if len(S) > 2 * CHUNK:
            self._split(c)

    def insert(self, pos: tuple[int, int], a: float, e: float) -> None:
        """Add busy ``[a, e)`` at ``pos`` (from :meth:`earliest`), merging it with a neighbour
        that touches it: the previous interval if it ends at ``a`` (then also the next one if the
        grown interval reaches it), else the next one if it starts at ``e``."""
        c, k = pos
        if not self.s:
            self.s.append([a])
            self.e.append([e])
            self.gap.append(float("-inf"))
            self.last.append(e)
            self.stale.append(False)
            return
        S, E = self.s[c], self.e[c]
        # previous interval: (pc, pk)
        if k > 0:
            pc, pk = c, k - 1
        elif c > 0:
            pc, pk = c - 1, len(self.s[c - 1]) - 1
        else:
            pc = -1
        # next interval: (nc, nk)
        if k < len(S):
            nc, nk = c, k
        elif c + 1 < len(self.s):
            nc, nk = c + 1, 0
        else:
            nc = -1
        if pc >= 0 and self.e[pc][pk] >= a - TOUCH:
            PE = self.e[pc]
            old = PE[pk]
            if e > old:
                PE[pk] = e
            if nc >= 0 and self.s[nc][nk] <= PE[pk] + TOUCH:
                ne = self.e[nc][nk]
                if ne > PE[pk]:
                    PE[pk] = ne
                self._delete(nc, nk)
            self._shrunk(pc)
            if nc >= 0 and nc != pc and nc < len(self.s):
                self._shrunk(nc)
            return
        if nc >= 0 and self.s[nc][nk] <= e + TOUCH:
            self.s[nc][nk] = a
            self._shrunk(nc)
            return
        S.insert(k, a)
        E.insert(k, e)
        # the new interval's gaps inside the chunk may be new internal gaps (a part of the gap
        # before the chunk, or of the idle tail after the last interval): raise the bound
        g = self.gap[c]
        if k > 0 and S[k] - E[k - 1] > g:
            g = S[k] - E[k - 1]
        if k + 1 < len(S) and S[k + 1] - E[k] > g:
            g = S[k + 1] - E[k]
        self.gap[c] = g
        self.last[c] = E[-1]
        if len(S) > 2 * CHUNK:
            self._split(c)

    def _delete(self, c: int, k: int) -> None:
        del self.s[c][k]
        del self.e[c][k]
        if not self.s[c]:
            del self.s[c], self.e[c], self.gap[c], self.last[c], self.stale[c]

    def _split(self, c: int) -> None:
        S, E = self.s[c], self.e[c]
        h = len(S) // 2
        self.s[c:c + 1] = [S[:h], S[h:]]
        self.e[c:c + 1] = [E[:h], E[h:]]
        self.gap[c:c + 1] = [self.gap[c]] * 2  # still upper bounds
        self.last[c:c + 1] = [E[h - 1], E[-1]]
        self.stale[c:c + 1] = [True, True]

    def _shrunk(self, c: int) -> None:
        """After busy time was added inside chunk ``c``: its last end; its gap bound is stale."""
        self.last[c] = self.e[c][-1]
        self.stale[c] = True

    def _regap(self, c: int) -> None:
        S, E = self.s[c], self.e[c]
        self.gap[c] = max((S[k] - E[k - 1] for k in range(1, len(S))), default=float("-inf"))
        self.stale[c] = False


__all__ = ["BusyBlocks", "CHUNK"]


class RateProfile:
    """The used bandwidth of one shared link over time (the DRB: every broadcast, of a CCB DMA
    engine or of a TPB's DTDU, streams its bytes over it, ``drb_bandwidth`` in all), as a step
    function: breakpoints ``t`` and the rate in use from each to the next (0 after the last).

    A transfer of rate ``r`` (bytes per cycle) may run over ``[a, a + dur)`` when the rate in use
    there stays <= ``cap - r``; :meth:`earliest` finds the first such ``a`` >= ``ready``, :meth:`add`
    books it. Two DMA broadcasts at their AXI rate use the whole DRB of the m100 and never wait
    for each other; a DTDU broadcast beside them waits (the interpreter shares the DRB max-min
    among the transfers on it, ``sim/engine.py``: there they slow each other down instead)."""

    __slots__ = ("t", "u", "cap", "eps")

    def __init__(self, cap: float) -> None:
        self.t: list[float] = [0.0]
        self.u: list[float] = [0.0]
        self.cap = cap
        self.eps = 1e-9 * cap

    def earliest(self, ready: float, dur: float, rate: float) -> float:
        """The first start >= ``ready`` where ``rate`` fits over ``dur`` cycles."""
        # The definition walks the steps j from the one holding ``ready`` while ``t[j] < a +
        # dur``, moving ``a`` to ``t[j + 1]`` past each step whose rate in use is above ``lim``.
        # ``a`` only grows, so the walk looks at every step of the window ``[j, k)`` (k the
        # first step at or after ``a + dur``) and ends at its last busy one: one ``max`` over the
        # window (in C; most queries fit at once: ResNet-50, 84 % of 217 k) and, past a busy
        # step, the window after it (the same ``a``, session 27: the walk was ~14 steps a query)
        # (session 32) Two exits before the walk, the same answers: a start at or after the last
        # breakpoint fits at once (the rate there is 0: only ``[a, a + dur)`` of a booking is
        # raised, never the last step; ~27 % of ResNet-50's queries), and a window of one step
        # is that step's rate, without a slice (~half of the rest; session 34: the last step of
        # every window is read first, below)
        t, u = self.t, self.u
        lim = self.cap - rate + self.eps
        n = len(t)
        a = ready
        if a >= t[n - 1] and lim >= 0.0:
            return a
        j = bisect_right(t, a) - 1
        while True:
            k = bisect_left(t, a + dur, j)
            if k <= j:
                return a
            # the window's last busy step ``v`` (the walk goes on from the step after it): the
            # last step first (session 34: it is busy in ~5 of 6 windows that push ``a`` on
            # ResNet-50, which then need no ``max``), else the ``max`` of the steps before it
            v = k - 1
            if not u[v] > lim:
                if v == j or not max(u[j:v]) > lim:
                    return a
                v -= 1
                while not u[v] > lim:
                    v -= 1
            if v + 1 == n:  # unreachable: the rate after the last breakpoint is 0
                raise AssertionError("RateProfile: the last step is in use")
            a = t[v + 1]
            j = v + 1

    def add(self, a: float, dur: float, rate: float) -> None:
        """Book ``rate`` over ``[a, a + dur)``."""
        if dur <= 0 or rate <= 0:
            return
        # a breakpoint at ``a``, then one at ``a + dur`` (each inserted if missing, with the rate
        # of the step it splits; the second searched from the first), then the rate added to
        # the steps between (session 34: one pass, was two ``_split`` calls)
        t, u = self.t, self.u
        i = bisect_right(t, a) - 1
        if t[i] != a:
            i += 1
            t.insert(i, a)
            u.insert(i, u[i - 1])
        b = a + dur
        k = bisect_right(t, b, i) - 1
        if t[k] != b:
            k += 1
            t.insert(k, b)
            u.insert(k, u[k - 1])
        for j in range(i, k):
            u[j] += rate

    def copy(self) -> "RateProfile":
        c = RateProfile(self.cap)
        c.t = list(self.t)
        c.u = list(self.u)
        return c
