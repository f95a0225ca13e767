"""Walk address streams: the analytic bank histogram vs brute-force enumeration of every beat."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from m100.sim.twu import bank_accesses, contiguous_start
from m100.targets.m100.isa import DType, Level, Space, Walk
from m100.targets.m100.machine import get_machine

M = get_machine("m100")
W, BANKS = M.hbsm_bank_width, M.hbsm_banks


def brute(walk: Walk) -> np.ndarray:
    """One access per granule touched by each pass of a fine-strided innermost level (consecutive
    beats in one granule coalesce), else one per granule touched by each beat."""
    es = walk.dtype.bits // 8
    off = walk.offsets()
    shape = [lv.count for lv in walk.levels if lv.count > 1] or [1]
    inner = [lv for lv in walk.levels if lv.count > 1]
    fine = bool(inner) and abs(inner[-1].step) * es <= W
    runs = off.reshape(-1, shape[-1]) if fine else off.reshape(-1, 1)
    counts = np.zeros(BANKS)
    for run in runs:
        a = walk.base + run * es
        granules = set()
        for x in a:
            granules.update(range(int(x) // W, (int(x) + es - 1) // W + 1))
        for g in granules:
            counts[g % BANKS] += 1
    return counts


level = st.tuples(st.integers(0, 40), st.sampled_from([0, 1, 2, 3, 8, 16, 33, 64, 256, 1024]),
                  st.integers(1, 9))


@settings(max_examples=150, deadline=None)
@given(st.lists(level, min_size=1, max_size=3), st.sampled_from([DType.I8, DType.F16, DType.I32]),
       st.integers(0, 4096))
def test_bank_histogram_matches_enumeration(levels, dt, base):
    lv = tuple(Level(i, s, i + s * (n - 1)) if s else Level(i, 0, n) for i, s, n in levels)
    w = Walk(Space.HBSM, 0, base, dt, lv)
    assert np.array_equal(bank_accesses(w, M), brute(w))


def test_one_bank_vs_spread():
    one = Walk.strided(Space.HBSM, 0, 0, DType.I32, (64,), (256,))  # 1024 B apart: bank 0 only
    spread = Walk.strided(Space.HBSM, 0, 0, DType.I32, (64,), (8,))  # 32 B apart: every bank
    assert list(bank_accesses(one, M)) == [64] + [0] * 31
    assert list(bank_accesses(spread, M)) == [2] * 32
    big = Walk.strided(Space.HBSM, 0, 0, DType.I8, (1 << 20,))  # 1 MiB contiguous, analytically
    assert list(bank_accesses(big, M)) == [(1 << 20) // 1024] * 32


def test_contiguous_start():
    assert contiguous_start(Walk.strided(Space.HBSM, 0, 0, DType.I8, (4, 8))) == 0
    assert contiguous_start(Walk.strided(Space.HBSM, 0, 0, DType.I8, (4, 8), (16, 1))) is None
    assert contiguous_start(Walk.strided(Space.HBSM, 0, 0, DType.I8, (1, 8), offset=5)) == 5


@settings(max_examples=100, deadline=None)
@given(st.lists(level, min_size=1, max_size=4), st.sampled_from([DType.I8, DType.F16, DType.F32]),
       st.integers(0, 1 << 20), st.booleans())
def test_enumerated_runs_equal_the_fft_convolution(levels, dt, base, sram):
    """The run start residues counted one by one (``twu.DIRECT_RUNS``) give the same histogram,
    bit for bit, as the FFT convolution of the levels' residue histograms (HBSM and CCB SRAM)."""
    from m100.sim import twu

    lv = tuple(Level(i, s, i + s * (n - 1)) if s else Level(i, 0, n) for i, s, n in levels)
    w = Walk(Space.HBSM, 0, base, dt, lv)
    width, banks = (M.ccb_sram_interleave, M.ccb_sram_banks) if sram else (W, BANKS)
    direct = twu._walk_bank_accesses(w, width, banks)
    old = twu.DIRECT_RUNS
    twu.DIRECT_RUNS = 0
    try:
        fft = twu._walk_bank_accesses(w, width, banks)
    finally:
        twu.DIRECT_RUNS = old
    assert direct.dtype == fft.dtype and direct.tobytes() == fft.tobytes()


@settings(max_examples=60, deadline=None)
@given(st.lists(level, min_size=1, max_size=3), st.sampled_from([DType.I4, DType.I8, DType.F16]),
       st.integers(0, 4096), st.integers(1, 5), st.integers(0, 55), st.booleans())
