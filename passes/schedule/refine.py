"""Whole-plan refinements of the placement: changes the isolated costs of the search can not see.

The search (:mod:`.search`) costs every segment alone, with its inputs and weights ready at cycle 0.
In the whole program the weights prefetch across segments, activations may stay in HBSM, small
independent ops can run side by side. Each function here tries changes of the chosen segments on
the whole plan (``Scheduler.build`` / ``Scheduler.shorter``, resumed from the checkpoints that
:func:`trial_points` asks for, :mod:`.resume`) and keeps a change only when the whole plan's
makespan drops: :func:`spread_segments` (run before the pools are compared), then :func:`unchunk`,
:func:`keep_activations`, :func:`weights_once`, :func:`widen_gemvs` ... :func:`kept_copies`, in
the order :func:`.placement.schedule` calls them (with the refinements of their own modules:
``gemv_runs``, ``narrow_vectors``, ``wshare``, ``widen_shared``, ``gemv_chunks``, ``side_by_side``,
``ksplit_refine``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from .gemv_runs import int4_gemvs_by_weight, widened_stages
from .graph import Op, geometry
from .keep import choose_kept, first_bcast_read
from .later_points import later_points
from .partition import col_splits
from .plan import Plan
from .resume import best_checkpoint
from .segment import SegmentCfg, ksplit_stages
from .timeline import BoundExceeded, Scheduler

if TYPE_CHECKING:
    from .search import Search

INF = float("inf")


def _unchunk_at(seg: SegmentCfg) -> bool:
    """:func:`unchunk` tries this segment: a chunked one-stage K split."""
    return seg.kind != "dma" and len(seg.stages) == 1 and seg.stages[0].chunked and \
        seg.stages[0].ks >= 2


def _weights_at(seg: SegmentCfg) -> bool:
    """:func:`weights_once` tries this segment: a one-stage K split on several TPB rows."""
    if seg.kind == "dma" or len(seg.stages) != 1:
        return False
    st = seg.stages[0]
    return st.ks >= 2 and st.gr >= 2 and not st.act_resident


def trial_points(segs: list[SegmentCfg], after: int = -1) -> set[int]:
    """The segments after ``after`` that :func:`unchunk` and :func:`weights_once` may change: a
    whole-plan build keeps a checkpoint before each, so that a trial that changes one rebuilds
    only from there (:mod:`.resume`)."""
    return {si for si, seg in enumerate(segs) if si > after and (_unchunk_at(seg) or
                                                                 _weights_at(seg))}


#: the keep modes :func:`keep_activations` tries, in order (:func:`.keep.choose_kept`)
KEEP_MODES = ("one-stage", "all", "all-mm")


def keep_activations(sched: Scheduler, segs: list[SegmentCfg], tl: Plan) -> tuple[Plan, str]:
    """The plan of ``segs`` with activations kept in the producer TPBs' HBSM between segments
    (:mod:`.keep`) where the whole plan is shorter: tried for the tensors whose later readers
    are one-stage segments, then for all eligible ones, then with those lockstep matmuls read
    too; else ``tl`` (nothing kept). The search
    itself costs segments in isolation and compares plans without keeping. Returns the plan and
    its keep mode (``Scheduler.build``'s ``keep``).

    Each mode's build resumes from the latest checkpoint that fits it of ``tl`` or of an earlier
    mode's build (finished or stopped at its bound), and takes checkpoints where a later mode's
    kept activations first differ from its own (:func:`_kept_agree`: LLaMA2-7B prefill's
    ``"one-stage"`` and ``"all"`` agree on 216 of 221 segments), and before every segment a
    later refinement's trial may change (:func:`.later_points.later_points`: side_by_side's
    first trial resumes at its run). Checkpoints change no plan (:mod:`.resume`), only where
    builds start."""
    cap = int(sched.cm.machine.hbsm_bytes * sched.prefetch_share)
    chosen = [choose_kept(sched, segs, cap, mode == "one-stage", mode == "all-mm")
              for mode in KEEP_MODES]
    points = later_points(sched, segs)
    bases = [tl]
    mode_of = ""
    for i, mode in enumerate(KEEP_MODES):
        kept, use = chosen[i]
        later = {_kept_agree(segs, chosen[i], c) for c in chosen[i + 1:]}
        base = max(bases, key=lambda b: _resume_index(b, segs, kept, use, tl.makespan))
        try:
            tl2 = sched.build(segs, bound=tl.makespan, keep=mode, base=base,
                              checkpoints=points | (later - {len(segs)}))
        except BoundExceeded as e:
            bases.append(e.plan)
            continue
        bases.append(tl2)
        if tl2.makespan < tl.makespan and tl2.kept:
            tl, mode_of = tl2, mode
    return tl, mode_of


def _kept_agree(segs: list[SegmentCfg], a: tuple[set, dict], b: tuple[set, dict]) -> int:
    """The longest prefix of ``segs`` on which two choices of kept activations (``choose_kept``'s
    (ops, {(TPB, segment): bytes})) agree as ``resume.Checkpoint.fits`` compares them: before
    the first segment of an op kept in one only, or with other kept bytes on some TPB."""
    at = {st.op: si for si, seg in enumerate(segs) for st in seg.stages}
    (ka, ua), (kb, ub) = a, b
    return min([at[o] for o in ka ^ kb] +
               [k[1] for k in ua.keys() | ub.keys() if ua.get(k) != ub.get(k)] + [len(segs)])


def _resume_index(base: Plan, segs: list[SegmentCfg], kept: set, use: dict,
                  bound: float) -> int:
    """The segment a build of ``segs`` keeping ``kept`` resumes at from ``base`` (-1: none)."""
    cp = best_checkpoint(base, segs, kept, use, bound)
    return -1 if cp is None else cp.index


def kept_copies(sched: Scheduler, segs: list[SegmentCfg], tl: Plan, keep: str
                ) -> tuple[Plan, str]:
    """The plan with the K chunks of kept activations that several column parts of a lockstep
    conv read moved by one mesh copy per reader (``keep`` + ``"+copies"``) instead of one DTDU
    broadcast per producer piece (``Plan.kept_bcast``), if that is shorter: the broadcasts take
    one DTDU's time instead of one per reader, but they share the DRB with the CCB DMA engines'
    weight broadcasts (``list_schedule``: ``RateProfile``). Tried once, on the final segments
    (the refinements before it choose with broadcasts).

    Session 30: the builder reads the broadcast mode only from the first segment
    :func:`.keep.first_bcast_read` names on: with none, the plan with copies is ``tl`` itself
    (not shorter: nothing is built); else the build resumes from ``tl``'s latest checkpoint at
    or before it (``Scheduler.build``: a base of the other mode; ``test_kept_copies``)."""
    if not keep or not tl.kept or first_bcast_read(sched, segs, tl.kept) == len(segs):
        return tl, keep
    tl2 = sched.shorter(segs, tl, keep + "+copies", base=tl)
    return (tl2, keep + "+copies") if tl2 is not None else (tl, keep)


#: weights_once: K parts per stage tried (a K split holds 1 / (gc * ks) of the weight per TPB)
MAX_KPARTS = 8
#: weights_once: whole-plan builds at most (each ~0.3 CPU-s on ResNet-18 224)
MAX_WEIGHT_TRIALS = 20
#: weights_once: candidates tried again after a later change was kept (one build each)
MAX_WEIGHT_RETRIES = 20


def weights_once(s: Search, segs: list[SegmentCfg], tl: Plan, keep: str
                 ) -> tuple[list[SegmentCfg], Plan]:
    """Fewer TPB rows for the K-split segments, so that each weight is held by fewer TPBs.

    A stage of ``gr`` TPB rows broadcasts each weight chunk of a column part to all ``gr`` rows
    (one DDR read, but ``gr`` copies in HBSM). The DDR traffic is the same, but the HBSM bytes
    the weights take are not: the weight prefetch across segments (``list_schedule.
    ListScheduler._prefetch``) stops where the HBSM share is full, and on ResNet-18 224 the layer-3/4 weights
    (gr 7 / 2: 2.4 MB per TPB against a 1.5 MB share) kept the CCB DMA engines idle while the
    TCU-bound early layers ran, then bound the late layers. With fewer rows and more K parts
    on the same TPBs (``gr * gc * ks`` unchanged) a TPB holds a smaller slice of the weight, so
    more of it loads early. The search costs segments in isolation, where this never shows (the
    inputs and weights are ready at cycle 0); here, per one-stage K-split segment with ``gr`` >
    1, largest weights first, the configuration of each smaller row count that is cheapest in
    isolation (K parts <= :data:`MAX_KPARTS`, whole chunks) replaces it in the whole plan, kept
    when the makespan drops (at most :data:`MAX_WEIGHT_TRIALS` builds; none once the search
    budget is spent: those graphs are the ones whose builds are expensive)."""
    if s.spent():
        return segs, tl
    g = s.g
    order = sorted((-sum(t.nbytes for t in g.weights(s.ops[seg.stages[0].op])), si)
                   for si, seg in enumerate(segs) if _weights_at(seg))
    trials = 0
    version = 0  # plan changes kept so far
    lost: list[tuple[int, int, SegmentCfg, SegmentCfg]] = []  # (version, si, seg, cand)
    for pos, (_w, si) in enumerate(order):
        if trials >= MAX_WEIGHT_TRIALS:
            break
        # checkpoints for the segments tried later (only those after this one: a trial that is
        # kept has the ones before it from the plan it replaces)
        later = {sj for _, sj in order[pos + 1:] if sj > si}
        seg = segs[si]
        st = seg.stages[0]
        op = s.ops[st.op]
        n = len(st.tpbs)
        rows = geometry(g, op).rows
        by_gr: dict[int, tuple[float, SegmentCfg]] = {}
        for ks in range(2, MAX_KPARTS + 1):
            # the parts' sum (+ bias, ReLU) is one CVU pipeline: at most cvu_max_stages stages
            if n % ks or ksplit_stages(op, ks) > s.cm.machine.cvu_max_stages:
                continue
            for gc in col_splits(s.cm, g, op, n // ks):
                gr = n // (ks * gc)
                if gr >= st.gr or gr > rows:
                    continue
                cand = replace(seg, stages=(replace(st, gc=gc, ks=ks, bands=gr, chunked=False),))
                c = s.cost(cand)
                if gr not in by_gr or c < by_gr[gr][0]:
                    by_gr[gr] = (c, cand)
        for gr in sorted(by_gr, reverse=True):
            if trials >= MAX_WEIGHT_TRIALS:
                break
            if by_gr[gr][0] == INF:
                continue
            trials += 1
            trial = segs[:si] + [by_gr[gr][1]] + segs[si + 1:]
            tl2 = s.sched.shorter(trial, tl, keep, base=tl, checkpoints=later)
            if tl2 is not None:
                segs, tl = trial, tl2
                version += 1
            else:
                lost.append((version, si, seg, by_gr[gr][1]))
    # a candidate that lost against the plan before a later change was kept may win now
    # (ResNet-18 224: conv36 on 1 x 8 x 7 loses before conv37 and conv31 move there, then wins);
    # retried, in the order they lost, until none of those compared with an older plan is left
    # (at most MAX_WEIGHT_RETRIES builds)
    retries = 0
    while retries < MAX_WEIGHT_RETRIES:
        stale = [x for x in lost if x[0] < version and segs[x[1]] is x[2]]
        if not stale:
            break
        lost = [x for x in lost if x[0] == version]
        for _v, si, seg, cand in stale:
            if retries >= MAX_WEIGHT_RETRIES:
                break
            if segs[si] is not seg:
                continue  # another row count of this segment was kept
            retries += 1
            trial = segs[:si] + [cand] + segs[si + 1:]
            tl2 = s.sched.shorter(trial, tl, keep, base=tl,
                                  checkpoints={x[1] for x in stale if x[1] > si})
            if tl2 is not None:
                segs, tl = trial, tl2
                version += 1
            else:
                lost.append((version, si, seg, cand))
    return segs, tl


#: widen_gemvs: whole-plan builds at most
MAX_WIDEN_TRIALS = 12
#: widen_gemvs: column splits tried per GEMV (the fewest TCU tiles per TPB first)
WIDEN_SPLITS = 2


def widen_gemvs(s: Search, segs: list[SegmentCfg], tl: Plan, keep: str, pool: tuple[int, ...]
                ) -> tuple[list[SegmentCfg], Plan]:
    """Int4-weight GEMVs (W4A16 decode) on more TPBs of the whole pool.

    A GEMV pads its one row to the TCU row granule (``tcu_row_granule``, 8 rows): a TPB
    dequantizes and multiplies ~64 int4 weights a cycle (~16 when it padded to the 32-row tile),
    so the compute of a GEMV's last weight chunk is a tail after its stream, and the down
    projection's is the decode layer's tail. The search costs segments in
    isolation and a smaller TPB pool can win the whole plan: LLaMA2-7B decode ran on 28 of the
    56 TPBs, the down projection (N = 4096) at 147 columns a TPB = 3 TCU column tiles. Here,
    per one-stage int4 GEMV, largest weight first, the column splits of the whole pool with
    fewer TCU tiles per TPB (at most :data:`WIDEN_SPLITS`, on the first and on the last TPBs of
    the pool: the last ones are those a smaller-pool plan leaves free, where the weight can
    prefetch early) replace it in the whole plan, kept when the makespan drops (at most
    :data:`MAX_WIDEN_TRIALS` builds; none once the search budget is spent). LLaMA2-7B W4A16
    decode: the down projection on 56 TPBs (74 columns, 2 tiles), 882 k -> 871 k predicted
    cycles a layer. (Splitting its K over TPBs as well, with f32 partial sums rounded once by
    the reduction, was tried: 877 k; the layer is bound by its DMA engines, which stream the
    down projection's weights after the gate/up ones whatever TPBs receive them.)"""
    if s.spent():
        return segs, tl
    trials = 0
    for si in int4_gemvs_by_weight(s, segs):
        for cand in widened_stages(s, segs[si], pool, WIDEN_SPLITS):
            if trials >= MAX_WIDEN_TRIALS:
                return segs, tl
            trials += 1
            trial = segs[:si] + [cand] + segs[si + 1:]
            tl2 = s.sched.shorter(trial, tl, keep)
            if tl2 is not None:
                segs, tl = trial, tl2
    return segs, tl


def unchunk(sched: Scheduler, segs: list[SegmentCfg], tl: Plan) -> tuple[list[SegmentCfg], Plan]:
    """The search costs each segment in isolation, where a contraction whose weight streams in
    more, smaller K chunks (``StageCfg.chunked``) starts computing sooner. In the whole program
    the weights are prefetched across segments (``list_schedule.ListScheduler._prefetch``) and arrive early
    anyway, while every extra transfer still pays a DMA latency on an engine the late layers are
    bound by. Per chunked one-stage K-split segment (``ks`` > 1: there the finer chunking
    multiplies the transfers of every K part), in order, the whole plan is rebuilt with the
    coarser chunking; the change is kept when the makespan is shorter (ResNet-18 224: 630k ->
    601k predicted cycles, 1.3 CPU-s; trying every chunked segment found nothing more there nor on
    ResNet-50, whose 18 CPU-s it took)."""
    for si, seg in enumerate(segs):
        if not _unchunk_at(seg):
            continue
        trial = segs[:si] + [replace(seg, stages=(replace(seg.stages[0], chunked=False),))] \
            + segs[si + 1:]
        try:
            tl2 = sched.build(trial, bound=tl.makespan, base=tl,
                              checkpoints=trial_points(trial, si))
        except BoundExceeded:
            continue
        if tl2.makespan < tl.makespan:
            segs, tl = trial, tl2
    return segs, tl


#: spread_segments moves runs of at least this many small contractions
RUN = 8


def spread_segments(segs: list[SegmentCfg], pool: tuple[int, ...],
                    ops: dict[str, Op], narrow: bool = False) -> list[SegmentCfg]:
    """The same segments with each small data-parallel contraction (at most a quarter of the pool)
    of a run of at least :data:`RUN` of them moved to the next free window of TPBs, round robin,
    instead of the first TPBs of the pool. The search costs
    segments in isolation, so it places every one at the start of the pool; a run of independent
    small ops (the per-head attention GEMVs of an LLM decode step: 32 ops of 1-4 TPBs each) then
    queues on the same TCUs one after the other although most TPBs are idle. Side by side they
    overlap. Tensors between segments go through memory, so where a segment runs changes no data
    path; :func:`schedule` keeps this plan only if its whole timeline is shorter.

    ``narrow``: each moved contraction runs on one TPB with its K in chunks: alone it is
    slower, but side by side the run is bound by the DMA engines, where every transfer costs its
    setup and DDR latency (LLaMA2-7B decode: a head's 256 KB K cache in 2 DMAs instead of 8 of
    32 KB; whole, 1 DMA of 3.3 k cycles does not fit between the heads' result stores the other
    in-order engine holds ~3.2 k cycles apart, so one engine idled: 1.009 M -> 0.937 M cycles a
    layer)."""
    n = len(pool)

    def small(cfg: SegmentCfg) -> bool:
        return cfg.kind == "data-parallel" and len(cfg.stages) == 1 and \
            ops[cfg.stages[0].op].unit == "tcu.matmul" and len(cfg.stages[0].tpbs) <= n // 4

    # only runs of at least RUN small contractions (DMA segments between them do not break a run)
    move: set[int] = set()
    run: list[int] = []
    for i, cfg in enumerate(segs + [None]):  # type: ignore[operator]
        if cfg is not None and small(cfg):
            run.append(i)
        elif cfg is None or cfg.kind != "dma":
            if len(run) >= RUN:
                move |= set(run)
            run = []
    cursor = 0
    out = []
    for i, cfg in enumerate(segs):
        if i in move:
            st = cfg.stages[0]
            k = len(st.tpbs)
            if narrow:
                k = 1
                st = replace(st, gc=1, bands=1, chunked=True, ks=1)
            if cursor + k > n:
                cursor = 0
            cfg = replace(cfg, stages=(replace(st, tpbs=tuple(pool[cursor:cursor + k])),))
            cursor += k
        out.append(cfg)
    return out


__all__ = ["MAX_KPARTS", "MAX_WEIGHT_RETRIES", "MAX_WEIGHT_TRIALS", "MAX_WIDEN_TRIALS", "RUN",
           "WIDEN_SPLITS", "keep_activations", "kept_copies", "spread_segments", "trial_points",
           "unchunk", "weights_once", "widen_gemvs"]
