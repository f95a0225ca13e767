"""Data movement ops (transpose, pad, broadcast, slice, concat, reshape, copy generics): CCB DMAs
memory -> memory, one per input (a concat moves each part). Plan and emission side by side. A
view (a reshape, or a slice that is one contiguous run: ``OpGraph.views``) is no transfer in
either: its readers read the root tensor's memory and wait for the root's writers (all of them,
also those built after the view: ``ListScheduler._wrote``, the emitter's shared writer list). A concat
moves only the parts not written in place by their producers (``OpGraph.in_place``); its readers
wait for the writers of those parts too."""
from __future__ import annotations

import numpy as np

from m100.dialects.tpb import SegmentOp

from ..emit_core import _NP, access, const_bytes, ident
from ..graph import ScheduleError
from ..segment import memory_of
from ..plan import PlanPiece


def plan_segment(bld, si: int, seg, pieces: list[PlanPiece]) -> None:
    """A data-movement op (transpose, pad, broadcast, reshape, slice, concat): CCB DMAs memory
    -> memory, one per input (a concat moves each part)."""
    g, cm = bld.g, bld.cm
    op = bld.s.ops[seg.stages[0].op]
    bld.piece = p = PlanPiece(op.name, 0, 0, -1, 0, 0, 0, 0, segment=si)
    pieces.append(p)
    if op.name in g.view_ops:  # a view: no transfer; its readers wait for the root's writer
        if op.inputs[0] in bld.written:
            bld.written[op.outputs[0]] = bld.written[op.inputs[0]]
        bld.piece = None
        return
    srcs = op.inputs if len(op.inputs) > 1 else op.inputs[:1]
    dst = memory_of(cm, g, op.outputs[0])
    placed = g.in_place.get(op.name, ())
    ids = []
    for i, tname in enumerate(srcs):
        if i in placed:  # written in place by its producer: its readers wait for that writer
            if tname in bld.written:
                bld._wrote(op.outputs[0], bld.written[tname])
            continue
        nb = float(g.tensors[tname].nbytes if len(srcs) > 1 else g.out(op).nbytes)
        src = memory_of(cm, g, tname)
        shape = g.out(op).shape
        lead = shape[chunk_dim(shape)] if shape else 1
        for a, e in chunk_rows(lead, g.chunks.get(op.name, 1)):
            part = nb * (e - a) / lead
            t = bld.task(kind="dma-mem", unit="dma", tpb=-1, op=op.name, tensor=op.outputs[0],
                         # a data-movement segment runs alone: no other engine shares its links
                         nbytes=part, cycles=cm.dma_cycles(part, src, 1, dst=dst),
                         deps=bld._mem_deps(tname),
                         segment=si, src=src, dst=dst, role="mem")
            ids.append(t)
    for i in ids:
        bld._wrote(op.outputs[0], i)
    bld.piece = None



def chunk_dim(shape: tuple[int, ...]) -> int:
    """The dimension a chunked transpose (``OpGraph.chunks``) is cut along: the result's first
    one longer than 1."""
    return next((d for d, n in enumerate(shape) if n > 1), 0)


def chunk_rows(n: int, chunks: int) -> list[tuple[int, int]]:
    """``[a, e)`` ranges of ``n`` rows in ``min(chunks, n)`` near-equal parts (the first ones
    one row longer): the DMAs of a chunked transpose (``OpGraph.chunks``), plan and emission."""
    c = max(1, min(chunks, n))
    q, r = divmod(n, c)
    out, a = [], 0
    for i in range(c):
        e = a + q + (i < r)
        out.append((a, e))
        a = e
    return out


