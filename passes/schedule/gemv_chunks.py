"""Int4 GEMVs streamed in finer K chunks where the compute of the last chunk trails the layer.

A W4A16 GEMV on a few TPBs (LLaMA2-7B decode: Q/K/V and gate/up on 7 TPBs each) streams its
weight in K chunks; each TPB computes a chunk while the next one arrives, and the compute of its
last chunk is a tail after the stream: the TCU pads the one row to the 8-row granule, so a chunk
of Q/K/V's 1756 columns x 1024 rows takes 28.7 k cycles, gate/up's 3146 x 512 25.6 k. Both tails
are on the layer's critical path (the attention needs q, the down projection needs the gate/up
product): the engines then wait with slots full or with nothing ready. The tiler alone keeps the
fewest chunks that fit (each is a transfer; ``partition.tile_piece``'s ``chunked`` gives at
least 4). :func:`finer_gemv_chunks` tries, per int4 GEMV in K chunks (largest weight first), at
least twice, then four times as many chunks (``StageCfg.kfine``) in the whole plan, kept when the
plan gets shorter (a whole-plan build each, at most :data:`MAX_TRIALS`; none once the search
budget is spent).

Pre: the plan after ``share_gemv_chunks``; post: the same plan or a shorter one. Models without
int4 GEMVs are not touched (no candidate: no build).
"""

from __future__ import annotations

from dataclasses import replace

from .segment import SegmentCfg

#: whole-plan builds at most
MAX_TRIALS = 8
#: the multipliers of the minimum chunk count tried (``StageCfg.kfine``)
FINER = (2, 4)


def finer_gemv_chunks(s, segs: list[SegmentCfg], tl, keep: str) -> tuple[list[SegmentCfg], object]:
    """``segs`` with ``kfine`` set on the int4 GEMVs where the whole plan gets shorter, and its
    plan (``s``: the placement search, ``tl``: the plan of ``segs``)."""
    if s.spent():
        return segs, tl
    order = []
    for si, seg in enumerate(segs):
        if len(seg.stages) != 1 or seg.kind == "dma":
            continue
        st = seg.stages[0]
        op = s.ops[st.op]
        plan = tl.plans.get(st.op)
        if plan is None or op.unit != "tcu.matmul" or "w4" not in op.attrs or st.ks != 1 or \
                st.gr != 1 or st.bands != 1 or st.act_resident or plan.tk >= plan.k or \
                st.kfine != 1:
            continue
        order.append((-sum(t.nbytes for t in s.g.weights(op)), si))
    trials = 0
    for _w, si in sorted(order):
        seg = segs[si]
        st = seg.stages[0]
        n0 = -(-tl.plans[st.op].k // tl.plans[st.op].tk)
        blocks = -(-tl.plans[st.op].k // s.ops[st.op].attrs["w4"][1])
        for f in FINER:
            if 4 * f <= n0 or 4 * f > blocks:
                continue  # the tiler already cuts this many / K has fewer whole blocks
            if trials >= MAX_TRIALS:
                return segs, tl
            trials += 1
            trial = segs[:si] + [replace(seg, stages=(replace(st, chunked=True, kfine=f),))] + \
                segs[si + 1:]
            tl2 = s.sched.shorter(trial, tl, keep)
            if tl2 is not None:
                segs, tl = trial, tl2
                break
    return segs, tl


__all__ = ["finer_gemv_chunks", "MAX_TRIALS", "FINER"]
