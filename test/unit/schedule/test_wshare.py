"""Int4 GEMVs whose column parts share each weight K chunk's DMA (``StageCfg.wshare``, issue 13).

Oracles: numpy from the ``DequantizeLinear`` definition on the compiled program, every int4
weight element read from DDR by exactly one DMA (counted per element from the DMA walks), the
DMA count from the configuration (column-part groups x K chunks, each a DRB broadcast to its
group), and the refinement's plan against a fresh build of the segments it returns.
"""

from dataclasses import replace

import numpy as np
import pytest

from m100.passes.schedule import placement, wshare
from m100.passes.schedule.segment import wshare_ok
from m100.targets.m100.isa import Dma, Space, tpbs_of
from m100.targets.m100.machine import get_machine
from m100.tools import driver

from ...e2e.test_llm_w4 import _matmuls
from .test_widen_gemvs import B, DIMS, _w4_chain, _w4_reference

M100 = get_machine("m100")


def _force(share: int, seen: list):
    """``widen_gemvs`` followed by ``wshare`` on every int4 GEMV that can take it
    (``share_gemv_chunks`` keeps a share only where the whole plan gets shorter)."""
    widen = placement.widen_gemvs

    def forced(s, segs, tl, keep, pool):
        segs, tl = widen(s, segs, tl, keep, pool)
        out = []
        for seg in segs:
            st = seg.stages[0]
            if len(seg.stages) == 1 and st.gc % share == 0 and \
                    wshare_ok(s.ops[st.op], replace(st, wshare=share), tl.plans[st.op]):
                seg = replace(seg, stages=(replace(st, wshare=share),))
                seen.append(seg.stages[0])
            out.append(seg)
        return out, s.sched.build(out, keep=keep)
    return forced


