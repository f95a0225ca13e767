"""fold-constants: evaluate weight-only subgraphs at compile time (numpy)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects import arith, tensor
from xdsl.dialects.builtin import (
    AnyFloat,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    TensorType,
)
from xdsl.dialects.linalg.ops import BroadcastOp, GenericOp, TransposeOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from m100.passes.graph.common import (
    E,
    body_exprs,
    const_array,
    evaluate,
    func_bodies,
    generic_maps,
    is_elementwise_generic,
    kinds,
    map_dims,
    np_dtype,
    numpy_to_dense,
    scalar_const,
    transposed,
)

# body ops the folder evaluates (anything else: the generic is left alone)
_FOLDABLE_BODY = {
    "in", "c", "idx", "addf", "subf", "mulf", "divf", "negf", "exp", "log", "sqrt", "rsqrt",
    "tanh", "erf", "absf", "maximumf", "minimumf", "maxnumf", "minnumf", "cmpf", "select",
    "powf", "fpowi", "extf", "truncf", "floor", "ceil",
}


def to_domain(arr: np.ndarray, dims: list[int | None], rank: int) -> np.ndarray:
    """View an operand read through a projected permutation (with 0 constants) as an array
    broadcastable over the iteration domain of ``rank`` dims."""
    index = tuple(0 if d is None else slice(None) for d in dims)
    a = arr[index]
    kept = [d for d in dims if d is not None]
    order = sorted(range(len(kept)), key=lambda i: kept[i])
    a = np.transpose(a, order)
    shape = [1] * rank
    for d in sorted(kept):
        shape[d] = a.shape[sorted(kept).index(d)]
    return a.reshape(shape)


def eval_elementwise(op: GenericOp, args: list[np.ndarray]) -> list[np.ndarray] | None:
    """Evaluate an elementwise linalg.generic on numpy inputs (None if not modelled)."""
    exprs = body_exprs(op)
    if exprs is None or any(not kinds(e) <= _FOLDABLE_BODY for e in exprs):
        return None
    maps = generic_maps(op)
    out_shape = tuple(op.results[0].type.get_shape())
    rank = len(out_shape)
    env = {}
    for i, (a, m) in enumerate(zip(args, maps)):
        env[("in", i)] = to_domain(a, map_dims(m), rank)
    for d in range(rank):
        shape = [1] * rank
        shape[d] = out_shape[d]
        env[("idx", d)] = np.arange(out_shape[d]).reshape(shape)
    outs = []
    for e, r in zip(exprs, op.results):
        dt = np_dtype(r.type.get_element_type())
        if dt is None:
            return None
        v = evaluate(e, env)
        outs.append(np.broadcast_to(np.asarray(v), out_shape).astype(dt))
    return outs


def eval_op(op: Operation, args: list[np.ndarray]) -> list[np.ndarray] | None:
    """numpy value of ``op``'s results given its (constant) tensor inputs, or None."""
    if isinstance(op, TransposeOp) and op.res:
        return [transposed(args[0], list(op.permutation.get_values()))]
    if isinstance(op, BroadcastOp) and op.result:
        out_shape = tuple(op.result[0].type.get_shape())
        bdims = set(op.dimensions.get_values())
        shape = [1 if d in bdims else out_shape[d] for d in range(len(out_shape))]
        return [np.broadcast_to(args[0].reshape(shape), out_shape).copy()]
    if isinstance(op, tensor.CollapseShapeOp | tensor.ExpandShapeOp | tensor.ReshapeOp):
        return [args[0].reshape(tuple(op.results[0].type.get_shape()))]
    if isinstance(op, GenericOp) and is_elementwise_generic(op) and op.results:
        return eval_elementwise(op, args)
    return None


def _inputs(op: Operation):
    """The operands whose values the op reads (outs of linalg ops are only shape carriers for
    the ops folded here)."""
    if isinstance(op, TransposeOp | GenericOp):
        return list(op.inputs)
    if isinstance(op, BroadcastOp):
        return [op.input]
    if isinstance(op, tensor.ReshapeOp):
        return list(op.operands)
    if isinstance(op, tensor.CollapseShapeOp | tensor.ExpandShapeOp):
        return [op.operands[0]]
    return []


