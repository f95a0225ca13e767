"""Causal attention chains whose masked half is skipped (issue 13, prefill).

A head's attention is ``s = q @ kT`` ``[T, T]``, ``p = softmax(s + mask)`` along the rows, ``o = p @
v``. With the causal mask ``np.triu(full(v), k)`` computed in the softmax's pipeline
(:func:`.cvu._band_mask`) a piece of rows ``[r0, r1)`` needs only the score columns ``[0, r1 - 1 +
k)``: every other column of those rows is masked, and a masked score contributes exactly nothing:

* the row's maximum is an unmasked score (column ``row`` itself is unmasked since ``k >= 1``), as
  long as every masked ``s + v`` lies below it;
* ``exp(s + v - max)`` of a masked column is exactly ``+0`` in f32 once ``s + v - max < -103.98``
  (below half of the smallest f32 subnormal) and in f16 once it is ``< -17.33`` (the 16-bit
  ``SOFTMAX`` body, docs/isa.md), so the row's sum and every unmasked probability keep their bits
  (``x + 0 == x``, whatever the order of the sum);
* the PV matmul loses only products with a ``+0`` probability (``+-0`` terms of its f32 sum).

So dropping those columns from QK, the softmax and PV's reduction is exact whenever every score of
the head satisfies ``max_row - s_masked > -v - 103.98``; with ``v <= -1e4`` (what the LLaMA graphs
use, :data:`MASK_MAX`) that holds for every head whose scores lie within +-4940 (f32 or f16 body; the
f16 rounding of ``s + v`` moves it by at most 4).
Scores that large already defeat the graph's own mask (a masked ``exp`` would not be 0 there
either: the graph's result is then not causal attention at all); the skip is then NOT the graph's
value -- the one numerics condition of this transformation (docs/llm.md, session 16).
:data:`ENABLED` turns it off (A/B).

:func:`find_causal` recognizes the chains; which pieces are clipped is decided per segment by
``passes/schedule/causal.py`` (the three ops' row pieces must be the same).
"""

from __future__ import annotations

from ..graph import OpGraph

# the skip on (False: every column computed, the programs of session 15)
ENABLED = True
# the mask value must be at least this negative (the exactness argument above)
MASK_MAX = -1e4


def find_causal(g: OpGraph, band_softmax: dict[str, tuple[float, int]]
                ) -> dict[str, tuple[str, int, tuple[str, str, str]]]:
    """Per op of each causal chain ``qk -> softmax -> pv``: ``(role, k, (qk, softmax, pv))``,
    role ``cols`` for the score matmul and the softmax (their output columns are clipped), ``k``
    for the PV matmul (its reduction is clipped). A chain qualifies when the softmax's mask is
    ``np.triu(full(v), k)`` with ``k >= 1`` and ``v <= MASK_MAX``; its scores ``[R, C]`` are the
    plain result of a 2-D matmul (no batch, bias, tables, post stages or int4 weights) read by
    the softmax alone; the softmax's result is read by one 2-D matmul alone, as its first
    operand (the reduction over the score columns, ``k == C``); no tensor of the chain is a
    view, a part written in place, an output or read through another layout."""
    if not ENABLED:
        return {}
    out: dict[str, tuple[str, int, tuple[str, str, str]]] = {}
    prods = g.producers()
    cons = g.consumers()
    special = set(g.views) | set(g.strided) | set(g.wmap) | set(g.cviews) | set(g.rmap) | \
        {r[0] for r in g.views.values()} | {r[0] for r in g.cviews.values()} | \
        {r[0] for r in g.rmap.values()}
    ops = {o.name: o for o in g.ops}

    def plain_matmul(o) -> bool:
        return o is not None and o.unit == "tcu.matmul" and len(o.inputs) == 2 and \
            not any(a in o.attrs for a in ("batch", "w4", "rq_table", "dq_table", "post_in")) \
            and not o.attrs.get("post")

    for name, (v, k) in band_softmax.items():
        sm = ops.get(name)
        if sm is None or not (k >= 1 and v <= MASK_MAX):
            continue
        s_t, p_t = sm.inputs[0], sm.outputs[0]
        st, pt = g.tensors[s_t], g.tensors[p_t]
        if len(st.shape) != 2 or st.shape != pt.shape or {s_t, p_t} & special or \
                st.kind != "act" or pt.kind != "act":
            continue
        R, C = st.shape
        qk = prods.get(s_t)
        users_p = cons.get(p_t, [])
        if not plain_matmul(qk) or [o.name for o in cons.get(s_t, [])] != [name] or \
                len(users_p) != 1:
            continue
        pv = users_p[0]
        if not plain_matmul(pv) or pv.inputs[0] != p_t or pv.inputs[1] == p_t:
            continue
        a_q, a_p = qk.attrs, pv.attrs
        if (a_q.get("m"), a_q.get("n")) != (R, C) or (a_p.get("m"), a_p.get("k")) != (R, C):
            continue
        chain = (qk.name, sm.name, pv.name)
        out[qk.name] = ("cols", k, chain)
        out[sm.name] = ("cols", k, chain)
        out[pv.name] = ("k", k, chain)
    return out
