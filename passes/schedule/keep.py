"""Activations kept in the producer TPBs' HBSM between segments (issue 9).

Without this, an activation tensor that a later segment reads is stored by its producer pieces to
CCB SRAM (or DDR) and loaded again by the consumer -- two trips over the CCB DMA engines, which
ResNet-18 224 is bound by (26 MB, 420k of its 1.1 M engine cycles). A tensor is **kept** instead:
its producer pieces write their output tiles into HBSM buffers that stay live after the segment,
nothing is stored, and each consumer piece of a later segment gets the rows (halo included) and
columns it needs by DTDU copies from the producer pieces over the mesh (or reads a piece on its
own TPB in place) -- exactly what a pipeline stage does with its producer inside a segment
(``build_transfers.Transfers._act_in``, ``emit_units.UnitEmitter.act_in``), so the timeline and the
emitter read one decision, :attr:`.plan.Plan.kept` (op names), and nothing else changes.

:func:`choose_kept` decides it for a whole plan (never for the search's isolated segment costs,
whose inputs are ready at cycle 0), in program order. A tensor is kept when

* its producer's output tiles are row-standard (conv, matmul, pool, elementwise; not a resident-
  activation matmul, whose stores interleave with its column tiles); of a K split, the reduced
  tiles on the part-0 TPBs are kept;
* it is an intermediate tensor (not a model input/output/constant) and every consumer outside the
  producer's segment is a later compute segment's stage that would stream it from a producer of
  its own segment (``segment.streamable``, not ``reads_whole``) and is built piece by piece, or
  is a lockstep conv (K split or not): then each K chunk of a piece -- rows x a range of input
  channels -- is copied from the kept pieces (``kinds/tcu.py`` ``kept_chunks``) instead of one DRB
  broadcast from memory to the column parts (a lockstep matmul's chunks are not image rows, a
  resident activation reads whole bands: not kept);
* or a consumer reads it only as its TCU epilogue's operand (``post_in``: LLaMA's up reading
  gate's ``silu(g)``, down reading the residual ``h``; :data:`POST_IN`): each of its pieces
  takes its ``[rows, cols]`` box in place when a kept piece on its TPB has exactly that box
  (then its own ``post_in`` buffer is not allocated, and not counted below), else by DTDU
  copies from the kept pieces;
* on every TPB holding producer pieces, in every segment from the producer's to the last
  consumer's, the plan's buffers (``TilePlan.footprint`` of the stages on that TPB) + the kept
  tensors already held there + this tensor's tiles stay within ``PREFETCH_HBSM_SHARE`` of the
  HBSM (the rest: hbsm-allocate's packing slack). The kept bytes are counted in the HBSM use that
  weight prefetch (``list_schedule.ListScheduler._prefetch``) checks.
"""

from __future__ import annotations

from .graph import OpGraph, dtype_bytes
from .plan import op_family, row_view
from .segment import (SegmentCfg, lockstep, lockstep_groups, reads_whole, reduce_pieces,
                      row_tile, streamable)

KEEP_UNITS = ("tcu.conv2d", "tcu.matmul", "cvu.pool", "cvu.elementwise")
#: False: a matmul epilogue's operand (``post_in``: gate's ``silu(g)`` for up) is never kept
#: (A/B; issue 13, session 20)
POST_IN = True
#: True: a lockstep 2-D matmul may read its activation's K chunks from kept pieces (as a lockstep
#: conv does); off: on the LLaMA2-7B W8A8 prefill layer down's tiles (1.71 MB) leave no room for
#: up's kept result, and the layer was not shorter (issue 13, session 20; docs/llm.md)
LOCKSTEP_MATMULS = False
#: False: a tensor read through a reshape view (RoPE's ``[T, n, hd]`` of a projection's
#: ``[T, n*hd]``) is never kept (A/B; issue 13, session 19)
ROW_VIEWS = True


