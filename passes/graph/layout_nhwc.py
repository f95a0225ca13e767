"""layout-nhwc: NCHW convolutions -> NHWC activations with pre-packed HWCF weights."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects import arith, tensor
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.dialects.linalg.ops import Conv2DNhwc_HwcfOp, GenericOp, TransposeOp
from xdsl.ir import Operation, OpResult, SSAValue
from xdsl.ir.affine import AffineExpr, AffineMap
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from m100.passes.graph.common import (
    const_view,
    transposed,
    func_bodies,
    generic_maps,
    is_elementwise_generic,
    maps_attr,
    numpy_to_dense,
)
from m100.passes.graph.fast_ops import empty, generic, transposed_type
from m100.passes.graph.simplify_algebra import make_transpose, perm_of

_NCHW_POOLS = ("linalg.pooling_nchw_max", "linalg.pooling_nchw_sum", "linalg.pooling_nchw_min")
TO_NHWC = [0, 2, 3, 1]  # transpose perm NCHW -> NHWC
TO_NCHW = [0, 3, 1, 2]  # transpose perm NHWC -> NCHW
FCHW_TO_HWCF = [2, 3, 1, 0]


def _permuted(t: TensorType, perm: list[int]) -> TensorType:
    """``t`` with its dims in ``perm``'s order (one shared attribute per type and order)."""
    return transposed_type(t, tuple(perm))


def _pack_weight(w: SSAValue) -> tuple[list[Operation], SSAValue]:
    """FCHW weights -> HWCF: computed now if constant (pre-packed), else a transpose."""
    arr = const_view(w)  # read only: transposed into the new constant's bytes (one copy)
    if arr is not None:
        t = _permuted(w.type, FCHW_TO_HWCF)  # type: ignore[arg-type]
        cst = arith.ConstantOp(numpy_to_dense(transposed(arr, FCHW_TO_HWCF), t))
        return [cst], cst.result
    return make_transpose(w, FCHW_TO_HWCF)


def convert_conv(op: Operation) -> None:
    """Replace one linalg.conv_2d_nchw_fchw by transposes + linalg.conv_2d_nhwc_hwcf."""
    x, w = op.operands[0], op.operands[1]
    init = op.operands[2]
    ops: list[Operation] = []
    tx_ops, x2 = make_transpose(x, TO_NHWC)
    w_ops, w2 = _pack_weight(w)
    ti_ops, i2 = make_transpose(init, TO_NHWC)
    out_t = _permuted(op.results[0].type, TO_NHWC)  # type: ignore[arg-type]
    conv = Conv2DNhwc_HwcfOp([x2, w2], [i2], [out_t], strides=op.properties["strides"],
                             dilations=op.properties["dilations"])
    for k, v in op.attributes.items():
        if k.startswith("m100."):
            conv.attributes[k] = v
    back_ops, y = make_transpose(conv.results[0], TO_NCHW)
    ops = tx_ops + w_ops + ti_ops + [conv] + back_ops
    Rewriter.replace_op(op, ops, [y])


def convert_depthwise(op: Operation) -> bool:
    """linalg.depthwise_conv_2d_nchw_chw -> transposes + linalg.depthwise_conv_2d_nhwc_hwc with
    [kh, kw, c] weights (pre-packed if constant, else a transpose)."""
    try:
        from m100.dialects.linalg_ext import DepthwiseConv2DNhwcHwcOp
    except ImportError:  # pragma: no cover - the extended dialect is part of the project
        return False
    if len(op.operands) != 3 or len(op.results) != 1:
        return False
    x, w, init = op.operands
    tx_ops, x2 = make_transpose(x, TO_NHWC)
    arr = const_view(w)  # read only: transposed into the new constant's bytes (one copy)
    if arr is not None:
        t = _permuted(w.type, [1, 2, 0])  # type: ignore[arg-type]
        cst = arith.ConstantOp(numpy_to_dense(np.transpose(arr, [1, 2, 0]), t))
        w_ops, w2 = [cst], cst.result
    else:
        w_ops, w2 = make_transpose(w, [1, 2, 0])
    ti_ops, i2 = make_transpose(init, TO_NHWC)
    out_t = _permuted(op.results[0].type, TO_NHWC)  # type: ignore[arg-type]
    conv = DepthwiseConv2DNhwcHwcOp([x2, w2], [i2], [out_t], strides=op.properties["strides"],
                                    dilations=op.properties["dilations"])
    for k, v in op.attributes.items():
        if k.startswith("m100."):
            conv.attributes[k] = v
    back_ops, y = make_transpose(conv.results[0], TO_NCHW)
    Rewriter.replace_op(op, tx_ops + w_ops + ti_ops + [conv] + back_ops, [y])
    return True


def _nhwc_pool_class(name: str):
    """The op class of ``linalg.pooling_nhwc_<kind>`` (the project's linalg), or None."""
    try:
        from m100.dialects.linalg_ext import EXTRA_OPS
    except ImportError:  # pragma: no cover - the extended dialect is part of the project
        return None
    want = name.replace("_nchw_", "_nhwc_")
    return next((c for c in EXTRA_OPS if getattr(c, "name", None) == want), None)


