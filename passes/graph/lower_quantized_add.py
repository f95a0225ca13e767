"""lower-quantized-add: ``qcast(addf(dcast(a), dcast(b)))`` -> onnxruntime's QLinearAdd arithmetic.

A QDQ residual Add (``DequantizeLinear`` of two int8 tensors, ``Add``, ``QuantizeLinear``; also
what ``onnx_rewrite_quant`` makes of a com.microsoft ``QLinearAdd``) is, by the ONNX definition,
``q((a - za) * sa + (b - zb) * sb)`` in f32 with ``q(v) = saturate(round_half_even(v / sc) + zc)``.
onnxruntime runs it as one ``QLinearAdd`` kernel whose float expression differs in the last bit
near rounding ties (1 LSB on about 1 in 10^4 elements). MLAS's x86 AVX2 kernel
(``qladd_avx2.cpp``, ``MlasQLinearAddKernelAvx2Helper``, vector + vector) computes, all in f32::

    rac = sa / sc;  rbc = sb / sc
    fixed = zc - fma(rac, za, rbc * zb)      # the C++ compiler contracts rac*za + rbc*zb
    y = saturate(round_half_even(fma(a, rac, fma(b, rbc, fixed))))

(the contraction of ``fixed`` was found against onnxruntime 1.32 over all 65536 int8 pairs for
random scales: ``test/e2e/test_quant_add.py``). This pass rewrites the chain into one elementwise
``linalg.generic`` on the int8 storage that computes exactly that, with ``math.fma`` (one
rounding; the CVU's ``fma`` stage, docs/isa.md), so the compiled program is bit-exact with
onnxruntime's int8 kernels.

"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects import arith, math, tensor
from xdsl.dialects.builtin import FloatAttr, IntegerType, ModuleOp, TensorType, f32
from xdsl.dialects.linalg.attrs import IteratorTypeAttr
from xdsl.dialects.linalg.ops import YieldOp
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.ir.affine import AffineMap
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from m100.dialects.linalg_ext import GenericOp
from m100.dialects.quant import DCastOp, QCastOp, SCastOp, UniformQuantizedType
from m100.passes.graph.common import (body_exprs, is_elementwise_generic, rewrite_each,
                                      maps_attr, unary_activation, users)
from m100.targets.m100.numerics import fma_f32


def qlinear_add_constants(sa: float, za: int, sb: float, zb: int, sc: float,
                          zc: int) -> tuple[float, float, float]:
    """``(rac, rbc, fixed)`` of MLAS's AVX2 QLinearAdd, as f32 values (module doc)."""
    f = np.float32
    rac, rbc = f(f(sa) / f(sc)), f(f(sb) / f(sc))
    fixed = f(f(zc) - fma_f32(rac, f(za), f(rbc * f(zb))))
    return float(rac), float(rbc), float(fixed)


def _i8_per_tensor(t) -> UniformQuantizedType | None:
    e = t.get_element_type() if isinstance(t, TensorType) else None
    if type(e) is UniformQuantizedType and e.width == 8 and e.signed:
        return e
    return None


def _dcast_i8(v: SSAValue) -> tuple[SSAValue, UniformQuantizedType] | None:
    d = v.owner
    if not isinstance(d, DCastOp):
        return None
    q = _i8_per_tensor(d.input.type)
    return (d.input, q) if q is not None else None


def match(op: Operation):
    """``(x, qx, y, qy, qcast, qout)`` if ``op`` is the Add of a lowerable chain, else None."""
    if not isinstance(op, GenericOp) or not is_elementwise_generic(op) or len(op.inputs) != 2 \
            or len(op.results) != 1:
        return None
    rank = len(op.results[0].type.get_shape())  # type: ignore[attr-defined]
    if any(m.data != AffineMap.identity(rank) for m in op.indexing_maps.data):
        return None
    exprs = body_exprs(op)
    if not exprs or len(exprs) != 1:
        return None
    e = exprs[0]
    if e.kind != "addf" or [(a.kind, a.val) for a in e.args] != [("in", 0), ("in", 1)]:
        return None
    a, b = _dcast_i8(op.inputs[0]), _dcast_i8(op.inputs[1])
    us = users(op.results[0])
    if a is None or b is None or len(us) != 1:
        return None
    relu = None
    if _is_relu_of(us[0], op.results[0]):  # Add -> Relu -> Q
        relu = us[0]
        us = users(relu.results[0])
        if len(us) != 1:
            return None
    if not isinstance(us[0], QCastOp):
        return None
    qout = _i8_per_tensor(us[0].results[0].type)
    if qout is None or (relu is not None and qout.zero_point != qout.qmin):
        return None
    return a[0], a[1], b[0], b[1], us[0], qout