def row_root(g: OpGraph, tensor: str) -> str | None:
    """The 2-D tensor ``R [rows, C]`` whose bytes ``tensor`` is when ``tensor`` is a whole reshape
    view of it at offset 0 with the same rows (``row_view``: ``(rows, E, c)``, ``E * c == C``):
    RoPE's ``x [T, n, hd]`` of a projection's ``[T, n * hd]``. A piece of whole rows of
    ``tensor`` (every ``E``, every ``c``) is then rows x all ``C`` columns of ``R``, byte for
    byte; None otherwise. (Cached per graph.)"""
    cache = g.__dict__.setdefault("_row_root", {})
    if tensor in cache:
        return cache[tensor]
    r = None
    v = g.views.get(tensor) if ROW_VIEWS else None
    if v is not None and v[1] == 0 and v[0] in g.tensors:
        root, t = g.tensors[v[0]], g.tensors[tensor]
        if len(root.shape) == 2 and len(t.shape) == 3 and root.numel == t.numel and \
                root.dtype == t.dtype and row_view(t.shape)[0] == root.shape[0]:
            r = v[0]
    cache[tensor] = r
    return r


def row_roots(g: OpGraph) -> set[str]:
    """The tensors that have a row view (:func:`row_root`). (Cached per graph.)"""
    r = g.__dict__.get("_row_roots")
    if r is None:
        r = g.__dict__["_row_roots"] = {x for x in (row_root(g, v) for v in g.views) if x}
    return r


def _view_readers(g: OpGraph, cons: dict, t: str, ops: set[str]):
    """The readers of ``t``'s row views (:func:`row_root`) as (reader, view tensor), or None when
    ``t`` is read through another view op or a view is read by an op of its own segment."""
    out = []
    for u in cons.get(t, []):
        if u.name not in g.view_ops:
            continue
        v = u.outputs[0] if len(u.outputs) == 1 else None
        if v is None or row_root(g, v) != t:
            return None
        for w in cons.get(v, []):
            if w.name in ops:
                return None
            out.append((w, v))
    return out


def piece_elems(g: OpGraph, op, geo) -> int:
    """Elements per (row, column) of ``op``'s output tile (``PlanPiece.out_dims[1]``)."""
    if op_family(op.unit) == "cvu":
        return row_view(g.out(op).shape)[1]
    return geo.row_elems


def post_reader(u, t: str) -> bool:
    """Does ``u`` read ``t`` only as its TCU epilogue's operand (``post_in``: a ``[rows, cols]``
    box per piece, the box of its own output tile)?"""
    return POST_IN and u.unit == "tcu.matmul" and u.attrs.get("post_in") == t and \
        t not in u.inputs[:2]


def piece_boxes(s, seg: SegmentCfg, st, op, tplan) -> set[tuple[int, int, int, int, int]]:
    """(TPB, r0, r1, c0, c1) of every piece of a stage, as the plan builder deals them (the
    pieces :func:`kept_bytes` counts)."""
    g, cm = s.g, s.cm
    if len(seg.stages) == 1 and lockstep(tplan, op):
        return {(p.tpb, p.r0, p.r1, p.c0, p.c1)
                for grp in lockstep_groups(g, op, st, tplan, s.geo(op), row_tile(cm, g, op))
                for p in (reduce_pieces(grp, 0) if st.ks > 1 else grp)}
    order = _band_order(s, seg, st, tplan)
    out = set()
    for b in range(st.bands):
        rb = b if order is None else order[b]
        for j, tpb, a, e_, cc, ce in s.band_boxes(st, op, tplan, rb):
            if order is not None:
                tpb = st.tpbs[st.row_of(b) * st.gc + j]
            out.add((tpb, a, e_, cc, ce))
    return out


def _post_in_place(s, seg, st, op, useg, ust, plans) -> int:
    """The ``post_in`` buffer bytes per TPB a post reader (``ust``) does not allocate when every
    one of its pieces reads the kept tile of a producer piece (``st``) on its own TPB with its
    box in place (``build_transfers.Transfers._act_in``); 0 when some piece would copy."""
    uop = s.ops[ust.op]
    if op.unit != "tcu.matmul" or s.geo(op).row_elems != 1 or s.geo(uop).row_elems != 1:
        return 0
    if not piece_boxes(s, useg, ust, uop, plans[ust.op]) <= \
            piece_boxes(s, seg, st, op, plans[st.op]):
        return 0
    return sum(b.nbytes for b in plans[ust.op].buffers if b.role == "post_in")


