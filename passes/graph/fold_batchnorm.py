"""fold-batchnorm: fold per-channel affine ops (inference BatchNorm) into the contraction before."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects import arith, tensor
from xdsl.dialects.builtin import DenseArrayBase, ModuleOp, TensorType, i64
from xdsl.dialects.linalg.ops import BroadcastOp, FillOp
from xdsl.ir import Operation, OpResult, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from m100.passes.graph.common import (
    CHANNEL_DIM,
    body_exprs,
    channel_vector,
    const_array,
    const_view,
    func_bodies,
    generic_maps,
    is_elementwise_generic,
    is_identity,
    numpy_to_dense,
    scalar_const,
    shape_of,
    users,
)

# contraction -> (operand index of the weights, axis of the output channel in the weights)
WEIGHT_AXIS = {
    "linalg.conv_2d_nhwc_hwcf": (1, 3), "linalg.conv_2d_nchw_fchw": (1, 0),
    "linalg.matmul": (1, 1), "linalg.batch_matmul": (1, 2),
    "linalg.depthwise_conv_2d_nchw_chw": (1, 0), "linalg.depthwise_conv_2d_nhwc_hwc": (1, 2),
}


def _init_bias(init: SSAValue, ch: int, f: int) -> np.ndarray | None:
    prod = init.owner if isinstance(init, OpResult) else None
    if isinstance(prod, FillOp):
        c = scalar_const(prod.inputs[0])
        return None if c is None else np.full(f, c, dtype=np.float64)
    if isinstance(prod, BroadcastOp):
        rank = len(shape_of(init) or ())
        kept = [d for d in range(rank) if d not in set(prod.dimensions.get_values())]
        arr = const_array(prod.input)
        if kept == [ch] and arr is not None and arr.size == f:
            return arr.astype(np.float64).reshape(f)
    return None


def _stage(u: Operation, cur: SSAValue, ch: int, f: int) -> tuple[str, np.ndarray] | None:
    """(kind, per-channel constant) if u computes cur (+|-|*|/) k per channel."""
    if not is_elementwise_generic(u) or len(u.inputs) != 2 or len(u.results) != 1:
        return None
    if shape_of(u.results[0]) != shape_of(cur):
        return None
    exprs = body_exprs(u)
    if exprs is None:
        return None
    e = exprs[0]
    if e.kind not in ("addf", "subf", "mulf", "divf") or \
            {(a.kind, a.val) for a in e.args} != {("in", 0), ("in", 1)}:
        return None
    k = 0 if u.inputs[0] is cur else 1
    if u.inputs[1 - k] is cur or not is_identity(generic_maps(u)[k]):
        return None
    if e.kind in ("subf", "divf") and e.args[0].val != k:
        return None  # k - x, k / x: not affine in x
    vec = channel_vector(u.inputs[1 - k], generic_maps(u)[1 - k], ch, f, float_only=True)
    if vec is None:
        return None
    return e.kind, vec


GROUPED = "linalg.conv_2d_ngchw_gfchw"  # out [N, G, F, H, W], weights [G, F, C, KH, KW]


def _grouped_view(op: Operation) -> SSAValue | None:
    """The [N, G*F, H, W] collapse of a grouped conv's result (torch-mlir's form), if it is the
    result's only use."""
    us = users(op.results[0])
    if len(us) != 1 or not isinstance(us[0], tensor.CollapseShapeOp):
        return None
    groups = [[int(i.value.data) for i in g.data] for g in us[0].reassociation.data]
    return us[0].result if groups == [[0], [1, 2], [3], [4]] else None


