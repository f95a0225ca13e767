"""A lower bound of a candidate segment's isolated cost, from the TCU work alone (issue 15).

The search (:meth:`.search.Search.cost`) asks of most candidates only whether they beat the best
so far (``cost(seg, bound) < bound``). :func:`tcu_floor` is a number the isolated build's makespan
can not be below, computed from the configuration without building anything; when it reaches the
bound, the answer (>= bound) is known and the build is skipped.

Why it is a lower bound: every TCU instruction of a contraction ``[m, k] @ [k, n]`` costs
``CostModel.tcu_cycles`` >= ``m * n * k / peak`` (tiles are padded, the operand ports can only
make it longer) + ``tcu_pipeline_latency``; the instructions of a stage cover its output once per
reduction element (``op_macs`` in all; a causal chain's clipped pieces at least the unmasked share
of it, :func:`causal_share`) and there is at least one per band and column part; they
run on the TPBs of at most ``min(gr, bands) * gc`` (TPB rows that get a band x column parts), and
one TPB's TCU runs its instructions one after the other from cycle 0 at the earliest
(``ListScheduler.put``). So some TPB is busy at least (sum of the instruction cycles) / (TPBs
used), and the makespan is at least that. A pipeline's stages each give such a bound (the
largest counts). Not bounded (0): grouped convolutions (a column part may hold partial groups),
K splits and resident activations (other piece shapes), non-TCU stages.

:func:`busy_floor` is the exact form of the same argument where it is cheap to have: the TCU
cycles the isolated build puts on each TPB, from the pieces the builder makes (its own functions:
``Scheduler.band_boxes`` in wave order, :func:`.segment.lockstep_groups` for a one-stage lockstep
contraction) and each piece's instructions as :func:`.kinds.tcu.plan_piece` costs them (one per K
chunk of the stage's tile plan, ``CostModel.piece_cycles``), summed per TPB; the busiest TPB's sum
is a floor of the makespan (its TCU runs them one after the other). It sees the padding of the
tiles, the pipeline latency of every instruction and an uneven split of the bands, which
:func:`tcu_floor` can not. The search asks it only where :func:`tcu_floor` does not decide
(``Search.cost``); it covers the stages :func:`stage_floor` covers (and not an op of a causal
chain, whose pieces are clipped: ``OpGraph.causal``), the others count 0.
"""

from __future__ import annotations

from dataclasses import fields
from operator import attrgetter

from .cost import CostModel
from .graph import OpGraph, Op, ScheduleError, geometry
from .segment import SegmentCfg, StageCfg, lockstep, lockstep_groups, row_tile

TCU_UNITS = ("tcu.matmul", "tcu.conv2d")


def stage_floor(cm: CostModel, g: OpGraph, op: Op, st: StageCfg) -> float:
    """The cycles some TPB's TCU is busy with stage ``st`` of ``op`` at least (0: not bounded)."""
    if op.unit not in TCU_UNITS or op.attrs.get("groups", 1) != 1 or st.ks != 1 or \
            st.act_resident:
        return 0.0
    geo = geometry(g, op)
    acts = g.act_inputs(op)
    peak = cm.peak_macs_per_cycle(acts[0].dtype if acts else g.out(op).dtype)
    used = min(st.gr, st.bands, geo.rows) * min(st.gc, geo.cols)
    if used < 1:
        return 0.0
    instrs = min(st.bands, geo.rows) * min(st.gc, geo.cols)  # >= one per band and column part
    macs = cm.op_macs(g, op)
    cz = g.causal.get(op.name)
    if cz is not None:  # a causal chain's pieces may be clipped (``causal.py``): row r keeps
        # at least min(C, r + k) of the C score columns; a column part may be wholly masked
        macs *= causal_share(geo.rows, geo.cols if cz[0] == "cols" else geo.k, cz[1])
        instrs = min(st.bands, geo.rows)
    return (macs / peak + instrs * cm.machine.tcu_pipeline_latency) / used


def causal_share(R: int, C: int, k: int) -> float:
    """``sum(min(C, r + k) for r in range(R)) / (R * C)``: the share of a causal chain's
    ``[R, C]`` score columns that its clipped pieces keep at least."""
    n1 = max(0, min(R, C - k + 1))  # the rows with r + k <= C
    return (n1 * k + n1 * (n1 - 1) / 2 + (R - n1) * C) / (R * C)


def tcu_floor(cm: CostModel, g: OpGraph, ops: dict[str, Op], seg: SegmentCfg) -> float:
    """A lower bound of the makespan of ``seg`` built alone (module doc); 0 when unknown."""
    if seg.kind not in ("data-parallel", "pipeline"):
        return 0.0
    return max((stage_floor(cm, g, ops[st.op], st) for st in seg.stages), default=0.0)


def busy_floor(sched, seg: SegmentCfg) -> float:
    """The TCU cycles of the busiest TPB in the isolated build of ``seg`` (module doc): a lower
    bound of its makespan, 0 when no stage is covered. ``sched``: the search's
    :class:`.timeline.Scheduler` (its tile plans and band boxes, so the build that may follow
    reuses them)."""
    busy = tpb_busy(sched, seg)
    return max(busy.values(), default=0.0) if busy is not None else 0.0