def _reads_kept(s, seg: SegmentCfg, st, plans: dict, flat: bool = False,
                matmul: bool = False) -> bool:
    """Can stage ``st`` read its input from kept pieces? Built piece by piece (no K split, no
    resident activation), or a lockstep conv (its K chunks -- input channels -- copied from the
    kept pieces), or with :data:`LOCKSTEP_MATMULS` a lockstep 2-D matmul whose producer's tiles
    are 2-D (``flat``: one element per row and column; a K chunk is then rows x a range of the
    producer's columns, LLaMA's down projection reading up's int8 result) -- a matmul over
    rows of several elements reads chunks of another shape. ``matmul`` (the keep mode
    ``"all-mm"``): such a matmul with its K in chunks whatever :data:`LOCKSTEP_MATMULS` says
    (LLaMA prefill's Q / K / V reading the norm's ``xq``)."""
    op = s.ops[st.op]
    if st.act_resident:
        return False
    if len(seg.stages) == 1 and lockstep(plans[st.op], op):
        return op.unit == "tcu.conv2d" or (
            (LOCKSTEP_MATMULS or (matmul and plans[st.op].tk < plans[st.op].k)) and flat and
            op.unit == "tcu.matmul" and not op.attrs.get("batch") and
            s.geo(op).row_elems == 1 and len(s.g.tensors[op.inputs[0]].shape) == 2)
    return st.ks == 1


def choose_kept(s, segs: list[SegmentCfg], cap: int, one_stage: bool = False,
                matmul: bool = False) -> tuple[set[str], dict]:
    """(op names whose output is kept in HBSM, {(TPB, segment): kept bytes held there}) for the
    plan of ``segs`` (see the module docstring). ``one_stage``: only tensors whose later
    consumers are all one-stage segments (their copies from the kept pieces are then the only
    DTDU copies of the segment: in a pipeline they queue on the source TPB's DTDU behind the
    stream copies of other stages, which wait for compute). ``matmul``: then, in a second pass
    over what the first left, tensors read by lockstep matmuls with K chunks too
    (:func:`_reads_kept`; the keep mode ``"all-mm"``: the prefill projections' activation, read
    three times) -- after the others, so that they keep the room they had."""
    kept, use = _choose(s, segs, cap, one_stage, False, set(), {})
    if matmul:
        kept, use = _choose(s, segs, cap, one_stage, True, kept, use)
    return kept, use


#: the greedy runs of :func:`_choose` kept per scheduler and (cap, one_stage, matmul) for a later
#: call to resume from (the most recent ones; :func:`_choose`'s doc)
KEEP_RUNS = 4
_NO_FEET: dict = {}