_SCALAR_OPS = {"arith.truncf", "arith.extf", "arith.sitofp", "arith.uitofp", "arith.fptosi",
               "arith.negf", "arith.addf", "arith.subf", "arith.mulf", "arith.divf",
               "arith.maximumf", "arith.minimumf", "arith.extsi", "arith.trunci", "arith.addi",
               "arith.subi", "arith.muli", "arith.index_cast", "math.sqrt", "math.exp"}


def _fold_scalar(o: Operation) -> None:
    """A graph-level scalar arith/math op on constants -> one arith.constant (e.g. the
    ``arith.truncf`` of an f64 -inf that torch-mlir leaves for MaxPool padding)."""
    if o.name not in _SCALAR_OPS or not o.operands:
        return
    vals = [scalar_const(v) for v in o.operands]
    if any(v is None for v in vals):
        return
    t = o.results[0].type
    kind = o.name.split(".", 1)[1]
    if kind in ("truncf", "extf", "sitofp", "uitofp", "fptosi", "extsi", "trunci", "index_cast"):
        val = vals[0]
        if kind == "fptosi":
            val = float(np.trunc(val))  # type: ignore[arg-type]
    else:
        e = E(kind, tuple(E("in", (), i) for i in range(len(vals))))
        try:
            val = float(evaluate(e, {("in", i): np.float64(v) for i, v in enumerate(vals)}))
        except KeyError:
            return
    if isinstance(t, IntegerType | IndexType):
        if not np.isfinite(val):  # type: ignore[arg-type]
            return
        attr = IntegerAttr(int(val), t)  # type: ignore[arg-type]
    elif isinstance(t, AnyFloat):
        dt = np_dtype(t)
        if dt is not None:  # round to the result type (f64 -> f32 overflow gives inf, as truncf)
            with np.errstate(all="ignore"):
                val = float(np.asarray(val, dtype=np.float64).astype(dt))
        attr = FloatAttr(float(val), t)  # type: ignore[arg-type]
    else:
        return
    Rewriter.replace_op(o, arith.ConstantOp(attr, t))


@dataclass(frozen=True)
class FoldConstants(ModulePass):
    """Fold weight-only subgraphs into dense constants, computed with numpy.

    What: an op whose every read input is an ``arith.constant dense`` - linalg.transpose,
    linalg.broadcast, tensor.collapse_shape/expand_shape/reshape, and elementwise linalg.generic
    (arith/math bodies, e.g. the weight copies torch-mlir emits before batch_matmul, or the
    BatchNorm ``rsqrt(var + eps)``) - is replaced by one ``arith.constant`` holding its value.
    Why: weights become pre-packed data; nothing of it runs on the NPU.
    Scalar arith/math ops at graph level whose operands are constants (casts, +, -, *, /, ...)
    become constants too.
    Pre: func + linalg-on-tensors. Post: same values (numpy, in the result's element type);
    fewer ops. Folding that would grow the constant data is skipped (see options).
    Options: max-growth (result elements / constant input elements allowed, default 1.0, so a
    bias broadcast to a whole activation is not materialized); max-elements (default 1<<24).
    """

    name = "fold-constants"
    max_growth: float = 1.0
    max_elements: int = 1 << 24

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for block in func_bodies(op):
            for o in list(block.ops):
                self._try_fold(o)

    def _try_fold(self, o: Operation) -> None:
        if len(o.results) != 1:
            return
        if not isinstance(o.results[0].type, TensorType):
            _fold_scalar(o)
            return
        ins = _inputs(o)
        if not ins:
            return
        vals = [const_array(v) for v in ins]
        if any(v is None for v in vals):
            return
        n_out = math.prod(o.results[0].type.get_shape())
        n_in = sum(v.size for v in vals)  # type: ignore[union-attr]
        if n_out > self.max_elements or n_out > self.max_growth * max(n_in, 1):
            return
        try:
            res = eval_op(o, vals)  # type: ignore[arg-type]
        except (KeyError, ValueError):
            return
        dt = np_dtype(o.results[0].type.get_element_type())
        if res is None or dt is None or dt == np.dtype("bool"):
            return
        cst = arith.ConstantOp(numpy_to_dense(res[0], o.results[0].type))
        Rewriter.replace_op(o, cst)


__all__ = ["FoldConstants", "eval_elementwise", "eval_op", "to_domain"]
