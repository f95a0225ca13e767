"""lower-quantized-avgpool: a QDQ int8 GlobalAveragePool -> onnxruntime's QLinearGlobalAveragePool.

``DequantizeLinear -> GlobalAveragePool -> QuantizeLinear`` is, by the ONNX definition, the f32
mean of the dequantized values, quantized. onnxruntime runs it as ``QLinearGlobalAveragePool``
(MLAS ``MlasQLinearGlobalAveragePoolNchw/Nhwc``): the integer sum ``acc = sum(x) - zx * N``
(exact, int32), then ``round_half_even(f32(f32(acc) * m)) + zy``, saturated, with
``m = f32(sx / f32(sy * f32(N)))``. The two differ where the f32 mean lands within an ulp of a
rounding tie (QDQ ResNet-18: 3 of 100 inputs). This pass makes the compiled graph compute
onnxruntime's expression: the pooling sum reads ``sitofp(x)`` (the raw int8 values; every partial
sum is an integer below 2**24, so the f32 sum is exact in any order) instead of the dequantized
values, and the division + QuantizeLinear become one elementwise requantization.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects import arith, math, tensor
from xdsl.dialects.builtin import FloatAttr, IntegerType, ModuleOp, TensorType, f32
from xdsl.dialects.linalg.attrs import IteratorTypeAttr
from xdsl.dialects.linalg.ops import FillOp, YieldOp
from xdsl.ir import Block, Operation, Region
from xdsl.ir.affine import AffineMap
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from m100.dialects.linalg_ext import GenericOp
from m100.dialects.quant import DCastOp, QCastOp, SCastOp, UniformQuantizedType
from m100.passes.graph.common import (body_exprs, is_elementwise_generic, rewrite_each,
                                      maps_attr, scalar_const, users)

_EXACT = 1 << 24  # f32 holds every integer below this exactly


def _i8_per_tensor(t) -> UniformQuantizedType | None:
    e = t.get_element_type() if isinstance(t, TensorType) else None
    if type(e) is UniformQuantizedType and e.width == 8 and e.signed:
        return e
    return None


def avgpool_multiplier(sx: float, sy: float, n: int) -> float:
    """``f32(sx / f32(sy * f32(n)))``: MLAS's QLinearGlobalAveragePool scale, in its order."""
    f = np.float32
    return float(f(f(sx) / f(f(sy) * f(n))))


def _ints(v) -> list[int]:
    return [int(x) for x in v.get_values()] if hasattr(v, "get_values") else []


def match(qc: Operation):
    """``(pool, x, qx, qy, n)`` if ``qc`` quantizes a global average pool of a per-tensor i8."""
    if not isinstance(qc, QCastOp):
        return None
    qy = _i8_per_tensor(qc.results[0].type)
    div = qc.operands[0].owner
    if qy is None or not isinstance(div, GenericOp) or not is_elementwise_generic(div) or \
            len(div.inputs) != 1 or len(users(div.results[0])) != 1:
        return None
    rank = len(div.results[0].type.get_shape())  # type: ignore[attr-defined]
    if any(m.data != AffineMap.identity(rank) for m in div.indexing_maps.data):
        return None
    exprs = body_exprs(div)
    if not exprs or len(exprs) != 1 or exprs[0].kind != "divf" or \
            [a.kind for a in exprs[0].args] != ["in", "c"]:
        return None
    pool = div.inputs[0].owner
    if not isinstance(pool, Operation) or pool.name != "linalg.pooling_nchw_sum" or \
            len(users(pool.results[0])) != 1:
        return None
    src, window, init = pool.operands[0], pool.operands[1], pool.operands[2]
    shape = src.type.get_shape()  # type: ignore[attr-defined]
    win = window.type.get_shape()  # type: ignore[attr-defined]
    if len(shape) != 4 or list(win) != list(shape[2:]) or \
            list(pool.results[0].type.get_shape()[2:]) != [1, 1]:  # type: ignore[attr-defined]
        return None
    if any(x != 1 for x in _ints(pool.properties["strides"]) + _ints(pool.properties["dilations"])):
        return None
    n = int(shape[2] * shape[3])
    if float(exprs[0].args[1].val) != float(n) or n * 256 >= _EXACT:
        return None
    fill = init.owner
    if not isinstance(fill, FillOp) or scalar_const(fill.inputs[0]) != 0.0:
        return None
    d = src.owner
    if not isinstance(d, DCastOp):
        return None
    qx = _i8_per_tensor(d.input.type)
    if qx is None:
        return None
    return pool, d.input, qx, qy, n


