"""The silu idiom group as ONE CVU op (split out of :mod:`.cvu`): ``x * sigmoid(x)`` with the
16-bit sigmoid body's roundings (:func:`silu_pair`, :func:`silu`), and the tail it takes along
(:func:`silu_tail`): LLaMA's ``silu(gate) * up`` and the W8A8 int8 quantize of that product, each
16-bit intermediate rounded where the graph rounds it (docs/isa.md: binary stages with a rounding
type), so the op gives the generics' values bit for bit.
"""

from __future__ import annotations

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.ir.affine import AffineMap

from m100.passes.graph.common import (GROUP, IDIOM, IDIOM_ROOT, UNIT, body_exprs, describe_op,
                                      generic_maps, is_identity)
from m100.targets.m100.isa import CvuOp, DType, Ref, RefKind, Stage

from ..graph import ScheduleError
from ..ir_facts import Lowering, _expr_stages, _shape, int_body_check, linear_map
from .builder import Builder


#: float element type -> the SIGMOID stage's rounding iparams (the 16-bit body, docs/isa.md)
_SIGMOID_ROUND = {"f32": (), "f16": (DType.F16.value,), "bf16": (DType.BF16.value,)}


def _elem(v: SSAValue) -> str | None:
    t = v.type
    return str(t.get_element_type()) if isinstance(t, TensorType) else None


def _sigmoid_of(op: Operation) -> SSAValue | None:
    """The input ``x`` of an elementwise generic whose body is ``1 / (1 + exp(-x))`` (ONNX
    ``Sigmoid`` as torch-mlir lowers it), ``x`` read with the identity map; else None."""
    ex = body_exprs(op) if len(op.results) == 1 else None
    if ex is None or len(ex) != 1 or len(op.inputs) != 1:  # type: ignore[attr-defined]
        return None
    one = lambda a: a.kind == "c" and float(a.val) == 1.0  # noqa: E731
    e = ex[0]
    if e.kind != "divf" or not one(e.args[0]) or e.args[1].kind != "addf":
        return None
    a, b = e.args[1].args
    if one(a):
        a, b = b, a
    if not one(b) or a.kind != "exp" or a.args[0].kind != "negf" or \
            a.args[0].args[0].kind != "in" or not all(is_identity(m) for m in generic_maps(op)):
        return None
    return op.inputs[0]  # type: ignore[attr-defined]


def silu_pair(op: Operation) -> tuple[Operation, Operation] | None:
    """(sigmoid, product) when ``op`` is a member of a silu idiom group of exactly the form
    ``s = sigmoid(x)`` (:func:`_sigmoid_of`), ``y = x * s`` (one ``mulf``, identity maps), ``s``
    read only by ``y``, ``x``, ``s`` and ``y`` of one float type (f32, f16, bf16); else None
    (the members then stay CVU ops of their own, as before)."""
    if IDIOM not in op.attributes or op.attributes[IDIOM].data != "silu":  # type: ignore[attr-defined]
        return None
    if IDIOM_ROOT in op.attributes:
        root = op
    else:
        us = [u.operation for u in op.results[0].uses] if len(op.results) == 1 else []
        if len(us) != 1:
            return None
        root = us[0]
    if IDIOM_ROOT not in root.attributes or len(root.results) != 1 or \
            root.attributes.get(GROUP) != op.attributes.get(GROUP):
        return None
    ins = list(getattr(root, "inputs", ()))
    ex = body_exprs(root)
    if len(ins) != 2 or ex is None or len(ex) != 1 or ex[0].kind != "mulf" or \
            {a.kind for a in ex[0].args} != {"in"} or \
            not all(is_identity(m) for m in generic_maps(root)):
        return None
    for si in (0, 1):
        sig = ins[si].owner
        if not isinstance(sig, Operation) or sig.name != "linalg.generic" or \
                IDIOM not in sig.attributes or sig.attributes.get(GROUP) != op.attributes.get(GROUP):
            continue
        x = _sigmoid_of(sig)
        if x is None or x is not ins[1 - si] or len(list(sig.results[0].uses)) != 1:
            continue
        if len({_elem(x), _elem(sig.results[0]), _elem(root.results[0])}) != 1 or \
                _elem(x) not in _SIGMOID_ROUND:
            continue
        if op is not root and op is not sig:
            return None
        return sig, root
    return None


