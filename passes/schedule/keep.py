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


def piece_elems(g: OpGraph, op, geo) -> int:
    """Elements per (row, column) of ``op``'s output tile (``PlanPiece.out_dims[1]``)."""
    if op_family(op.unit) == "cvu":
        return row_view(g.out(op).shape)[1]
    return geo.row_elems


def _reads_kept(s, seg: SegmentCfg, st, plans: dict) -> bool:
    """Can stage ``st`` read its input from kept pieces? Built piece by piece (no K split, no
    resident activation), or a lockstep conv (its K chunks -- input channels -- copied from the
    kept pieces; a lockstep matmul's activation chunks are rows of another shape)."""
    op = s.ops[st.op]
    if st.act_resident:
        return False
    if len(seg.stages) == 1 and lockstep(plans[st.op], op):
        return op.unit == "tcu.conv2d"
    return st.ks == 1


def choose_kept(s, segs: list[SegmentCfg], cap: int, one_stage: bool = False
                ) -> tuple[set[str], dict]:
    """(op names whose output is kept in HBSM, {(TPB, segment): kept bytes held there}) for the
    plan of ``segs`` (see the module docstring). ``one_stage``: only tensors whose later
    consumers are all one-stage segments (their copies from the kept pieces are then the only
    DTDU copies of the segment: in a pipeline they queue on the source TPB's DTDU behind the
    stream copies of other stages, which wait for compute)."""
    g = s.g
    seg_of: dict[str, int] = {}
    plans: dict = {}
    foot: dict[tuple[int, int], int] = {}
    for si, seg in enumerate(segs):
        if seg.kind == "dma":
            continue
        for st in seg.stages:
            seg_of[st.op] = si
            plans[st.op] = p = s.stage_plan(seg, st)
            for x in st.tpbs:
                foot[(x, si)] = foot.get((x, si), 0) + p.footprint
    stage = {st.op: (si, seg, st) for si, seg in enumerate(segs) if seg.kind != "dma"
             for st in seg.stages}
    cons = g.consumers()
    kept: set[str] = set()
    use: dict[tuple[int, int], int] = {}
    for si, seg in enumerate(segs):
        if seg.kind == "dma":
            continue
        ops = set(seg.ops)
        for st in seg.stages:
            op = s.ops[st.op]
            t = op.outputs[0]
            if len(op.outputs) != 1 or op.unit not in KEEP_UNITS or \
                    op.attrs.get("layout") == "nchw" or g.tensors[t].kind != "act" or \
                    st.act_resident:
                continue
            users = cons.get(t, [])
            later = [u for u in users if u.name not in ops]
            if not later or any(reads_whole(u, t) for u in users):
                continue
            ok = True
            last = si
            for u in later:
                if u.name not in stage or seg_of[u.name] <= si or not streamable(g, u, t):
                    ok = False
                    break
                usi, useg, ust = stage[u.name]
                if not _reads_kept(s, useg, ust, plans) or (one_stage and len(useg.stages) > 1):
                    ok = False
                    break
                last = max(last, usi)
            if not ok:
                continue
            held = kept_bytes(s, seg, st, op, plans[st.op])
            if any(foot.get((x, q), 0) + use.get((x, q), 0) + nb > cap
                   for x, nb in held.items() for q in range(si, last + 1)):
                continue
            kept.add(op.name)
            for x, nb in held.items():
                for q in range(si, last + 1):
                    use[(x, q)] = use.get((x, q), 0) + nb
    return kept, use


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


__all__ = ["choose_kept", "kept_bytes", "piece_elems", "KEEP_UNITS"]
