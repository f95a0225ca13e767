"""xDSL's builders of ``linalg.transpose`` and ``tensor.empty``, for the graph passes that make them
by the hundred: the same ops, built without ``irdl_op_init``.

Why: layout-nhwc wraps every convolution in transposes and sinks them through the elementwise
ops after it (ResNet-50: 460 ``linalg.transpose`` with their ``tensor.empty``, nearly all
cancelled again by simplify-algebra); xDSL's constructors took ~130 us a pair (``TransposeOp``'s
``irdl_op_init`` walks the definition for operands, results, regions and successors, its body is
built through an implicit builder, and the permutation's ``DenseArrayBase`` and the result's
``TensorType`` are made and verified anew each time) -- ~0.06 CPU-s of ResNet-50's ~0.25 of
layout-nhwc.

What: :func:`transpose` is ``simplify_algebra``'s ``make_transpose`` until session 34 --
``tensor.EmptyOp([], out_t)`` then ``TransposeOp(value, empty, DenseArrayBase.from_list(i64,
perm), out_t)`` -- with both ops made by ``Operation.create`` (xDSL's own ``Operation.__init__``
and the class's ``__post_init__``: the same operands and their uses in order, results, property
and attribute dicts, location, and an implicit builder still receives the op) from the
arguments ``irdl_op_init`` would have passed it: ``TransposeOp``'s definition has
``SameVariadicOperandSize`` (no segment sizes) and one property; its body is one block of the
two element types holding ``linalg.yield`` of the first argument (``Builder.implicit_region``'s
block, ``YieldOp(args[0])``). The result type and the permutation attribute are kept per (input
type, permutation) and per permutation (attributes are immutable values; the parser shares equal
ones as well). A value whose type is not a ranked tensor of float or integer elements, and any
transpose made while an ``ImplicitBuilder`` is active (it would take the body's yield; xDSL's
body is built under a nested one), go to xDSL's constructors (their own errors).
:func:`empty` is ``tensor.EmptyOp([], t)`` the same way. ``test/unit/graph/test_fast_ops.py``
builds both ways and requires the same op state and printed module.
"""

from __future__ import annotations

from functools import lru_cache

from xdsl.dialects import tensor
from xdsl.dialects.builtin import (AnyFloat, ArrayAttr, DenseArrayBase, IntegerType, TensorType,
                                   i32, i64)
from xdsl.dialects.linalg.ops import GenericOp, TransposeOp, YieldOp
from xdsl.builder import _current_builder as _implicit
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

_EmptyOp = tensor.EmptyOp


def empty(t: Attribute) -> tensor.EmptyOp:
    """``tensor.EmptyOp([], t)``: no dynamic sizes, result type ``t``."""
    return _EmptyOp.create(result_types=(t,))


@lru_cache(maxsize=64)
def _perm_attr(perm: tuple[int, ...]) -> DenseArrayBase:
    return DenseArrayBase.from_list(i64, list(perm))


@lru_cache(maxsize=4096)
def transposed_type(t: TensorType, perm: tuple[int, ...]) -> TensorType:
    """``TensorType(t.get_element_type(), [t.get_shape()[p] for p in perm])`` (the encoding
    dropped), one instance per (type, order)."""
    shape = t.get_shape()
    return TensorType(t.get_element_type(), [shape[p] for p in perm])


def transpose(value: SSAValue, perm) -> tuple[list[Operation], SSAValue]:
    """``linalg.transpose`` of ``value`` by ``perm`` (out.shape[i] = in.shape[perm[i]]) into a
    new ``tensor.empty``: ([empty, transpose], the transpose's result)."""
    t = value.type
    assert isinstance(t, TensorType)
    key = tuple(perm)
    out_t = transposed_type(t, key)
    elt = t.get_element_type()
    e = _EmptyOp.create(result_types=(out_t,))
    if not isinstance(elt, AnyFloat | IntegerType) or _implicit.builder is not None:
        # xDSL's body_arg_types asserts; an implicit builder would take the body's yield
        tr = TransposeOp(value, e.tensor, _perm_attr(key), out_t)
        return [e, tr], tr.results[0]
    block = Block(arg_types=(elt, elt))
    block.add_op(YieldOp.create(operands=(block.args[0],)))
    tr = TransposeOp.create(operands=(value, e.tensor), result_types=(out_t,),
                            properties={"permutation": _perm_attr(key)}, regions=(Region(block),))
    return [e, tr], tr.results[0]


@lru_cache(maxsize=64)
def _segments(sizes: tuple[int, ...]) -> DenseArrayBase:
    return DenseArrayBase.from_list(i32, list(sizes))


def generic(inputs, outputs, body: Region, indexing_maps, iterator_types,
            result_types) -> GenericOp:
    """``GenericOp(inputs, outputs, body, indexing_maps, iterator_types, result_types)`` (no doc,
    no library call): the operands in order with their sizes as ``operandSegmentSizes`` (a
    property, after the two others, as ``irdl_op_init`` adds it), ``body`` its one region. Values
    only (an ``Operation`` given as an operand, or an active implicit builder: xDSL's
    constructor)."""
    ops = (*inputs, *outputs)
    if _implicit.builder is not None or not all(isinstance(v, SSAValue) for v in ops):
        return GenericOp(inputs, outputs, body, indexing_maps, iterator_types, result_types)
    return GenericOp.create(
        operands=ops, result_types=tuple(result_types),
        properties={"indexing_maps": ArrayAttr(indexing_maps),
                    "iterator_types": ArrayAttr(iterator_types),
                    "operandSegmentSizes": _segments((len(inputs), len(outputs)))},
        regions=(body,))


__all__ = ["empty", "generic", "transpose", "transposed_type"]
