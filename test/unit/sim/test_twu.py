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
