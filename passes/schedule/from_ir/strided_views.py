"""Strided views: slices and reshapes read in place through an affine walk (issue 13, session 17).

A slice that is not one contiguous run of its input (``find_views``) -- a column slice of a 2-D
tensor, say -- was a DMA copy through memory, and so was every reshape of it. A fused projection
(``xn @ [Wq Wk Wv]``, one GEMM) is cut into Q/K/V by three such column slices, each then
reshaped into heads (``[T, n*hd] -> [T, n, hd]``) for RoPE or transposed into the ``v`` output:
three copies of the projection's result (docs/llm.md, session 16: the fused form lost to
separate projections by them).

:func:`find_strided_views` makes such a slice (the **origin**) and every slice / reshape of it
(its **descendants**, contiguous views included) a **strided view** of the origin's source:
``OpGraph.rmap``: tensor -> (root, element stride per dim, element offset) -- the root's linear
element index of each of the tensor's elements, affine element by element (a reshape merging
dims whose strides do not chain is not: the chain below it stays as it was). The root is a
tensor with memory of its own (an ``act`` tensor an op produces, or a model input; a contiguous
view's root at its offset). The view ops move nothing (``OpGraph.view_ops``: their readers wait
for the root's writers, ``kinds/movement.py``); a reader loads its boxes from the root through
the composed walk (``emit_core.Emitter.source``: one DMA per box as before, the same bytes, from
other addresses), so the plan's tasks and bytes are those of a read of the tensor itself.

Readers allowed (every reader of every tensor of the chain, else the origin stays a copy):
TCU matmuls (their operand boxes are explicit walks: ``emit_units.load`` / broadcasts), CVU
pipeline ops of kind ``cvu`` (``kinds/cvu.input_box``), data-movement copies (transpose, slice,
reshape, copy generic, broadcast: one DMA with the composed source walk) and the chain's own
view ops. Never for a model output, a weight, a sub-byte dtype, a tensor stored into another
layout (``wmap``, ``strided``) or a concat part; ``Emitter.memory`` of a strided view is an
internal error (nothing is silently copied elsewhere).
"""

from __future__ import annotations

import collections
import math

#: on by default; off: such slices are DMA copies as before (A/B)
ENABLED = True

#: data-movement kinds whose DMA reads its source through ``Emitter.source``
MOVERS = ("transpose", "slice", "reshape", "gcopy", "broadcast")

Map = tuple[str, tuple[int, ...], int]  # (root, element strides, element offset)


def row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc if n != 1 else 0)
        acc *= n
    return tuple(reversed(out))


def reshape_strides(shape, strides, new) -> tuple[int, ...] | None:
    """The strides of ``new`` (a reshape in row-major order of an array of ``shape`` with element
    ``strides``) when the result is again affine, else None (numpy's no-copy reshape rule);
    unit dims get stride 0."""
    old = [(n, s) for n, s in zip(shape, strides) if n != 1]
    nd = [n for n in new]
    if math.prod(shape) != math.prod(new):
        return None
    if math.prod(new) == 0:
        return None
    out = [0] * len(new)
    big = [i for i, n in enumerate(nd) if n != 1]
    nn = [nd[i] for i in big]
    ns = [0] * len(nn)
    oi, oj, ni, nj = 0, 1, 0, 1
    od = [n for n, _ in old]
    os_ = [s for _, s in old]
    while ni < len(nn) and oi < len(od):
        np_, op_ = nn[ni], od[oi]
        while np_ != op_:
            if np_ < op_:
                np_ *= nn[nj]
                nj += 1
            else:
                op_ *= od[oj]
                oj += 1
        for ok in range(oi, oj - 1):
            if os_[ok] != od[ok + 1] * os_[ok + 1]:
                return None
        ns[nj - 1] = os_[oj - 1]
        for nk in range(nj - 1, ni, -1):
            ns[nk - 1] = ns[nk] * nn[nk]
        ni, nj, oi, oj = nj, nj + 1, oj, oj + 1
    for i, s in zip(big, ns):
        out[i] = s
    return tuple(out)