def test_bank_histogram_is_shared_by_tpb_and_base_residue(levels, dt, base, k, tpb, sram):
    """The bank histograms are cached by (base modulo width * banks, element bits, levels)
    (``twu._accesses``): a walk on another TPB, or ``k`` sweeps further, gets the entry of the
    first -- which must be its own histogram (brute force for HBSM; for the CCB SRAM granules,
    the histogram computed afresh without the cache)."""
    from m100.sim import twu

    lv = tuple(Level(i, s, i + s * (n - 1)) if s else Level(i, 0, n) for i, s, n in levels)
    width, banks = (M.ccb_sram_interleave, M.ccb_sram_banks) if sram else (W, BANKS)
    first = Walk(Space.HBSM, 0, base, dt, lv)
    other = Walk(Space.HBSM, tpb, base + k * width * banks, dt, lv)
    got = [twu._accesses(w, width, banks) for w in (first, other)]
    for w, g in zip((first, other), got):
        want = brute(w) if not sram and dt.bits >= 8 else twu._walk_bank_accesses(w, width, banks)
        assert g.tobytes() == np.asarray(want, dtype=np.float64).tobytes()


def _old_cached(base_mod, bits, levels, width, banks):
    """Session 35's ``twu._cached`` (the reference): every base residue modulo the sweep built."""
    from m100.sim import twu

    return tuple(twu._bank_hist(base_mod, bits, levels, width, banks).tolist())


@settings(max_examples=100, deadline=None)
@given(st.lists(level, min_size=1, max_size=4),
       st.sampled_from([DType.I4, DType.I8, DType.F16, DType.F32]), st.integers(0, 1 << 20),
       st.booleans(), st.booleans())
def test_rolled_histograms_equal_the_built_ones(levels, dt, base, sram, fft):
    """A histogram at ``base`` made by rolling the one at ``base % width`` (``twu.ROLL``) equals
    the one built at ``base`` -- on the enumerated runs and on the FFT convolution (HBSM and CCB
    SRAM granules; i4's half-byte elements), every residue of the sweep reached."""
    from m100.sim import twu

    lv = tuple(Level(i, s, i + s * (n - 1)) if s else Level(i, 0, n) for i, s, n in levels)
    width, banks = (M.ccb_sram_interleave, M.ccb_sram_banks) if sram else (W, BANKS)
    old = twu.DIRECT_RUNS
    twu.DIRECT_RUNS = 0 if fft else old
    try:
        twu._cached.cache_clear()
        for b in (base, base + width, base + 3 * width + 1):
            mod = b % (width * banks)
            got = twu._cached(mod, dt.bits, lv, width, banks)
            assert got == _old_cached(mod, dt.bits, lv, width, banks), (b, mod)
    finally:
        twu.DIRECT_RUNS = old
        twu._cached.cache_clear()


def test_rolled_histograms_are_taken_and_a_wrong_roll_fails():
    """(Not vacuous: a walk at several granule offsets builds one histogram; rolling the other
    way -- the mutant -- gives other counts than the brute force.)"""
    from m100.sim import twu

    w = Walk.strided(Space.HBSM, 0, 0, DType.F32, (3, 5), (40, 1))
    twu._cached.cache_clear()
    real = twu._bank_hist
    built = []
    twu._bank_hist = lambda *a: built.append(a[0]) or real(*a)
    try:
        for q in range(0, 8):
            base = q * W + 4
            assert twu._cached(base, 32, w.levels, W, BANKS) == \
                tuple(brute(Walk(Space.HBSM, 0, base, DType.F32, w.levels)).tolist())
    finally:
        twu._bank_hist = real
    assert built == [4]
    got = twu._cached(5 * W + 4, 32, w.levels, W, BANKS)
    wrong = got[5:] + got[:5]  # (q = 5 the other way)
    twu._cached.cache_clear()
    assert wrong != tuple(brute(Walk(Space.HBSM, 0, 5 * W + 4, DType.F32, w.levels)).tolist())


def test_accesses_found_by_identity():
    """``twu._accesses`` finds a levels tuple's array by identity (the entry holds the tuple),
    and does not take an entry whose id is reused by another tuple."""
    from m100.sim import twu

    twu._ACC.clear()
    a = Walk.strided(Space.HBSM, 0, 64, DType.F32, (4, 8), (16, 1))
    b = Walk.strided(Space.HBSM, 3, 64, DType.F32, (4, 8), (16, 1))  # (equal levels, another tuple)
    ga = twu._accesses(a, W, BANKS)
    assert np.array_equal(ga, brute(a)) and len(twu._ACC) == 1
    stale = np.full(BANKS, -1.0)
    twu._ACC[(64, 32, id(b.levels), W, BANKS)] = (a.levels if a.levels is not b.levels else (),
                                                 stale)
    gb = twu._accesses(b, W, BANKS)
    assert gb is not stale and np.array_equal(gb, ga)
    twu._ACC.clear()
