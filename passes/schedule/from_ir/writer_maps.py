"""Transposes written by their producers (writer-side affine maps; issue 13, session 14).

A ``linalg.transpose`` is a DMA memory -> memory (``kinds/movement.py``): prefill attention's
RoPE results ``[2, T, n, hd/2]`` -> ``[n, T, 2, hd/2]`` (q) and ``[kvh, 2, hd/2, T]`` (kT), each
a serial 8 MB copy a LLaMA2-7B layer between RoPE and the heads. :func:`find_transpose_writes`
makes such a transpose **no transfer**: the ops that write its input store each piece straight
into the transposed layout, through an affine map from the tensor they produce to the linear
element index of the transpose's result (``OpGraph.wmap``, used by ``emit_units.store``); the
transpose becomes a view op (its readers wait for the input's writers, ``kinds/movement.py``).

The input ``Y`` may be written directly by one op or be a concat whose parts are all written in
place (``find_in_place``: the RoPE halves); every tensor whose bytes are ``Y``'s (``Y``, its
views, the parts) must be read by nothing but view ops, that concat and the transpose, and each
one an op writes must be written through ``emit_units.store`` (:data:`WRITERS`), its map affine
(checked element by element: a map that is not -- a reshape splitting a dim across the
permutation -- leaves the transpose a copy). The result may be a view at offset 0 of a model
output (``find_output_reshapes``: kT), or at any offset of a root (a part of a concat written in
place: each group of heads' k in the kT output, ``llm.PREFILL_Q_GROUPS``, session 17). ``Y``
may not be the root of column parts (``OpGraph.strided``: a concat of matmuls side by side; their
producers store into ``Y``'s rows, not through a map of ``Y``; session 24, the fuzzer's heads
family). Nothing is ever silently copied elsewhere: ``Emitter.memory`` of a mapped tensor is an
internal error.
"""

from __future__ import annotations

import collections

import numpy as np

#: producers whose pieces store through ``emit_units.store`` (``row_index`` of their output's
#: shape): their stores can go through any affine map of their output's indices
WRITERS = ("tcu.matmul", "cvu.elementwise", "cvu.softmax", "cvu.layernorm", "cvu.rmsnorm")


def _affine(m: np.ndarray) -> tuple[tuple[int, ...], int] | None:
    """``(strides, offset)`` with ``m[i] == offset + sum(strides[d] * i[d])`` for every index
    of ``m`` (an integer array), else None."""
    off = int(m.reshape(-1)[0]) if m.size else 0
    strides = []
    for d, n in enumerate(m.shape):
        if n == 1:
            strides.append(0)
            continue
        idx = [0] * m.ndim
        idx[d] = 1
        strides.append(int(m[tuple(idx)]) - off)
    pred = np.full((1,) * m.ndim, off, np.int64)
    for d, s in enumerate(strides):
        shp = [1] * m.ndim
        shp[d] = m.shape[d]
        pred = pred + (np.arange(m.shape[d], dtype=np.int64) * s).reshape(shp)
    if not np.array_equal(np.broadcast_to(pred, m.shape), m):
        return None
    return tuple(strides), off


def find_transpose_writes(g, low: dict, views: dict[str, tuple[str, int]],
                          strided: dict, in_place: dict[str, frozenset[int]], view_ops: set[str]
                          ) -> tuple[set[str], dict[str, tuple[str, tuple[int, ...], int]]]:
    """The transposes written by their input's producers: ``(transpose ops, wmap)`` with
    ``wmap``: tensor -> (root tensor, element stride per dim, element offset) -- the linear
    element index in the root of each of the tensor's elements -- for every tensor whose bytes
    were the transpose input's (module doc). The transpose ops are view ops (no transfer)."""
    from ..graph import dtype_bytes
    producer = {t: o for o in g.ops for t in o.outputs}
    readers: dict[str, list] = collections.defaultdict(list)
    for o in g.ops:
        for t in set(o.inputs):
            readers[t].append(o)
    members: dict[str, list[str]] = collections.defaultdict(list)  # root -> views of it
    for v, (r, _) in views.items():
        members[r].append(v)
    s_roots = {v[0] for v in strided.values()}
    ops, wmap = set(), {}
    for op in g.ops:
        lw = low.get(op.name)
        if lw is None or lw.kind != "transpose" or len(op.inputs) != 1 or len(op.outputs) != 1:
            continue
        yv, r = op.inputs[0], op.outputs[0]
        y, yoff = views.get(yv, (yv, 0))  # the bytes' root (the input may be a reshape of it)
        yt, rt = g.tensors[y], g.tensors[r]
        if yt.kind != "act" or rt.kind not in ("act", "output") or yt.dtype != rt.dtype or \
                yt.dtype in ("i4", "u4") or dtype_bytes(yt.dtype) < 1 or yoff or \
                yt.nbytes != rt.nbytes or y in strided or y in wmap or r in strided or r in wmap:
            continue
        if y in s_roots:  # parts of a concat written into y's columns (``OpGraph.strided``):
            continue  # their stores address y's rows, which a map of y would move (fuzz heads)
        root, roff = views.get(r, (r, 0))
        # (a view of a root at an offset: a part written in place into a concat, e.g. a group
        # of heads' k in the kT output; its elements are the root's from roff on)
        if root != r and (roff % int(dtype_bytes(yt.dtype)) or
                          roff + rt.nbytes > g.tensors[root].nbytes):
            continue
        group = [y] + members.get(y, [])
        ok = True
        for t in group:
            p = producer.get(t)
            if t in strided or p is None:
                ok = False
                break
            if p.name not in view_ops and not (lw_kind(low, p) == "concat" and t == y and
                                               len(in_place.get(p.name, ())) == len(p.inputs)):
                if p.unit not in WRITERS or len(p.outputs) != 1:
                    ok = False
                    break
            for u in readers.get(t, []):
                if u is op or u.name in view_ops or (
                        lw_kind(low, u) == "concat" and
                        u.inputs.index(t) in in_place.get(u.name, ())):
                    continue
                ok = False
                break
            if not ok:
                break
        if not ok:
            continue
        elem = int(dtype_bytes(yt.dtype))
        perm = lw.params["perm"]
        m_r = np.arange(rt.numel, dtype=np.int64).reshape(rt.shape) + roff // elem
        # the input's index -> the root's element (the input's bytes are y's, row-major)
        m_y = np.transpose(m_r, np.argsort(perm))
        flat = m_y.reshape(-1)
        maps = {}
        for t in group:
            tt = g.tensors[t]
            o = views[t][1] // elem if t != y else 0
            a = _affine(flat[o:o + tt.numel].reshape(tt.shape or (1,)))
            if a is None:
                break
            maps[t] = (root, a[0], a[1])
        else:
            ops.add(op.name)
            wmap.update(maps)
    return ops, wmap


