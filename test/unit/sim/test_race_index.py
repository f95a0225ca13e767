"""The race checker's per-unit logs (``sim/checks.py: RaceDetector``: a unit's records bisected by
epoch) find exactly the races of the definition: every earlier access of another unit to a common
byte, one of the two a write, that does not happen-before (``epoch > clock[unit]``), in arrival
order, with the lowest common byte -- checked against a brute-force scan of every earlier access,
with pruning, accesses sharing an epoch (a block's reads and writes) and lazy byte sets.

The batch checker (``sim/race_batch.py``) finds a race exactly when the per-access checker reports
one and the brute-force scan finds one: the same random sequences over several spaces, batches
the engine's prunings at random points; every access checked once at the end, by address: it
raises at the end iff the per-access checker and the brute force found a race anywhere, by the
sweep and by its fallback (one batch). Whole runs with batching on and off
are compared in ``test/e2e/test_speed_paths.py``."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from m100.sim.checks import ByteSet, RaceDetector, Record
from m100.sim.race_batch import RaceBatch, RaceFound

UNITS = 4


def byte_set(kind, lo, n, stride):
    """A dense interval, a strided set, a lazy strided set (bounds at once, members later), or a
    lazy bitmap (:meth:`ByteSet.lazy_mask`, how a dense-enough box walk is recorded)."""
    if kind == 0:
        return ByteSet.interval(lo, lo + n), set(range(lo, lo + n))
    addrs = lo + stride * np.arange(n)
    if kind == 1:
        return ByteSet(addrs), set(addrs.tolist())
    if kind == 3:
        hi = int(addrs[-1]) + 1

        def mask():
            m = np.zeros(hi - lo, dtype=bool)
            m[addrs - lo] = True
            return m
        return ByteSet.lazy_mask(lo, hi, mask), set(addrs.tolist())
    return (ByteSet.lazy(lo, int(addrs[-1]) + 1, lambda: ByteSet(addrs).arr),
            set(addrs.tolist()))


access = st.tuples(st.integers(0, UNITS - 1), st.booleans(), st.integers(0, 3),
                   st.integers(0, 1 << 12), st.integers(1, 300), st.integers(1, 9),
                   st.integers(0, 3), st.booleans(), st.booleans())


@settings(max_examples=150, deadline=None)
@given(st.lists(access, min_size=1, max_size=60))
def test_race_checker_equals_brute_force(accesses):
    det = RaceDetector(max_reports=10 ** 6)
    vc = np.zeros((UNITS, UNITS), dtype=np.int64)
    vc[np.arange(UNITS), np.arange(UNITS)] = 1
    seen = []  # (unit, epoch, write, members, inst)
    for i, (u, write, kind, lo, n, stride, sync_from, prune, tick) in enumerate(accesses):
        if sync_from != u and i % 3 == 0:  # a counter: u joins the clock of sync_from
            np.maximum(vc[u], vc[sync_from], out=vc[u])
        bs, members = byte_set(kind, lo, n, stride)
        rec = Record(u, int(vc[u, u]), write, bs, i, 0, "w" if write else "r")
        got = [(r.inst, a) for r, a in det.access((2, 0), rec, vc[u])]
        want = []
        for (ou, oe, ow, om, oi) in seen:
            if ou != u and (ow or write) and oe > vc[u, ou]:
                common = om & members
                if common:
                    want.append((oi, min(common)))
        assert got == want
        seen.append((u, int(vc[u, u]), write, members, i))
        vc[u, u] += tick  # no tick: the next access of u is in the same epoch
        if prune:
            det.prune(vc.min(axis=0))


batch_access = st.tuples(st.integers(0, UNITS - 1), st.booleans(), st.integers(0, 3),
                   st.integers(0, 1 << 12), st.integers(1, 300), st.integers(1, 9),
                   st.integers(0, 3), st.booleans(), st.booleans(), st.booleans(),
                   st.integers(0, 2))


@settings(max_examples=300, deadline=None)
@given(st.lists(batch_access, min_size=1, max_size=60))
def test_batch_finds_a_race_iff_the_per_access_checker_does(accesses):
    det = RaceDetector(max_reports=10 ** 6)
    batch = RaceBatch(UNITS)
    vc = np.zeros((UNITS, UNITS), dtype=np.int64)
    vc[np.arange(UNITS), np.arange(UNITS)] = 1
    seen = []  # (space, unit, epoch, write, members)
    raced = False  # the brute force found a race so far
    for i, (u, write, kind, lo, n, stride, sync_from, prune, tick, flush, sp) in \
            enumerate(accesses):
        if sync_from != u and i % 3 == 0:  # a counter: u joins the clock of sync_from
            np.maximum(vc[u], vc[sync_from], out=vc[u])
        bs, members = byte_set(kind, lo, n, stride)
        space = (2, sp)
        e = int(vc[u, u])
        got = det.access(space, Record(u, e, write, bs, i, 0, "w" if write else "r"), vc[u])
        now = any(osp == space and ou != u and (ow or write) and oe > vc[u, ou] and om & members
                  for (osp, ou, oe, ow, om) in seen)
        assert bool(got) == now
        raced |= now
        seen.append((space, u, e, write, members))
        batch.add(space, u, e, write, bs, batch.snapshot(vc[u]))
        vc[u, u] += tick
        if flush or prune:
            batch.check(vc.min(axis=0))  # (the engine's prunings: nothing is checked yet)
            if prune:
                det.prune(vc.min(axis=0))
    if raced:
        with pytest.raises(RaceFound):
            batch.check(None)
    else:
        batch.check(None)


@settings(max_examples=300, deadline=None)
@given(st.lists(batch_access, min_size=1, max_size=60), st.sampled_from([False, True, 1, 3]))
def test_bulk_check_finds_a_race_iff_the_brute_force_does(accesses, fallback):
    """Every access recorded (``RaceBatch.add``; the intermediate checks -- the engine's prunings
    -- do nothing), checked once at the end: :class:`RaceFound` iff some access has an earlier
    one of another unit in its space, one of the two a write, with a common byte, that does not
    happen-before it. ``fallback``: the sweep's pair bound at 0 (the run as one batch of
    ``check``); 1 or 3: the sweep's pairs in chunks of that many (``SWEEP_CHUNK``). The byte
    sets' bounding intervals meet in many ways here (inside, across,
    equal starts, touching ends), one unit's accesses share epochs (no tick), spaces differ."""
    from m100.sim import race_batch

    batch = RaceBatch(UNITS)
    vc = np.zeros((UNITS, UNITS), dtype=np.int64)
    vc[np.arange(UNITS), np.arange(UNITS)] = 1
    seen = []
    raced = False
    for i, (u, write, kind, lo, n, stride, sync_from, prune, tick, flush, sp) in \
            enumerate(accesses):
        if sync_from != u and i % 3 == 0:
            np.maximum(vc[u], vc[sync_from], out=vc[u])
        bs, members = byte_set(kind, lo, n, stride)
        space = (2, sp)
        e = int(vc[u, u])
        raced |= any(osp == space and ou != u and (ow or write) and oe > vc[u, ou] and
                     om & members for (osp, ou, oe, ow, om) in seen)
        seen.append((space, u, e, write, members))
        batch.add(space, u, e, write, bs, batch.snapshot(vc[u]))
        vc[u, u] += tick
        if flush or prune:
            batch.check(vc.min(axis=0))  # (bulk: nothing yet)
    bound, chunk = race_batch.BULK_PAIRS_PER_ACCESS, race_batch.SWEEP_CHUNK
    race_batch.BULK_PAIRS_PER_ACCESS = -1 if fallback is True else bound
    race_batch.SWEEP_CHUNK = chunk if isinstance(fallback, bool) else fallback
    try:
        if raced:
            with pytest.raises(RaceFound):
                batch.check(None)
        else:
            batch.check(None)
    finally:
        race_batch.BULK_PAIRS_PER_ACCESS, race_batch.SWEEP_CHUNK = bound, chunk
    batch.check(None)  # (checked once: nothing is left)


