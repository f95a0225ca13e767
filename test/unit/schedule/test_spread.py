"""placement.spread_segments: a run of small independent contractions (per-head attention GEMVs)
goes side by side on disjoint TPB windows instead of queueing on the first TPBs of the pool."""

from m100.passes.schedule.graph import Op
from m100.passes.schedule.refine import RUN, spread_segments
from m100.passes.schedule.segment import SegmentCfg, StageCfg


def _seg(op, tpbs, kind="data-parallel"):
    return SegmentCfg((StageCfg(op, tuple(tpbs)),), kind)


def _ops(names, unit="tcu.matmul"):
    return {n: Op(n, unit, (), ()) for n in names}


def test_a_run_of_small_matmuls_gets_disjoint_windows():
    pool = tuple(range(16))
    names = [f"mm{i}" for i in range(RUN)]
    ops = _ops(names) | _ops(["slice"], "dma") | _ops(["big"])
    segs = [_seg("big", pool)]
    for n in names:  # DMA segments in between do not break the run
        segs += [_seg(n, range(4)), _seg("slice", [0], "dma")]
    out = spread_segments(segs, pool, ops)
    assert out[0] == segs[0]  # the big one stays
    mm = [s.stages[0].tpbs for s in out if s.stages[0].op.startswith("mm")]
    assert mm[:4] == [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11), (12, 13, 14, 15)]
    assert mm[4] == (0, 1, 2, 3)  # round robin
    assert [s.stages[0].tpbs for s in out if s.kind == "dma"] == [(0,)] * RUN


def test_short_runs_and_other_units_stay():
    pool = tuple(range(16))
    ops = _ops([f"mm{i}" for i in range(RUN - 1)]) | _ops([f"ew{i}" for i in range(RUN)],
                                                           "cvu.elementwise")
    segs = [_seg(f"mm{i}", [0]) for i in range(RUN - 1)] + [_seg(f"ew{i}", [0]) for i in range(RUN)]
    assert spread_segments(segs, pool, ops) == segs


def test_narrow_puts_each_small_matmul_on_one_tpb_with_k_in_chunks():
    pool = tuple(range(16))
    names = [f"mm{i}" for i in range(RUN + 10)]
    ops = _ops(names)
    segs = [SegmentCfg((StageCfg(n, (0, 1, 2, 3), gc=4),), "data-parallel") for n in names]
    out = spread_segments(segs, pool, ops, narrow=True)
    st = [s.stages[0] for s in out]
    assert [s.tpbs for s in st] == [(i % 16,) for i in range(RUN + 10)]  # side by side, round robin
    assert all(s.gc == 1 and s.ks == 1 and s.chunked for s in st)
    assert spread_segments(segs, pool, ops)[0].stages[0].gc == 4  # (not narrow: as searched)
