"""fuse-elementwise: a tree of float elementwise generics becomes one generic, computed in f32 and
rounded once.

What: an all-parallel float generic ``P`` (a body of ``addf subf mulf divf negf maximumf
minimumf`` only, one result, written with the identity map) whose result has exactly one use, an
input of another such generic ``U`` read with the identity map, is inlined into ``U``; repeated,
every maximal tree of such producers under a root becomes ONE generic. Its inputs are the tree's
leaf inputs with their own maps (broadcast reads stay broadcasts; a leaf read twice with the
same map is one input); its body computes in **f32**: every f16/bf16 leaf (and outer scalar) is
widened by ``arith.extf`` (exact), every op of the tree computes in f32, and one ``arith.truncf`` rounds the root's value to the result type at the end
(the store). A tree of f32 generics is unchanged in value (every op still rounds to f32) and gets
no ``extf``/``truncf``. A generic with no fusable producer is left as it is.
Why: the CVU runs one such generic as one pipeline instruction (stages in f32, the output walk
rounds once: docs/isa.md "CVU stages"), so the intermediate tensors of the tree never go through
memory. At 1024 tokens RoPE's ``x * C + rot(x) * S`` was three passes over an 8 MB tensor
through DDR (docs/llm.md section 5). **Numerics decision (session 11):** a fused f16/bf16 tree is
rounded once, not after every op as the ONNX definition of the unfused graph does; the body says
so explicitly (f32 ops between an ``extf`` and a ``truncf``), so the reference executor, the
scheduler's stages and the interpreter all compute the same f32 value and round it once: the
fused graph is bit-exact with the program. Against the per-op-rounded ONNX definition a fused
tree differs by at most the intermediate roundings (a few f16 ulps; onnxruntime's own f16 graphs
run their elementwise ops in f32 too), within ``m100 check``'s f16 tolerance.
Pre: linalg on tensors after the epilogue/dequant fusions (``m100-graph`` runs it before
fuse-predicates and classify-ops). Post: no float elementwise generic of the op set above has its
single use as an identity-map input of another one; the IR still runs on the reference executor
(the f32 body is its semantics). Options: none. Ops carrying ``m100.*`` annotations (idiom
members, fused epilogues) are left alone, and so are bodies with anything else (casts,
comparisons, math functions, integer ops): their rounding points stay where they are.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, ModuleOp, TensorType
from xdsl.dialects.linalg.ops import GenericOp, YieldOp
from xdsl.ir import Block, BlockArgument, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from m100.passes.graph.common import func_bodies, generic_maps, is_identity, is_projection, \
    iterators, maps_attr

#: the body ops a fused tree may contain (exact in f32 arithmetic followed by one rounding; each
#: is one CVU stage)
_BINARY = {"arith.addf": arith.AddfOp, "arith.subf": arith.SubfOp, "arith.mulf": arith.MulfOp,
           "arith.divf": arith.DivfOp, "arith.maximumf": arith.MaximumfOp,
           "arith.minimumf": arith.MinimumfOp}
_UNARY = {"arith.negf": arith.NegfOp}
_FLOATS = (Float16Type, BFloat16Type, Float32Type)
F32 = Float32Type()


def _float(t) -> bool:
    return isinstance(t, _FLOATS)


def _fusable(op: Operation) -> bool:
    """A float elementwise generic of the op set above (see the module docstring)."""
    if not isinstance(op, GenericOp) or len(op.results) != 1 or len(op.outputs) != 1 or \
            any(k.startswith("m100.") for k in op.attributes):
        return False
    t = op.results[0].type
    if not isinstance(t, TensorType) or not _float(t.get_element_type()):
        return False
    if any(it != "parallel" for it in iterators(op)):
        return False
    maps = generic_maps(op)
    n_in = len(op.inputs)
    if not is_identity(maps[n_in]) or not all(is_projection(m) for m in maps[:n_in]):
        return False
    blk = op.regions[0].blocks[0]
    if blk.args[n_in].uses or not all(_float(a.type) for a in blk.args):
        return False
    body = list(blk.ops)[:-1]
    if not body:
        return False  # a copy: data movement, not a CVU op
    for o in body:
        if o.name not in _BINARY and o.name not in _UNARY:
            return False
        if not all(_float(v.type) for v in (*o.operands, *o.results)):
            return False
        for v in o.operands:  # block args, values of the body, or outer scalars
            if not isinstance(v, BlockArgument) and v.owner.parent_block() is not blk and \
                    isinstance(v.type, TensorType):
                return False
    return True


def _producer_of(user: GenericOp, idx: int) -> GenericOp | None:
    """The fusable producer of ``user``'s input ``idx`` if it can be inlined there."""
    v = user.inputs[idx]
    p = v.owner if not isinstance(v, BlockArgument) else None
    if not isinstance(p, GenericOp) or not _fusable(p) or len(list(v.uses)) != 1:
        return None
    um = generic_maps(user)[idx]
    if not is_identity(um) or um.num_dims != generic_maps(p)[len(p.inputs)].num_dims:
        return None
    if p.results[0].type != user.inputs[idx].type:
        return None
    return p


