"""raise-quant-casts: torch-mlir's QuantizeLinear/DequantizeLinear generics -> quant.qcast/dcast."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import Float32Type, ModuleOp, TensorType
from xdsl.ir import Attribute, Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from m100.dialects.quant import (DCastOp, QCastOp, SCastOp, UniformQuantizedPerAxisType,
                                 UniformQuantizedType)
from m100.passes.graph.common import func_bodies, users
from m100.passes.graph.quant_match import QParams, match_dequant, match_quant


def quant_type(p: QParams, expressed: Attribute | None = None) -> Attribute:
    """The ``!quant.uniform`` element type of parameters ``p`` (signed storage)."""
    expressed = expressed or Float32Type()
    storage = (p.width, True)
    if p.axis is None:
        return UniformQuantizedType(storage, expressed, p.scales[0], p.zero_points[0], p.qmin, p.qmax)
    return UniformQuantizedPerAxisType(storage, expressed, p.axis, p.scales, p.zero_points,
                                       p.qmin, p.qmax)


def _retype(t: TensorType, elem: Attribute) -> TensorType:
    return TensorType(elem, t.get_shape())


def raise_op(op: Operation) -> bool:
    """Replace one matched DequantizeLinear / QuantizeLinear generic; True if rewritten."""
    dq = match_dequant(op)
    if dq is not None:
        q, p = dq
        if p.axis is None and any(z < p.qmin or z > p.qmax for z in p.zero_points):
            return False
        qt = _retype(q.type, quant_type(p))  # type: ignore[arg-type]
        try:
            qt.verify()
            s = SCastOp(q, qt)
            d = DCastOp(s.result, op.results[0].type)
            s.verify()
            d.verify()
        except Exception:
            return False  # parameters the type cannot hold (e.g. a zero point outside the range)
        Rewriter.replace_op(op, [s, d], [d.result])
        return True
    qm = match_quant(op)
    if qm is not None:
        x, p = qm
        if any(not p.qmin <= z <= p.qmax for z in p.zero_points):
            return False
        rt = op.results[0].type
        qt = _retype(rt, quant_type(p))  # type: ignore[arg-type]
        try:
            c = QCastOp(x, qt)
            s = SCastOp(c.result, rt)
            c.verify()
            s.verify()
        except Exception:
            return False
        Rewriter.replace_op(op, [c, s], [s.result])
        return True
    return False


def fold_scast_pairs(block) -> int:
    """``scast(scast(v))`` back to ``v``'s type -> ``v`` (a Q then DQ with equal parameters)."""
    n = 0
    for op in list(block.ops):
        if not isinstance(op, SCastOp):
            continue
        src = op.input.owner
        if isinstance(src, SCastOp) and src.input.type == op.result.type:
            op.result.replace_all_uses_with(src.input)
            Rewriter.erase_op(op)
            n += 1
            if not users(src.result):
                Rewriter.erase_op(src)
    return n


@dataclass(frozen=True)
class RaiseQuantCasts(ModulePass):
    """Raise ONNX QuantizeLinear / DequantizeLinear (as torch-mlir lowers them) to quant types.

    What: every elementwise ``linalg.generic`` that is exactly DequantizeLinear
    (``(sitofp(extsi(q) - zp)) * scale``, per tensor or per axis, signed storage, f32 result) becomes
    ``quant.scast`` (storage -> ``!quant.uniform``) + ``quant.dcast``; every one that is exactly
    QuantizeLinear (``fptosi(clamp(roundeven(x / scale) + zp, qmin, qmax))``) becomes ``quant.qcast``
    + ``quant.scast``. A quantize followed by a dequantize with the same parameters then meets as
    ``scast(scast(..))`` and the pair is dropped, so values flow as ``tensor<..x!quant.uniform<..>>``.
    Parameters must be constants (scalars or 1-D constant tensors read along one dim); anything
    else (unsigned forms, non-constant scales) is left as it is -- still correct, only not raised.
    Why: the quantization parameters live in the types (the MLIR way, docs/dialects.md), which is
    what fold-quantized-contractions and the requantize epilogue are derived from.
    Pre: torch-mlir output (after canonicalize/fold-constants). Post: same values; the reference
    executor runs the quant ops with the ONNX definitions (round half to even, saturate).
    Options: none.
    """

    name = "raise-quant-casts"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for block in func_bodies(op):
            for o in list(block.ops):
                raise_op(o)
            fold_scast_pairs(block)


__all__ = ["RaiseQuantCasts", "quant_type", "raise_op"]