def tpb_busy(sched, seg: SegmentCfg, names: set[str] | None = None) -> dict[int, float] | None:
    """TPB -> the TCU cycles :func:`busy_floor` counts for ``seg`` on it (the covered stages'
    pieces; a TPB's TCU runs at least these for the segment in any build of it); None when a
    stage does not tile (the build says why). ``names``: filled with the covered stages' ops
    (the isolated build's TCU tasks of these ops are exactly the counted cycles, TPB by TPB:
    :meth:`.build_segments.SearchBuilder.task`'s tail stop)."""
    busy: dict[int, float] = {}
    if seg.kind not in ("data-parallel", "pipeline"):
        return busy
    causal = getattr(sched.g, "causal", None) or {}
    memo = sched.__dict__.setdefault("_busy_floor", {})
    for st in seg.stages:
        op = sched.ops[st.op]
        if op.unit not in TCU_UNITS or op.attrs.get("groups", 1) != 1 or st.ks != 1 or \
                st.act_resident or op.name in causal:
            continue
        try:
            tplan = sched.stage_plan(seg, st)
        except ScheduleError:
            return None  # the build says why
        if tplan.act_resident:
            continue
        lock = len(seg.stages) == 1 and lockstep(tplan, op)
        key = (st, lock, tplan.tr, tplan.tc, tplan.tk, tplan.k)
        per = memo.get(key)
        if per is None:
            shape = stage_shape(sched, op, st)
            if shape is None:
                per = _stage_busy(sched, st, op, tplan, lock)
            else:  # a stage of the same structure (another op, other TPBs): its counts
                smemo = sched.__dict__.setdefault("_busy_shapes", {})
                skey = (shape, key[1:])
                hit = smemo.get(skey)
                if hit is not None:
                    per = {st.tpbs[i]: c for i, c in hit}
                else:
                    per = _stage_busy(sched, st, op, tplan, lock)
                    smemo[skey] = by_position(st, per)
            memo[key] = per
        for x, c in per.items():
            busy[x] = busy.get(x, 0.0) + c
        if names is not None:
            names.add(op.name)
    return busy


_stage_fields = attrgetter(*(f.name for f in fields(StageCfg) if f.name not in ("op", "tpbs")))


def stage_shape(sched, op: Op, st: StageCfg) -> tuple | None:
    """What :func:`_stage_busy` and :func:`.search_dma_floor.stage_dma` read of stage ``st`` of
    ``op`` besides its tile plan, so stages of the same structure share them (ResNet-50: 1 498
    of 2 509 per-stage TCU counts and 2 035 of 3 147 DMA counts are distinct; session 29): the
    op's structure and where its tensors live
    (``Scheduler.op_shape``, as the one-stage floors' memo, ``Search._floors``), the stage's
    fields but its op and TPBs, and its TPBs as first-seen positions (both name pieces by
    their TPB and nothing else of a TPB: ``Scheduler.band_boxes``, :func:`.segment.
    lockstep_groups`; a DMA's cost does not depend on the TPB it loads). None: not shared
    (an op whose key is not hashable)."""
    shape = sched.op_shape(op)
    if shape is None:
        return None
    tp = st.tpbs
    if len(set(tp)) == len(tp):  # distinct TPBs (nearly always): positions 0..n-1, as n
        return (shape, _stage_fields(st), len(tp))
    first: dict[int, int] = {}
    return (shape, _stage_fields(st), tuple(first.setdefault(x, len(first)) for x in tp))


def by_position(st: StageCfg, per: dict[int, float]) -> tuple | None:
    """``per`` (TPB -> cycles, in its order) with each TPB as its first position in
    ``st.tpbs``; None when a TPB is not one of them (then not shared)."""
    pos: dict[int, int] = {}
    for i, x in enumerate(st.tpbs):
        pos.setdefault(x, i)
    if any(x not in pos for x in per):
        return None
    return tuple((pos[x], c) for x, c in per.items())


def _stage_busy(sched, st: StageCfg, op: Op, tplan, lock: bool) -> dict[int, float]:
    """TPB -> the TCU cycles of ``st``'s pieces on it (``kinds.tcu.plan_piece``'s chunks)."""
    g, cm = sched.g, sched.cm
    if op.unit == "tcu.conv2d":
        kwin = op.attrs["kh"] * op.attrs["kw"]
        K = op.attrs["c"]
        kk = max(1, tplan.tk // kwin) if tplan.tk < tplan.k else K
        unit_k = kwin
    else:
        K = op.attrs["k"]
        kk = tplan.tk if tplan.tk < K else K
        unit_k = 1
    chunks = [min(kk, K - k0) * unit_k for k0 in range(0, K, kk)]
    if lock:
        boxes = [(p.tpb, p.r1 - p.r0, p.c1 - p.c0)
                 for grp in lockstep_groups(g, op, st, tplan, sched.geo(op),
                                            row_tile(cm, g, op)) for p in grp]
    else:
        boxes = [(tpb, e - a, ce - cc) for b in range(st.bands)
                 for _j, tpb, a, e, cc, ce in sched.band_boxes(st, op, tplan, b)]
    out: dict[int, float] = {}
    per_box: dict[tuple[int, int], float] = {}
    for tpb, rows, cols in boxes:
        c = per_box.get((rows, cols))
        if c is None:
            c = per_box[(rows, cols)] = sum(cm.piece_cycles(g, op, rows, cols, kpg)
                                            for kpg in chunks)
        out[tpb] = out.get(tpb, 0.0) + c
    return out


__all__ = ["busy_floor", "stage_floor", "stage_shape", "tcu_floor", "tpb_busy"]
