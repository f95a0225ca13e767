"""Int4 GEMVs in finer K chunks (``StageCfg.kfine``, ``gemv_chunks.finer_gemv_chunks``, issue 13).

Oracles: the chunk count from the tiling (at least ``4 * kfine`` chunks of whole dequantization
blocks), the refinement's plan against a fresh build of the segments it returns (and only
``chunked`` / ``kfine`` changed, only where the plan got shorter), numpy from the
``DequantizeLinear`` definition on a program compiled with the finer chunks, and every int4 weight
element read from DDR by exactly one DMA.
"""

from dataclasses import replace

import numpy as np

from m100.passes.schedule import gemv_chunks, placement
from m100.passes.schedule.cost import CostModel, ceil_div
from m100.passes.schedule.partition import tile_piece
from m100.targets.m100.isa import Dma, Space
from m100.targets.m100.machine import get_machine
from m100.tools import driver

from .test_widen_gemvs import B, DIMS, _graph, _w4_chain, _w4_reference

M100 = get_machine("m100")


def test_tiler_cuts_at_least_4_kfine_chunks_of_whole_blocks():
    cm = CostModel(M100)
    g = _graph(_w4_chain())
    op = [o for o in g.ops if o.unit == "tcu.matmul"][1]  # K = 4096 = 32 blocks of 128
    for kfine in (1, 2, 4):
        p = tile_piece(cm, g, op, 1, 586, chunked=True, kfine=kfine)
        n = ceil_div(p.k, p.tk)
        assert n >= 4 * kfine and p.tk % B == 0
    # more chunks than K has whole blocks: the finest there is (one block a chunk), never fewer
    assert tile_piece(cm, g, op, 1, 586, chunked=True, kfine=16).tk == B


def _finer(seen: list):
    """``share_gemv_chunks`` followed by ``kfine = 2`` on every int4 GEMV in K chunks."""
    share = placement.share_gemv_chunks

    def forced(s, segs, tl, keep):
        segs, tl = share(s, segs, tl, keep)
        out = []
        for seg in segs:
            st = seg.stages[0]
            if len(seg.stages) == 1 and "w4" in s.ops[st.op].attrs:
                seg = replace(seg, stages=(replace(st, chunked=True, kfine=2),))
                seen.append(seg.stages[0])
            out.append(seg)
        return out, s.sched.build(out, keep=keep)
    return forced


def test_finer_chunks_match_numpy_and_read_every_weight_once(monkeypatch):
    seen: list = []
    monkeypatch.setattr(placement, "share_gemv_chunks", _finer(seen))
    monkeypatch.setattr(placement, "finer_gemv_chunks", lambda s, segs, tl, keep: (segs, tl))
    # (the forced configuration as it is: not widened afterwards)
    monkeypatch.setattr(placement, "widen_shared_gemvs", lambda s, segs, tl, keep, pool: (segs, tl))
    cr = driver.compile(_w4_chain(), machine="m100")
    assert len(seen) == 2
    prog = cr.program
    dmas = [i for s in prog.streams.values() for i in s if isinstance(i, Dma)
            and i.src.space is Space.DDR]
    for i, (k, n) in enumerate(zip(DIMS, DIMS[1:])):
        sym = next(s for s in prog.symbols if s.name == f"q{i}")
        mine = [d for d in dmas if sym.address <= d.src.base < sym.address + sym.nbytes]
        el = np.zeros(k * n, np.int64)
        for d in mine:
            np.add.at(el, (d.src.base - sym.address) * 2 + d.src.offsets(), 1)
        assert el.min() == 1 and el.max() == 1
        # at least 8 K chunks for each TPB (group of ``wshare`` TPBs): one DMA each
        st = seen[i]
        assert len(mine) >= 8 * len(st.tpbs) // st.wshare
    rng = np.random.default_rng(11)
    feed = {"x": rng.standard_normal((1, DIMS[0])).astype(np.float16)}
    want = _w4_reference(rng, feed)
    got = driver.run(prog, feed, machine=cr.machine).outputs["y"].reshape(want.shape)
    d = np.abs(got.astype(np.float64) - want.astype(np.float64))
    assert np.all(d <= 4 * np.abs(np.spacing(want)) + 2e-3 * np.abs(want).max())


def test_refinement_keeps_finer_chunks_only_when_the_plan_is_shorter(monkeypatch):
    seen = []
    share = placement.share_gemv_chunks

    def spy(s, segs, tl, keep):
        out = share(s, segs, tl, keep)
        seen.append((s, out[0], out[1], keep))
        return out

    monkeypatch.setattr(placement, "share_gemv_chunks", spy)
    placement.schedule(_graph(_w4_chain()), M100)
    s, segs, tl, keep = seen[-1]
    s.budget = float("inf")
    tried = []
    shorter = s.sched.shorter
    monkeypatch.setattr(s.sched, "shorter", lambda trial, *a, **k: tried.append(trial) or
                        shorter(trial, *a, **k))
    segs2, tl2 = gemv_chunks.finer_gemv_chunks(s, segs, tl, keep)
    assert tried and all(any(seg.stages[0].kfine > 1 for seg in t) for t in tried)
    assert tl2.makespan <= tl.makespan
    assert s.sched.build(segs2, keep=keep).makespan == tl2.makespan
    for a, b in zip(segs, segs2):
        if a != b:
            assert replace(b.stages[0], kfine=1, chunked=a.stages[0].chunked) == a.stages[0]
            assert tl2.makespan < tl.makespan
            p = tl2.plans[b.stages[0].op]
            assert ceil_div(p.k, p.tk) >= 4 * b.stages[0].kfine