@pytest.mark.parametrize("first_write", [True, False])
@pytest.mark.parametrize("lo, hi, race", [
    (90, 100, False), (110, 120, False),  # touching the write's ends
    (90, 101, True), (109, 120, True),  # one byte in common at each end
    (100, 110, True), (100, 101, True), (109, 110, True),  # equal bounds; first / last byte
    (95, 130, True), (99, 105, True), (102, 104, True)])  # the write inside; the read inside
def test_bulk_check_at_interval_edges(lo, hi, race, first_write):
    """Two unordered accesses of two units, a write of [100, 110) and a read of [lo, hi), in
    either arrival order: the bulk check raises iff they have a common byte."""
    vc = np.eye(2, dtype=np.int64)
    batch = RaceBatch(2)
    acc = [(0, True, ByteSet.interval(100, 110)), (1, False, ByteSet.interval(lo, hi))]
    for u, write, bs in (acc if first_write else acc[::-1]):
        batch.add((2, 0), u, 1, write, bs, batch.snapshot(vc[u]))
    if race:
        with pytest.raises(RaceFound):
            batch.check(None)
    else:
        batch.check(None)


def test_per_access_checker_agrees_with_the_brute_force_flag():
    """(The per-access checker's own brute-force test is test_race_index; here: a race found by
    the batch is one the per-access checker reports, on a fixed racy sequence.)"""
    vc = np.eye(2, dtype=np.int64)
    batch = RaceBatch(2)
    det = RaceDetector()
    bs_w, _ = byte_set(0, 100, 10, 1)
    bs_r, _ = byte_set(1, 105, 3, 2)
    assert not det.access((1, 0), Record(0, 1, True, bs_w, 0, 0, "w"), vc[0])
    batch.add((1, 0), 0, 1, True, bs_w, batch.snapshot(vc[0]))
    assert det.access((1, 0), Record(1, 1, False, bs_r, 1, 0, "r"), vc[1])
    batch.add((1, 0), 1, 1, False, bs_r, batch.snapshot(vc[1]))
    with pytest.raises(RaceFound):
        batch.check(None)


