"""fuse-predicates: inline an elementwise generic that yields a predicate (i1) into its one user.

What: ``%m = generic ins(%x) -> tensor<..xi1>`` (a comparison, e.g. torch-mlir's ``x > 20`` branch of
Softplus/Mish, ``x < 0`` of PRelu/Sign/Shrink, the sign test of Mod) whose only use is an input of
another all-parallel generic read with the identity map becomes part of that generic's body: the
producer's inputs join the user's (with their own maps), its body is cloned in front of the
user's, and the user's block argument is replaced by the predicate value.
Why: the scheduler has no i1 tensors (a mask would be a round trip through memory for one compare
stage); the CVU computes the comparison as a stage (1.0 / 0.0) feeding a SELECT in the same
pipeline, so the fused form runs as one CVU instruction.
Pre: linalg on tensors (torch-mlir's form). Post: no i1 tensor produced by an elementwise generic
that has a single elementwise user; the IR still runs on the reference executor (same semantics).
Options: none. Ops carrying ``m100.*`` annotations (idiom members, fused epilogues) are left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerType, ModuleOp, TensorType
from xdsl.dialects.linalg.ops import GenericOp
from xdsl.ir import Block, Operation, Region
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from m100.passes.graph.common import func_bodies, generic_maps, is_identity, iterators, maps_attr


def _annotated(op: Operation) -> bool:
    return any(k.startswith("m100.") for k in op.attributes)


def _candidate(op: Operation) -> tuple[GenericOp, int] | None:
    """(user, index of the fused input among the user's inputs) if ``op`` can be fused."""
    if not isinstance(op, GenericOp) or len(op.results) != 1 or len(op.outputs) != 1 or \
            _annotated(op):
        return None
    t = op.results[0].type
    if not isinstance(t, TensorType) or t.get_element_type() != IntegerType(1):
        return None
    if any(it != "parallel" for it in iterators(op)):
        return None
    maps = generic_maps(op)
    n_in = len(op.inputs)
    out_arg = op.regions[0].blocks[0].args[n_in]
    if not is_identity(maps[n_in]) or out_arg.uses:
        return None
    uses = list(op.results[0].uses)
    if len(uses) != 1:
        return None
    user = uses[0].operation
    if not isinstance(user, GenericOp) or _annotated(user) or \
            any(it != "parallel" for it in iterators(user)):
        return None
    idx = uses[0].index
    if idx >= len(user.inputs):
        return None
    umaps = generic_maps(user)
    if not is_identity(umaps[idx]) or umaps[idx].num_dims != maps[n_in].num_dims:
        return None
    return user, idx


def fuse(prod: GenericOp, user: GenericOp, idx: int) -> GenericOp:
    """The user with ``prod`` (its input ``idx``) inlined."""
    pmaps, umaps = generic_maps(prod), generic_maps(user)
    p_in, u_in = list(prod.inputs), list(user.inputs)
    keep = [i for i in range(len(u_in)) if i != idx]
    ins = [u_in[i] for i in keep] + p_in
    maps = [umaps[i] for i in keep] + pmaps[:len(p_in)] + umaps[len(u_in):]
    pblk, ublk = prod.regions[0].blocks[0], user.regions[0].blocks[0]
    types = [ublk.args[i].type for i in keep] + [a.type for a in pblk.args[:len(p_in)]] + \
        [a.type for a in ublk.args[len(u_in):]]
    blk = Block(arg_types=types)
    vmap = {}
    for j, i in enumerate(keep):
        vmap[ublk.args[i]] = blk.args[j]
    for j in range(len(p_in)):
        vmap[pblk.args[j]] = blk.args[len(keep) + j]
    for j, a in enumerate(ublk.args[len(u_in):]):
        vmap[a] = blk.args[len(keep) + len(p_in) + j]
    for o in pblk.ops:
        if o is pblk.last_op:
            vmap[ublk.args[idx]] = vmap.get(o.operands[0], o.operands[0])
            break
        c = o.clone(value_mapper=vmap)
        blk.add_op(c)
    for o in ublk.ops:
        blk.add_op(o.clone(value_mapper=vmap))
    new = GenericOp(ins, list(user.outputs), Region(blk), maps_attr(maps), user.iterator_types,
                    [r.type for r in user.results])
    new.attributes.update(user.attributes)
    return new


@dataclass(frozen=True)
class FusePredicates(ModulePass):
    """Inline i1-producing elementwise generics into their single elementwise user (see the module
    docstring: what, why, pre/post; no options)."""

    name = "fuse-predicates"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        rw = Rewriter()
        for block in func_bodies(op):
            changed = True
            while changed:
                changed = False
                for o in list(block.ops):
                    c = _candidate(o)
                    if c is None:
                        continue
                    user, idx = c
                    new = fuse(o, user, idx)  # type: ignore[arg-type]
                    rw.replace_op(user, new)
                    rw.erase_op(o)
                    changed = True
                    break
