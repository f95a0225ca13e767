"""BusyBlocks (passes/schedule/busy.py) gives exactly the linear walk's placements.

The oracle is the definition the scheduler used before the index: a flat sorted list of merged busy
intervals, the earliest gap found by walking it from the first interval that ends after ``ready``,
an insertion merging touching neighbours. Random operation sequences (gap queries with random
``ready``/``dur`` -- zero lengths, touching and overlapping-in-time requests, values on a coarse
grid so that merges and exact fits happen -- each followed by an insertion at the answer, plus
appends as the DTDU does) must give the same start and the same intervals after every step, with
chunks small enough that splits, chunk skips and chunk deletions all occur.
"""

from __future__ import annotations

import bisect
import operator
import random

import pytest

from m100.passes.schedule import busy
from m100.passes.schedule.busy import BusyBlocks

_END = operator.itemgetter(1)


def walk_gap(blocks, ready, dur):
    """The definition: earliest start >= ready of a dur long interval between busy blocks."""
    i = bisect.bisect_right(blocks, ready, key=_END)
    t = ready
    while i < len(blocks):
        if blocks[i][0] >= t + dur:
            break
        t = max(t, blocks[i][1])
        i += 1
    return t, i


def walk_insert(blocks, i, a, e):
    if i > 0 and blocks[i - 1][1] >= a - 1e-9:
        blocks[i - 1][1] = max(blocks[i - 1][1], e)
        if i < len(blocks) and blocks[i][0] <= blocks[i - 1][1] + 1e-9:
            blocks[i - 1][1] = max(blocks[i - 1][1], blocks[i][1])
            del blocks[i]
        return
    if i < len(blocks) and blocks[i][0] <= e + 1e-9:
        blocks[i][0] = a
        return
    blocks.insert(i, [a, e])


def _check_index(b: BusyBlocks) -> None:
    """The index invariants: ends sorted, every chunk's bound >= its largest internal gap."""
    ends = [e for _, e in b.intervals()]
    assert ends == sorted(ends)
    for c, (S, E) in enumerate(zip(b.s, b.e)):
        assert S and b.last[c] == E[-1]
        gaps = [S[k] - E[k - 1] for k in range(1, len(S))]
        if gaps:
            assert b.gap[c] >= max(gaps)


@pytest.mark.parametrize("chunk", [1, 2, 3, 48])
@pytest.mark.parametrize("seed", range(6))
def test_same_as_linear_walk(monkeypatch, chunk, seed):
    monkeypatch.setattr(busy, "CHUNK", chunk)
    rng = random.Random(seed)
    ref: list[list[float]] = []
    b = BusyBlocks()
    horizon = 0.0
    grid = rng.choice((1.0, 0.25, 0.1))  # 0.1: not exact in binary (rounded sums)
    for step in range(1500):
        if rng.random() < 0.1:  # the DTDU: append at the end of its queue
            a = horizon + grid * rng.randrange(0, 3)
            e = a + grid * rng.randrange(0, 6)
            walk_insert(ref, len(ref), a, e)
            b.append(a, e)
        else:
            ready = grid * rng.randrange(0, int(horizon / grid) + 20)
            dur = grid * rng.choice((0, 1, 1, 2, 3, 5, 8, 40))
            want_t, want_i = walk_gap(ref, ready, dur)
            got_t, pos = b.earliest(ready, dur)
            assert got_t == want_t, (step, ready, dur)
            walk_insert(ref, want_i, want_t, want_t + dur)
            b.insert(pos, got_t, got_t + dur)
        horizon = max(horizon, ref[-1][1]) if ref else horizon
        assert b.intervals() == [tuple(x) for x in ref], step
        if step % 50 == 0:
            _check_index(b)
    _check_index(b)
    assert len(b) == len(ref)


def test_skips_chunks_without_a_gap_that_fits():
    """A long transfer ready at 0 after many short busy blocks with short gaps goes to the end
    (and to the one gap that fits, when there is one) looking at few intervals."""
    b = BusyBlocks()
    for k in range(10_000):
        b.append(10.0 * k, 10.0 * k + 9.0)  # gaps of 1
    assert len(b.s) > 50  # chunked
    t, pos = b.earliest(0.0, 5.0)
    assert t == 100_000 - 1.0 and pos == b._end()
    b.insert(pos, t, t + 5.0)
    # open one gap of 6 in the middle: the fit is found there
    S, E = b.s, b.e
    c = len(S) // 2
    E[c][3] -= 5.0  # [.., end - 5): the gap after it is 6 long
    b._regap(c)
    t, (pc, pk) = b.earliest(0.0, 5.0)
    assert t == E[c][3] and (pc, pk) == (c, 4)


def _used(bookings, x):
    """The rate in use at time ``x``: the sum over the bookings covering it (the definition)."""
    return sum(r for a, d, r in bookings if a <= x < a + d)