def convert_pool(op: Operation) -> bool:
    """pooling_nchw_<kind> -> transposes + pooling_nhwc_<kind> (same window, strides, dilations)."""
    cls = _nhwc_pool_class(op.name)
    if cls is None or len(op.operands) != 3 or len(op.results) != 1:
        return False
    x, window, init = op.operands
    tx_ops, x2 = make_transpose(x, TO_NHWC)
    ti_ops, i2 = make_transpose(init, TO_NHWC)
    out_t = _permuted(op.results[0].type, TO_NHWC)  # type: ignore[arg-type]
    pool = cls([x2, window], [i2], [out_t], strides=op.properties["strides"],
               dilations=op.properties["dilations"])
    for k, v in op.attributes.items():
        if k.startswith("m100."):
            pool.attributes[k] = v
    back_ops, y = make_transpose(pool.results[0], TO_NCHW)
    Rewriter.replace_op(op, tx_ops + ti_ops + [pool] + back_ops, [y])
    return True


def _from_nhwc(v: SSAValue) -> SSAValue | None:
    """``y`` if ``v = transpose(y, TO_NCHW)``."""
    o = v.owner if isinstance(v, OpResult) else None
    if isinstance(o, TransposeOp) and o.res and perm_of(o) == TO_NCHW:
        return o.inputs[0]
    return None


def _subst(m: AffineMap, new_pos: list[int]) -> AffineMap:
    """Rename dims d_j -> d_{new_pos[j]} in every result."""
    repl = [AffineExpr.dimension(p) for p in new_pos]
    return AffineMap(m.num_dims, m.num_symbols,
                     tuple(r.replace_dims_and_symbols(repl, []) for r in m.results))


def sink_through_generic(op: GenericOp) -> bool:
    """Rewrite a rank-4 elementwise generic fed by transpose(y, TO_NCHW) to compute in NHWC
    (reading y directly) and transpose its results back to NCHW."""
    if not is_elementwise_generic(op) or not op.results:
        return False
    if any(len(r.type.get_shape()) != 4 for r in op.results):  # type: ignore[attr-defined]
        return False
    if not any(_from_nhwc(v) is not None for v in op.inputs):
        return False
    if any(o.name == "linalg.index" for o in op.regions[0].walk()):
        return False
    maps = generic_maps(op)
    n_in = len(op.inputs)
    new_pos = [TO_NHWC.index(j) for j in range(4)]  # NCHW dim j -> its NHWC position
    ins: list[SSAValue] = []
    new_maps: list[AffineMap] = []
    pre: list[Operation] = []
    qinv = [TO_NCHW.index(k) for k in range(4)]
    for v, m in zip(op.inputs, maps[:n_in]):
        y = _from_nhwc(v)
        if y is not None:
            m = AffineMap(m.num_dims, m.num_symbols, tuple(m.results[qinv[k]] for k in range(4)))
            v = y
        ins.append(v)
        new_maps.append(_subst(m, new_pos))
    outs: list[SSAValue] = []
    if any(op.regions[0].blocks[0].args[n_in + i].uses for i in range(len(op.outputs))):
        return False  # the body reads the init values: keep it simple, do not sink
    for v in op.outputs:
        e = empty(_permuted(v.type, TO_NHWC))  # type: ignore[arg-type]
        pre.append(e)
        outs.append(e.tensor)
        new_maps.append(AffineMap.identity(4))
    res_t = [_permuted(r.type, TO_NHWC) for r in op.results]  # type: ignore[arg-type]
    # the body moves to the new op (``op`` is replaced below; a clone of it was the same IR)
    new = generic(ins, outs, op.detach_region(0), maps_attr(new_maps), op.iterator_types, res_t)
    new.attributes.update(op.attributes)
    post: list[Operation] = []
    vals: list[SSAValue] = []
    for r in new.results:
        b_ops, y = make_transpose(r, TO_NCHW)
        post += b_ops
        vals.append(y)
    Rewriter.replace_op(op, pre + [new] + post, vals)
    return True


def sink_through_pad(op: tensor.PadOp) -> bool:
    """pad(transpose(y, TO_NCHW)) -> transpose(pad'(y), TO_NCHW) (static pads, constant value)."""
    y = _from_nhwc(op.source)
    if y is None or op.low or op.high:
        return False
    if any(a.uses for a in op.region.blocks[0].args):
        return False
    lo, hi = list(op.static_low.get_values()), list(op.static_high.get_values())
    if len(lo) != 4:
        return False
    res_t = _permuted(op.result.type, TO_NHWC)  # type: ignore[arg-type]
    new = tensor.PadOp(y, [], [], op.region.clone(), [lo[p] for p in TO_NHWC],
                       [hi[p] for p in TO_NHWC], res_t)
    new.attributes.update(op.attributes)
    b_ops, v = make_transpose(new.result, TO_NCHW)
    Rewriter.replace_op(op, [new] + b_ops, [v])
    return True