def lower_one(qc: Operation) -> bool:
    m = match(qc)
    if m is None:
        return False
    pool, x, qx, qy, n = m
    shape = x.type.get_shape()  # type: ignore[attr-defined]
    rank = len(shape)
    par = [IteratorTypeAttr.parallel()] * rank
    # the raw int8 values as f32 (exact)
    sx = SCastOp(x, TensorType(IntegerType(8), shape))
    e1 = tensor.EmptyOp([], TensorType(f32, shape))
    b1 = Block(arg_types=[IntegerType(8), f32])
    c1 = arith.SIToFPOp(b1.args[0], f32)
    b1.add_ops([c1, YieldOp(c1.result)])
    xf = GenericOp([sx.result], [e1.tensor], Region(b1), maps_attr([AffineMap.identity(rank)] * 2),
                   par, [TensorType(f32, shape)])
    Rewriter.insert_op([sx, e1, xf], InsertPoint.before(pool))
    pool.operands[0] = xf.results[0]
    # (sum - zx * n) * m, rounded half to even, + zy, saturated (exact subtraction: integers)
    out_t = qc.results[0].type
    st = TensorType(IntegerType(8), out_t.get_shape())  # type: ignore[attr-defined]
    cs = [arith.ConstantOp(FloatAttr(float(v), f32)) for v in (
        qx.zero_point * n, avgpool_multiplier(qx.scale, qy.scale, n), qy.zero_point, qy.qmin,
        qy.qmax)]
    e2 = tensor.EmptyOp([], st)
    b2 = Block(arg_types=[f32, IntegerType(8)])
    acc = arith.SubfOp(b2.args[0], cs[0].result)
    p = arith.MulfOp(acc.result, cs[1].result)
    r = math.RoundEvenOp(p.result)
    a = arith.AddfOp(r.result, cs[2].result)
    lo = arith.MaximumfOp(a.result, cs[3].result)
    hi = arith.MinimumfOp(lo.result, cs[4].result)
    o = arith.FPToSIOp(hi.result, IntegerType(8))
    b2.add_ops([acc, p, r, a, lo, hi, o, YieldOp(o.result)])
    g = GenericOp([pool.results[0]], [e2.tensor], Region(b2),
                  maps_attr([AffineMap.identity(rank)] * 2), par, [st])
    out = SCastOp(g.results[0], out_t)
    Rewriter.insert_op([*cs, e2, g, out], InsertPoint.before(qc))
    qc.results[0].replace_all_uses_with(out.result)
    return True


@dataclass(frozen=True)
class LowerQuantizedAvgpool(ModulePass):
    """Lower a QDQ int8 GlobalAveragePool to onnxruntime's QLinearGlobalAveragePool arithmetic.

    What: ``qcast(generic{divf(in0, N)}(pooling_nchw_sum(dcast(x), window = the whole H x W,
    init fill 0.0)))`` with ``x`` and the result per-tensor signed 8-bit, single users along the
    chain, ``N * 256 < 2**24`` -> the same pooling sum of ``sitofp(scast(x))`` (exact integers),
    then ``scast(generic{fptosi(clamp(roundeven((s - zx * N) * m) + zy, qmin, qmax))})`` with
    ``m = f32(sx / f32(sy * f32(N)))`` (module doc).
    Why: bit-exactness with onnxruntime's int8 kernels (issue 11: the QDQ ResNet-18's last 3 of
    100 inputs); the pooled tensor is summed from int8 values, not dequantized f32 ones.
    Pre: raise-quant-casts (quant types); before layout-nhwc (NCHW pooling). Post: the dcast,
    division and qcast are erased when dead.
    Options: none.
    """

    name = "lower-quantized-avgpool"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        rewrite_each(op, lower_one)


__all__ = ["LowerQuantizedAvgpool", "avgpool_multiplier", "lower_one", "match"]
