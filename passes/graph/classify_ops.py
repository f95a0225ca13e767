"""classify-ops: annotate every graph op with the M100 unit family that will run it."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.dialects.linalg.ops import GenericOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass

from m100.passes.graph.check_supported import NO_UNIT, raise_if_unsupported
from m100.passes.graph.common import (
    CONTRACTIONS,
    FUSED_INTO,
    IDIOM,
    UNIT,
    body_exprs,
    func_bodies,
    is_copy_generic,
    is_conv,
    iterators,
    users,
    value_index_reduction,
)

#: Every value ``m100.unit`` can take (the scheduler's dispatch table; see docs/graph.md).
UNITS: tuple[str, ...] = (
    "tcu.matmul",  # matmul, batch_matmul, contraction-shaped generics
    "tcu.conv2d",  # 1-D/2-D convolutions (incl. depthwise / grouped)
    "tcu.epilogue",  # an op fused into a contraction's TCU epilogue (m100.fused_into)
    "cvu.elementwise",  # elementwise chains (also gelu/silu idioms not fused into a TCU op)
    "cvu.reduction",  # sum/max/min reductions
    "cvu.softmax",  # members of a softmax idiom group
    "cvu.layernorm",  # members of a layernorm idiom group
    "cvu.rmsnorm",  # members of an rmsnorm idiom group
    "cvu.pool",  # max/sum pooling
    "dtdu.copy",  # transpose / pad / slice / concat / broadcast / reshape / copy
    "dtdu.fill",  # fill with a scalar
    "csu.gather",  # gather / embedding lookup (tensor.extract inside a generic)
    "csu.topk",  # top-k (tm_tensor.sort + slices, and the index iota feeding it)
    "csu.argmax",  # arg-max/min reductions whose index result is used
)

IDIOM_UNIT = {"softmax": "cvu.softmax", "layernorm": "cvu.layernorm", "rmsnorm": "cvu.rmsnorm",
              "gelu": "cvu.elementwise", "gelu_tanh": "cvu.elementwise",
              "silu": "cvu.elementwise"}

DTDU_COPY = frozenset({
    "linalg.transpose", "linalg.broadcast", "linalg.copy", "tensor.pad", "tensor.extract_slice",
    "tensor.insert_slice", "tensor.concat", "tensor.expand_shape", "tensor.collapse_shape",
    "tensor.reshape", "tensor.cast",
})
CVU_ELEMENTWISE = frozenset({
    "linalg.add", "linalg.sub", "linalg.mul", "linalg.div", "linalg.max", "linalg.min",
    "linalg.exp", "linalg.log", "linalg.sqrt", "linalg.select",
})


def _generic_unit(op: GenericOp) -> str:
    body = list(op.regions[0].walk())
    if any(o.name == "tensor.extract" for o in body):
        return "csu.gather"
    its = iterators(op)
    if not op.inputs:
        if any(u.name == "tm_tensor.sort" for r in op.results for u in users(r)):
            return "csu.topk"
        return "cvu.elementwise"  # generated from indices (iota-like)
    if "reduction" in its:
        if value_index_reduction(op):
            used = any(r.uses for r in op.results[1:])
            return "csu.argmax" if used else "cvu.reduction"
        exprs = body_exprs(op)
        if exprs is not None and len(exprs) == 1 and len(op.inputs) == 2:
            e = exprs[0]
            kinds = {e.kind} | {a.kind for a in e.args}
            if e.kind in ("addf", "addi") and ("mulf" in kinds or "muli" in kinds):
                return "tcu.matmul"
        return "cvu.reduction"
    if is_copy_generic(op):
        return "dtdu.copy"
    return "cvu.elementwise"


def unit_of(op: Operation) -> str | None:
    """The unit family for a top-level graph op (None: not a computation, e.g. constants)."""
    name = op.name
    if name in NO_UNIT:
        return None
    if op.attributes.get(FUSED_INTO) is not None:
        return "tcu.epilogue"
    idiom = op.attributes.get(IDIOM)
    if isinstance(idiom, StringAttr) and idiom.data in IDIOM_UNIT:
        return IDIOM_UNIT[idiom.data]
    if name in CONTRACTIONS:
        return "tcu.matmul"
    if is_conv(name):
        return "tcu.conv2d"
    if name.startswith("linalg.pooling_"):
        return "cvu.pool"
    if name in ("linalg.fill", "tensor.splat"):
        return "dtdu.fill"
    if name in DTDU_COPY:
        return "dtdu.copy"
    if name in CVU_ELEMENTWISE:
        return "cvu.elementwise"
    if name == "linalg.reduce":
        return "cvu.reduction"
    if name == "tm_tensor.sort":
        return "csu.topk"
    if name in ("quant.qcast", "quant.dcast"):
        return "cvu.elementwise"
    if isinstance(op, GenericOp):
        return _generic_unit(op)
    return None


@dataclass(frozen=True)
class ClassifyOps(ModulePass):
    """Annotate every graph op with ``m100.unit``: the unit family that will run it.

    What: first the check-supported test (one diagnostic naming the first unsupported op, and a
    non-zero exit from m100-opt); then every top-level op of every function body except
    constants, tensor.empty and func.return gets ``m100.unit`` = one of ``UNITS``
    (``m100.passes.graph.classify_ops.UNITS``): ops fused into a contraction -> tcu.epilogue;
    idiom members -> cvu.softmax / cvu.layernorm / cvu.rmsnorm (gelu, silu -> cvu.elementwise);
    matmul-like -> tcu.matmul; convolutions -> tcu.conv2d; pooling -> cvu.pool; fills ->
    dtdu.fill; transpose/broadcast/copy/pad/slices/concat/reshapes and copy-only generics ->
    dtdu.copy; generics with tensor.extract -> csu.gather; tm_tensor.sort (top-k) -> csu.topk;
    arg-max reductions whose index is used -> csu.argmax; other reductions -> cvu.reduction;
    other generics -> cvu.elementwise.
    Why: the space-time scheduler dispatches on it (docs/graph.md).
    Pre: func + linalg-on-tensors; recognize-idioms and fuse-epilogue ran (else their ops are
    classified as plain elementwise/reduction ops). Post: annotations only.
    Options: none.
    """

    name = "classify-ops"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        raise_if_unsupported(op)
        for block in func_bodies(op):
            for o in block.ops:
                unit = unit_of(o)
                if unit is not None:
                    assert unit in UNITS, unit
                    o.attributes[UNIT] = StringAttr(unit)


__all__ = ["ClassifyOps", "UNITS", "unit_of"]
