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
When the fused generic is exactly ``truncf?(mulf(sitofp(acc), scale[n]))`` of a 2-D
``linalg.matmul`` with nothing else fused into it (no bias, activation, requantization), with an
f32 per-output-channel ``scale`` (a ``[N]`` operand read along the matmul's columns) and an
f16/bf16/f32 result, it is also marked as the contraction's TCU epilogue: the matmul gets
``m100.group`` and ``m100.epilogue = ["dequant"]``, the generic ``m100.fused_into`` and
``m100.stage = "dequant"``. The chain stops there when it is that form and continues with more than a cast (the
residual ``Add`` after ``wo`` / ``wd``, the ``silu(gate) * up`` product of a LLaMA MLP): the rest
stays its own generic reading the epilogue's f16 result, instead of one CVU pass reading the i32
accumulator from memory (twice the bytes; LLaMA2-7B prefill at 1024 tokens: 45 MB of i32 for
``up`` alone). The scheduler then emits one TCU instruction whose epilogue
(``isa.Epilogue.dequant``) converts the i32 accumulator and scales it per channel in f32, rounded
once to the result type: the same operations in the same order as the generic's body, so the
same values; the i32 accumulator never leaves the TCU.
Pre: linalg on tensors after fuse-epilogue (ops it annotated, idiom members and every other
``m100.*``-annotated op are left alone). Post: the same values; the IR still runs on the reference
executor. Options: none.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import (ArrayAttr, Float32Type, IntegerAttr, IntegerType, ModuleOp,
                                    StringAttr, TensorType, i64)
from xdsl.dialects.linalg.ops import GenericOp
from xdsl.ir import BlockArgument, Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter


from m100.passes.graph.common import (EPILOGUE, FUSED_INTO, GROUP, STAGE, body_exprs, func_bodies,
                                      generic_maps, is_const, is_identity, iterators, map_dims,
                                      next_group_id, shape_of)
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
        if _body(user)[0] != "arith.truncf" and tcu_dequant(cur) is not None:
            break  # the TCU epilogue form: the rest of the chain reads its f16, not the i32
        new = fuse(cur, user, idx)
        Rewriter.replace_op(user, new)
        Rewriter.erase_op(cur)
        cur, n = new, n + 1
    return n


def tcu_dequant(g: GenericOp, marked: bool = False) -> int | None:
    """The input index of the per-channel f32 scale if the fused generic ``g`` is the TCU's
    dequantization epilogue of its contraction (module docstring), else None. ``marked``: the
    pair is already annotated (the scheduler's question), else the matmul must carry nothing."""
    if len(g.inputs) != 2 or len(g.results) != 1:
        return None
    ai = next((i for i, v in enumerate(g.inputs) if isinstance(v.owner, Operation)
               and v.owner.name == "linalg.matmul"), None)
    if ai is None:
        return None
    mm, si = g.inputs[ai].owner, 1 - ai
    if marked:
        if mm.attributes.get(GROUP) is None or g.attributes.get(FUSED_INTO) != \
                mm.attributes[GROUP] or [a.data for a in mm.attributes[EPILOGUE].data] != \
                ["dequant"]:  # type: ignore[attr-defined]
            return None
    elif _annotated(mm):
        return None
    if len(list(g.inputs[ai].uses)) != 1 or len(mm.results[0].type.get_shape()) != 2:
        return None
    exprs = body_exprs(g)
    if exprs is None or len(exprs) != 1:
        return None
    e = exprs[0]
    out_t = str(g.results[0].type.get_element_type())
    if e.kind == "truncf" and out_t in ("f16", "bf16"):
        e = e.args[0]
    elif out_t != "f32":
        return None
    if e.kind != "mulf" or len(e.args) != 2:
        return None
    acc = [a for a in e.args if a.kind == "sitofp" and len(a.args) == 1 and
           a.args[0].kind == "in" and a.args[0].val == ai]
    sc = [a for a in e.args if a.kind == "in" and a.val == si]
    if len(acc) != 1 or len(sc) != 1 or e.args[0] is e.args[1]:
        return None
    if not isinstance(g.inputs[si].type.get_element_type(), Float32Type):
        return None
    # the scales are loaded once per column tile like a bias: a model input/weight or a
    # constant, never a value some op computes during the program
    sv = g.inputs[si]
    if not (isinstance(sv, BlockArgument) or is_const(sv)):
        return None
    maps = generic_maps(g)
    n = (shape_of(g.results[0]) or (0, 0))[1]
    try:
        dims = map_dims(maps[si])
    except ValueError:
        return None
    if dims != [1] or shape_of(g.inputs[si]) != (n,) or not is_identity(maps[ai]):
        return None
    return si


def _mark(g: GenericOp, gid: int) -> bool:
    if tcu_dequant(g) is None:
        return False
    mm = next(v.owner for v in g.inputs if isinstance(v.owner, Operation)
              and v.owner.name == "linalg.matmul")
    mm.attributes[GROUP] = IntegerAttr(gid, i64)
    mm.attributes[EPILOGUE] = ArrayAttr([StringAttr("dequant")])
    g.attributes[FUSED_INTO] = IntegerAttr(gid, i64)
    g.attributes[STAGE] = StringAttr("dequant")
    return True


@dataclass(frozen=True)
class FuseDequant(ModulePass):
    """See the module docstring."""

    name = "fuse-dequant"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        gid = next_group_id(op)
        for block in func_bodies(op):
            for o in list(block.ops):
                if o.parent is block and _is_dequant_start(o):
                    src = o.inputs[0].owner
                    fuse_chain(o)
                    us = list(src.results[0].uses)  # type: ignore[union-attr]
                    g = us[0].operation if len(us) == 1 else None
                    if isinstance(g, GenericOp) and _mark(g, gid):
                        gid += 1


__all__ = ["FuseDequant", "fuse_chain", "tcu_dequant"]
