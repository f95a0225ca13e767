"""Int4 GEMVs on wider column splits *with* shared weight chunks, in the whole plan (issue 13,
session 12).

``refine.widen_gemvs`` tries each int4 GEMV on wider column splits of the TPB pool before any
weight chunk is shared: there a wider split is one DMA per TPB and K chunk, many more transfers,
and on LLaMA3-8B W4A16 decode the down projection (K = 14336, N = 4096) stayed on 7 TPBs (on 56:
753.9 k vs 746.2 k predicted cycles a layer). Its compute then trails the gate/up projection on
the same 7 TPBs: their HBSM holds `wgu`'s chunks, so `wd`'s weights cannot stream ahead, and the
engines idle at the boundary (~20 k cycles on DMA0). On 56 TPBs whose K chunks are shared by
groups (``wshare``: one DRB broadcast per group and chunk) the transfers are as few as before
and TPBs 7-55 receive `wd` during `wgu`.

:func:`widen_shared_gemvs` (after ``share_gemv_chunks``): per one-stage int4 GEMV on fewer TPBs
than the pool (largest weight first), per wider column split ``refine.widen_gemvs`` would try
(the fewest TCU tiles per TPB first, :data:`refine.WIDEN_SPLITS` of them, on the first and
on the last TPBs of the pool), the widened segment is built once in the whole plan (whatever its
length), then ``share_gemv_chunks`` on that segment alone picks its best share (K chunked first
when the tiler keeps K whole); the result is kept when it is shorter than the plan before. At
most :data:`MAX_WIDEN_SHARE_TRIALS` widened builds (each followed by up to ``len(SHARES) + 1``
share builds); none once the search budget is spent. Pre: the plan after
``share_gemv_chunks``; post: the same plan or a shorter one. Models without int4 GEMVs: no
candidate, no build.
"""

from __future__ import annotations

from .gemv_runs import int4_gemvs_by_weight, widened_stages
from .segment import SegmentCfg
from .timeline import BoundExceeded
from .graph import ScheduleError
from .wshare import share_gemv_chunks

#: widened whole-plan builds at most
MAX_WIDEN_SHARE_TRIALS = 6


def widen_shared_gemvs(s, segs: list[SegmentCfg], tl, keep: str, pool: tuple[int, ...]
                       ) -> tuple[list[SegmentCfg], object]:
    """``segs`` with int4 GEMVs widened and shared where the whole plan gets shorter, and its
    plan (``s``: the placement search, ``tl``: the plan of ``segs``)."""
    from .refine import WIDEN_SPLITS
    if s.spent():
        return segs, tl
    trials = 0
    for si in int4_gemvs_by_weight(s, segs):
        seg = segs[si]
        st = seg.stages[0]
        if len(st.tpbs) >= len(pool) or st.wshare != 1:
            continue
        for cand in widened_stages(s, seg, pool, WIDEN_SPLITS):
            if trials >= MAX_WIDEN_SHARE_TRIALS or s.spent():
                return segs, tl
            trials += 1
            trial = segs[:si] + [cand] + segs[si + 1:]
            try:
                tlw = s.sched.build(trial, keep=keep)
            except (BoundExceeded, ScheduleError):
                continue
            trial2, tl2 = share_gemv_chunks(s, trial, tlw, keep, only=si)
            if tl2.makespan < tl.makespan:
                segs, tl = trial2, tl2
                break
    return segs, tl


__all__ = ["widen_shared_gemvs", "MAX_WIDEN_SHARE_TRIALS"]