def scaled(w: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``np.multiply(w, scale, dtype=np.float64).astype(w.dtype)``: the product in float64 (each
    weight converted exactly), rounded once to the weights' type -- computed by the ufunc into
    an array of the weights' type (its buffered loop casts each block of float64 products as
    ``astype`` casts them: the same cast, element by element) instead of writing and reading a
    whole float64 array (ResNet-50: ~100 MB of weights). ``test_scaled_is_the_float64_product``."""
    out = np.empty(np.broadcast_shapes(w.shape, scale.shape), w.dtype)
    np.multiply(w, scale, out=out, dtype=np.float64, casting="unsafe")
    return out


def fold_one(op: Operation) -> bool:
    if (op.name not in WEIGHT_AXIS and op.name != GROUPED) or len(op.results) != 1:
        return False
    grouped = op.name == GROUPED
    w_idx, w_axis = (1, 0) if grouped else WEIGHT_AXIS[op.name]
    out_t = op.results[0].type
    if not isinstance(out_t, TensorType) or out_t.get_element_type() != op.operands[w_idx].type \
            .get_element_type():  # type: ignore[attr-defined]
        return False
    start: SSAValue | None = op.results[0]
    if grouped:
        g, fg = out_t.get_shape()[1], out_t.get_shape()[2]
        ch, f = 1, g * fg
        start = _grouped_view(op)
        prod = op.operands[-1].owner if isinstance(op.operands[-1], OpResult) else None
        c = scalar_const(prod.inputs[0]) if isinstance(prod, FillOp) else None
        bias = None if c is None else np.full(f, c, dtype=np.float64)
    else:
        ch = CHANNEL_DIM[op.name]
        f = out_t.get_shape()[ch]
        bias = _init_bias(op.operands[-1], ch, f)
    if bias is None or start is None:
        return False
    w = const_view(op.operands[w_idx])  # read only: the scaled weights are a new array
    scale = np.ones(f)
    chain: list[Operation] = []
    cur: SSAValue = start
    while True:
        us = users(cur)
        if len(us) != 1:
            break
        st = _stage(us[0], cur, ch, f)
        if st is None:
            break
        kind, k = st
        if kind in ("mulf", "divf") and w is None:
            break
        if kind == "addf":
            bias = bias + k
        elif kind == "subf":
            bias = bias - k
        elif kind == "mulf":
            bias, scale = bias * k, scale * k
        else:
            bias, scale = bias / k, scale / k
        chain.append(us[0])
        cur = us[0].results[0]
    if not chain:
        return False
    new_ops: list[Operation] = []
    if w is not None and not np.all(scale == 1.0):
        shape = [1] * w.ndim
        if grouped:
            shape[0], shape[1] = g, fg
        else:
            shape[w_axis] = f
        w_new = scaled(w, scale.reshape(shape))
        wc = arith.ConstantOp(numpy_to_dense(w_new, op.operands[w_idx].type))  # type: ignore
        new_ops.append(wc)
        w_val = wc.result
    else:
        w_val = op.operands[w_idx]
    elem = out_t.get_element_type()
    rank = len(out_t.get_shape())
    if grouped:  # the bias as [G, F], broadcast over N, H, W of the 5-d result
        bc = arith.ConstantOp(numpy_to_dense(bias.reshape(g, fg), TensorType(elem, [g, fg])))
        keep = (1, 2)
    else:
        bc = arith.ConstantOp(numpy_to_dense(bias, TensorType(elem, [f])))
        keep = (ch,)
    empty = tensor.EmptyOp([], out_t)
    bb = BroadcastOp(bc.result, empty.tensor,
                     DenseArrayBase.from_list(i64, [d for d in range(rank) if d not in keep]), out_t)
    new_ops += [bc, empty, bb]
    Rewriter.insert_op(new_ops, InsertPoint.before(op))
    operands = list(op.operands)
    operands[w_idx] = w_val
    operands[len(operands) - 1] = bb.result[0]
    op.operands = operands
    cur.replace_all_uses_with(start)
    for u in reversed(chain):
        Rewriter.erase_op(u)
    return True


@dataclass(frozen=True)
class FoldBatchnorm(ModulePass):
    """Fold per-channel affine ops after a contraction (inference BatchNorm) into it.

    What: after a conv (conv_2d_nhwc_hwcf / conv_2d_nchw_fchw / depthwise / grouped
    conv_2d_ngchw_gfchw seen through its [N, G*F, H, W] collapse) or matmul / batch_matmul with
    constant weights whose init is a constant fill or a per-channel bias broadcast, a chain of
    single-use elementwise generics ``x - k``, ``x + k``, ``x * k``, ``x / k`` with constant
    per-output-channel ``k`` (what torch-mlir makes of BatchNormalization:
    ``(x - mean) * rsqrt(var + eps) * gamma + beta``, after fold-constants) is folded: the weights
    are scaled per output channel (a new constant) and the init becomes the broadcast of the
    folded bias; the generics disappear. Bias-only chains also fold when the weights are not
    constant.
    Why: the TCU epilogue has a bias but no per-channel scale; folding leaves conv + bias + ReLU,
    which fuse-epilogue then fuses completely.
    Pre: func + linalg-on-tensors, constants folded. Post: the same values up to float rounding
    (computed in float64, rounded once to the weights' type).
    Options: none.
    """

    name = "fold-batchnorm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for block in func_bodies(op):
            for o in list(block.ops):
                if o.parent_block() is block:
                    fold_one(o)


__all__ = ["FoldBatchnorm", "fold_one"]
