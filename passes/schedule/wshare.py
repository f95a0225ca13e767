"""Int4 GEMVs whose column parts share their weight chunks' DMAs (``StageCfg.wshare``).

A W4A16 decode layer is bound by its two in-order DMA engines, and each DDR transfer costs
``dma_setup_cycles + ddr_latency`` (+ ``hbsm_latency``) before its data. A GEMV streamed to P
TPBs in c K chunks is P * c weight transfers (LLaMA2-7B's down projection on 56 TPBs in 4 chunks:
224 a layer, ~56 k engine-cycles of latency). Its weight rows are contiguous in DDR across
column parts, so the K chunk of ``w`` consecutive column parts is one box: one DRB broadcast
delivers it to the ``w`` TPBs, each computing its own columns out of it (the matmul's B walk
picks them; ``kinds.tcu``). DDR bytes stay the same, the transfers drop ``w``-fold, each TPB
holds ``w`` times the chunk (``partition.tile_piece``'s ``wshare``).

:func:`share_gemv_chunks` tries, per int4 GEMV (one TPB row, K chunked, a column tile per column
part; largest weight first), the shares that divide its column parts in the whole plan and keeps
the shortest (a whole-plan build each, bounded by :data:`MAX_SHARE_TRIALS`); none once the search
budget is spent. Pre: the plan after ``narrow_vector_ops``; post: the same plan or a shorter one.

**A GEMV whose tiling keeps K whole** (session 11) is tried in K chunks (``StageCfg.chunked``)
first unshared, then with each share. The tiler charges a tiling the weight DMAs it implies
(session 10), so a GEMV on many TPBs whose part fits one slot keeps K whole: LLaMA2-7B's down
projection on 56 TPBs became one 407 KB DMA a TPB (56 weight + 56 scale transfers), and the last
TPB's 22 k cycles of compute (74 columns padded to 2 TCU column tiles x 8 rows x K = 11008 at the
f16 rate) trailed the layer's last DMA. In 4 K chunks shared by 4 (56 broadcasts + 14 for the
scales) the tail is one chunk's compute: 807.6 k -> 791.5 k predicted cycles a layer (main
154c861).

Its scales go the same way: the group's scale columns (all of K, ``kinds.tcu.scales_resident``)
are one broadcast to the group before its first chunk, each TPB reading its own columns (one scale
transfer per group instead of one per TPB; ``partition.tile_piece`` budgets the group's scales).

**Called by ``placement.schedule``** after ``narrow_vector_ops`` (session 10). Session 9 measured
it before ``unchunk_gemv_runs``: there every share made the LLaMA2-7B W4A16 decode layer 4.6 k-8 k
cycles longer (the engines' busy time dropped, all of it on one engine, which then waited in short
gaps for chunk slots that the TPBs' compute frees; the list scheduler fills each engine's earliest
gap in build order). On the plan after ``unchunk_gemv_runs`` and ``narrow_vector_ops`` (807.1 k
cycles, 933 transfers) a share of 4 for the down projection (56 TPBs, 4 K chunks: 224 -> 56
weight broadcasts, 56 -> 14 scale broadcasts) gives 794.5 k (723 transfers). Tested in
``test/unit/schedule/test_wshare.py`` (numerics, one broadcast per group and chunk and one for the
group's scales, every int4 byte and every scale read once). Models without int4 GEMVs are not
touched (no candidate: no build).
"""

from __future__ import annotations

from dataclasses import replace

from .segment import SegmentCfg, wshare_ok

#: whole-plan builds at most
MAX_SHARE_TRIALS = 16
#: the shares tried (column parts per broadcast)
SHARES = (2, 4, 7, 8)


def share_gemv_chunks(s, segs: list[SegmentCfg], tl, keep: str, only: int | None = None
                      ) -> tuple[list[SegmentCfg], object]:
    """``segs`` with ``wshare`` set on the int4 GEMVs where the whole plan gets shorter, and its
    plan (``s``: the placement search, ``tl``: the plan of ``segs``; ``only``: try segment
    ``only`` alone, :mod:`.widen_shared`)."""
    if s.spent():
        return segs, tl
    order = []
    for si, seg in enumerate(segs):
        if len(seg.stages) != 1 or (only is not None and si != only):
            continue
        st = seg.stages[0]
        op = s.ops[st.op]
        plan = tl.plans.get(st.op)
        if plan is None or st.wshare != 1:
            continue
        if not wshare_ok(op, st, plan):
            # K whole (the tiler's fewest DMAs): in K chunks, with or without a share
            if not (plan.tk >= plan.k and wshare_ok(op, st, replace(plan, tk=plan.k - 1))):
                continue
        order.append((-sum(t.nbytes for t in s.g.weights(op)), si))
    trials = 0
    for _w, si in sorted(order):
        seg = segs[si]
        st = seg.stages[0]
        whole = tl.plans[st.op].tk >= tl.plans[st.op].k
        for w in ((1,) if whole else ()) + SHARES:
            if st.gc % w or w > st.gc:
                continue
            if trials >= MAX_SHARE_TRIALS:
                return segs, tl
            trials += 1
            cand = replace(st, wshare=w, chunked=True) if whole else replace(st, wshare=w)
            trial = segs[:si] + [replace(seg, stages=(cand,))] + segs[si + 1:]
            tl2 = s.sched.shorter(trial, tl, keep)
            if tl2 is not None:
                segs, tl = trial, tl2
    return segs, tl


__all__ = ["share_gemv_chunks", "MAX_SHARE_TRIALS", "SHARES"]
