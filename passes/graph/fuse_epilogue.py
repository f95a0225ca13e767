"""fuse-epilogue: mark bias / activation / requantize ops after a contraction as fused into it."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import (
    ArrayAttr,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    StringAttr,
    f64,
    i64,
)
from xdsl.dialects.linalg.ops import BroadcastOp, GenericOp
from xdsl.ir import Operation, OpResult, SSAValue

from xdsl.passes import ModulePass

from m100.passes.graph.quant_match import match_requant

from m100.passes.graph.common import (
    CHANNEL_DIM,
    EPILOGUE,
    FUSED_INTO,
    GROUP,
    IDIOM,
    STAGE,
    body_exprs,
    channel_vector,
    func_bodies,
    generic_maps,
    is_elementwise_generic,
    is_identity,
    map_dims,
    next_group_id,
    shape_of,
    unary_activation,
    users,
)

#: requant parameters on the contraction (``isa.Requant`` is derived from them by the emitter):
#: multipliers (f64, one or one per output channel: ``x_scale * w_scale[c] / y_scale``), zero
#: point (i64) and the clamp range [qmin, qmax] (i64).
REQUANT_SCALE = "m100.requant_scale"
REQUANT_ZP = "m100.requant_zp"
REQUANT_RANGE = "m100.requant_range"

STAGES = ("bias", "relu", "gelu", "silu", "sigmoid", "tanh", "clamp", "requant", "store")
ACTS = ("relu", "gelu", "silu", "sigmoid", "tanh", "clamp")
FUSABLE_IDIOMS = ("gelu", "silu")


def _per_channel(v: SSAValue, m, ch: int) -> bool:
    """Operand ``v`` read through map ``m`` varies only along output dim ``ch``."""
    shape = shape_of(v)
    if shape is None:
        return False
    try:
        dims = map_dims(m)
    except ValueError:
        return False
    return all(d is None or d == ch or s == 1 for d, s in zip(dims, shape)) and \
        any(d == ch for d in dims)


def _init_bias(op: Operation, ch: int) -> Operation | None:
    """The op producing the contraction's init if it broadcasts a per-channel bias."""
    init = op.operands[-1]
    prod = init.owner if isinstance(init, OpResult) else None
    if prod is None or len(users(init)) != 1 or prod.attributes.get(FUSED_INTO) is not None:
        return None
    rank = len(shape_of(init) or ())
    if isinstance(prod, BroadcastOp):
        kept = [d for d in range(rank) if d not in set(prod.dimensions.get_values())]
        if kept == [ch]:
            return prod
    if isinstance(prod, GenericOp) and len(prod.inputs) == 1 and is_elementwise_generic(prod):
        exprs = body_exprs(prod)
        if exprs and exprs[0].kind == "in" and _per_channel(prod.inputs[0],
                                                            generic_maps(prod)[0], ch):
            return prod
    return None


def _bias_stage(u: GenericOp, cur: SSAValue, ch: int) -> bool:
    if len(u.inputs) != 2 or len(u.results) != 1:
        return False
    exprs = body_exprs(u)
    if exprs is None or exprs[0].kind not in ("addf", "addi"):
        return False
    if {(a.kind, a.val) for a in exprs[0].args} != {("in", 0), ("in", 1)}:
        return False
    k = 0 if u.inputs[0] is cur else 1
    if u.inputs[1 - k] is cur:
        return False
    # The TCU reads a fused bias from a constant weight buffer (the scheduler takes the vector
    # from this operand), so only a constant per-channel operand is a bias. A runtime operand
    # (a bias graph input, or a residual [1, N] that looks per-channel when M = 1) stays a CVU
    # add; fusing it lost the addend (issue 10).
    f = (shape_of(cur) or (0,) * (ch + 1))[ch]
    return _per_channel(u.inputs[1 - k], generic_maps(u)[1 - k], ch) and \
        channel_vector(u.inputs[1 - k], generic_maps(u)[1 - k], ch, f) is not None


def _store_stage(u: GenericOp) -> bool:
    """``u`` only narrows the f32 accumulator to f16/bf16 (``arith.truncf``; an f16/bf16
    contraction accumulates in f32 and rounds on store): the TCU writes its result in that type."""
    from xdsl.dialects.builtin import Float32Type

    exprs = body_exprs(u)
    if exprs is None or len(u.inputs) != 1:  # type: ignore[attr-defined]
        return False
    e = exprs[0]
    src = u.inputs[0].type.get_element_type()  # type: ignore[attr-defined]
    return e.kind == "truncf" and len(e.args) == 1 and e.args[0].kind == "in" and \
        isinstance(src, Float32Type) and str(u.results[0].type.get_element_type()) in ("f16",
                                                                                      "bf16")


def _requant_stage(u: GenericOp, acc: SSAValue, ch: int):
    """The requantization of an int32 accumulator to a <= 8-bit integer (isa.Requant applies to
    integer TCU ops), recognized exactly (``quant_match.match_requant``: constant multiplier per
    tensor or per output channel ``ch``, zero point, clamp), or None."""
    t = u.results[0].type.get_element_type()  # type: ignore[attr-defined]
    a = acc.type.get_element_type()  # type: ignore[attr-defined]
    if not (isinstance(t, IntegerType) and t.width.data <= 8 and len(u.results) == 1 and
            isinstance(a, IntegerType) and a.width.data == 32):
        return None
    m = match_requant(u)
    if m is None or (m[1].axis is not None and m[1].axis != ch):
        return None
    return m[1]