class _Tree:
    """The fused generic of a root and its inlined producers, built bottom-up."""

    def __init__(self, root: GenericOp):
        self.ins: list[SSAValue] = []
        self.maps: list = []
        self.leaf: dict = {}  # (value, map) -> its f32 value in the body
        self.block = Block()
        self.erased: list[GenericOp] = []
        self.ext: dict[SSAValue, SSAValue] = {}  # outer scalars widened inside the body
        self.root = root

    def _wide(self, v: SSAValue) -> SSAValue:
        if v.type == F32:
            return v
        op = arith.ExtFOp(v, F32)
        self.block.add_op(op)
        return op.result

    def emit(self, g: GenericOp, maps) -> SSAValue:
        """``g``'s yielded value in f32, its inputs read with ``maps`` (the iteration space of the
        root: every inlined producer is read with the identity map)."""
        blk = g.regions[0].blocks[0]
        vm: dict[SSAValue, SSAValue] = {}
        for i, v in enumerate(g.inputs):
            p = _producer_of(g, i)
            if p is not None:
                vm[blk.args[i]] = self.emit(p, generic_maps(p))
                self.erased.append(p)
                continue
            key = (v, maps[i])
            if key not in self.leaf:  # a leaf read twice with one map is one input
                arg = self.block.insert_arg(blk.args[i].type, len(self.block.args))
                self.ins.append(v)
                self.maps.append(maps[i])
                self.leaf[key] = self._wide(arg)
            vm[blk.args[i]] = self.leaf[key]
        for o in list(blk.ops)[:-1]:
            args = []
            for v in o.operands:
                if v not in vm:  # an outer scalar (a constant of the function)
                    if v not in self.ext:
                        self.ext[v] = self._wide(v)
                    args.append(self.ext[v])
                else:
                    args.append(vm[v])
            if o.name in _BINARY:
                new = _BINARY[o.name](args[0], args[1], result_type=F32)
            else:
                new = _UNARY[o.name](args[0])
            self.block.add_op(new)
            vm[o.results[0]] = new.results[0]
        return vm[blk.last_op.operands[0]]

    def build(self) -> GenericOp:
        root = self.root
        val = self.emit(root, generic_maps(root))
        out_t = root.regions[0].blocks[0].args[len(root.inputs)].type
        if out_t != F32:
            tr = arith.TruncFOp(val, out_t)
            self.block.add_op(tr)
            val = tr.result
        self.block.insert_arg(out_t, len(self.block.args))
        self.block.add_op(YieldOp(val))
        maps = self.maps + [generic_maps(root)[len(root.inputs)]]
        new = GenericOp(self.ins, list(root.outputs), Region(self.block), maps_attr(maps),
                        root.iterator_types, [r.type for r in root.results])
        new.attributes.update(root.attributes)
        return new


def _is_root(op: Operation) -> bool:
    """A fusable generic with a fusable producer that is not itself inlined into a user."""
    if not _fusable(op):
        return False
    v = op.results[0]
    uses = list(v.uses)
    if len(uses) == 1 and isinstance(uses[0].operation, GenericOp) and \
            _fusable(uses[0].operation) and uses[0].index < len(uses[0].operation.inputs) and \
            _producer_of(uses[0].operation, uses[0].index) is op:
        return False
    return any(_producer_of(op, i) is not None for i in range(len(op.inputs)))


@dataclass(frozen=True)
class FuseElementwise(ModulePass):
    """Fuse trees of float elementwise generics into one generic computed in f32 and rounded once
    (see the module docstring: what, why, the numerics decision, pre/post; no options)."""

    name = "fuse-elementwise"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        rw = Rewriter()
        for block in func_bodies(op):
            for o in list(block.ops):
                if o.parent_block() is None or not _is_root(o):
                    continue
                tree = _Tree(o)  # type: ignore[arg-type]
                new = tree.build()
                rw.replace_op(o, new)
                for p in reversed(tree.erased):  # users first
                    rw.erase_op(p)


__all__ = ["FuseElementwise"]
