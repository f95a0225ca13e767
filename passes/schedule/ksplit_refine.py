"""Whole-plan refinements of K-split contractions whose weights the plan prefetches.

The search costs each segment in isolation: its weights start loading at cycle 0 and the stage
waits for them. In the whole program the late layers' weights are prefetched while earlier
segments compute (``PREFETCH_HBSM_SHARE``), so their stages are bound by compute, DMA count and
the chain of layers, which isolation does not see. Two refinements, each kept only when the
whole plan's makespan drops:

**Whole K parts** (:func:`whole_parts`).
The tiler cuts a K-split stage's reduction (``StageCfg.ks`` parts over TPBs) into at least two
chunks per part, so that in isolation (inputs and weights ready at cycle 0, what the search
costs) each part's compute starts on its first chunk while the second streams. In the whole
program the weights of the late layers are prefetched during earlier segments
(``PREFETCH_HBSM_SHARE``), and every chunk is a DMA of its own that costs the engine its setup and
the DDR latency (~250 cycles, ResNet-18 224: 448 of its 606 weight DMAs were the layer-4 convs'
two chunks per part, 1 x 8 x 7 TPBs). With ``StageCfg.whole`` each part's weight is one chunk:
one DMA, and (one-tile pieces) one HBSM slot instead of two of half the size, the same bytes.

:func:`whole_parts` runs in ``placement.schedule`` after :func:`refine.weights_once` (which
picks the row / column / K-part split of those stages); :func:`widen` is not called (ResNet-18
224 gains nothing from it once the kept K chunks are broadcast: ``docs/schedule.md``).
:func:`whole_parts` sets ``whole`` on every eligible stage at once and keeps the plan if its
makespan drops; otherwise it tries the stages one by one, largest weights first, each kept only
if the whole plan gets shorter (at most :data:`MAX_TRIALS` builds).
Eligible: a one-stage segment of a TCU contraction with ``ks`` > 1, one round (``bands == gr``)
and no resident activation.

**Wider K splits** (:func:`widen`). A small-M contraction (ResNet-18's FC: M = 1, K = 512,
N = 1000) is placed on few TPBs because in isolation its 2 MB weight load dominates and more
TPBs do not shorten it; with the weight prefetched, its TCU time (18 tiles of M = 1 per TPB on
1 x 6 x 3 TPBs, 9.3k cycles) is the end of the program's critical path. Per one-stage K-split
segment on fewer TPBs than the pool (at most :data:`MAX_WIDEN` of them, the longest TCU time per
TPB first), the configuration on the whole pool with the least TCU time per TPB (K parts up to
``refine.MAX_KPARTS``, every column split, one round) replaces it when the plan gets shorter.
"""

from __future__ import annotations

from dataclasses import replace

from .cost import ceil_div
from .graph import ScheduleError, geometry
from .partition import col_splits
from .segment import SegmentCfg, ksplit_ok, ksplit_stages

#: per-stage trials (whole-plan builds) when setting every eligible stage at once does not gain
MAX_TRIALS = 6
#: widen: segments tried (one whole-plan build each)
MAX_WIDEN = 3
#: widen: K parts tried at most (the parts' sum is one CVU pipeline: see ``ksplit_stages``)
MAX_KPARTS = 8


def eligible(seg: SegmentCfg, ops: dict) -> bool:
    if seg.kind == "dma" or len(seg.stages) != 1:
        return False
    st = seg.stages[0]
    return (st.ks > 1 and st.bands == st.gr and not st.act_resident and not st.whole
            and ops[st.op].unit in ("tcu.matmul", "tcu.conv2d"))


def _whole(seg: SegmentCfg) -> SegmentCfg:
    return replace(seg, stages=(replace(seg.stages[0], whole=True, chunked=False),))


