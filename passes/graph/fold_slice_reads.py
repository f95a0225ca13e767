"""fold-slice-reads: a static slice read only by elementwise generics becomes an offset in their
input maps (the generic reads the slice's source; no copy).

What: a ``tensor.extract_slice`` with static offsets and sizes, unit strides and the rank of its
source (ONNX ``Slice`` as torch-mlir imports it), whose every use is an input of an all-parallel
``linalg.generic`` with an identity output map that reads it with a projected permutation (a
broadcast read included), is removed: each such input reads the slice's source instead, viewed with every cut dim ``d``
split into ``[S_d / s_d, s_d]`` (one ``tensor.expand_shape`` per source and shape), with the
constant block index ``offset[d] / s_d`` put before the old map's result for that dim. Only
slices that are whole blocks (offset and source size multiples of the slice's size) fold. A slice of a
constant is left to fold-constants; generics carrying ``m100.`` annotations (idiom members,
fused epilogues) are left alone. A slice of such a slice (ONNX ``Slice`` over several axes imports
as one slice per axis: prefill RoPE of a group of heads, ``llm.PREFILL_Q_GROUP``) folds as one
slice of the inner one's source at the summed offsets; the inner slice goes when nothing else
reads it.
Why: the scheduler lowers a slice that is not one contiguous run (``from_ir.movement.find_views``)
to a DMA copy through memory, while a CVU op loads each input as the box its affine map reads
(``kinds/cvu.input_box``: any map, strided walks). Prefill RoPE reads the halves of every head's
rows (``x[..., :hd/2]``, ``x[..., hd/2:]``) this way: rotate-half without the rotate matmul and
without copies of the halves (docs/llm.md, session 13).
Pre: linalg on tensors after fuse-elementwise (its trees are built on identity-map leaves, so it
runs first and the fused generic's leaves are folded here). Post: no such whole-block slice is left;
the generics' input maps may have constant results (``(d0, 1, d1)``): not projections any more, so no
later pass takes them for a plain elementwise op (fuse-predicates and classify-ops only need the
body; the scheduler's CVU lowering reads the maps with their constants, and the reference
executor evaluates any affine-linear map). Values are unchanged (the same elements are read).
Options: none.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import tensor
from xdsl.dialects.builtin import ArrayAttr, IntegerAttr, ModuleOp, TensorType, i64
from xdsl.dialects.linalg.ops import GenericOp
from xdsl.ir import Operation
from xdsl.ir.affine import AffineConstantExpr, AffineMap
from xdsl.passes import ModulePass

from m100.passes.graph.common import (const_array, func_bodies, generic_maps, is_identity,
                                      is_projection, iterators, maps_attr)


def _static(op: tensor.ExtractSliceOp) -> tuple[list[int], list[int]] | None:
    """(offsets, sizes) of a static, unit-stride, rank-keeping slice; else None."""
    if len(op.operands) != 1:
        return None  # dynamic offsets / sizes / strides
    offs = list(op.static_offsets.get_values())
    sizes = list(op.static_sizes.get_values())
    strides = list(op.static_strides.get_values())
    src_t, res_t = op.operands[0].type, op.results[0].type
    if not isinstance(src_t, TensorType) or not isinstance(res_t, TensorType):
        return None
    if any(s != 1 for s in strides) or len(src_t.get_shape()) != len(res_t.get_shape()) or \
            list(res_t.get_shape()) != sizes:
        return None
    return offs, sizes


def _reader(user: Operation, index: int) -> bool:
    """Is operand ``index`` of ``user`` an input of an elementwise generic read by a projection?"""
    if not isinstance(user, GenericOp) or index >= len(user.inputs) or \
            any(k.startswith("m100.") for k in user.attributes):
        return False
    if any(it != "parallel" for it in iterators(user)):
        return False
    maps = generic_maps(user)
    return all(is_identity(m) for m in maps[len(user.inputs):]) and is_projection(maps[index])


def _split(src_shape: list[int], offs: list[int], sizes: list[int]):
    """The source viewed with every cut dim ``d`` split into ``[S_d / s_d, s_d]`` and, per source
    dim, the block index the slice reads (None: dim not cut); None when a cut is not a whole
    block (offset and source size multiples of the slice's size). The reader's map then reads
    each dim it iterates with exactly the loop's range (MLIR's shape rule for a pure dim)."""
    shape, groups, block = [], [], []
    for d, (n, o, s) in enumerate(zip(src_shape, offs, sizes)):
        if s == n:
            groups.append([len(shape)])
            shape.append(n)
            block.append(None)
        elif s and o % s == 0 and n % s == 0:
            groups.append([len(shape), len(shape) + 1])
            shape += [n // s, s]
            block.append(o // s)
        else:
            return None
    return shape, groups, block


def fold(op: Operation, views: dict | None = None, dead: list | None = None) -> bool:
    """Fold one slice into its readers' maps; True when it did (the slice is then dead).
    ``views`` caches the split views of a source (one ``tensor.expand_shape`` per shape);
    ``dead`` collects the inner slice of a folded slice of a slice (dead once nothing else reads
    it)."""
    if not isinstance(op, tensor.ExtractSliceOp):
        return False
    st = _static(op)
    if st is None or const_array(op.operands[0]) is not None:
        return False
    offs, sizes = st
    uses = list(op.results[0].uses)
    if not uses or not all(_reader(u.operation, u.index) for u in uses):
        return False
    src = op.operands[0]
    # a slice of a slice (ONNX ``Slice`` over several axes imports as one per axis): the same
    # elements as one slice of the inner slice's source at the summed offsets
    inner = src.owner
    ist = _static(inner) if isinstance(inner, tensor.ExtractSliceOp) else None
    if ist is not None and const_array(inner.operands[0]) is None:
        offs = [a + b for a, b in zip(ist[0], offs)]
        src = inner.operands[0]
    else:
        inner = None
    src_t = src.type
    assert isinstance(src_t, TensorType)
    sp = _split(list(src_t.get_shape()), offs, sizes)
    if sp is None:
        return False
    ins_at = op if inner is None else inner  # (the view dominates every reader)
    shape, groups, block = sp
    views = {} if views is None else views
    key = (src, tuple(shape))
    if key not in views:
        view = tensor.ExpandShapeOp(
            src, [], ArrayAttr([ArrayAttr([IntegerAttr(i, i64) for i in g]) for g in groups]),
            shape, TensorType(src_t.get_element_type(), shape))
        blk = ins_at.parent_block()
        assert blk is not None
        blk.insert_op_before(view, ins_at)
        views[key] = view.results[0]
    new_src = views[key]
    for u in uses:
        g = u.operation
        maps = generic_maps(g)
        m = maps[u.index]
        res = []
        for e, b in zip(m.results, block):
            if b is not None:
                res.append(AffineConstantExpr(b))
            res.append(e)
        maps[u.index] = AffineMap(m.num_dims, m.num_symbols, tuple(res))
        g.operands[u.index] = new_src
        g.indexing_maps = ArrayAttr(maps_attr(maps))  # type: ignore[attr-defined]
    if inner is not None and dead is not None:
        dead.append(inner)  # erased by the caller once ``op`` is (when nothing else reads it)
    return True


@dataclass(frozen=True)
class FoldSliceReads(ModulePass):
    """Fold static slices read only by elementwise generics into their input maps (see the module
    docstring: what, why, pre/post; no options)."""

    name = "fold-slice-reads"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for block in func_bodies(op):
            views: dict = {}
            dead: list = []
            for o in list(block.ops):
                if fold(o, views, dead):
                    block.erase_op(o)
            for o in reversed(dead):
                if o.parent_block() is block and not o.results[0].uses:
                    block.erase_op(o)


__all__ = ["FoldSliceReads", "fold"]
