"""fuse-dequant: an int32 accumulator's dequantization chain (sitofp -> mulf -> truncf) as one generic.

What: ``%f = generic(sitofp(%acc))`` where ``%acc`` is the i32 result of a contraction
(``linalg.matmul`` / ``batch_matmul``: what ``MatMulInteger`` becomes), followed by single-use
all-parallel elementwise generics that read it with the identity map, each with a one-op body of
``mulf`` / ``divf`` / ``addf`` / ``truncf`` / ``extf`` (ONNX ``Cast(acc, f32) * scale`` then ``Cast``
to f16: the W8A8 dequantization of :mod:`m100.frontend.llm`), become one generic: each producer's
body is inlined into its user (:func:`m100.passes.graph.fuse_predicates.fuse`), its inputs join
the user's with their own maps. The body computes the same values in the same order (the f32
intermediates are f32 values of the body instead of f32 tensors).
Why: each generic of the chain is a CVU pass over the whole accumulator, and between segments the
tensor goes through DDR: a W8A8 LLaMA2-7B prefill of 128 tokens moved 4 bytes per element three
more times (i32 -> f32 -> f32 -> f16) for every projection; fused, the CVU reads the i32 once and
writes the f16 once (one CVU pipeline: ITOF, MUL, and the store's rounding to f16).
Pre: linalg on tensors after fuse-epilogue (ops it annotated, idiom members and every other
``m100.*``-annotated op are left alone). Post: the same values; the IR still runs on the reference
executor. Options: none.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerType, ModuleOp, TensorType
from xdsl.dialects.linalg.ops import GenericOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from m100.passes.graph.common import func_bodies, generic_maps, is_identity, iterators
from m100.passes.graph.fuse_predicates import fuse

#: one-op bodies a chain may continue with (arith op names)
_CHAIN = ("arith.mulf", "arith.divf", "arith.addf", "arith.truncf", "arith.extf")
_CONTRACTIONS = ("linalg.matmul", "linalg.batch_matmul")


def _annotated(op: Operation) -> bool:
    return any(k.startswith("m100.") for k in op.attributes)


def _body(op: GenericOp) -> list[str]:
    return [o.name for o in op.regions[0].blocks[0].ops][:-1]  # without the yield


def _elementwise(op: Operation) -> bool:
    return isinstance(op, GenericOp) and len(op.results) == 1 and len(op.outputs) == 1 and \
        not _annotated(op) and all(it == "parallel" for it in iterators(op))


def _is_dequant_start(op: Operation) -> bool:
    """``generic(sitofp(acc))`` of the i32 result of a contraction, read with the identity map."""
    if not _elementwise(op) or _body(op) != ["arith.sitofp"] or len(op.inputs) != 1:
        return False
    src = op.inputs[0].owner
    t = op.inputs[0].type
    return isinstance(src, Operation) and src.name in _CONTRACTIONS and \
        isinstance(t, TensorType) and t.get_element_type() == IntegerType(32) and \
        is_identity(generic_maps(op)[0])


def _next(op: GenericOp) -> tuple[GenericOp, int] | None:
    """(user, input index) if ``op``'s one use continues the chain."""
    n_in = len(op.inputs)
    maps = generic_maps(op)
    if not is_identity(maps[n_in]) or op.regions[0].blocks[0].args[n_in].uses:
        return None
    uses = list(op.results[0].uses)
    if len(uses) != 1:
        return None
    user, idx = uses[0].operation, uses[0].index
    if not _elementwise(user) or idx >= len(user.inputs) or len(_body(user)) != 1 or \
            _body(user)[0] not in _CHAIN:
        return None
    umaps = generic_maps(user)
    if not is_identity(umaps[idx]) or umaps[idx].num_dims != maps[n_in].num_dims or \
            sum(v is op.results[0] for v in user.inputs) != 1:
        return None
    return user, idx


def fuse_chain(start: GenericOp) -> int:
    """Fuse the chain that begins at ``start``; returns the number of generics merged away."""
    cur, n = start, 0
    while (nx := _next(cur)) is not None:
        user, idx = nx
        new = fuse(cur, user, idx)
        Rewriter.replace_op(user, new)
        Rewriter.erase_op(cur)
        cur, n = new, n + 1
    return n


@dataclass(frozen=True)
class FuseDequant(ModulePass):
    """See the module docstring."""

    name = "fuse-dequant"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for block in func_bodies(op):
            for o in list(block.ops):
                if o.parent is block and _is_dequant_start(o):
                    fuse_chain(o)


__all__ = ["FuseDequant", "fuse_chain"]