@pytest.mark.parametrize("seed", range(6))
def test_memoized_bitmap_test_equals_the_byte_sets(seed):
    """``race_batch.meet`` (the sweep's byte test, memoized for two read-only bitmaps by their
    identity, offset and spans) answers as the members do, for every offset at which two bitmaps'
    windows meet (exhaustive), each pair in both orders, bases far and near: three bitmaps of one
    span (so only the identity tells them apart; as ``twu.box_mask`` shares one per geometry)
    and one of another span, one memo across all of it so keys repeat; a dense mask and a
    writeable one go to ``first_overlap``."""
    from m100.sim.race_batch import meet

    rng = np.random.default_rng(seed)
    span = int(rng.integers(3, 30))
    masks = []
    for k, sp in enumerate((span, span, span, span + 7, span)):
        m = rng.random(sp) < (1.0 if k == 4 else 0.3)  # the last: dense (mask None)
        m[0] = m[-1] = True  # (a bitmap spans its lowest to its highest member)
        m.flags.writeable = k == 2
        masks.append(m)
    memo = {}
    for base in (0, 1000, 37):
        for i, ma in enumerate(masks):
            for j, mb in enumerate(masks):
                for d in range(-mb.size - 1, ma.size + 2):
                    a = ByteSet.lazy_mask(base, base + ma.size, lambda m=ma: m)
                    b = ByteSet.lazy_mask(base + d, base + d + mb.size, lambda m=mb: m)
                    want = bool(set((base + np.flatnonzero(ma)).tolist()) &
                                set((base + d + np.flatnonzero(mb)).tolist()))
                    assert meet(a, b, memo) == want, (i, j, d)
                    assert meet(b, a, memo) == want, (j, i, -d)
    assert memo  # (the read-only pairs were memoized)