def _is_relu_of(u: Operation, v: SSAValue) -> bool:
    """``u`` is an elementwise f32 ReLU of ``v`` alone, same shape, identity maps. Before a
    QuantizeLinear whose zero point is the type's minimum it changes nothing (every negative
    value quantizes to qmin anyway), so onnxruntime drops it (its ReluQuantFusion) and runs
    QLinearAdd."""
    if not isinstance(u, GenericOp) or len(u.inputs) != 1 or u.inputs[0] is not v or \
            len(u.results) != 1 or u.results[0].type != v.type:
        return False
    act = unary_activation(u)
    return act is not None and act[0] == "relu" and all(
        m.data == AffineMap.identity(m.data.num_dims) for m in u.indexing_maps.data)


def lower_one(op: Operation) -> bool:
    m = match(op)
    if m is None:
        return False
    x, qx, y, qy, qc, qo = m
    rac, rbc, fixed = qlinear_add_constants(qx.scale, qx.zero_point, qy.scale, qy.zero_point,
                                            qo.scale, qo.zero_point)
    shape = op.results[0].type.get_shape()  # type: ignore[attr-defined]
    st = TensorType(IntegerType(8), shape)
    sx, sy = SCastOp(x, st), SCastOp(y, st)
    empty = tensor.EmptyOp([], st)
    cs = [arith.ConstantOp(FloatAttr(v, f32)) for v in (rac, rbc, fixed, float(qo.qmin),
                                                          float(qo.qmax))]
    blk = Block(arg_types=[IntegerType(8)] * 3)
    af = arith.SIToFPOp(blk.args[0], f32)
    bf = arith.SIToFPOp(blk.args[1], f32)
    t = math.FmaOp(bf.result, cs[1].result, cs[2].result)
    u = math.FmaOp(af.result, cs[0].result, t.result)
    lo = arith.MaximumfOp(u.result, cs[3].result)
    hi = arith.MinimumfOp(lo.result, cs[4].result)
    r = math.RoundEvenOp(hi.result)
    o = arith.FPToSIOp(r.result, IntegerType(8))
    blk.add_ops([af, bf, t, u, lo, hi, r, o, YieldOp(o.result)])
    rank = len(shape)
    g = GenericOp([sx.result, sy.result], [empty.tensor], Region(blk),
                  maps_attr([AffineMap.identity(rank)] * 3),
                  [IteratorTypeAttr.parallel()] * rank, [st])
    out = SCastOp(g.results[0], qc.results[0].type)
    Rewriter.insert_op([sx, sy, empty, *cs, g, out], InsertPoint.before(qc))
    qc.results[0].replace_all_uses_with(out.result)
    return True


@dataclass(frozen=True)
class LowerQuantizedAdd(ModulePass):
    """Lower a QDQ int8 Add to onnxruntime's QLinearAdd arithmetic (one CVU pipeline).

    What: ``qcast([relu](generic{addf(in0, in1)}(dcast(x), dcast(y))))``, every map the identity
    (same shapes: onnxruntime's vector + vector kernel), ``x``, ``y`` and the result per-tensor
    signed 8-bit, single users along the chain, a ReLU only where the result's zero point is its
    qmin (then it changes nothing and onnxruntime drops it too) ->
    ``scast(generic{fptosi(roundeven(clamp(fma(sitofp(a), rac, fma(sitofp(b), rbc, fixed)), qmin,
    qmax)))}(scast(x), scast(y)))``.
    Why: bit-exactness with onnxruntime's QLinearAdd (issue 11: QDQ ResNet-18 vs int8-kernel
    onnxruntime); the int8 operands are read directly (no dequantized f32 tensors).
    Pre: raise-quant-casts (quant types). Post: the dcasts/generic/qcast are erased when dead.
    Broadcasting adds, per-axis or unsigned types stay as they are (the ONNX definition, in f32).
    Options: none.
    """

    name = "lower-quantized-add"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        rewrite_each(op, lower_one)


__all__ = ["LowerQuantizedAdd", "lower_one", "match", "qlinear_add_constants"]