def _choose(s, segs: list[SegmentCfg], cap: int, one_stage: bool, matmul: bool,
            kept: set[str], use: dict) -> tuple[set[str], dict]:
    """One greedy pass of :func:`choose_kept` over the stages of ``segs`` in program order,
    starting from ``kept`` / ``use``.

    Resumed (session 33): the whole-plan trials ask it for lists that differ from an earlier
    call's in a few segments (ResNet-50: 41 calls a schedule). Each stage's decision reads the
    segments from its own to the last it looked at (its later readers' segments: their stages
    and tile plans, the footprints ``feet`` of the segments in between) -- ``R`` in the run's
    trace -- and the greedy state ``kept`` / ``use`` the decisions before it left. So when the
    first ``j`` segments of ``segs`` are those of a kept run (by identity) with the same start
    state, every decision of that run before the first one with ``R >= j`` is this call's too,
    with the same additions to ``kept`` / ``use`` in the same order: they are applied from the
    trace and the greedy runs on from there (a reader in no segment, ``R`` = infinity, is read
    of the whole list). A list naming an op in two stages is run whole and not kept (the
    segment maps would not be per position). ``test_keep_resume`` compares every call of
    whole placements with the pass written out as it was."""
    g = s.g
    seg_of: dict[str, int] = {}
    stage: dict[str, tuple] = {}
    plans: dict = {}
    # per segment, TPB -> the footprints of its stages' tile plans there (kept per segment
    # object: a segment and its stages are frozen, ``stage_plan`` answers them alike)
    feet: list[dict] = []
    fmemo = s.__dict__.setdefault("_keep_feet", {})
    pos: list[tuple] = []  # the greedy's stages in order: (si, seg, st)
    dup = False
    for si, seg in enumerate(segs):
        if seg.kind == "dma":
            feet.append(_NO_FEET)
            continue
        hit = fmemo.get(id(seg))
        if hit is None or hit[0] is not seg:
            f: dict[int, int] = {}
            for st in seg.stages:
                fp = s.stage_plan(seg, st).footprint
                for x in st.tpbs:
                    f[x] = f.get(x, 0) + fp
            hit = fmemo[id(seg)] = (seg, f)
        feet.append(hit[1])
        for st in seg.stages:
            if st.op in seg_of:
                dup = True
            seg_of[st.op] = si
            stage[st.op] = (si, seg, st)
            pos.append((si, seg, st))
            plans[st.op] = s.stage_plan(seg, st)
    cons = g.consumers()
    start = (frozenset(kept), dict(use))
    kept, use = set(kept), dict(use)
    trace: list[tuple] = []  # per stage of ``pos``: (R, kept op or None, its use additions)
    runs = s.__dict__.setdefault("_keep_runs", {}).setdefault((cap, one_stage, matmul), [])
    if not dup:
        best_j, best = -1, None
        for r in runs:
            rsegs, rstart, rtrace = r
            if rstart != start:
                continue
            n = min(len(rsegs), len(segs))
            j = 0
            while j < n and rsegs[j] is segs[j]:
                j += 1
            if j > best_j:
                best_j, best = j, rtrace
        if best is not None:
            for e in best:
                if e[0] >= best_j:
                    break
                trace.append(e)
                if e[1] is not None:
                    kept.add(e[1])
                    for k, a in e[2]:
                        use[k] = use.get(k, 0) + a
    inf = len(segs) + 1
    cur, ops = -1, set()
    for si, seg, st in pos[len(trace):]:
        if si != cur:
            cur, ops = si, set(seg.ops)
        op = s.ops[st.op]
        t = op.outputs[0]
        if op.name in kept or len(op.outputs) != 1 or op.unit not in KEEP_UNITS or \
                op.attrs.get("layout") == "nchw" or g.tensors[t].kind != "act" or \
                st.act_resident:
            trace.append((si, None, ()))
            continue
        users = cons.get(t, [])
        # readers through a row view (read as whole rows of ``t``: one column part)
        vread = _view_readers(g, cons, t, ops) if t in row_roots(g) else []
        if vread is None:
            trace.append((si, None, ()))
            continue
        users = [u for u in users if u.name not in g.view_ops] if vread else users
        later = [(u, t) for u in users if u.name not in ops] + vread
        if not later or any(reads_whole(u, t) and not post_reader(u, t) for u in users) or \
                any(reads_whole(u, v) for u, v in vread):
            trace.append((si, None, ()))
            continue
        ok = True
        last = R = si
        flat = piece_elems(g, op, s.geo(op)) == 1 and len(g.tensors[t].shape) == 2
        free: dict[tuple[int, int], int] = {}  # (TPB, segment) -> post_in bytes not allocated
        for u, v in later:
            # (a box of rows x columns of 2-D producer tiles: the reader's [rows, cols])
            post = post_reader(u, v) and flat
            if u.name not in stage:
                R, ok = inf, False
                break
            usi, useg, ust = stage[u.name]
            if usi > R:
                R = usi
            if usi <= si or not (post or streamable(g, u, v)):
                ok = False
                break
            if (not post and not _reads_kept(s, useg, ust, plans, flat, matmul)) or \
                    (one_stage and len(useg.stages) > 1) or (v != t and ust.gc != 1):
                ok = False
                break
            if post:  # read in place: the reader's own ``post_in`` buffer is not allocated
                pin = _post_in_place(s, seg, st, op, useg, ust, plans)
                for x in (ust.tpbs if pin else ()):
                    free[(x, usi)] = free.get((x, usi), 0) + pin
            last = max(last, usi)
        if not ok:
            trace.append((R, None, ()))
            continue
        held = kept_bytes(s, seg, st, op, plans[st.op])
        # in its own segment a tile held there is in an output slot of the producer (its
        # footprint): only what the slots do not hold is more
        own = sum(b.nbytes for b in plans[st.op].buffers if b.role == "out")
        # what the kept tiles add on TPB x in segment q: nb - own in si, nb - the post_in bytes
        # not allocated there after it (never below 0); fits where feet + use + that <= cap
        adds = []
        for x, nb in held.items():
            for q in range(si, last + 1):
                m = nb - own if q == si else nb - free.get((x, q), 0)
                if m < 0:
                    m = 0
                k = (x, q)
                if feet[q].get(x, 0) + use.get(k, 0) + m > cap:
                    break
                adds.append((k, nb if q == si else m))
            else:
                continue
            break
        else:
            kept.add(op.name)
            for k, a in adds:
                use[k] = use.get(k, 0) + a
            trace.append((R, op.name, tuple(adds)))
            continue
        trace.append((R, None, ()))
    if not dup:
        runs.append((tuple(segs), start, trace))
        if len(runs) > KEEP_RUNS:
            runs.pop(0)
    return kept, use