#: :func:`silu_tail` takes the op after the product too (W8A8: the int8 quantize; one op of 8
#: stages). Off by default, kept for A/B (docs/llm.md, session 14): the 8-stage op is
#: data-parallel in the LLaMA2-7B layer, its rows all finish at its end and the down projection
#: waits (+41 k predicted, +43 k simulated a layer); the product op and the quantize stay a
#: 2-op pipeline whose bands stream in row order (-13 k predicted vs main)
TAIL_QUANTIZE = False


def _plain_ew(op: Operation, n_in: int) -> bool:
    """``op`` is an elementwise generic of ``n_in`` inputs and one result, every map the identity,
    with no ``m100.*`` annotation but its unit ``cvu.elementwise`` (no idiom or epilogue group)."""
    if op.name != "linalg.generic" or len(op.results) != 1 or \
            len(getattr(op, "inputs", ())) != n_in:
        return False
    unit = op.attributes.get(UNIT)
    if unit is None or unit.data != "cvu.elementwise" or \
            any(k.startswith("m100.") and k != UNIT for k in op.attributes):  # type: ignore[attr-defined]
        return False
    return all(is_identity(m) for m in generic_maps(op))


def _sole_user(v: SSAValue) -> Operation | None:
    us = list(v.uses)
    return us[0].operation if len(us) == 1 else None


def silu_tail(ctx: Builder, root: Operation, where: str) -> tuple[list[Operation], SSAValue | None,
                                                                      tuple[Stage, ...]]:
    """What a silu group's CVU op (:func:`silu`) computes after ``x * sigmoid(x)``: LLaMA's MLP
    ``silu(gate) * up`` and, in W8A8 with :data:`TAIL_QUANTIZE`, the int8 quantize of that
    product -- ``([mul, q], up, the quantize's stages)``, or fewer members when the form is not
    there or the flag is off (``([], None, ())``, ``([mul], up, ())``).

    The product ``m = silu * u`` is taken when it is the silu's only use, a plain elementwise
    generic (:func:`_plain_ew`) whose body is one ``mulf`` of its two inputs, ``u`` another
    tensor of the same type and shape already produced (not a constant). The op after it is
    taken when it is ``m``'s only use, a plain one-input elementwise generic whose body maps to
    CVU stages (:func:`~..ir_facts._expr_stages`; the quantize: ``DIV, ROUND, MAX, MIN, FTOI``)
    and all the stages fit one CVU op (``max_cvu_stages``). Its stages are the ones the op has
    alone, reading the product where it read its input: it read the product rounded to the
    type from memory, and the ``MUL`` before it rounds to that type (``iparams``, docs/isa.md),
    so the values are the same bit for bit (f32: no rounding, the f32 product is the value)."""
    m_op = _sole_user(root.results[0])
    if m_op is None or not _plain_ew(m_op, 2):
        return [], None, ()
    ex = body_exprs(m_op)
    ins = list(m_op.inputs)  # type: ignore[attr-defined]
    if ex is None or len(ex) != 1 or ex[0].kind != "mulf" or \
            sorted(a.val for a in ex[0].args if a.kind == "in") != [0, 1]:
        return [], None, ()
    u = ins[1] if ins[0] is root.results[0] else ins[0]
    if u is root.results[0] or u in ctx.consts or u in ctx.fills or u not in ctx.names or \
            _shape(u) != _shape(root.results[0]) or \
            len({_elem(u), _elem(root.results[0]), _elem(m_op.results[0])}) != 1:
        return [], None, ()
    q_op = _sole_user(m_op.results[0])
    if not TAIL_QUANTIZE or q_op is None or not _plain_ew(q_op, 1):
        return [m_op], u, ()
    ex = body_exprs(q_op)
    if ex is None or len(ex) != 1:
        return [m_op], u, ()
    try:
        int_body_check(q_op, where)
        q_st = _expr_stages(ex, 1, where)
    except ScheduleError:
        return [m_op], u, ()
    if 3 + len(q_st) > ctx.max_cvu_stages:
        return [m_op], u, ()
    return [m_op, q_op], u, q_st


