"""split-value-index: a max/min reduction whose value *and* index are used becomes two reductions.

What: a ``linalg.generic`` with one reduction iterator and two results -- the max/min value and
its index, the arg-max form torch-mlir emits for ``ReduceMax``/``ReduceMin`` and for
``ArgMax``/``ArgMin`` (``cmpf``/``cmpi`` + ``select`` of ``linalg.index``) -- whose two results are
both used is cloned: the clone (inserted before it) supplies every use of the value, the original
keeps the uses of the index. Each copy then has one used result, and ``classify-ops`` makes the
value a CVU reduction and the index a CSU arg-max, as for a model that asked for only one of them.
Why: torch-mlir's CSE merges a ``ReduceMax`` and an ``ArgMax`` of the same input and axis (greedy
decoding: the best logit and its token) into one two-result generic, which no unit computes; it
was refused. The two units read the same input; the cost is one more read of it.
Pre: linalg on tensors. Post: no generic of this form has both results used; same values (the IR
still runs on the reference executor). Runs late in ``m100-graph`` (after its CSE, which would
merge the copies again). Options: none.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.linalg.ops import GenericOp
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from m100.passes.graph.common import value_index_reduction


def _value_and_index(op) -> bool:
    """A two-result max/min-with-index reduction generic (both results used)."""
    return isinstance(op, GenericOp) and value_index_reduction(op) and \
        all(r.uses for r in op.results)


@dataclass(frozen=True)
class SplitValueIndex(ModulePass):
    """See the module docstring."""

    name = "split-value-index"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for g in [o for o in op.walk() if _value_and_index(o)]:
            value = g.clone()
            Rewriter.insert_op(value, InsertPoint.before(g))
            g.results[0].replace_all_uses_with(value.results[0])


__all__ = ["SplitValueIndex"]