def test_shared_weight_chunks_are_one_broadcast_per_group_and_match_numpy(monkeypatch):
    seen: list = []
    monkeypatch.setattr(placement, "widen_gemvs", _force(7, seen))
    cr = driver.compile(_w4_chain(), machine="m100")
    assert len(seen) == 2 and all(st.gc == 7 and st.wshare == 7 for st in seen)
    prog = cr.program
    mm = [i for i in _matmuls(prog) if i.scale is not None]
    dmas = [i for s in prog.streams.values() for i in s if isinstance(i, Dma)
            and i.src.space is Space.DDR]
    n_weight_dmas = 0
    for i, (k, n) in enumerate(zip(DIMS, DIMS[1:])):
        sym = next(s for s in prog.symbols if s.name == f"q{i}")
        mine = [d for d in dmas if sym.address <= d.src.base < sym.address + sym.nbytes]
        seen_el = np.zeros(k * n, np.int64)
        for d in mine:  # int4: element offsets from the symbol's first nibble
            np.add.at(seen_el, (d.src.base - sym.address) * 2 + d.src.offsets(), 1)
        assert seen_el.min() == 1 and seen_el.max() == 1
        assert all(sorted(tpbs_of(d.tpb_mask)) == sorted(seen[i].tpbs) for d in mine)
        n_weight_dmas += len(mine)
        # the group's scales: one broadcast to the group, every f16 scale read once
        ssym = next(s for s in prog.symbols if s.name == f"s{i}")
        sd = [d for d in dmas if ssym.address <= d.src.base < ssym.address + ssym.nbytes]
        assert len(sd) == 1 and sorted(tpbs_of(sd[0].tpb_mask)) == sorted(seen[i].tpbs)
        s_el = np.zeros((k // B) * n, np.int64)
        np.add.at(s_el, (sd[0].src.base - ssym.address) // 2 + sd[0].src.offsets(), 1)
        assert s_el.min() == 1 and s_el.max() == 1
    # one group of all 7 column parts: per K chunk one broadcast, where each TPB computes one
    # matmul per K chunk of each GEMV (unshared: 7 loads per chunk)
    per_tpb = {t: sum(1 for m in mm if m.tpb == t) for t in seen[0].tpbs}
    assert set(per_tpb.values()) == {n_weight_dmas}
    rng = np.random.default_rng(7)
    feed = {"x": rng.standard_normal((1, DIMS[0])).astype(np.float16)}
    want = _w4_reference(rng, feed)
    got = driver.run(prog, feed, machine=cr.machine).outputs["y"].reshape(want.shape)
    d = np.abs(got.astype(np.float64) - want.astype(np.float64))
    assert np.all(d <= 4 * np.abs(np.spacing(want)) + 2e-3 * np.abs(want).max())


def test_refinement_keeps_a_share_only_when_the_plan_is_shorter(monkeypatch):
    seen = []
    widen = placement.widen_gemvs

    def spy(s, segs, tl, keep, pool):
        out = widen(s, segs, tl, keep, pool)
        seen.append((s, out[0], out[1], keep))
        return out

    monkeypatch.setattr(placement, "widen_gemvs", spy)
    placement.schedule(_graph(), M100)
    s, segs, tl, keep = seen[-1]
    s.budget = float("inf")  # (the trials are not skipped for a spent search budget)
    tried = []
    shorter = s.sched.shorter
    monkeypatch.setattr(s.sched, "shorter", lambda trial, *a, **k: tried.append(trial) or
                        shorter(trial, *a, **k))
    segs2, tl2 = wshare.share_gemv_chunks(s, segs, tl, keep)
    assert len(tried) == 2  # both GEMVs on 7 TPBs: a share of 7 each
    assert tl2.makespan <= tl.makespan
    assert s.sched.build(segs2, keep=keep).makespan == tl2.makespan
    for a, b in zip(segs, segs2):
        if a != b:  # only wshare changed, and the plan got shorter
            assert replace(b.stages[0], wshare=1) == a.stages[0] and tl2.makespan < tl.makespan


def _graph(dims=DIMS):
    from .test_widen_gemvs import _graph as g
    return g(_w4_chain(dims))


def test_tiling_of_a_shared_weight_chunk():
    """The tiler budgets the group's chunk on each TPB (``wshare`` x the TPB's columns), cuts K
    and keeps a piece one column tile; a K split can not share its chunks."""
    from m100.passes.schedule.cost import CostModel
    from m100.passes.schedule.graph import ScheduleError
    from m100.passes.schedule.partition import tile_piece
    cm = CostModel(M100)
    g = _graph()
    op = next(o for o in g.ops if o.unit == "tcu.matmul")
    one = tile_piece(cm, g, op, 1, 586)
    for share in (2, 7):
        p = tile_piece(cm, g, op, 1, 586, wshare=share)
        assert p.tc == p.cols == 586 and p.tk < p.k
        (w,) = [b for b in p.buffers if b.role == "weight"]
        assert w.slots == 2 and w.slot_bytes >= p.tk * 586 * share // 2
        assert p.footprint <= M100.hbsm_bytes
    assert one.tc == 586
    with pytest.raises(ScheduleError):
        tile_piece(cm, g, op, 1, 586, kparts=2, wshare=2)


def test_k_whole_gemv_is_tried_in_k_chunks(monkeypatch):
    """A GEMV whose tiling keeps K whole (the tiler's fewest DMAs: LLaMA2-7B's down projection on
    56 TPBs, 407 KB of int4 a TPB) is tried in K chunks, alone and shared, in the whole plan: its
    compute (22 k cycles a TPB at the 8-row granule) then overlaps its stream instead of
    trailing the last TPB's one DMA. Kept only when the plan gets shorter; the plan is the
    fresh build of the returned segments; nothing but ``chunked`` / ``wshare`` changes."""
    seen = []
    widen = placement.widen_gemvs

    def spy(s, segs, tl, keep, pool):
        out = widen(s, segs, tl, keep, pool)
        seen.append((s, out[0], out[1], keep, pool))
        return out

    monkeypatch.setattr(placement, "widen_gemvs", spy)
    dims = (4096, 11008, 4096)
    placement.schedule(_graph(dims), M100)
    s, segs, tl, keep, pool = seen[-1]
    s.budget = float("inf")
    # the down-projection-shaped GEMV on the whole pool, one column part a TPB, K whole
    si = max(i for i, seg in enumerate(segs) if s.ops[seg.stages[0].op].unit == "tcu.matmul")
    st = replace(segs[si].stages[0], tpbs=pool, gc=len(pool), bands=1, chunked=False, wshare=1)
    segs = segs[:si] + [replace(segs[si], stages=(st,))] + segs[si + 1:]
    tl = s.sched.build(segs, keep=keep)
    assert tl.plans[st.op].tk == tl.plans[st.op].k  # K whole
    tried = []
    shorter = s.sched.shorter
    monkeypatch.setattr(s.sched, "shorter", lambda trial, *a, **k: tried.append(trial) or
                        shorter(trial, *a, **k))
    segs2, tl2 = wshare.share_gemv_chunks(s, segs, tl, keep)
    mine = [t[si].stages[0] for t in tried if t[si] != segs[si]]
    assert mine and all(t.chunked for t in mine)  # K chunks, unshared and shared
    assert {t.wshare for t in mine} >= {1, 2}
    assert tl2.makespan <= tl.makespan
    assert s.sched.build(segs2, keep=keep).makespan == tl2.makespan
    for a, b in zip(segs, segs2):
        if a != b:
            assert replace(b.stages[0], wshare=1, chunked=a.stages[0].chunked) == a.stages[0]
            assert tl2.makespan < tl.makespan and tl2.plans[b.stages[0].op].tk < \
                tl2.plans[b.stages[0].op].k
