"""CSU ops (split out of ``from_ir.py``): Gather / GatherElements (row indices computed on the
CVU's integer lane, then a CSU gather of table rows), flips (a gather whose index is an affine
reversal: a DMA copy), TopK (``tm_tensor.sort`` with its index iota) and ArgMax/ArgMin.
"""

from __future__ import annotations

import math

import numpy as np
from xdsl.ir import Operation
from xdsl.ir.affine import AffineMap

from m100.targets.m100.isa import CvuOp, Ref, RefKind, Stage

from ..graph import Op, Tensor
from ..ir_facts import Lowering, linear_map
from ..ir_index import argmax_info, flip_map, gather_info, iota_dim, sort_info
from .builder import Builder


def flip(ctx: Builder, op: Operation, nm: str, unit: str | None, where: str) -> None:
    """A gather whose index is an affine reversal: a DMA copy."""
    src, lin = flip_map(op)  # type: ignore[misc]
    if src in ctx.consts:
        ctx.const_tensor(src, ctx.consts[src])
    ctx.add("copy", "dtdu.copy", [ctx.tname(src)], op.results[0], {},
        Lowering("gcopy", params=dict(map=lin)), op)


def gather(ctx: Builder, op: Operation, nm: str, unit: str | None, where: str) -> None:
    """Gather / GatherElements: integer row indices (CVU) then a CSU row gather."""
    gi = gather_info(op, where)
    tt = ctx.value(gi.table)
    it = ctx.value(gi.indices)  # a constant index tensor becomes a weight
    V, inner, outer = gi.table_shape[gi.axis], gi.inner, gi.outer
    if gi.elements:  # flat element index: idx * stride(axis) + the other coordinates
        o_sh = gi.out_shape
        strides = [math.prod(gi.table_shape[q + 1:]) for q in range(len(o_sh))]
        grids = np.meshgrid(*[np.arange(n) for n in o_sh], indexing="ij")
        # (started from zeros of the output's shape: with the axis the only dim, ``sum`` of
        # nothing was the int 0, a 4-byte constant read as N elements -- the rest of them
        # whatever DDR held there; the dataflow check found it, docs/sim.md)
        base = sum((g_ * strides[q] for q, g_ in enumerate(grids) if q != gi.axis),
                   np.zeros(o_sh, dtype=np.int64))
        cb = ctx.next_name("c")
        ctx.g.add_tensor(Tensor(cb, o_sh, "i32", "weight"))
        ctx.data[cb] = np.ascontiguousarray(base, dtype=np.int32)
        r = len(o_sh)
        ident = linear_map(AffineMap.identity(r))
        st = (Stage(CvuOp.MUL, (Ref(RefKind.INPUT, 0), Ref(RefKind.IMM, 0,
                                                            float(strides[gi.axis])))),
              Stage(CvuOp.ADD, (Ref(RefKind.STAGE, 0), Ref(RefKind.INPUT, 1))))
        rows = ctx.add_t("ew", "cvu.elementwise", [it, cb], o_sh, "i32", {"maps": [ident, ident]},
                     Lowering("cvu", stages=st, in_maps=[ident, ident]), op)
        prm = dict(V=math.prod(gi.table_shape), D=1, N=math.prod(o_sh))
    elif outer > 1:  # row index o * V + idx[n] of the table viewed as [outer * V, inner]
        N = gi.out_shape[gi.axis]
        cb = ctx.next_name("c")
        ctx.g.add_tensor(Tensor(cb, (outer, 1), "i32", "weight"))
        ctx.data[cb] = (np.arange(outer, dtype=np.int32) * V).reshape(outer, 1)
        mi = [((0, 1), 0)]
        mb = [((1, 0), 0), ((0, 0), 0)]
        st = (Stage(CvuOp.ADD, (Ref(RefKind.INPUT, 0), Ref(RefKind.INPUT, 1))),)
        rows = ctx.add_t("ew", "cvu.elementwise", [it, cb], (outer, N), "i32",
                     {"maps": [mi, mb]}, Lowering("cvu", stages=st, in_maps=[mi, mb]), op)
        prm = dict(V=outer * V, D=inner, N=outer * N)
    else:
        rows = it
        prm = dict(V=V, D=inner, N=gi.out_shape[gi.axis])
    ctx.add("gather", "csu.gather", [tt, rows], op.results[0], dict(prm),
        Lowering("gather", params=prm), op)


def iota(ctx: Builder, op: Operation, nm: str, unit: str | None, where: str) -> None:
    """The index iota of a ``tm_tensor.sort`` (TopK's indices): remembered for the sort."""
    ctx.iotas[op.results[0]] = iota_dim(op)  # consumed by the sort (the routine's indices)


def sort(ctx: Builder, op: Operation, nm: str, unit: str | None, where: str) -> None:
    """``tm_tensor.sort`` (TopK): a CSU top-k."""
    si_ = sort_info(op, where, ctx.iotas)
    sh = si_.shape
    prm = dict(outer=math.prod(sh[:si_.axis]), L=sh[si_.axis],
               inner=math.prod(sh[si_.axis + 1:]), largest=int(si_.largest))
    xt = ctx.value(si_.x)
    outs_ = [ctx.new_tensor(r) for r in op.results]
    o_ = Op(ctx.op_name("topk"), "csu.topk", (xt,), tuple(outs_), dict(prm), loc=where)
    ctx.g.add_op(o_)
    ctx.low[o_.name] = Lowering("topk", params=prm)


def argmax(ctx: Builder, op: Operation, nm: str, unit: str | None, where: str) -> None:
    """ArgMax / ArgMin generic: a CSU argmax."""
    ai = argmax_info(op, where, ctx.fills)
    sh = ai.in_shape
    prm = dict(outer=math.prod(sh[:ai.axis]), L=sh[ai.axis],
               inner=math.prod(sh[ai.axis + 1:]), largest=int(ai.largest), last=int(ai.last))
    xt = ctx.value(ai.x)
    ctx.add("argmax", "csu.argmax", [xt], ai.result, dict(prm), Lowering("argmax", params=prm),
        op)