def _after(st: Stage, n: int, src: int) -> Stage:
    """``st`` of a one-input op, placed ``n`` stages later and reading stage ``src`` for its input."""
    def ref(r: Ref) -> Ref:
        if r.kind is RefKind.INPUT:
            return Ref(RefKind.STAGE, src)
        if r.kind is RefKind.STAGE:
            return Ref(RefKind.STAGE, r.index + n)
        return r
    return Stage(st.op, tuple(ref(r) for r in st.args), axis=st.axis, fparam=st.fparam,
                 iparams=st.iparams)


def silu(ctx: Builder, op: Operation, nm: str, unit: str | None, where: str) -> None:
    """A silu idiom group ``x * sigmoid(x)`` (:func:`silu_pair`) as ONE CVU op reading ``x`` once:
    stages ``SIGMOID(x)`` -- of a 16-bit type with its body's roundings (``exp(-x)``, ``1 + e``
    and ``1 / .`` each rounded to the type, as the linalg computes them; ``iparams`` = the type) --
    and ``MUL(x, s)``, rounded by the store: the same values as the two generics, one pass over
    ``x`` instead of two (LLaMA's MLP: the [T, ffn] gate read once). The sigmoid member is
    claimed here and lowered at the product.
    With its tail (:func:`silu_tail`) the op also multiplies by ``up`` (stages ``SIGMOID``,
    ``MUL`` -- the 16-bit product rounded to its type where the graph rounds it -- ``MUL``,
    rounded by the store): LLaMA's ``silu(gate) * up`` is one op reading gate and up, and with
    :data:`TAIL_QUANTIZE` W8A8's ``QuantizeLinear`` of it too (8 stages: then the quantize's
    ``DIV, ROUND, MAX, MIN, FTOI``, int8 out)."""
    pair = silu_pair(op)
    assert pair is not None
    sig, root = pair
    if op is not root:
        return
    x = sig.inputs[0]  # type: ignore[attr-defined]
    if x in ctx.consts or x in ctx.fills:
        # a constant x: each member on its own, as before
        from .cvu import elementwise
        elementwise(ctx, sig, sig.name, unit, describe_op(sig))
        elementwise(ctx, root, nm, unit, where)
        return
    rnd = _SIGMOID_ROUND[_elem(x)]
    tail, u, q_st = silu_tail(ctx, root, where)
    inp, stg = (lambda i: Ref(RefKind.INPUT, i)), (lambda i: Ref(RefKind.STAGE, i))  # noqa: E731
    stages = [Stage(CvuOp.SIGMOID, (inp(0),), iparams=rnd),
              Stage(CvuOp.MUL, (inp(0), stg(0)), iparams=rnd if tail else ())]
    names = [ctx.tname(x)]
    if tail:
        stages.append(Stage(CvuOp.MUL, (stg(1), inp(1)), iparams=rnd if q_st else ()))
        names.append(ctx.tname(u))  # type: ignore[arg-type]
        stages += [_after(s, 3, 2) for s in q_st]
    last = tail[-1] if tail else root
    ident = linear_map(AffineMap.identity(len(_shape(x))))
    lw = Lowering("cvu", stages=tuple(stages), in_maps=[ident] * len(names))
    for t_op in tail:
        ctx.absorbed.add(id(t_op))
    ctx.add("ew", "cvu.elementwise", names, last.results[0], {"maps": lw.in_maps}, lw, last)


__all__ = ["silu", "silu_pair", "silu_tail"]
