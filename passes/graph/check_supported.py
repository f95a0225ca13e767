"""check-supported: fail with one clear diagnostic if the graph holds an op the M100 cannot run."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation
from xdsl.passes import ModulePass

from m100.errors import M100Error
from m100.passes.graph.common import CONTRACTIONS, CONVS, describe_op, func_bodies, is_conv


class UnsupportedOpError(M100Error):
    """An op (or a type) in the input graph that no M100 unit can run."""


# graph-level ops that are not computations (no unit)
NO_UNIT = frozenset({"arith.constant", "tensor.empty", "func.return",
                     "quant.scast"})  # scast: a quantized type <-> its storage bits, no data change

LINALG_SUPPORTED = frozenset({
    "linalg.generic", "linalg.fill", "linalg.copy", "linalg.transpose", "linalg.broadcast",
    "linalg.reduce", "linalg.add", "linalg.sub", "linalg.mul", "linalg.div", "linalg.max",
    "linalg.min", "linalg.exp", "linalg.log", "linalg.sqrt", "linalg.select",
    "linalg.pooling_nchw_max", "linalg.pooling_nchw_sum", "linalg.pooling_nhwc_max",
    "linalg.pooling_nhwc_sum", "linalg.pooling_ndhwc_sum",
}) | CONTRACTIONS | CONVS

TENSOR_SUPPORTED = frozenset({
    "tensor.pad", "tensor.extract_slice", "tensor.insert_slice", "tensor.concat",
    "tensor.expand_shape", "tensor.collapse_shape", "tensor.reshape", "tensor.cast",
    "tensor.splat",
})

OTHER_SUPPORTED = frozenset({"tm_tensor.sort",  # top-k (sort + slice) -> a CSU routine
                             "quant.qcast", "quant.dcast"})  # elementwise (de)quantize (CVU)

# scalar ops allowed inside linalg bodies: what the CVU pipelines (isa.CvuOp) and the TCU
# epilogue can compute, plus index/cast plumbing
BODY_MATH = frozenset({
    "math.exp", "math.log", "math.sqrt", "math.rsqrt", "math.tanh", "math.erf", "math.absf",
    "math.fpowi", "math.powf", "math.floor", "math.ceil", "math.round", "math.roundeven",
    "math.absi", "math.sin", "math.cos", "math.tan", "math.atan", "math.asin", "math.acos",
    "math.sinh", "math.cosh", "math.asinh", "math.acosh", "math.atanh", "math.log1p",
    "math.expm1", "math.fma",
})
BODY_OTHER = frozenset({"linalg.yield", "linalg.index", "cf.assert", "tensor.extract",
                        "tm_tensor.yield", "tensor.yield"})


def _dynamic(op: Operation) -> bool:
    for v in list(op.results) + list(op.operands):
        t = v.type
        if isinstance(t, TensorType) and any(d < 0 for d in t.get_shape()):
            return True
    return False


def why_unsupported(op: Operation) -> str | None:
    """The reason ``op`` (a top-level op of a function body) cannot run, or None."""
    name = op.name
    if name in NO_UNIT:
        return None
    if _dynamic(op):
        return "dynamic shapes are not supported (the M100 schedule is static): give the " \
               "model static input shapes"
    if name in LINALG_SUPPORTED or name in TENSOR_SUPPORTED or name in OTHER_SUPPORTED or \
            is_conv(name) or name.startswith("linalg.pooling_"):
        for inner in op.walk():
            if inner is op:
                continue
            iname = inner.name
            if iname.startswith("arith.") or iname in BODY_MATH or iname in BODY_OTHER:
                continue
            return f"its body uses '{iname}', which no CVU/TCU operation computes"
        return None
    if name.startswith("linalg."):
        return "this linalg op has no M100 lowering (rewrite it as linalg.generic or a " \
               "supported named op)"
    if name.startswith(("arith.", "math.")):
        return "scalar computation at graph level (only constants are supported outside " \
               "linalg bodies; fold-constants, part of m100-graph, folds it on constants)"
    if name == "func.call":
        return "calls are not supported: inline the callee"
    return "no M100 unit runs this op"


def find_unsupported(module: ModuleOp) -> list[tuple[Operation, str]]:
    out = []
    for block in func_bodies(module):
        for op in block.ops:
            why = why_unsupported(op)
            if why is not None:
                out.append((op, why))
    return out


def raise_if_unsupported(module: ModuleOp) -> None:
    bad = find_unsupported(module)
    if bad:
        op, why = bad[0]
        more = f" (and {len(bad) - 1} more unsupported op{'s' if len(bad) > 2 else ''})" \
            if len(bad) > 1 else ""
        raise UnsupportedOpError(f"unsupported op {describe_op(op)}: {why}{more}")


@dataclass(frozen=True)
class CheckSupported(ModulePass):
    """Reject graphs with ops no M100 unit can run, with ONE clear diagnostic.

    What: every top-level op of every function body must be a constant, tensor.empty,
    func.return, a supported linalg op (contractions, convolutions, pooling, generic, fill,
    transpose, broadcast, reduce, elementwise named ops), a supported tensor op (pad,
    extract/insert_slice, concat, expand/collapse_shape, reshape, cast) or tm_tensor.sort (top-k);
    linalg bodies may only use arith ops, the math ops the CVU computes (exp, log, sqrt, rsqrt,
    tanh, erf, abs, pow, floor, ceil, round), linalg.index, tensor.extract (gathers) and cf.assert;
    shapes must be static. Otherwise the pass raises UnsupportedOpError naming the first such op
    (function, position, result name) and the reason, with the count of further ones;
    m100-opt prints it as one line and exits non-zero.
    Why: fail early and clearly instead of deep inside the scheduler.
    Pre: func + linalg-on-tensors. Post: IR unchanged.
    Options: none.
    """

    name = "check-supported"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        raise_if_unsupported(op)


__all__ = ["CheckSupported", "UnsupportedOpError", "find_unsupported", "raise_if_unsupported",
           "why_unsupported"]