def root_strides(g, wmap: dict, cviews: dict, views: dict
                 ) -> dict[str, tuple[tuple[int, int], ...]]:
    """Per root whose bytes are accessed scattered (``OpGraph.wroots``): a root of ``wmap`` (a
    transposed layout its producers store into) -> the ``(byte stride, extent)`` in it of every
    dim (extent > 1, stride not 0) of the tensors mapped into it; a root of ``cviews`` (read in
    column boxes) -> ``(row pitch, rows)``. Keyed by the root and, where the root is a view, by
    the root of its bytes too."""
    from ..graph import dtype_bytes
    out: dict[str, set] = {}

    def add(r: str, dims) -> None:
        for key in {r, views.get(r, (r, 0))[0]}:
            out.setdefault(key, set()).update(dims)
    for t, (r, strides, _) in wmap.items():
        elem = int(dtype_bytes(g.tensors[t].dtype))
        add(r, {(abs(s) * elem, int(n)) for s, n in zip(strides, g.tensors[t].shape)
                if n > 1 and s})
    for t, (r, _, w) in cviews.items():
        tt = g.tensors[t]
        if len(tt.shape) == 2 and tt.shape[0] > 1:
            add(r, {(int(w * dtype_bytes(tt.dtype)), int(tt.shape[0]))})
    return {r: tuple(sorted(d)) for r, d in out.items()}


def lw_kind(low: dict, op) -> str | None:
    lw = low.get(op.name)
    return lw.kind if lw is not None else None


def find_column_views(g, low: dict, views: dict[str, tuple[str, int]], align: int,
                      taken: set[str]) -> dict[str, tuple[str, int, int]]:
    """**Column views** (reader side): a static slice with unit strides of a 2-D tensor ``S``
    ``[R, W]`` (or of a view of a 2-D root with ``W`` columns at a whole row) whose result is read
    by TCU matmuls only: ``result -> (root, byte offset, W)``. Such a matmul loads its operand
    boxes through explicit walks over the result's indices (``emit_units.load`` /
    ``weight_box``), so the result's memory is the root's bytes from the offset with the root's
    row pitch (``Emitter.memory``: a ``[rows, W]`` buffer) and the slice moves nothing (a view
    op). Prefill attention's heads read ``v_j`` as the columns ``[j hd, (j+1) hd)`` of the V
    projection ``[T, kvh hd]`` this way (session 14: before, they read the ``v`` output after
    its 8 MB transpose). Not for a model output, a weight, a mapped / strided / viewed tensor,
    a sub-byte dtype or an offset that is not a multiple of ``align``; ``taken``: tensors that
    must not be a root (``OpGraph.wmap``, ``OpGraph.strided``)."""
    from ..graph import dtype_bytes
    readers: dict[str, list] = collections.defaultdict(list)
    for o in g.ops:
        for t in set(o.inputs):
            readers[t].append(o)
    out: dict[str, tuple[str, int, int]] = {}
    viewed = {r for r, _ in views.values()}
    for op in g.ops:
        lw = low.get(op.name)
        if lw is None or lw.kind != "slice" or len(op.inputs) != 1 or len(op.outputs) != 1:
            continue
        s, x = op.inputs[0], op.outputs[0]
        st, xt = g.tensors[s], g.tensors[x]
        if xt.kind != "act" or x in views or x in viewed or x in taken or \
                len(st.shape) != 2 or len(xt.shape) != 2 or st.dtype != xt.dtype or \
                st.dtype in ("i4", "u4") or dtype_bytes(st.dtype) < 1:
            continue
        offs, sizes, strides = lw.params["offsets"], lw.params["sizes"], lw.params["strides"]
        if any(k != 1 for k in strides) or list(sizes) != list(xt.shape):
            continue
        root, base = views.get(s, (s, 0))
        rt = g.tensors[root]
        elem = int(dtype_bytes(st.dtype))
        w = st.shape[1]
        if rt.kind in ("weight",) or root in taken or len(rt.shape) != 2 or rt.shape[1] != w or \
                base % (w * elem):
            continue
        off = base + (offs[0] * w + offs[1]) * elem
        if off % align or not readers.get(x) or any(
                u.unit != "tcu.matmul" for u in readers[x]):
            continue
        out[x] = (root, off, w)
    return out