def emit_op(em, op) -> None:
    """The DMAs of a data-movement op, each taking its plan task."""
    lw = em.irg.lowering[op.name]
    src_t = op.inputs[0]
    if op.name in em.g.view_ops:  # a view (``OpGraph.views``): no DMA, the root's writers
        if op.outputs[0] not in em.g.wmap and op.outputs[0] not in em.g.rmap:
            # (a mapped tensor or a strided view has no memory: OpGraph.wmap / rmap)
            em.memory(op.outputs[0])
        # the root's writer list itself, not a copy: a store of the root emitted after the view
        # (a late store: ``PlanBuilder._late_wave`` / ``_late_reads``) is the view's writer too,
        # as the plan's ``ListScheduler._wrote`` makes it
        em.writers[op.outputs[0]] = em.writers.setdefault(src_t, [])
        return
    # (a concat addresses each part itself: a part written in place has no memory of its own)
    src = em.memory(src_t) if lw.kind != "concat" and src_t not in em.g.rmap else None

    def source(bounds, lin):  # (a strided view: its root through the composed walk)
        if src_t in em.g.rmap:
            return em.source(src_t, bounds, lin)
        return src, (access(bounds, lin) if lin is not None else None)

    s_shape = em.g.tensors[src_t].shape
    out_t = op.outputs[0]
    o_shape = em.g.tensors[out_t].shape
    # (a concat whose parts are all stored into another layout has no memory: OpGraph.wmap)
    dst = em.memory(out_t) if out_t not in em.g.wmap else None
    # (a concat's first part written in place: no join of its writers here)
    deps = [] if 0 in em.g.in_place.get(op.name, ()) else em.token_of(src_t)
    if lw.kind == "transpose":
        perm = lw.params["perm"]
        # iterate the output; source index perm[k] = d_k
        lin = [None] * len(s_shape)
        for k, p in enumerate(perm):
            lin[p] = (tuple(1 if d == k else 0 for d in range(len(o_shape))), 0)
        n = em.g.chunks.get(op.name, 1)
        if n == 1:
            tok = em.dma(*source(o_shape, lin), dst, None, deps)
        else:  # in ranges of the result's first dim (OpGraph.chunks), as planned
            toks = []
            d = chunk_dim(o_shape)
            for a, e in chunk_rows(o_shape[d], n):
                sub = tuple(e - a if q == d else x for q, x in enumerate(o_shape))
                # result index d_d = a + d_d': the source index of dim perm[d] moves by a
                lin_a = [(c, k0 + a * c[d]) for c, k0 in lin]
                at = tuple(a if q == d else 0 for q in range(len(o_shape)))
                toks.append(em.dma(*source(sub, lin_a), dst, access(sub, ident(len(o_shape), at)),
                                   deps))
            em.writers[out_t] = toks
            return
    elif lw.kind == "broadcast":
        dims = set(lw.params["dims"])
        kept = [d for d in range(len(o_shape)) if d not in dims]
        lin = [(tuple(1 if d == kept[j] else 0 for d in range(len(o_shape))), 0)
               for j in range(len(s_shape))]
        tok = em.dma(*source(o_shape, lin), dst, None, deps)
    elif lw.kind == "pad":
        lo = lw.params["low"]
        val = lw.params["value"]
        t = em.g.tensors[out_t]
        arr = np.full(o_shape, val, dtype=_NP[t.dtype])
        sp, addr = em.mem_addr[out_t]
        em.head.append(SegmentOp(f"{out_t}.pad", sp, addr, const_bytes(arr, t.dtype)))
        tok = em.dma(src, None, dst, access(s_shape, ident(len(s_shape), tuple(lo))), deps)
    elif lw.kind == "gcopy":  # a copy generic: the input's indexing map over the output
        tok = em.dma(*source(o_shape, lw.params["map"]), dst, None, deps)
    elif lw.kind == "concat":
        dim = lw.params["dim"]
        off = 0
        toks = []
        placed = em.g.in_place.get(op.name, ())
        for i, tn in enumerate(op.inputs):
            sh = em.g.tensors[tn].shape
            if i in placed:  # its producer wrote it in place (``OpGraph.in_place``)
                toks.extend(em.writers.get(tn, []))
                off += sh[dim]
                continue
            offs = tuple(off if d == dim else 0 for d in range(len(sh)))
            toks.append(em.dma(em.memory(tn), None, dst, access(sh, ident(len(sh), offs)),
                                 em.token_of(tn)))
            off += sh[dim]
        em.writers[out_t] = toks
        return
    elif lw.kind == "slice":
        offs, sizes, strides = lw.params["offsets"], lw.params["sizes"], lw.params["strides"]
        # iterate the result; dims of size 1 that the result dropped are fixed offsets
        kept = [d for d in range(len(sizes))]
        if len(o_shape) != len(sizes):
            # which unit dims were dropped: match the result dims left to right (any matching
            # of unit dims gives the same addresses: a unit dim contributes no offset)
            kept, j = [], 0
            for d in range(len(sizes)):
                if j < len(o_shape) and sizes[d] == o_shape[j] and \
                        len(sizes) - d - 1 >= len(o_shape) - j - 1:
                    kept.append(d)
                    j += 1
                elif sizes[d] != 1:
                    break
            if len(kept) != len(o_shape):
                raise ScheduleError(f"op '{op.name}': unsupported rank-reducing slice")
        lin = []
        for d in range(len(sizes)):
            if d in kept:
                k = kept.index(d)
                lin.append((tuple(strides[d] if q == k else 0 for q in range(len(o_shape))),
                            offs[d]))
            else:
                lin.append((tuple(0 for _ in o_shape), offs[d]))
        tok = em.dma(*source(o_shape, lin), dst, None, deps)
    elif lw.kind == "reshape":
        tok = em.dma(*source(s_shape, None), em.alias(out_t, s_shape), None, deps)
    else:
        raise ScheduleError(f"op '{op.name}': no DMA lowering for '{lw.kind}'")
    em.writers[out_t] = [tok]

