"""Which pieces of a causal attention chain are clipped in a segment, and how.

``OpGraph.causal`` (``from_ir/causal.find_causal``) names the chains ``qk -> softmax -> pv`` whose
masked score columns contribute exactly nothing (the exactness argument is there): a piece of rows
``[a, e)`` needs only the score columns ``[0, e - 1 + k)``. The plan builder clips, per segment:

* the softmax and PV when both run in the segment (the softmax's pieces then hold only their
  columns ``[0, lim)``, which PV reads as its reduction ``[0, lim)``: the two must go together,
  since nothing else writes the dropped columns), and the QK matmul too when it runs there (its
  pieces compute only the columns the softmax reads);
* only when the chain's stages in the segment cut their rows into the same bands (a consumer
  piece reads the columns ``[0, lim)`` of its rows, which the producer pieces of those rows must
  hold), none splits its reduction over TPBs or keeps its activation resident, and PV's
  second operand is not a resident weight cut into K chunks (a chunk loaded once for all bands).
  When the stages also cut their bands into the same row pieces, a piece of rows ``[a, e)``
  keeps ``lim = e - 1 + k``; otherwise (their tile plans cut a band into pieces of different
  rows, e.g. a large first band of work-cut bands, ``StageCfg.wcut``) every piece of a band of
  rows ``[A, E)`` keeps ``lim = E - 1 + k``, the columns its band needs (its own masked columns
  among them, computed as the unclipped program computes them: exact all the same).

A clipped QK / softmax piece has columns ``[c0, min(c1, lim))`` (a column tile wholly past
``lim`` is dropped) and remembers its unclipped end (``PlanPiece.cfull``: a resident second
operand is still loaded for the whole column tile, once per TPB); a clipped PV piece has
``PlanPiece.kx = lim`` (its reduction; its resident second operand keeps all of K). The cost of
each piece follows from its box (``kinds/tcu``, ``kinds/cvu``), so the search sees the saving.
"""

from __future__ import annotations

from .graph import geometry
from .plan import PlanPiece
from .segment import stage_rows


# clip the pieces of a band to the columns of the band's last row where the stages cut it into
# different pieces (False: no clip then, as in session 16; A/B)
PER_BAND = True


def clips(s, seg, plans) -> dict[str, tuple[str, int, bool]]:
    """op -> (role, k, per band) of the chain ops clipped in segment ``seg`` (``plans``: the
    stages' tile plans); ``per band``: each piece keeps the columns of its band's last row, not
    its own (module doc). Empty when the graph has no causal chain."""
    g = s.g
    if not g.causal:
        return {}
    stages = {st.op: st for st in seg.stages}
    out: dict[str, tuple[str, int, bool]] = {}
    for name, (role, k, chain) in g.causal.items():
        qk, sm, pv = chain
        if name != sm or sm not in stages or pv not in stages:
            continue
        members = [x for x in chain if x in stages]
        rows = bands = None
        ok, same = True, True
        for x in members:
            st, tp = stages[x], plans[x]
            if st.ks > 1 or st.act_resident or tp.act_resident or \
                    (x == pv and tp.weight_resident and tp.tk < tp.k):
                ok = False
                break
            op = s.ops[x]
            nr = s.geo(op).rows
            c = tuple(stage_rows(st, nr, b) for b in range(st.bands))
            r = tuple(sorted({(a, e) for b in range(st.bands)
                              for _j, _t, a, e, _c, _d in s.band_boxes(st, op, tp, b)}))
            if bands is None:
                bands, rows = c, r
            elif c != bands:
                ok = False
                break
            elif r != rows:
                same = False
        if ok and (same or PER_BAND):
            for x in members:
                out[x] = (g.causal[x][0], k, not same)
    return out


def band_order(seg, clip: dict[str, tuple[str, int]]) -> list[int] | None:
    """Which band's rows each band of the segment computes, when the stages of ``seg`` hold a
    clipped chain's PV and all have the same number of bands (a stage after the chain too: the
    W8A8 heads' quantize of their output, ``llm.PREFILL_O_QUANT``, session 18), dealt round robin
    to its TPB rows (a pipeline): band ``b`` computes the rows of band ``order[b]``, every odd round reversed
    (for the chain's PV stage's TPB rows). A band's work grows with its last row (it keeps the
    columns ``[0, r1)``), so round robin alone gives TPB row ``gr - 1`` the largest band of
    every round; reversed odd rounds pair each TPB's light band with a heavy one (48 bands on
    28 TPB rows, band b's work ~ b + 1: the busiest TPB row computes 49 units instead of 68,
    against 42 perfectly balanced -- the largest band alone is 48). All stages take the same order, so
    band ``b`` of each stage covers the same rows (the wave lags stay those of equal bands).
    None: the bands keep their rows."""
    if not clip or any(st.block for st in seg.stages) or \
            len({st.bands for st in seg.stages}) != 1:
        return None
    pv = [st for st in seg.stages if st.op in clip and clip[st.op][0] == "k"]
    if not pv:
        return None
    g, n = pv[0].gr, pv[0].bands
    if g < 2 or n <= g:
        return None
    order = []
    for r0 in range(0, n, g):
        rnd = list(range(r0, min(n, r0 + g)))
        order += rnd[::-1] if (r0 // g) % 2 else rnd
    return order


def piece(s, op, clip: tuple[str, int, bool], b: int, j: int, tpb: int, a: int, e: int, cc: int,
          ce: int, si: int, last: int = 0) -> PlanPiece | None:
    """The clipped piece of the box rows [a, e) x columns [cc, ce) (None: wholly masked);
    ``last``: the end row of its band (the columns it keeps when ``clip`` is per band)."""
    role, k, per_band = clip
    if per_band:
        e_lim = max(e, last)
    else:
        e_lim = e
    geo = geometry(s.g, op)
    if role == "cols":
        lim = min(geo.cols, e_lim - 1 + k)
        if cc >= lim:
            return None
        p = PlanPiece(op.name, b, j, tpb, a, e, cc, min(ce, lim), segment=si)
        if ce > lim:
            p.cfull = ce
        return p
    p = PlanPiece(op.name, b, j, tpb, a, e, cc, ce, segment=si)
    lim = min(geo.k, e_lim - 1 + k)
    if lim < geo.k:
        p.kx = lim
    return p