def first_bcast_read(s, segs: list[SegmentCfg], kept: set[str]) -> int:
    """The first index of ``segs`` whose build may read ``Plan.kept_bcast`` (``len(segs)``:
    none), for a plan keeping ``kept``. The builder reads it in one place, a lockstep group's
    K chunk of a kept activation (``kinds/tcu.plan_piece``'s ``kept_chunks``: the piece is in a
    lockstep group, so its segment is one lockstep contraction -- ``PlanPiece.group`` is set by
    ``_lockstep_segment`` alone --, and its activation ``inputs[0]`` is kept or a row view of a
    kept tensor, ``Transfers._streamed``; a producer in the same segment is impossible with
    one stage). This is the first segment meeting those conditions with any input (a superset):
    two builds that differ only in the broadcast mode build the segments before it alike, so a
    build of one mode may resume from a checkpoint of the other's at or before it
    (``refine.kept_copies``; ``test_kept_copies``)."""
    if not kept:
        return len(segs)
    g, prod = s.g, s.producers
    for si, seg in enumerate(segs):
        if seg.kind == "dma" or len(seg.stages) != 1:
            continue
        st = seg.stages[0]
        op = s.ops[st.op]
        if not lockstep(s.stage_plan(seg, st), op):
            continue
        for t in op.inputs:
            p = prod.get(t)
            if p is None:
                continue
            if p.name in g.view_ops:
                r = row_root(g, t)
                p = prod.get(r) if r is not None else None
            if p is not None and p.name in kept:
                return si
    return len(segs)


def kept_bytes(s, seg: SegmentCfg, st, op, tplan) -> dict[int, int]:
    """HBSM bytes per TPB of a stage's output tiles (each rounded to the bank width), all of them
    live at once when its output is kept: the pieces of a stage built piece by piece or in
    lockstep groups, the reduced tiles (on the part-0 TPBs) of a K split. The result is read,
    never changed: it is memoized per scheduler on what it depends on (the stage, whether it is
    alone in its segment, its tiling -- the scheduler's cached ``TilePlan`` object)."""
    key = (st, seg if s.g.causal else len(seg.stages) == 1, id(tplan))
    hit = s.kept_memo.get(key)
    if hit is not None and hit[0] is tplan:
        return hit[1]
    out = _kept_bytes(s, seg, st, op, tplan)
    s.kept_memo[key] = (tplan, out)
    return out


def _kept_bytes(s, seg: SegmentCfg, st, op, tplan) -> dict[int, int]:
    g, cm = s.g, s.cm
    geo = s.geo(op)
    e = piece_elems(g, op, geo)
    ob = dtype_bytes(g.out(op).dtype)
    out: dict[int, int] = {}
    if len(seg.stages) == 1 and lockstep(tplan, op):
        for grp in lockstep_groups(g, op, st, tplan, geo, row_tile(cm, g, op)):
            for p in (reduce_pieces(grp, 0) if st.ks > 1 else grp):
                out[p.tpb] = out.get(p.tpb, 0) + cm.align((p.r1 - p.r0) * e * (p.c1 - p.c0) * ob)
        return out
    order = _band_order(s, seg, st, tplan)
    for b in range(st.bands):
        rb = b if order is None else order[b]  # the band whose rows band b computes
        for j, tpb, a, e_, cc, ce in s.band_boxes(st, op, tplan, rb):
            if order is not None:  # on band b's TPB (as the plan builder deals them)
                tpb = st.tpbs[st.row_of(b) * st.gc + j]
            out[tpb] = out.get(tpb, 0) + cm.align((e_ - a) * e * (ce - cc) * ob)
    return out


def _band_order(s, seg: SegmentCfg, st, tplan) -> list[int] | None:
    """The causal band order of ``seg`` (:func:`.causal.band_order`: band ``b`` computes the
    rows of band ``order[b]`` on the TPB row of ``b``), as the plan builder takes it; None when
    the bands keep their rows."""
    if not s.g.causal or len(seg.stages) < 2:
        return None
    from . import causal
    plans = {x.op: tplan if x is st else s.stage_plan(seg, x) for x in seg.stages}
    return causal.band_order(seg, causal.clips(s, seg, plans))


__all__ = ["choose_kept", "first_bcast_read", "kept_bytes", "piece_elems", "KEEP_UNITS"]
