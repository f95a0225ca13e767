"""recognize-idioms: softmax / layernorm / rmsnorm / gelu / silu as decomposed by torch-mlir."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from xdsl.context import Context
from xdsl.dialects import tensor
from xdsl.dialects.builtin import FloatAttr, IntegerAttr, ModuleOp, StringAttr, UnitAttr, f64, i64
from xdsl.dialects.linalg.ops import BroadcastOp, FillOp, GenericOp
from xdsl.ir import Operation, OpResult, SSAValue
from xdsl.passes import ModulePass

from m100.passes.graph.common import (
    GROUP,
    IDIOM,
    IDIOM_AXIS,
    IDIOM_EPS,
    IDIOM_ROOT,
    E,
    next_group_id,
    body_exprs,
    classify_unary,
    evaluate,
    func_bodies,
    generic_maps,
    is_identity,
    is_projection,
    iterators,
    map_dims,
    scalar_const,
    shape_of,
)

IDIOMS = ("softmax", "layernorm", "rmsnorm", "gelu", "gelu_tanh", "silu")


@dataclass(eq=False)
class N:
    """A node of the dataflow view: elementwise bodies inlined across ops.

    kind: ``leaf`` (an opaque SSA value), ``c`` (scalar/splat constant ``val``), ``bc`` (the child
    read through a broadcast or a unit-dim reshape), ``red`` (reduction; ``val`` = (combiner,
    reduced dims of the input)), or an arith/math op name. ``v`` is the SSA value the node stands
    for (None for values internal to one body); ``ops`` the ops inlined into this node."""

    kind: str
    args: tuple[N, ...] = ()
    val: object = None
    v: SSAValue | None = None
    ops: frozenset[Operation] = field(default_factory=frozenset)


def same(a: N, b: N) -> bool:
    if a.v is not None and b.v is not None:
        return a.v is b.v
    if a.kind != b.kind or len(a.args) != len(b.args):
        return False
    if a.kind in ("c",):
        return a.val == b.val
    if a.kind == "leaf":
        return a.v is b.v
    return a.val == b.val and all(same(x, y) for x, y in zip(a.args, b.args))


def strip(n: N) -> N:
    while n.kind == "bc":
        n = n.args[0]
    return n


def _unit_reshape(op: Operation) -> bool:
    a, b = shape_of(op.operands[0]), shape_of(op.results[0])
    return a is not None and b is not None and [d for d in a if d != 1] == [d for d in b if d != 1]


class Builder:
    """Builds (memoized) N views of SSA values."""

    def __init__(self) -> None:
        self.memo: dict[SSAValue, N] = {}

    def of(self, v: SSAValue) -> N:
        if v in self.memo:
            return self.memo[v]
        n = self._build(v)
        self.memo[v] = n
        return n

    def _build(self, v: SSAValue) -> N:
        c = scalar_const(v)
        if c is not None:
            return N("c", (), c, v)
        op = v.owner if isinstance(v, OpResult) else None
        if op is None:
            return N("leaf", (), None, v)
        if isinstance(op, tensor.ExpandShapeOp | tensor.CollapseShapeOp) and _unit_reshape(op):
            k = self.of(op.operands[0])
            return N("bc", (k,), None, v, k.ops | {op})
        if isinstance(op, BroadcastOp):
            k = self.of(op.input)
            return N("bc", (k,), None, v, k.ops | {op})
        if isinstance(op, GenericOp):
            n = self._generic(op, v)
            if n is not None:
                return n
        return N("leaf", (), None, v)

    def _generic(self, op: GenericOp, v: SSAValue) -> N | None:
        exprs = body_exprs(op)
        if exprs is None:
            return None
        idx = v.index  # type: ignore[attr-defined]
        e = exprs[idx]
        maps = generic_maps(op)
        n_in = len(op.inputs)
        its = iterators(op)
        if all(it == "parallel" for it in its):
            if not all(is_identity(m) for m in maps[n_in:]):
                return None
            if not all(is_projection(m) for m in maps[:n_in]):
                return None
            if any(lf.kind in ("out", "idx") for lf in _leaves(e)):
                return None
            node = self._inline(e, op, maps)
            if node is None:
                return None
            return N(node.kind, node.args, node.val, v, node.ops | {op})
        # a reduction: out = combiner(in0, out)
        if n_in != 1 or e.kind not in ("addf", "maximumf", "maxnumf", "minimumf", "minnumf"):
            return None
        a, b = e.args
        if not ({(a.kind, a.val), (b.kind, b.val)} == {("in", 0), ("out", idx)}):
            return None
        if not is_identity(maps[0]):
            return None
        red = tuple(i for i, it in enumerate(its) if it == "reduction")
        try:
            out_dims = map_dims(maps[n_in + idx])
        except ValueError:
            return None
        if any(d in red for d in out_dims if d is not None):
            return None
        k = self.of(op.inputs[0])
        extra = {op}
        init = op.outputs[idx]
        if isinstance(init, OpResult) and isinstance(init.owner, FillOp):
            extra.add(init.owner)
        return N("red", (k,), (e.kind, red), v, k.ops | frozenset(extra))

    def _inline(self, e: E, op: GenericOp, maps) -> N | None:
        if e.kind == "in":
            m = maps[e.val]  # type: ignore[index]
            k = self.of(op.inputs[e.val])  # type: ignore[index]
            if k.kind == "c":  # a splat/scalar constant needs no broadcast
                return N("c", (), k.val)
            if is_identity(m) and shape_of(op.inputs[e.val]) == shape_of(op.results[0]):  # type: ignore[index]
                return k
            return N("bc", (k,), None, None, k.ops)
        if e.kind == "c":
            return N("c", (), e.val)
        kids = []
        ops: frozenset[Operation] = frozenset()
        for a in e.args:
            k = self._inline(a, op, maps)
            if k is None:
                return None
            kids.append(k)
            ops |= k.ops
        return N(e.kind, tuple(kids), e.val, None, ops)


def _leaves(e: E):
    if e.kind in ("in", "out", "c", "idx"):
        yield e
    for a in e.args:
        yield from _leaves(a)


# --- pattern helpers -------------------------------------------------------------------------------
def _comm(n: N, kind: str) -> list[tuple[N, N]]:
    """Operand orders of a (commutative) binary node of ``kind``."""
    if n.kind != kind or len(n.args) != 2:
        return []
    a, b = n.args
    return [(a, b), (b, a)] if kind in ("addf", "mulf") else [(a, b)]


def _const(n: N) -> float | None:
    n = strip(n)
    return float(n.val) if n.kind == "c" else None  # type: ignore[arg-type]


def _reduced(n: N, comb: tuple[str, ...]) -> N | None:
    n = strip(n)
    if n.kind == "red" and n.val[0] in comb:  # type: ignore[index]
        return n
    return None


def _mean_of(n: N) -> tuple[N, N] | None:
    """n = mean(x) along some dims -> (x, the red node)."""
    n = strip(n)
    for a, b in _comm(n, "mulf"):
        r, c = _reduced(a, ("addf",)), _const(b)
        if r is not None and c is not None and _count(r) and abs(c * _count(r) - 1) < 1e-6:
            return r.args[0], r
    if n.kind == "divf":
        r, c = _reduced(n.args[0], ("addf",)), _const(n.args[1])
        if r is not None and c is not None and _count(r) == c:
            return r.args[0], r
    return None


def _one_axis(*reds: N) -> int | None:
    """The axis when every reduction reduces exactly that one axis, else None. The CVU norms and
    softmax work along one axis; a mean over several axes (an RMSNormalization with axis 1 of a
    4-D input) taken as one over its last axis gave wrong numbers."""
    axes = {tuple(r.val[1]) for r in reds}  # type: ignore[index]
    if len(axes) != 1:
        return None
    (only,) = axes
    return only[0] if len(only) == 1 else None


def _count(r: N) -> int:
    shape = shape_of(r.args[0].v) if r.args[0].v is not None else None
    if shape is None:
        # the reduced input is internal to a body: use the reduction op's input
        op = next((o for o in r.ops if isinstance(o, GenericOp) and o.results and
                   any(res is r.v for res in o.results)), None)
        if op is None:
            return 0
        shape = shape_of(op.inputs[0])
        if shape is None:
            return 0
    return int(np.prod([shape[d] for d in r.val[1]]))  # type: ignore[index]


def _square_of(n: N) -> N | None:
    n = strip(n)
    if n.kind == "mulf" and same(n.args[0], n.args[1]):
        return n.args[0]
    if n.kind in ("fpowi", "powf") and _const(n.args[1]) == 2.0:
        return n.args[0]
    return None


def _inv_sqrt(n: N) -> tuple[N, bool] | None:
    """n = 1/sqrt(a) -> (a, True); n = sqrt(a) -> (a, False)."""
    n = strip(n)
    if n.kind == "rsqrt":
        return n.args[0], True
    if n.kind == "divf" and _const(n.args[0]) == 1.0 and strip(n.args[1]).kind == "sqrt":
        return strip(n.args[1]).args[0], True
    if n.kind == "sqrt":
        return n.args[0], False
    return None


def _plus_eps(n: N) -> tuple[N, float] | None:
    n = strip(n)
    for a, b in _comm(n, "addf"):
        c = _const(b)
        if c is not None and 0 <= c < 1e-1:
            return a, c
    return None


def _norm_scale(root: N) -> tuple[N, N, bool] | None:
    """root = x * (1/s) or x / s -> (x, s-argument node, ok)."""
    for x, r in _comm(root, "mulf"):
        got = _inv_sqrt(r)
        if got is not None and got[1]:
            return x, got[0], True
    if root.kind == "divf":
        got = _inv_sqrt(root.args[1])
        if got is not None and not got[1]:
            return root.args[0], got[0], True
    return None


@dataclass
class Match:
    kind: str
    boundary: list[SSAValue]  # the idiom's inputs
    axis: int | None = None
    eps: float | None = None


def match_softmax(root: N) -> Match | None:
    if root.kind != "divf":
        return None
    e, s = root.args
    r = _reduced(s, ("addf",))
    if r is None or not same(strip(r.args[0]), e) or strip(e).kind != "exp":
        return None
    z = strip(e).args[0]
    x = z
    if z.kind == "subf":
        m = _reduced(z.args[1], ("maximumf", "maxnumf"))
        if m is not None and same(m.args[0], z.args[0]):
            x = z.args[0]
    axis = _one_axis(r)
    if x.v is None or axis is None:
        return None
    return Match("softmax", [x.v], axis=axis)


def match_rmsnorm(root: N) -> Match | None:
    got = _norm_scale(root)
    if got is None:
        return None
    x, a, _ = got
    pe = _plus_eps(a)
    if pe is None:
        return None
    mean = _mean_of(pe[0])
    if mean is None:
        return None
    sq = _square_of(mean[0])
    axis = _one_axis(mean[1])
    if sq is None or not same(sq, x) or x.v is None or axis is None:
        return None
    return Match("rmsnorm", [x.v], axis=axis, eps=pe[1])


def match_layernorm(root: N) -> Match | None:
    got = _norm_scale(root)
    if got is None:
        return None
    d, a, _ = got
    pe = _plus_eps(a)
    if pe is None or d.kind != "subf":
        return None
    x, mu = d.args
    m1 = _mean_of(mu)
    if m1 is None or not same(m1[0], x):
        return None
    var = _mean_of(pe[0])
    if var is None:
        return None
    sq = _square_of(var[0])
    axis = _one_axis(m1[1], var[1])
    if sq is None or not same(sq, d) or x.v is None or axis is None:
        return None
    return Match("layernorm", [x.v], axis=axis, eps=pe[1])


def _eval(n: N, x: N, xs: np.ndarray) -> np.ndarray:
    if n is x or (n.v is not None and n.v is x.v):
        return xs
    if n.kind == "c":
        return n.val  # type: ignore[return-value]
    if n.kind == "leaf":
        raise KeyError("free leaf")
    env = {("in", i): _eval(a, x, xs) for i, a in enumerate(n.args)}
    return evaluate(E(n.kind, tuple(E("in", (), i) for i in range(len(n.args))), n.val), env)


def match_unary(root: N, builder: Builder) -> Match | None:
    """gelu / silu (or gelu_tanh) as a chain of elementwise ops over one input: try the values
    the inlined ops read, nearest to the root first, as the free variable."""
    ops = [o for o in root.ops if isinstance(o, GenericOp)]
    if not ops or root.v is None:
        return None
    cands: dict[int, SSAValue] = {}
    for o in sorted(ops, key=_position, reverse=True):
        for v in o.inputs:
            if scalar_const(v) is None and isinstance(v.type, type(root.v.type)):
                cands.setdefault(id(v), v)
    for xv in list(cands.values())[:8]:
        x_leaf = N("leaf", (), None, xv)
        tree = _rebuild(root, xv, x_leaf)
        got = classify_unary(lambda xs, t=tree, x=x_leaf: _eval(t, x, xs))
        if got is not None and got[0] in ("gelu", "gelu_tanh", "silu"):
            return Match(got[0], [xv])
    return None


def _position(op: Operation) -> int:
    block = op.parent_block()
    return next(i for i, o in enumerate(block.ops) if o is op) if block else 0


def _rebuild(n: N, xv: SSAValue, x_leaf: N) -> N:
    """The tree with the value xv replaced by a leaf (stops inlining at x)."""
    if n.v is xv:
        return x_leaf
    if not n.args:
        return n
    return N(n.kind, tuple(_rebuild(a, xv, x_leaf) for a in n.args), n.val, n.v, n.ops)


MATCHERS: tuple[Callable[[N], Match | None], ...] = (match_softmax, match_layernorm,
                                                       match_rmsnorm)


def group_ops(root_op: Operation, boundary: list[SSAValue]) -> list[Operation] | None:
    """Ops between the boundary values and root_op (inclusive), in program order; None if an
    intermediate value escapes the group. Fills used only inside are included, other fills and
    tensor.empty are not."""
    block = root_op.parent_block()
    stop = {id(v) for v in boundary}
    members: dict[int, Operation] = {}
    work = [root_op]
    while work:
        op = work.pop()
        if id(op) in members:
            continue
        members[id(op)] = op
        for v in op.operands:
            if id(v) in stop or scalar_const(v) is not None:
                continue
            o = v.owner if isinstance(v, OpResult) else None
            if o is None or o.parent_block() is not block:
                continue
            if o.name in ("tensor.empty", "arith.constant"):
                continue
            if isinstance(o, GenericOp | FillOp | BroadcastOp | tensor.ExpandShapeOp |
                          tensor.CollapseShapeOp):
                work.append(o)
            else:
                return None  # something else inside the cone: not a clean idiom
    ids = set(members)
    for op in list(members.values()):
        if op is root_op:
            continue
        escapes = any(u.operation.parent_block() is block and id(u.operation) not in ids
                      for r in op.results for u in r.uses)
        if escapes:
            if isinstance(op, FillOp):
                del members[id(op)]
            else:
                return None
    order = {id(o): i for i, o in enumerate(block.ops)}
    return sorted(members.values(), key=lambda o: order[id(o)])


def _extend_affine(root_op: Operation, kind: str) -> tuple[Operation, list[SSAValue]]:
    """Absorb the per-feature scale (and for layernorm the shift) that follows a norm; returns
    the new end op and the scale/shift operands."""
    steps = ("mulf", "addf") if kind == "layernorm" else ("mulf",)
    extra: list[SSAValue] = []
    for step in steps:
        r = root_op.results[0]
        us = [u.operation for u in r.uses]
        if len(us) != 1 or not isinstance(us[0], GenericOp) or len(us[0].results) != 1:
            break
        nxt = us[0]
        exprs = body_exprs(nxt)
        if exprs is None or exprs[0].kind != step or len(nxt.inputs) != 2:
            break
        if {a.kind for a in exprs[0].args} != {"in"}:
            break
        pos = [i for i, v in enumerate(nxt.inputs) if v is r]
        if len(pos) != 1 or not is_identity(generic_maps(nxt)[pos[0]]):
            break
        extra += [v for v in nxt.inputs if v is not r]
        root_op = nxt
    return root_op, extra


@dataclass(frozen=True)
class RecognizeIdioms(ModulePass):
    """Recognize softmax, layernorm, rmsnorm, gelu and silu in their decomposed form.

    What: torch-mlir lowers these to several linalg.generic ops (softmax: max-reduce with an
    unused argmax result, subtract, exp, sum-reduce, divide; layernorm: mean, subtract, square,
    mean, + eps, rsqrt, multiply, scale, shift; rmsnorm: square, mean, + eps, sqrt, reciprocal,
    multiply (LLaMA: x * 1/sqrt); gelu: x * 0.5 * (1 + erf(x / sqrt 2)); silu: sigmoid then
    x * sigmoid). Each occurrence becomes one idiom group: every member op gets
    ``m100.idiom = "<kind>"`` and ``m100.group = <id>``; the op producing the result also gets
    ``m100.idiom_root`` and, for softmax/norms, ``m100.idiom_axis`` (normalized dim of the input)
    and ``m100.idiom_eps``. Matching works on a dataflow view that inlines elementwise bodies
    across ops (so the same idiom is found however the frontend splits it into generics);
    gelu/silu are recognized numerically as unary functions of one input. Layernorm/rmsnorm
    groups absorb a following per-feature scale (and shift) generic.
    Why: the CVU runs these as one fused pipeline (isa.CvuOp SOFTMAX/LAYERNORM/RMSNORM, GELU,
    SILU); the scheduler places a group as one unit of work.
    Pre: func + linalg-on-tensors (run simplify-algebra and fold-constants first).
    Post: IR unchanged except the annotations (the group stays executable op by op).
    Options: none.
    """

    name = "recognize-idioms"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        next_id = next_group_id(op)
        for block in func_bodies(op):
            builder = Builder()
            taken: set[int] = set()
            for root_op in reversed(list(block.ops)):
                if id(root_op) in taken or not isinstance(root_op, GenericOp):
                    continue
                if len(root_op.results) != 1:
                    continue
                root = builder.of(root_op.results[0])
                match = None
                for m in MATCHERS:
                    match = m(root)
                    if match is not None:
                        break
                if match is None:
                    match = match_unary(root, builder)
                if match is None:
                    continue
                end, extra = root_op, []
                if match.kind in ("layernorm", "rmsnorm"):
                    end, extra = _extend_affine(root_op, match.kind)
                members = group_ops(end, match.boundary + extra)
                if members is None or any(id(o) in taken for o in members):
                    continue
                for o in members:
                    taken.add(id(o))
                    o.attributes[GROUP] = IntegerAttr(next_id, i64)
                    o.attributes[IDIOM] = StringAttr(match.kind)
                if match.axis is not None:
                    end.attributes[IDIOM_AXIS] = IntegerAttr(match.axis, i64)
                if match.eps is not None:
                    end.attributes[IDIOM_EPS] = FloatAttr(match.eps, f64)
                end.attributes[IDIOM_ROOT] = UnitAttr()
                next_id += 1


__all__ = ["IDIOMS", "RecognizeIdioms", "Builder", "N", "group_ops"]
