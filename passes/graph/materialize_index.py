"""materialize-index: ``linalg.index`` values of an elementwise generic become constant iota inputs.

What: in an all-parallel ``linalg.generic`` with static shapes whose body reads ``linalg.index d``
only through ``arith.index_cast`` to an integer (torch-mlir's Trilu masks ``j <= i + k``, EyeLike's
``i == j``, Range's ``start + i * delta``, OneHot's iota), each such ``d`` becomes a new input: an
``arith.constant dense<[0, 1, .., n_d - 1]> : tensor<n_d x i64>`` read with the map
``(d0, ..) -> (d)``; the casts read the new block argument (``arith.trunci`` to a narrower type).
Why: the CVU computes on walked operands, it has no loop counter; an iota is a tiny constant
(one row per indexed dimension, broadcast by the walk) and the rest of the body runs unchanged
on the integer lane. Generics whose index values feed anything else (``tensor.extract`` of a
gather, an argmax reduction, the iota of a ``tm_tensor.sort``) are left alone for the CSU
routines that recognize them.
Pre: linalg on tensors. Post: such generics have no ``linalg.index``; same values (the IR still
runs on the reference executor). Options: none.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerType, ModuleOp, TensorType, i64
from xdsl.dialects.linalg.ops import GenericOp
from xdsl.ir.affine import AffineDimExpr, AffineMap
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from m100.dialects.dense import numpy_to_dense
from m100.passes.graph.common import func_bodies, generic_maps, iterators, maps_attr


def _candidate(op) -> dict[int, list] | None:
    """dim -> its linalg.index ops, if every index value is only index_cast to an integer."""
    if not isinstance(op, GenericOp) or any(it != "parallel" for it in iterators(op)):
        return None
    if not op.inputs and any(u.operation.name == "tm_tensor.sort"
                             for r in op.results for u in r.uses):
        return None  # the index iota of a top-k sort (csu.topk takes it as is)
    if any(not isinstance(v.type, TensorType) or any(d < 1 for d in v.type.get_shape())
           for v in list(op.inputs) + list(op.outputs)):  # dynamic or empty: left alone
        return None
    block = op.regions[0].blocks[0]
    body = list(block.ops)
    if any(o.name == "tensor.extract" for o in body):
        return None  # a gather (csu.gather)
    dims: dict[int, list] = {}
    for o in body:
        if o.name != "linalg.index":
            continue
        for u in o.results[0].uses:
            c = u.operation
            if c.name not in ("arith.index_cast", "arith.index_castui") or \
                    not isinstance(c.results[0].type, IntegerType):
                return None
        dims.setdefault(o.properties["dim"].value.data, []).append(o)  # type: ignore[union-attr]
    return dims or None


def materialize(op: GenericOp, dims: dict[int, list], rw: Rewriter) -> GenericOp:
    maps = generic_maps(op)
    n_in = len(op.inputs)
    rank = maps[-1].num_dims
    shape = list(op.outputs[0].type.get_shape())  # type: ignore[attr-defined]
    new_ins, new_maps = [], []
    for d in sorted(dims):
        n = shape[d]
        t = TensorType(i64, [n])
        c = arith.ConstantOp(numpy_to_dense(np.arange(n, dtype=np.int64), t), t)
        rw.insert_op(c, InsertPoint.before(op))
        new_ins.append(c.result)
        new_maps.append(AffineMap(rank, 0, (AffineDimExpr(d),)))
    region = op.detach_region(op.regions[0])
    block = region.blocks[0]
    for j, d in enumerate(sorted(dims)):
        arg = block.insert_arg(i64, n_in + j)
        for ix in dims[d]:
            for u in list(ix.results[0].uses):
                cast = u.operation
                ty = cast.results[0].type
                if ty == i64:
                    cast.results[0].replace_all_uses_with(arg)
                else:
                    tr = arith.TruncIOp(arg, ty)
                    block.insert_op_before(tr, cast)
                    cast.results[0].replace_all_uses_with(tr.result)
                block.erase_op(cast)
            block.erase_op(ix)
    new = GenericOp(list(op.inputs) + new_ins, list(op.outputs), region,
                    maps_attr(maps[:n_in] + new_maps + maps[n_in:]), op.iterator_types,
                    [r.type for r in op.results])
    new.attributes.update(op.attributes)
    rw.replace_op(op, new)
    return new


@dataclass(frozen=True)
class MaterializeIndex(ModulePass):
    """Turn the index values of elementwise generics into constant iota inputs (see the module
    docstring: what, why, pre/post; no options)."""

    name = "materialize-index"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        rw = Rewriter()
        for block in func_bodies(op):
            for o in list(block.ops):
                dims = _candidate(o)
                if dims is not None:
                    materialize(o, dims, rw)


__all__ = ["MaterializeIndex"]
