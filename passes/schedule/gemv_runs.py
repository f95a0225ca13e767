"""Runs of small K-chunked GEMVs (decode attention heads) with every other one's K whole.

A decode layer's attention is one small GEMV per (sequence, KV head) and cache (``q_h @ kT_j``,
``p_h @ v_j``), each on one TPB, its cache streamed in K chunks (``StageCfg.chunked``: the
search costs a segment in isolation, where the first chunk starts the TCU sooner). In the whole
plan their ~130 cache loads share the two in-order DMA engines with the weight streams of the
projections; each K chunk is one more transfer (``dma_setup_cycles + ddr_latency``), while a
whole-K head waits for its whole cache. :func:`unchunk_gemv_runs` tries, in the whole plan,
every other GEMV of the run with its K whole (both phases) and all of them, and keeps the
shortest plan (3 builds). LLaMA2-7B W4A16 decode, context 1024, batch 1 (8-row TCU granule):
823.3 k -> 816.3 k predicted cycles a layer with the odd heads whole (all whole: 833.1 k; every
K-cache GEMV whole: 823.1 k; every V-cache GEMV whole: 824.6 k).

Pre: the plan after ``widen_gemvs``; post: the same plan or a shorter one. Runs only once the
search has budget left, like the other whole-plan refinements.
"""

from __future__ import annotations

from dataclasses import replace

from .graph import geometry
from .segment import SegmentCfg

#: a run needs at least this many chunked GEMVs (the heads of one attention)
MIN_RUN = 8


def gemv_segments(s, segs: list[SegmentCfg]):
    """(index, stage, op) of every one-stage data-parallel GEMV segment in plan order: a TCU
    matmul with K whole on each TPB and its activation streamed, whose rows fit one TCU tile
    (its tiles are mostly padding). Shared by :func:`gemv_run` and ``refine.widen_gemvs``."""
    mc = s.cm.machine
    for si, seg in enumerate(segs):
        if seg.kind != "data-parallel" or len(seg.stages) != 1:
            continue
        st = seg.stages[0]
        op = s.ops[st.op]
        if op.unit != "tcu.matmul" or st.ks != 1 or st.act_resident:
            continue
        geo = geometry(s.g, op)
        if geo.rows * geo.row_elems <= mc.tcu_tile_m:
            yield si, st, op


def int4_gemvs_by_weight(s, segs: list[SegmentCfg]) -> list[int]:
    """The indices of the one-stage int4-weight GEMV segments of ``segs`` (:func:`gemv_segments`),
    largest weight first (ties: the earlier segment first): the order the widening refinements
    (``refine.widen_gemvs``, ``widen_shared.widen_shared_gemvs``) try them in."""
    g = s.g
    return [si for _w, si in sorted((-sum(t.nbytes for t in g.weights(op)), si)
                                    for si, _st, op in gemv_segments(s, segs)
                                    if "w4" in op.attrs)]


def wider_col_splits(s, st, pool: tuple[int, ...], most: int) -> list[int]:
    """Column splits ``gc`` of the whole ``pool`` (dividing it) for the GEMV stage ``st``: wider than
    its TPBs and with fewer TCU column tiles per TPB than its split now, fewest tiles first (then
    the widest), at most ``most``."""
    from .cost import ceil_div
    from .partition import col_splits
    g = s.g
    op = s.ops[st.op]
    cols = geometry(g, op).cols
    tile = s.cm.machine.tcu_tile_n

    def tiles(gc: int) -> int:  # TCU column tiles of a TPB's column part
        return ceil_div(ceil_div(cols, gc), tile)
    splits = sorted((tiles(gc), -gc) for gc in col_splits(s.cm, g, op, len(pool))
                    if len(pool) % gc == 0 and gc > len(st.tpbs) and tiles(gc) < tiles(st.gc))
    return [-neg for _t, neg in splits[:most]]


def widened_stages(s, seg: SegmentCfg, pool: tuple[int, ...], most: int):
    """The candidates of the widening refinements for the one-stage GEMV segment ``seg``: per
    column split of :func:`wider_col_splits`, the segment on the first and on the last ``gc``
    TPBs of ``pool`` (one row band)."""
    st = seg.stages[0]
    for gc in wider_col_splits(s, st, pool, most):
        for window in dict.fromkeys((pool[:gc], pool[-gc:])):
            yield replace(seg, stages=(replace(st, tpbs=window, gc=gc, bands=1),))


def gemv_run(s, segs: list[SegmentCfg]) -> list[int]:
    """Indices of the one-stage, one-TPB-row, K-chunked f16/f32 GEMV segments (no int4 weight:
    the attention's products with the KV cache) in plan order."""
    return [si for si, st, op in gemv_segments(s, segs)
            if "w4" not in op.attrs and st.chunked and st.gr == 1]


def unchunk_gemv_runs(s, segs: list[SegmentCfg], tl, keep: str
                      ) -> tuple[list[SegmentCfg], object]:
    """``segs`` with K whole on every other GEMV of :func:`gemv_run` (or on all of them) where
    the whole plan gets shorter, and its plan."""
    if s.spent():
        return segs, tl
    run = gemv_run(s, segs)
    if len(run) < MIN_RUN:
        return segs, tl
    best = (segs, tl)
    for sel in (run[1::2], run[::2], run):
        trial = list(segs)
        for si in sel:
            trial[si] = replace(segs[si], stages=(replace(segs[si].stages[0], chunked=False),))
        tl2 = s.sched.shorter(trial, best[1], keep)
        if tl2 is not None:
            best = (trial, tl2)
    return best


__all__ = ["gemv_run", "unchunk_gemv_runs", "MIN_RUN"]