def fuse_one(op: Operation, gid: int) -> bool:
    """Annotate the epilogue chain of contraction ``op``; True if anything was fused."""
    ch = CHANNEL_DIM.get(op.name)
    if ch is None or len(op.results) != 1:
        return False
    stages: list[str] = []
    fused: list[tuple[Operation, str]] = []
    clamp: tuple[float, float] | None = None
    requant = None
    b = _init_bias(op, ch)
    if b is not None:
        stages.append("bias")
        fused.append((b, "bias"))
    cur: SSAValue = op.results[0]
    out_shape = shape_of(cur)
    while True:
        us = users(cur)
        if not us or any(u.attributes.get(FUSED_INTO) is not None for u in us):
            break
        idiom = us[0].attributes.get(IDIOM)
        if isinstance(idiom, StringAttr) and idiom.data in FUSABLE_IDIOMS:
            gattr = us[0].attributes.get(GROUP)
            members = [o for o in cur.owner.parent_block().ops  # type: ignore[union-attr]
                       if o.attributes.get(GROUP) == gattr]
            if not all(u in members for u in us) or any(s in ACTS or s == "requant"
                                                         for s in stages):
                break
            root = members[-1]
            if shape_of(root.results[0]) != out_shape:
                break
            stages.append(idiom.data)
            fused += [(m, idiom.data) for m in members]
            cur = root.results[0]
            continue
        if len(us) != 1 or not isinstance(us[0], GenericOp) or us[0].attributes.get(IDIOM):
            break
        u = us[0]
        if not is_elementwise_generic(u) or len(u.results) != 1 or \
                shape_of(u.results[0]) != out_shape:
            break
        pos = [i for i, v in enumerate(u.inputs) if v is cur]
        if len(pos) != 1 or not is_identity(generic_maps(u)[pos[0]]):
            break
        has_act = any(s in ACTS for s in stages)
        if "requant" in stages or "store" in stages:
            break
        if not has_act and "bias" not in stages and _bias_stage(u, cur, ch):
            stage = "bias"
        elif _store_stage(u):
            stage = "store"
        elif (rq := _requant_stage(u, op.results[0], ch)) is not None:
            stage, requant = "requant", rq
        else:
            act = unary_activation(u)
            if has_act or act is None or act[0] not in ACTS or act[2] != pos[0]:
                break
            stage, clamp = act[0], act[1]
        stages.append(stage)
        fused.append((u, stage))
        cur = u.results[0]
    if not stages:
        return False
    op.attributes[GROUP] = IntegerAttr(gid, i64)
    op.attributes[EPILOGUE] = ArrayAttr([StringAttr(s) for s in stages])
    if clamp is not None:
        op.attributes["m100.clamp"] = ArrayAttr([FloatAttr(clamp[0], f64),
                                                 FloatAttr(clamp[1], f64)])
    if requant is not None:
        op.attributes[REQUANT_SCALE] = ArrayAttr([FloatAttr(x, f64) for x in requant.multipliers])
        op.attributes[REQUANT_ZP] = IntegerAttr(requant.zero_point, i64)
        op.attributes[REQUANT_RANGE] = ArrayAttr([IntegerAttr(requant.qmin, i64),
                                                  IntegerAttr(requant.qmax, i64)])
    for o, s in fused:
        o.attributes[FUSED_INTO] = IntegerAttr(gid, i64)
        o.attributes[STAGE] = StringAttr(s)
    return True


@dataclass(frozen=True)
class FuseEpilogue(ModulePass):
    """Fuse bias / activation / requantize epilogues into the producing TCU contraction.

    What: for each matmul / batch_matmul / convolution, follow its result through single-use
    elementwise ops in the TCU non-linear pipeline order (isa.Epilogue): an optional per-channel
    bias (an ``addf``/``addi`` with a *constant* operand that varies only along the output
    channel, or a bias broadcast used as the contraction's init; a runtime addend stays a CVU
    add), at most one activation (relu, gelu (erf form), silu, sigmoid, tanh, clamp -
    recognized numerically from the body, or a gelu/silu idiom group), then an optional requantization of the int32 accumulator to <= 8 bits, recognized
    exactly (``fptosi(clamp(roundeven(sitofp(acc) * m) + zp))``, ``m`` constant per tensor or per
    output channel; its parameters go to ``m100.requant_scale`` / ``_zp`` / ``_range``). The contraction
    gets ``m100.group = <id>`` and ``m100.epilogue = ["bias", "relu", ...]`` (stage order; for
    clamp also ``m100.clamp = [lo, hi]``); every fused op gets ``m100.fused_into = <id>`` and
    ``m100.stage = "<stage>"``. The ops are left in place, so the reference executor still runs
    the graph; the scheduler emits one TCU instruction for the group.
    Why: the epilogue runs on the accumulator inside the TCU for free instead of a CVU pass over
    the whole output.
    Pre: run recognize-idioms first (for gelu/silu groups). Post: annotations only.
    Options: none.
    """

    name = "fuse-epilogue"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        gid = next_group_id(op)
        for block in func_bodies(op):
            for o in list(block.ops):
                if fuse_one(o, gid):
                    gid += 1


__all__ = ["FuseEpilogue", "STAGES", "fuse_one"]