def slice_map(shape, strides, off, params, out_shape) -> tuple[tuple[int, ...], int] | None:
    """The map of a static slice (``offsets, sizes, strides`` of the source's rank; the result
    may drop unit dims) of an array with element ``strides`` at ``off``."""
    offs, sizes, steps = params["offsets"], params["sizes"], params["strides"]
    if len(offs) != len(shape) or math.prod(sizes) != math.prod(out_shape):
        return None
    off = off + sum(s * o for s, o in zip(strides, offs))
    kept = [(n, s * k) for n, s, k in zip(sizes, strides, steps) if n != 1]
    big = [n for n in out_shape if n != 1]
    if [n for n, _ in kept] != big:
        return None
    it = iter(s for _, s in kept)
    return tuple(next(it) if n != 1 else 0 for n in out_shape), off


def find_strided_views(g, low: dict, views: dict[str, tuple[str, int]], cviews: dict,
                       wmap: dict, strided: dict, in_place: dict, view_ops: set[str]
                       ) -> dict[str, Map]:
    """The strided views of the graph (module doc): ``tensor -> (root, strides, offset)``.
    ``views`` / ``cviews`` lose the tensors that become strided views (a contiguous view or a
    column view below an origin); the caller adds their ops to ``view_ops``."""
    from ..graph import dtype_bytes
    readers: dict[str, list] = collections.defaultdict(list)
    for o in g.ops:
        for t in set(o.inputs):
            readers[t].append(o)
    producer = {t: o for o in g.ops for t in o.outputs}
    parts = {t for o in g.ops if (low.get(o.name) is not None and low[o.name].kind == "concat")
             for t in o.inputs}
    special = set(wmap) | set(strided) | {r for r, _, _ in wmap.values()} | \
        {r for r, _ in strided.values()}
    tent: dict[str, Map] = {}
    origin: dict[str, str] = {}  # tensor -> the origin of its chain
    for op in g.ops:
        lw = low.get(op.name)
        if lw is None or lw.kind not in ("slice", "reshape") or len(op.inputs) != 1 or \
                len(op.outputs) != 1:
            continue
        s, x = op.inputs[0], op.outputs[0]
        st, xt = g.tensors[s], g.tensors[x]
        if xt.kind != "act" or st.dtype != xt.dtype or st.dtype in ("i4", "u4") or \
                dtype_bytes(st.dtype) < 1 or x in special or x in parts:
            continue
        if s in tent:
            root, sst, soff = tent[s]
            org = origin[s]
        elif op.name in view_ops or s in cviews or s in special:
            continue  # already moves nothing, or its source has no memory of its own
        else:
            if lw.kind != "slice":
                continue  # an origin is a slice that is a copy today
            r, boff = views.get(s, (s, 0))
            rt = g.tensors[r]
            elem = int(dtype_bytes(st.dtype))
            if rt.kind not in ("act", "input") or r in special or r in cviews or boff % elem or \
                    (rt.kind == "act" and r not in producer):
                continue
            root, sst, soff = r, row_major(st.shape), boff // elem
            org = x
        if lw.kind == "slice":
            m = slice_map(st.shape, sst, soff, lw.params, xt.shape)
        else:
            rs = reshape_strides(st.shape, sst, xt.shape) if st.nbytes == xt.nbytes else None
            m = None if rs is None else (rs, soff)
        if m is None:
            if s in tent:  # a descendant that is no affine walk: its origin stays a copy
                _drop(tent, origin, origin[s])
            continue
        tent[x] = (root, m[0], m[1])
        origin[x] = org
    # every reader of a chain's tensor must read through an explicit walk (module doc)
    changed = True
    while changed:
        changed = False
        for x in list(tent):
            if x not in tent:
                continue
            for u in readers.get(x, []):
                lw = low.get(u.name)
                if u.outputs and u.outputs[0] in tent and len(u.inputs) == 1:
                    continue
                if u.unit == "tcu.matmul" and len(u.inputs) == 2 and \
                        not any(a in u.attrs for a in ("w4", "batch")):
                    continue
                if lw is not None and lw.kind == "cvu" and u.unit.startswith("cvu."):
                    continue
                if lw is not None and lw.kind in MOVERS and u.name not in view_ops and \
                        len(u.inputs) == 1:
                    continue
                _drop(tent, origin, origin[x])
                changed = True
                break
    for x in tent:
        views.pop(x, None)
        cviews.pop(x, None)
    return tent


def _drop(tent: dict, origin: dict, org: str) -> None:
    for t in [t for t, o in origin.items() if o == org]:
        tent.pop(t, None)
        origin.pop(t, None)