def sink_through_quant_cast(op: Operation) -> bool:
    """``cast(transpose(y, TO_NCHW)) -> transpose(cast(y), TO_NCHW)`` for the per-tensor
    ``quant.qcast/dcast/scast`` (elementwise, so the order does not matter): in a quantized graph
    they sit between a convolution's back-transpose and the next one's transpose, which then
    cancel (issue 11: the QDQ ResNet-18 kept a transpose pair around every convolution).
    ``linalg.transpose`` takes no quantized element type, so a cast to a quantized type moves
    together with its single user that casts it back to a plain type (``qcast -> scast`` to the
    storage, ``scast -> dcast`` from it)."""
    from m100.dialects.quant import (DCastOp, QCastOp, QuantizedType, SCastOp,
                                     UniformQuantizedPerAxisType)

    if not isinstance(op, (QCastOp, DCastOp, SCastOp)):
        return False
    y = _from_nhwc(op.input)
    t = op.result.type
    if y is None or not isinstance(t, TensorType) or len(t.get_shape()) != 4:
        return False
    users: list[Operation] = []
    if isinstance(t.get_element_type(), QuantizedType):
        users = [u.operation for u in op.result.uses]
        if not users or any(not isinstance(u, (SCastOp, DCastOp)) or isinstance(
                u.result.type.get_element_type(), QuantizedType) for u in users):  # type: ignore
            return False
    if any(isinstance(v.type.get_element_type(), UniformQuantizedPerAxisType)  # type: ignore
           for c in [op] + users for v in (c.input, c.result)):
        return False  # per-axis parameters would need their axis permuted
    first = type(op)(y, _permuted(t, TO_NHWC))
    first.attributes.update(op.attributes)
    Rewriter.insert_op(first, InsertPoint.before(op))
    for c in users or [op]:
        v: SSAValue = first.result
        new_ops: list[Operation] = []
        if users:
            n = type(c)(v, _permuted(c.result.type, TO_NHWC))  # type: ignore[arg-type]
            n.attributes.update(c.attributes)
            new_ops.append(n)
            v = n.result
        b_ops, back = make_transpose(v, TO_NCHW)
        Rewriter.insert_op(new_ops + b_ops, InsertPoint.before(c))
        c.result.replace_all_uses_with(back)
        Rewriter.erase_op(c)
    if users:
        Rewriter.erase_op(op)
    return True


@dataclass(frozen=True)
class LayoutNhwc(ModulePass):
    """Layout for the TCU: NCHW convolutions become NHWC convolutions with HWCF weights.

    What: every ``linalg.conv_2d_nchw_fchw`` becomes ``transpose(x) -> linalg.conv_2d_nhwc_hwcf
    -> transpose back`` (``depthwise_conv_2d_nchw_chw`` -> ``depthwise_conv_2d_nhwc_hwc``, [kh,
    kw, c] weights, the same way); constant FCHW weights are pre-packed to HWCF at compile time (a new
    dense constant), other weights get a transpose. With ``propagate`` (default) the NHWC->NCHW
    transposes are then sunk through rank-4 elementwise linalg.generic ops (bias, BatchNorm,
    ReLU, residual adds: the generic is re-indexed to iterate in NHWC), through constant
    ``tensor.pad`` and through per-tensor ``quant.qcast/dcast/scast``, so that between consecutive convolutions a transpose pair remains that
    simplify-algebra cancels.
    With ``pools`` (default) NCHW max/sum/min pooling becomes the NHWC pooling op the same way.
    Why: the TCU convolves NHWC activations with [kh, kw, c, f] weights (isa.Conv2D) and the CVU
    pools NHWC (isa.CvuOp.MAXPOOL/AVGPOOL); transposes left at the graph boundary are DTDU copies.
    Pre: func + linalg-on-tensors. Post: no conv_2d_nchw_fchw (nor NCHW pooling with ``pools``);
    same values (pure data movement).
    Options: propagate (bool, default true), pools (bool, default true).
    """

    name = "layout-nhwc"
    propagate: bool = True
    pools: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for block in func_bodies(op):
            for o in list(block.ops):
                if o.name == "linalg.conv_2d_nchw_fchw" and o.results:
                    convert_conv(o)
                elif o.name == "linalg.depthwise_conv_2d_nchw_chw" and o.results:
                    convert_depthwise(o)
                elif self.pools and o.name in _NCHW_POOLS:
                    convert_pool(o)
            if not self.propagate:
                continue
            changed = True
            while changed:
                changed = False
                for o in list(block.ops):
                    if o.parent_block() is not block:
                        continue
                    if isinstance(o, GenericOp):
                        changed |= sink_through_generic(o)
                    elif isinstance(o, tensor.PadOp):
                        changed |= sink_through_pad(o)
                    elif o.name in ("quant.qcast", "quant.dcast", "quant.scast"):
                        changed |= sink_through_quant_cast(o)


__all__ = ["LayoutNhwc", "convert_conv", "convert_depthwise", "TO_NHWC", "TO_NCHW", "FCHW_TO_HWCF"]