@pytest.mark.parametrize("seed", range(6))
def test_rate_profile_is_the_earliest_fitting_start(seed):
    """RateProfile.earliest against the definition: with the rate in use computed from the list of
    bookings, the returned start fits (at every booking edge inside the window and at its start,
    where the step function can change) and no earlier candidate start does (the candidates: the
    ready time and every booking end after it -- the step function only drops there)."""
    from m100.passes.schedule.busy import RateProfile
    rng = random.Random(seed)
    cap = 170.0
    prof = RateProfile(cap)
    book = []
    for _ in range(150):
        ready = rng.choice([0.0, 10.0, 25.0, 40.0]) + rng.randrange(0, 400, 5)
        dur = float(rng.choice([1, 5, 20, 50, 120]))
        rate = rng.choice([30.0, 64.0, 85.0, 100.0, 170.0])

        def fits(a):
            pts = [a] + [x for b, d, _ in book for x in (b, b + d) if a < x < a + dur]
            return all(_used(book, x) + rate <= cap + 1e-6 for x in pts)
        a = prof.earliest(ready, dur, rate)
        assert a >= ready and fits(a)
        cands = [ready] + [b + d for b, d, _ in book if ready < b + d < a]
        assert not any(fits(c) for c in cands if c < a)
        prof.add(a, dur, rate)
        book.append((a, dur, rate))
        for x in prof.t:  # the profile is the sum of the bookings
            assert prof.u[prof.t.index(x)] == pytest.approx(_used(book, x))


def test_rate_profile_two_axi_broadcasts_share_the_drb():
    """Two DMA broadcasts at the AXI rate (half the m100's DRB each) run at the same time; a
    third transfer of any rate waits until one of them ends."""
    from m100.passes.schedule.busy import RateProfile
    from m100.targets.m100.machine import get_machine
    m = get_machine("m100")
    drb, axi = m.bytes_per_cycle(m.drb_bandwidth), m.bytes_per_cycle(m.axi_bandwidth)
    assert 2 * axi <= drb * (1 + 1e-9)
    prof = RateProfile(drb)
    prof.add(0.0, 100.0, axi)
    assert prof.earliest(0.0, 100.0, axi) == 0.0
    prof.add(0.0, 50.0, axi)
    assert prof.earliest(0.0, 10.0, 1.0) == 50.0


def _rate_walk(prof, ready, dur, rate):
    """RateProfile.earliest's definition, the step-by-step walk (the code before session 27)."""
    t, u = prof.t, prof.u
    lim = prof.cap - rate + prof.eps
    a = ready
    j = bisect.bisect_right(t, a) - 1
    while j < len(t) and t[j] < a + dur:
        if u[j] > lim:
            a = t[j + 1]
        j += 1
    return a


@pytest.mark.parametrize("seed", range(4))
def test_rate_profile_windows_are_the_walk(seed):
    """The windowed search (a ``max`` per window, session 27) returns exactly the walk's start,
    on profiles of many small bookings on a coarse grid (ties of step edges and window ends)."""
    from m100.passes.schedule.busy import RateProfile
    rng = random.Random(100 + seed)
    prof = RateProfile(100.0)
    for _ in range(400):
        ready = float(rng.randrange(0, 300, rng.choice([1, 5])))
        dur = float(rng.choice([0, 1, 3, 5, 10, 40]))
        rate = rng.choice([10.0, 25.0, 50.0, 75.0, 100.0])
        a = prof.earliest(ready, dur, rate)
        assert a == _rate_walk(prof, ready, dur, rate)
        if rng.random() < 0.7:
            prof.add(a, dur, rate)


def _add_by_splits(prof, a, dur, rate):
    """``RateProfile.add`` as it was before session 34: a breakpoint at ``a`` and one at ``a +
    dur`` (each inserted if missing, with the rate of the step it splits), then the rate added
    to every step between them."""
    if dur <= 0 or rate <= 0:
        return
    t, u = prof.t, prof.u

    def split(x):
        i = bisect.bisect_right(t, x) - 1
        if t[i] == x:
            return i
        t.insert(i + 1, x)
        u.insert(i + 1, u[i])
        return i + 1
    i = split(a)
    k = split(a + dur)
    for j in range(i, k):
        u[j] += rate


@pytest.mark.parametrize("seed", range(6))
def test_rate_profile_add_is_the_two_splits(seed):
    """(session 34) ``RateProfile.add`` written as one pass gives exactly the breakpoints and
    float sums of the two splits: bookings on a coarse grid (shared edges, a booking ending where
    another starts), tiny durations whose end rounds onto their start, zero durations and rates,
    and starts past the last breakpoint."""
    from m100.passes.schedule.busy import RateProfile
    rng = random.Random(3400 + seed)
    prof, ref = RateProfile(100.0), RateProfile(100.0)
    for step in range(600):
        a = rng.choice([float(rng.randrange(0, 400, 5)), rng.uniform(0, 500), prof.t[-1],
                        prof.t[-1] + 7.0, 1e6])
        dur = rng.choice([0.0, 5.0, 20.0, rng.uniform(0, 50), 1e-12, 3.0])
        rate = rng.choice([0.0, 10.0, 25.5, 1 / 3, 50.0])
        prof.add(a, dur, rate)
        _add_by_splits(ref, a, dur, rate)
        assert prof.t == ref.t and prof.u == ref.u, step
    assert len(prof.t) > 300