def whole_parts(s, segs: list[SegmentCfg], tl, keep: str):
    """``(segs, plan)`` with ``StageCfg.whole`` set where the whole plan is shorter (see the
    module docstring); ``s`` is the :class:`search.Search` whose scheduler builds plans,
    ``keep`` the kept-activation mode of ``tl``. Nothing is tried once the search budget is
    spent (those graphs are the ones whose whole-plan builds are expensive)."""
    if s.spent():
        return segs, tl
    g = s.g
    idx = [si for si, seg in enumerate(segs) if eligible(seg, s.ops)]
    if not idx:
        return segs, tl
    # every trial resumes from the latest checkpoint of ``tl`` before the segments it changes
    # (:mod:`.resume`: the same plan as a full build); ``tl`` has the refinements' checkpoints
    trial = [_whole(seg) if si in idx else seg for si, seg in enumerate(segs)]
    tl2 = s.sched.shorter(trial, tl, keep, base=tl)
    if tl2 is not None:
        return trial, tl2
    order = sorted(idx, key=lambda si: -sum(t.nbytes for t in g.weights(s.ops[segs[si].stages[0].op])))
    order = order[:MAX_TRIALS]
    for pos, si in enumerate(order):
        trial = segs[:si] + [_whole(segs[si])] + segs[si + 1:]
        # checkpoints for the later trials after this one (a kept trial's plan has those of
        # ``tl`` only up to where it resumed)
        tl2 = s.sched.shorter(trial, tl, keep, base=tl,
                              checkpoints={sj for sj in order[pos + 1:] if sj > si})
        if tl2 is not None:
            segs, tl = trial, tl2
    return segs, tl


def _tcu_per_tpb(s, seg: SegmentCfg) -> float:
    """The TCU cycles of the busiest TPB of a one-stage segment (its tiling's piece cycles x the
    pieces a TPB computes); inf when it does not tile."""
    st = seg.stages[0]
    try:
        tp = s.sched.stage_plan(seg, st)
    except ScheduleError:
        return float("inf")
    return tp.cycles * ceil_div(st.bands, st.gr)


def widen(s, segs: list[SegmentCfg], tl, keep: str):
    """``(segs, plan)`` with small K-split stages spread over the whole pool where the whole plan
    is shorter (module docstring); arguments as :func:`whole_parts`."""
    if s.spent():
        return segs, tl
    g, mc = s.g, s.cm.machine
    pool = len(s.tpbs)
    idx = []
    for si, seg in enumerate(segs):
        if seg.kind == "dma" or len(seg.stages) != 1:
            continue
        st = seg.stages[0]
        op = s.ops[st.op]
        if st.ks > 1 and len(st.tpbs) < pool and not st.act_resident and ksplit_ok(g, op):
            idx.append((-_tcu_per_tpb(s, seg), si))
    for _t, si in sorted(idx)[:MAX_WIDEN]:
        seg = segs[si]
        op = s.ops[seg.stages[0].op]
        rows = geometry(g, op).rows
        best = None
        for ks in range(2, MAX_KPARTS + 1):
            if ksplit_stages(op, ks) > mc.cvu_max_stages:
                continue
            for gc in col_splits(s.cm, g, op, pool // ks):
                gr = min(pool // (ks * gc), rows)
                cand = s._dp_cfg(op, gr * gc * ks, gc, 1, ks=ks)
                if cand is None:
                    continue
                c = _tcu_per_tpb(s, cand)
                if best is None or (c, len(cand.stages[0].tpbs)) < best[0]:
                    best = ((c, len(cand.stages[0].tpbs)), cand)
        if best is None or best[0][0] >= -_t:
            continue
        trial = segs[:si] + [best[1]] + segs[si + 1:]
        tl2 = s.sched.shorter(trial, tl, keep)
        if tl2 is not None:
            segs, tl = trial, tl2
    return segs, tl


__all__ = ["whole_parts", "widen", "eligible", "MAX_TRIALS", "MAX_WIDEN"]
