"""fold-quantized-contractions: dcast -> float conv/matmul -> qcast chains -> int8 contractions."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects import arith, math, tensor
from xdsl.dialects.builtin import (DenseArrayBase, Float32Type, FloatAttr, IndexType, IntegerAttr, ModuleOp,
                                   TensorType, f32, i8, i32, i64)
from xdsl.dialects.linalg.ops import BroadcastOp, FillOp, MatmulOp, YieldOp
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.ir.affine import AffineMap
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from m100.dialects.linalg_ext import GenericOp
from m100.dialects.quant import (DCastOp, QCastOp, SCastOp, UniformQuantizedPerAxisType,
                                 UniformQuantizedType)
from m100.passes.graph.common import (CHANNEL_DIM, const_array, erase_dead, func_bodies, maps_attr,
                                      numpy_to_dense, scalar_const, shape_of, unary_activation,
                                      users)

#: contraction -> (axis of the output channel in the weights, weight axes summed per channel)
_WEIGHT = {"linalg.conv_2d_nchw_fchw": (0, (1, 2, 3)), "linalg.matmul": (1, (0,))}

REQUANT_ATTR = "m100.requant"  # on the requantize generic this pass builds (informational)


def _producer(v: SSAValue):
    return v.owner if isinstance(v.owner, Operation) else None


def _per_tensor(v: SSAValue):
    """``(quantized value, type)`` if ``v = quant.dcast(q)`` with a per-tensor i8 type."""
    d = _producer(v)
    if not isinstance(d, DCastOp):
        return None
    q = d.input.type.get_element_type()  # type: ignore[attr-defined]
    if type(q) is not UniformQuantizedType or q.width != 8 or not q.signed:
        return None
    return d.input, q


def _const_weights(v: SSAValue):
    """``(int8 weights, scales per output channel or one, zero points)`` if ``v`` is
    ``dcast(scast(constant i8))``."""
    d = _producer(v)
    if not isinstance(d, DCastOp):
        return None
    s = _producer(d.input)
    if not isinstance(s, SCastOp):
        return None
    w = const_array(s.input)
    q = d.input.type.get_element_type()  # type: ignore[attr-defined]
    if w is None or q.width != 8 or not q.signed or w.dtype != np.int8:
        return None
    if isinstance(q, UniformQuantizedPerAxisType):
        return w, q.quantized_dimension, np.asarray(q.scales, np.float64), np.asarray(q.zero_points)
    return w, None, np.asarray([q.scale], np.float64), np.asarray([q.zero_point])


def _bias(init: SSAValue, f: int, ch: int, rank: int, sx: float, sw: np.ndarray):
    """The int32 bias per output channel of the contraction's init, or None if not foldable.
    ``fill(0.0)`` -> zeros; ``broadcast(dcast(scast(const i32)))`` with scale ``sx * sw[c]`` and
    zero point 0 (what ONNX QDQ writes for a Conv/Gemm bias) -> its integer values."""
    p = _producer(init)
    if isinstance(p, FillOp):
        c = scalar_const(p.inputs[0])
        return np.zeros(f, np.int64) if c == 0.0 else None
    if not isinstance(p, BroadcastOp) or len(users(init)) != 1:
        return None
    kept = [d for d in range(rank) if d not in set(p.dimensions.get_values())]
    if kept != [ch]:
        return None
    d = _producer(p.input)
    if not isinstance(d, DCastOp):
        return None
    s = _producer(d.input)
    b = const_array(s.input) if isinstance(s, SCastOp) else None
    q = d.input.type.get_element_type()  # type: ignore[attr-defined]
    if b is None or b.dtype != np.int32 or b.shape != (f,):
        return None
    scales = np.asarray(q.scales if isinstance(q, UniformQuantizedPerAxisType) else [q.scale])
    zps = np.asarray(q.zero_points if isinstance(q, UniformQuantizedPerAxisType) else [q.zero_point])
    want = (np.float32(sx) * sw.astype(np.float32)).astype(np.float64)
    if np.any(zps != 0) or not np.allclose(np.broadcast_to(scales, (f,)), want, rtol=1e-6, atol=0):
        return None  # a bias whose scale is not in_scale * w_scale cannot be added in int32
    return b.astype(np.int64)


def _pad_source(v: SSAValue):
    """``(source, pad op)`` if ``v`` is a constant-0.0 ``tensor.pad`` of ``source``, else ``(v, None)``."""
    p = _producer(v)
    if isinstance(p, tensor.PadOp):
        y = p.region.block.last_op
        if y is not None and len(y.operands) == 1 and scalar_const(y.operands[0]) == 0.0 and \
                not p.low and not p.high:
            return p.source, p
    return v, None


def requant_multiplier(x_scale: float, w_scale: np.ndarray, y_scale: float) -> np.ndarray:
    """``x_scale * w_scale[c] / y_scale`` computed in f32 as onnxruntime's integer kernels do
    (QLinearConv/QLinearMatMul/QGemm: ``float`` product, then ``float`` quotient), as f64 values.
    In f64 the multiplier can differ by one f32 ulp, enough to move a result by 1 LSB (test:
    ``test_requant_multiplier_is_computed_in_f32_like_onnxruntime``)."""
    f = np.float32
    w = np.asarray(w_scale, dtype=np.float64).astype(f).reshape(-1)
    return ((f(x_scale) * w).astype(f) / f(y_scale)).astype(f).astype(np.float64)


def _requant_generic(acc: SSAValue, mult: np.ndarray, ch: int, zp: int, lo: int, hi: int,
                     out_t: TensorType) -> list[Operation]:
    """``fptosi(clamp(roundeven(sitofp(acc) * mult[c]) + zp, lo, hi))`` -> i8 (per channel ``ch``)."""
    rank = len(out_t.get_shape())
    ops: list[Operation] = []
    empty = tensor.EmptyOp([], out_t)
    consts = [arith.ConstantOp(FloatAttr(float(x), f32)) for x in (zp, lo, hi)]
    ops += [empty, *consts]
    ins = [acc]
    maps = [AffineMap.identity(rank)]
    per_ch = mult.size > 1
    if per_ch:
        mc = arith.ConstantOp(numpy_to_dense(mult.astype(np.float32), TensorType(f32, [mult.size])))
        ops.append(mc)
        ins.append(mc.result)
        maps.append(AffineMap(rank, 0, (AffineMap.identity(rank).results[ch],)))
    else:
        sc = arith.ConstantOp(FloatAttr(float(np.float32(mult[0])), f32))
        ops.append(sc)
    maps.append(AffineMap.identity(rank))
    blk = Block(arg_types=[i32] + ([f32] if per_ch else []) + [i8])
    with_ops = []
    x = arith.SIToFPOp(blk.args[0], f32)
    m = arith.MulfOp(x.result, blk.args[1] if per_ch else sc.result)
    r = math.RoundEvenOp(m.result)
    a = arith.AddfOp(r.result, consts[0].result)
    c1 = arith.MaximumfOp(a.result, consts[1].result)
    c2 = arith.MinimumfOp(c1.result, consts[2].result)
    o = arith.FPToSIOp(c2.result, i8)
    with_ops += [x, m, r, a, c1, c2, o, YieldOp(o.result)]
    blk.add_ops(with_ops)
    from xdsl.dialects.linalg.attrs import IteratorTypeAttr

    g = GenericOp(ins, [empty.tensor], Region(blk), maps_attr(maps),
                  [IteratorTypeAttr.parallel()] * rank, [out_t])
    ops.append(g)
    return ops


def _is_relu_of(u: Operation, v: SSAValue) -> bool:
    """``u`` is an elementwise f32 ReLU of ``v`` alone (recognized numerically, common.py)."""
    if not isinstance(u, GenericOp) or len(u.inputs) != 1 or u.inputs[0] is not v or \
            len(u.results) != 1 or shape_of(u.results[0]) != shape_of(v):
        return False
    act = unary_activation(u)
    return act is not None and act[0] == "relu" and all(
        m == AffineMap.identity(m.num_dims) for m in (a.data for a in u.indexing_maps.data))


def _relu_i32(acc: SSAValue, t: TensorType) -> list[Operation]:
    rank = len(t.get_shape())
    empty = tensor.EmptyOp([], t)
    zero = arith.ConstantOp(IntegerAttr(0, i32))
    blk = Block(arg_types=[i32, i32])
    mx = arith.MaxSIOp(blk.args[0], zero.result)
    blk.add_ops([mx, YieldOp(mx.result)])
    from xdsl.dialects.linalg.attrs import IteratorTypeAttr

    g = GenericOp([acc], [empty.tensor], Region(blk),
                  maps_attr([AffineMap.identity(rank)] * 2), [IteratorTypeAttr.parallel()] * rank, [t])
    return [empty, zero, g]


def push_weight_transposes(block) -> int:
    """``transpose(dcast(scast(C)))`` -> ``dcast(scast(C^T))`` (the quantized axis permuted): how
    torch-mlir lowers a Gemm with ``transB``; afterwards the weights are a plain quantized constant."""
    from xdsl.dialects.linalg.ops import TransposeOp

    n = 0
    for op in list(block.ops):
        if not isinstance(op, TransposeOp) or len(op.results) != 1:
            continue
        d = _producer(op.inputs[0])
        s = _producer(d.input) if isinstance(d, DCastOp) else None
        c = const_array(s.input) if isinstance(s, SCastOp) else None
        if c is None:
            continue
        perm = list(op.permutation.get_values())
        q = d.input.type.get_element_type()  # type: ignore[attr-defined]
        if isinstance(q, UniformQuantizedPerAxisType):
            q = UniformQuantizedPerAxisType((q.width, q.signed), q.expressed_type,
                                            perm.index(q.quantized_dimension), q.scales,
                                            q.zero_points, q.qmin, q.qmax)
        ct = np.ascontiguousarray(np.transpose(c, perm))
        st = s.input.type.get_element_type()  # type: ignore[attr-defined]
        k = arith.ConstantOp(numpy_to_dense(ct, TensorType(st, ct.shape)))
        sc = SCastOp(k.result, TensorType(q, ct.shape))
        dc = DCastOp(sc.result, op.results[0].type)
        Rewriter.insert_op([k, sc, dc], InsertPoint.before(op))
        op.results[0].replace_all_uses_with(dc.result)
        Rewriter.erase_op(op)
        n += 1
    return n


def _bias_after(u: Operation, v: SSAValue, ch: int, rank: int, f: int):
    """``u = v + b[c]`` (elementwise addf, ``b = dcast(scast(const i32 [F]))`` read along output
    dim ``ch``): ``(int32 bias values, its scales)``, else None."""
    if not isinstance(u, GenericOp) or len(u.inputs) != 2 or len(u.results) != 1:
        return None
    k = 0 if u.inputs[0] is v else 1 if u.inputs[1] is v else None
    if k is None or u.inputs[1 - k] is v:
        return None
    maps = [a.data for a in u.indexing_maps.data]
    if maps[k] != AffineMap.identity(rank) or maps[-1] != AffineMap.identity(rank):
        return None
    if maps[1 - k] != AffineMap(rank, 0, (AffineMap.identity(rank).results[ch],)):
        return None
    blk = u.body.block
    ops = list(blk.ops)
    if len(ops) != 2 or ops[0].name != "arith.addf" or \
            {o for o in ops[0].operands} != {blk.args[0], blk.args[1]} or \
            ops[1].operands[0] is not ops[0].results[0]:
        return None
    d = _producer(u.inputs[1 - k])
    s = _producer(d.input) if isinstance(d, DCastOp) else None
    b = const_array(s.input) if isinstance(s, SCastOp) else None
    if b is None or b.dtype != np.int32 or b.shape != (f,):
        return None
    q = d.input.type.get_element_type()  # type: ignore[attr-defined]
    scales = np.asarray(q.scales if isinstance(q, UniformQuantizedPerAxisType) else [q.scale])
    zps = np.asarray(q.zero_points if isinstance(q, UniformQuantizedPerAxisType) else [q.zero_point])
    if np.any(zps != 0):
        return None
    return b.astype(np.int64), np.broadcast_to(scales, (f,))


def fold_one(op: Operation) -> bool:
    """Rewrite one ``dcast -> conv/matmul -> qcast`` chain; True if rewritten."""
    spec = _WEIGHT.get(op.name)
    if spec is None or len(op.results) != 1:
        return False
    w_axis, red_axes = spec
    ch = CHANNEL_DIM[op.name]
    us = users(op.results[0])
    out_rank = len(shape_of(op.results[0]) or ())
    f_out = (shape_of(op.results[0]) or ())[ch] if out_rank else 0
    bias_op, post_bias = None, None
    if len(us) == 1 and (pb := _bias_after(us[0], op.results[0], ch, out_rank, f_out)) is not None:
        bias_op, post_bias = us[0], pb
        us = users(bias_op.results[0])
    relu = None
    cur = bias_op.results[0] if bias_op is not None else op.results[0]
    if len(us) == 1 and _is_relu_of(us[0], cur):
        relu = us[0]
        us = users(relu.results[0])
    if len(us) != 1 or not isinstance(us[0], QCastOp):
        return False
    qc = us[0]
    yq = qc.result.type.get_element_type()  # type: ignore[attr-defined]
    if type(yq) is not UniformQuantizedType or yq.width != 8 or not yq.signed:
        return False
    lhs, pad = _pad_source(op.operands[0])
    xs = _per_tensor(lhs)
    wt = _const_weights(op.operands[1])
    if xs is None or wt is None or not isinstance(op.results[0].type.get_element_type(), Float32Type):
        return False
    xq, xqt = xs
    w, axis, sw, zw = wt
    out_t = op.results[0].type
    out_shape = tuple(out_t.get_shape())  # type: ignore[attr-defined]
    f = out_shape[ch]
    if np.any(zw != 0) or (axis is not None and (axis != w_axis or len(sw) != f)):
        return False  # asymmetric or wrongly-oriented weights: left in float
    sw = np.broadcast_to(sw, (f,))
    bias = _bias(op.operands[2], f, ch, len(out_shape), xqt.scale, sw)
    if bias is None:
        return False
    if post_bias is not None:  # a bias added after the product (Gemm): same rule as an init bias
        want = (np.float32(xqt.scale) * sw.astype(np.float32)).astype(np.float64)
        if not np.allclose(post_bias[1], want, rtol=1e-6, atol=0):
            return False
        bias = bias + post_bias[0]
    zx = xqt.zero_point
    # sum_k (x - zx) w = sum_k x w - zx * sum_k w; with the pad value zx every window is full.
    wsum = w.astype(np.int64).sum(axis=red_axes)
    if w_axis != 0:
        wsum = wsum.reshape(-1)
    total = bias - zx * wsum
    # the i32 accumulator must not wrap where the float graph does not: bound |sum x*w| + |init|
    # per channel by sum_k |w| * 128 (|x| <= 128)
    wabs = np.abs(w.astype(np.int64)).sum(axis=red_axes).reshape(-1)
    if np.any(np.abs(total) + 128 * wabs >= (1 << 31)):
        return False
    new: list[Operation] = []
    xi = SCastOp(xq, TensorType(i8, xq.type.get_shape()))  # type: ignore[attr-defined]
    new.append(xi)
    src = xi.result
    if pad is not None:
        zc = arith.ConstantOp(IntegerAttr(zx, i8))
        rank = len(pad.result.type.get_shape())
        blk = Block(arg_types=[IndexType()] * rank)
        blk.add_op(tensor.YieldOp(zc.result))
        p = tensor.PadOp(src, [], [], Region(blk), pad.static_low, pad.static_high,
                         TensorType(i8, pad.result.type.get_shape()))
        new += [zc, p]
        src = p.result
    acc_t = TensorType(i32, out_shape)
    empty = tensor.EmptyOp([], acc_t)
    new.append(empty)
    if np.any(total != 0):
        bc = arith.ConstantOp(numpy_to_dense(total.astype(np.int32), TensorType(i32, [f])))
        dims = [d for d in range(len(out_shape)) if d != ch]
        init = BroadcastOp(bc.result, empty.tensor, DenseArrayBase.from_list(i64, dims))
        new += [bc, init]
    else:
        z = arith.ConstantOp(IntegerAttr(0, i32))
        init = FillOp([z.result], [empty.tensor], [acc_t])
        new += [z, init]
    w_in = _producer(op.operands[1]).input.owner.input  # type: ignore[union-attr]
    if op.name == "linalg.matmul":
        acc = MatmulOp([src, w_in], [init.results[0]])
    else:
        acc = type(op)([src, w_in], [init.results[0]], [acc_t],  # type: ignore[call-arg]
                       strides=op.strides, dilations=op.dilations)  # type: ignore[attr-defined]
    new.append(acc)
    mult = requant_multiplier(xqt.scale, sw, yq.scale)
    if np.all(mult == mult[0]):
        mult = mult[:1]
    acc_v = acc.results[0]
    if relu is not None:  # relu(acc) * m == relu(acc * m) for m > 0: exact in the integer domain
        r_ops = _relu_i32(acc_v, acc_t)
        new += r_ops
        acc_v = r_ops[-1].results[0]
    rq = _requant_generic(acc_v, mult, ch, yq.zero_point, yq.qmin, yq.qmax,
                          TensorType(i8, out_shape))
    new += rq
    yv = SCastOp(rq[-1].results[0], qc.result.type)
    new.append(yv)
    Rewriter.insert_op(new, InsertPoint.before(qc))
    qc.result.replace_all_uses_with(yv.result)
    Rewriter.erase_op(qc)
    return True


#: torch-mlir's own fused per-tensor forms -> (plain op, weight output-channel axis, summed axes)
_INT_FORMS = {"linalg.quantized_matmul": ("linalg.matmul", 1, (0,)),
              "linalg.conv_2d_nchw_fchw_q": ("linalg.conv_2d_nchw_fchw", 0, (1, 2, 3))}


def fold_integer_one(qc: Operation) -> bool:
    """``qcast(dcast(scast(quantized_matmul | conv_2d_nchw_fchw_q(x, W, za, 0))))`` (torch-mlir's
    per-tensor form after raise-quant-casts) -> plain i8 contraction with init ``-za * sum(W)`` +
    requantize ``m = s_acc / s_y``; True if rewritten."""
    if not isinstance(qc, QCastOp):
        return False
    yq = qc.result.type.get_element_type()  # type: ignore[attr-defined]
    d = _producer(qc.input)
    s = _producer(d.input) if isinstance(d, DCastOp) else None
    acc_op = _producer(s.input) if isinstance(s, SCastOp) else None
    if acc_op is None or acc_op.name not in _INT_FORMS or type(yq) is not UniformQuantizedType or \
            yq.width != 8 or not yq.signed:
        return False
    aq = s.result.type.get_element_type()  # type: ignore[attr-defined]
    if type(aq) is not UniformQuantizedType or aq.zero_point != 0 or \
            len(users(acc_op.results[0])) != 1 or len(users(s.result)) != 1 or \
            len(users(d.result)) != 1:
        return False
    plain, w_axis, red_axes = _INT_FORMS[acc_op.name]
    x, wv, za_v, zb_v, init = acc_op.operands
    w = const_array(wv)
    za, zb = scalar_const(za_v), scalar_const(zb_v)
    fill = _producer(init)
    if w is None or w.dtype != np.int8 or za is None or zb != 0 or not isinstance(fill, FillOp) \
            or scalar_const(fill.inputs[0]) != 0 or str(x.type.get_element_type()) != "i8":  # type: ignore[attr-defined]
        return False
    out_t = acc_op.results[0].type
    out_shape = tuple(out_t.get_shape())  # type: ignore[attr-defined]
    ch = CHANNEL_DIM[plain]
    f = out_shape[ch]
    total = -int(za) * w.astype(np.int64).sum(axis=red_axes).reshape(-1)
    wabs = np.abs(w.astype(np.int64)).sum(axis=red_axes).reshape(-1)
    if total.shape != (f,) or np.any(np.abs(total) + 128 * wabs >= (1 << 31)):
        return False
    new: list[Operation] = []
    empty = tensor.EmptyOp([], out_t)
    new.append(empty)
    if np.any(total != 0):
        bc = arith.ConstantOp(numpy_to_dense(total.astype(np.int32), TensorType(i32, [f])))
        dims = [k for k in range(len(out_shape)) if k != ch]
        new_init = BroadcastOp(bc.result, empty.tensor, DenseArrayBase.from_list(i64, dims))
        new += [bc, new_init]
    else:
        z = arith.ConstantOp(IntegerAttr(0, i32))
        new_init = FillOp([z.result], [empty.tensor], [out_t])
        new += [z, new_init]
    if plain == "linalg.matmul":
        acc = MatmulOp([x, wv], [new_init.results[0]])
    else:
        from xdsl.dialects.linalg.ops import Conv2DNchwFchwOp

        acc = Conv2DNchwFchwOp([x, wv], [new_init.results[0]], [out_t],
                               strides=acc_op.strides, dilations=acc_op.dilations)  # type: ignore[attr-defined]
    new.append(acc)
    mult = requant_multiplier(aq.scale, np.ones(1), yq.scale)
    rq = _requant_generic(acc.results[0], mult, ch, yq.zero_point, yq.qmin, yq.qmax,
                          TensorType(i8, out_shape))
    new += rq
    yv = SCastOp(rq[-1].results[0], qc.result.type)
    new.append(yv)
    Rewriter.insert_op(new, InsertPoint.before(qc))
    qc.result.replace_all_uses_with(yv.result)
    Rewriter.erase_op(qc)
    return True


@dataclass(frozen=True)
class FoldQuantizedContractions(ModulePass):
    """Fold QDQ chains around conv/matmul into int8 x int8 -> int32 contractions + requantize.

    What: ``qcast([relu]([+ b](conv_2d_nchw_fchw | matmul(dcast(x), dcast(scast(W)), init))))`` where ``x`` is
    per-tensor i8, ``W`` a constant i8 tensor quantized symmetrically per output channel (or per
    tensor), ``init`` zero or the broadcast of an int32 bias whose scale is ``x_scale * w_scale``
    (what onnxruntime's ``quantize_static`` writes) or such a bias added after the product (Gemm;
    transposed constant weights are transposed first), and the result is quantized per tensor to i8,
    becomes ``acc = conv|matmul(scast(x) [padded with x's zero point], W)`` on i8 -> i32 with init
    ``bias - zx * sum(W)`` per channel (exact in int32), [an i32 ReLU ``maxsi(acc, 0)``], then a
    requantize ``linalg.generic``
    ``fptosi(clamp(roundeven(sitofp(acc) * m[c]) + zy, qmin, qmax))`` with
    ``m[c] = x_scale * w_scale[c] / y_scale``, then ``scast`` to the result's quant type.
    fuse-epilogue then marks bias + requant as the contraction's TCU epilogue.
    Also torch-mlir's own per-tensor form ``qcast(dcast(scast(quantized_matmul |
    conv_2d_nchw_fchw_q(x, W, za, 0))))`` becomes the plain i8 contraction with init
    ``-za * sum(W)`` and a requantize with ``m = s_acc / s_y``.
    Chains that do not match exactly (asymmetric weights, float biases, per-channel activations,
    u8) stay in float: correct, only not folded.
    Why: the TCU is an int8 machine (int8 at 16x the f32 rate); the ONNX QDQ form computes the same
    result in float. Differences to the float graph: at most 1 LSB where the float rounding of the
    original sum differs from the exact integer sum (onnxruntime's QLinearConv also accumulates
    exactly).
    Pre: raise-quant-casts. Post: the folded ops are erased when dead.
    Options: none.
    """

    name = "fold-quantized-contractions"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        n = 0
        for block in func_bodies(op):
            push_weight_transposes(block)
            for o in list(block.ops):
                if fold_one(o) or fold_integer_one(o):
                    n += 1
        if n:
            erase_dead(op)


__all__ = ["FoldQuantizedContractions", "fold_one"]
