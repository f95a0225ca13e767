"""simplify-algebra: algebraic simplification of linalg/tensor graphs (pattern rewrites)."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import tensor
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    IntegerAttr,
    ModuleOp,
    TensorType,
    i64,
)
from xdsl.dialects.linalg.ops import BroadcastOp, FillOp, GenericOp, TransposeOp
from xdsl.ir import BlockArgument, Operation, OpResult, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)

from m100.passes.graph.common import (
    erase_dead,
    generic_maps,
    is_identity,
    iterators,
    maps_attr,
    scalar_const,
    yield_values,
)
from m100.passes.graph.fast_ops import transpose as fast_transpose


# --- helpers used by other graph passes too --------------------------------------------------------
def perm_of(op: TransposeOp) -> list[int]:
    return list(op.permutation.get_values())


def make_transpose(value: SSAValue, perm: list[int]) -> tuple[list[Operation], SSAValue]:
    """``linalg.transpose`` of ``value`` by ``perm`` (out.shape[i] = in.shape[perm[i]]) into a new
    ``tensor.empty``: ([empty, transpose], result), built by :func:`fast_ops.transpose` (xDSL's
    constructors' ops without ``irdl_op_init``)."""
    return fast_transpose(value, perm)


def reassoc_of(op: Operation) -> list[list[int]]:
    return [[int(i.value.data) for i in grp.data] for grp in op.properties["reassociation"].data]


def reassoc_attr(groups: list[list[int]]) -> ArrayAttr:
    return ArrayAttr([ArrayAttr([IntegerAttr(i, i64) for i in g]) for g in groups])


def make_collapse(src: SSAValue, groups: list[list[int]], out_t: TensorType) -> Operation:
    return tensor.CollapseShapeOp.create(operands=[src], result_types=[out_t],
                                         properties={"reassociation": reassoc_attr(groups)})


def make_expand(src: SSAValue, groups: list[list[int]], out_t: TensorType) -> Operation:
    return tensor.ExpandShapeOp(src, [], reassoc_attr(groups), list(out_t.get_shape()), out_t)


# --- patterns ---------------------------------------------------------------------------------
class TransposeChain(RewritePattern):
    """transpose(transpose(x, p1), p2) -> transpose(x, p1[p2]) (or x if that is the identity);
    an identity transpose -> its input."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, TransposeOp) or not op.res:
            return
        perm = perm_of(op)
        src = op.inputs[0]
        if perm == list(range(len(perm))) and src.type == op.res[0].type:
            rewriter.replace(op, [], [src])
            return
        inner = src.owner if isinstance(src, OpResult) else None
        if isinstance(inner, TransposeOp) and inner.res:
            p1 = perm_of(inner)
            comp = [p1[p] for p in perm]
            x = inner.inputs[0]
            if comp == list(range(len(comp))):
                rewriter.replace(op, [], [x])
            else:
                ops, v = make_transpose(x, comp)
                rewriter.replace(op, ops, [v])


class TransposeOfProducer(RewritePattern):
    """transpose(fill(c)) -> fill(c) of the transposed shape; transpose(broadcast(x)) ->
    broadcast(x) into the transposed shape when the kept dims stay in order."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, TransposeOp) or not op.res:
            return
        src = op.inputs[0]
        prod = src.owner if isinstance(src, OpResult) else None
        out_t = op.res[0].type
        perm = perm_of(op)
        if isinstance(prod, FillOp) and prod.res:
            empty = tensor.EmptyOp([], out_t)
            fill = FillOp([prod.inputs[0]], [empty.tensor], [out_t])
            rewriter.replace(op, [empty, fill], [fill.res[0]])
        elif isinstance(prod, BroadcastOp) and prod.result:
            bdims = set(prod.dimensions.get_values())
            kept = [p for p in perm if p not in bdims]
            if kept != sorted(kept):
                return
            new_dims = [i for i, p in enumerate(perm) if p in bdims]
            empty = tensor.EmptyOp([], out_t)
            b = BroadcastOp(prod.input, empty.tensor, DenseArrayBase.from_list(i64, new_dims), out_t)
            rewriter.replace(op, [empty, b], [b.result[0]])


class ReshapeChain(RewritePattern):
    """collapse(collapse(x)) / expand(expand(x)) -> one op; reshapes that restore their source's
    type, or do not change it, -> the source."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, tensor.CollapseShapeOp | tensor.ExpandShapeOp):
            return
        src = op.operands[0]
        if src.type == op.results[0].type:
            rewriter.replace(op, [], [src])
            return
        inner = src.owner if isinstance(src, OpResult) else None
        if not isinstance(inner, tensor.CollapseShapeOp | tensor.ExpandShapeOp):
            return
        x = inner.operands[0]
        if x.type == op.results[0].type:
            rewriter.replace(op, [], [x])
            return
        out_t = op.results[0].type
        r1, r2 = reassoc_of(inner), reassoc_of(op)
        if isinstance(op, tensor.CollapseShapeOp) and isinstance(inner, tensor.CollapseShapeOp):
            groups = [[d for j in g for d in r1[j]] for g in r2]
            rewriter.replace(op, [new := make_collapse(x, groups, out_t)], new.results)
        elif isinstance(op, tensor.ExpandShapeOp) and isinstance(inner, tensor.ExpandShapeOp):
            groups = [[d for j in g for d in r2[j]] for g in r1]
            rewriter.replace(op, [new := make_expand(x, groups, out_t)], new.results)


class IdentityBroadcast(RewritePattern):
    """linalg.broadcast adding no dimension -> its input."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if isinstance(op, BroadcastOp) and op.result and not op.dimensions.get_values() \
                and op.input.type == op.result[0].type:
            rewriter.replace(op, [], [op.input])


_NEUTRAL = {  # op name -> (neutral constant, operand positions where it may stand)
    "arith.mulf": (1.0, (0, 1)), "arith.addf": (0.0, (0, 1)), "arith.subf": (0.0, (1,)),
    "arith.divf": (1.0, (1,)), "arith.muli": (1.0, (0, 1)), "arith.addi": (0.0, (0, 1)),
    "arith.subi": (0.0, (1,)),
}


class GenericNeutralOps(RewritePattern):
    """Inside a generic: x*1, 1*x, x+0, 0+x, x-0, x/1 -> x (the constant may be a scalar
    arith.constant or an input read from a splat dense constant); then drop inputs the body no
    longer reads; then a generic that only copies its input unchanged (identity maps, same type)
    -> its input. Note x+0 -> x ignores the sign of zero (-0.0 + 0.0 is +0.0)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, GenericOp):
            return
        block = op.regions[0].blocks[0]
        n_in = len(op.inputs)

        def const_of(v: SSAValue) -> float | None:
            if isinstance(v, BlockArgument) and v.block is block and v.index < n_in:
                return scalar_const(op.inputs[v.index])
            if isinstance(v, OpResult):
                return scalar_const(v)
            return None

        changed = False
        for inner in list(block.ops):
            spec = _NEUTRAL.get(inner.name)
            if spec is None or len(inner.operands) != 2 or len(inner.results) != 1:
                continue
            neutral, positions = spec
            for pos in positions:
                c = const_of(inner.operands[pos])
                other = inner.operands[1 - pos]
                if c == neutral and other.type == inner.results[0].type:
                    rewriter.replace_all_uses_with(inner.results[0], other)
                    changed = True
                    break
        if changed:
            for inner in reversed(list(block.ops)):
                if inner is not block.last_op and all(not r.uses for r in inner.results) \
                        and inner.name.startswith(("arith.", "math.")):
                    rewriter.erase(inner)
        # drop unused inputs
        unused = [i for i in range(n_in) if not block.args[i].uses]
        maps = generic_maps(op)
        keep = [i for i in range(n_in) if i not in unused]
        if unused and not _covers_loops([maps[i] for i in keep] + maps[n_in:]):
            unused = []  # a shape-only operand (e.g. a pooling window) defines some loop range
        if unused:
            region = op.detach_region(op.regions[0])
            for i in reversed(unused):
                region.blocks[0].erase_arg(region.blocks[0].args[i])
            new = GenericOp([op.inputs[i] for i in keep], list(op.outputs), region,
                            maps_attr([maps[i] for i in keep] + maps[n_in:]),
                            op.iterator_types, [r.type for r in op.results])
            new.attributes.update(op.attributes)
            rewriter.replace(op, new)
            return
        # identity copy
        if len(op.inputs) == 1 and len(op.outputs) == 1 and len(op.results) == 1:
            block = op.regions[0].blocks[0]
            maps = generic_maps(op)
            if all(is_identity(m) for m in maps) and op.inputs[0].type == op.results[0].type \
                    and yield_values(op)[0] is block.args[0] \
                    and all(it == "parallel" for it in iterators(op)):
                rewriter.replace(op, [], [op.inputs[0]])
                return
        if changed:
            rewriter.notify_op_modified(op)


def _covers_loops(maps) -> bool:
    """Every loop dim appears alone as a result of some map (so its range is still known)."""
    from xdsl.ir.affine import AffineDimExpr

    if not maps:
        return False
    seen = {e.position for m in maps for e in m.results if isinstance(e, AffineDimExpr)}
    return seen >= set(range(maps[0].num_dims))


PATTERNS = (TransposeChain, TransposeOfProducer, ReshapeChain, IdentityBroadcast, GenericNeutralOps)


def simplify(module: ModuleOp) -> bool:
    """Apply every simplification to a fixpoint (also removes dead pure ops); True if changed."""
    changed = PatternRewriteWalker(
        GreedyRewritePatternApplier([p() for p in PATTERNS]), apply_recursively=True
    ).rewrite_module(module)
    return erase_dead(module) > 0 or changed


@dataclass(frozen=True)
class SimplifyAlgebra(ModulePass):
    """Algebraic simplification of linalg/tensor graphs.

    What: transpose(transpose(x)) -> one transpose or x; identity transposes/broadcasts -> x;
    transpose(fill)/transpose(broadcast) -> fill/broadcast of the transposed shape; chains of
    tensor.collapse_shape / tensor.expand_shape -> one reshape, or x when the chain restores x's
    type; inside linalg.generic bodies x*1, x+0, x-0, x/1 -> x (constants may be scalars or splat
    dense inputs), unused inputs dropped, a generic that copies its input unchanged -> x.
    Dead pure ops are erased.
    Why: frontends emit such chains (ONNX Transpose/Reshape/Expand, torch-mlir broadcasts, unit
    RMSNorm weights) and layout-nhwc inserts transposes that cancel between consecutive convs.
    Pre: func + linalg-on-tensors. Post: same semantics (up to the sign of zero for x+0), fewer ops.
    Options: none.
    """

    name = "simplify-algebra"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        simplify(op)


__all__ = ["SimplifyAlgebra", "make_transpose", "make_collapse", "make_expand", "perm_of",
           "reassoc_of", "simplify"]
