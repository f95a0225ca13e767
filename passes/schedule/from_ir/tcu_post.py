"""What follows a dequantized matmul, computed in its TCU epilogue (``isa.MatMul.post``,
docs/isa.md): LLaMA's W8A8 MLP without its f16 gate / up results through memory.

* **gate** (:func:`_silu_post`): the dequantized result ``g`` read only by a silu idiom group
  ``g * sigmoid(g)`` (:func:`.silu.silu_pair`): the matmul writes ``silu(g)``. Post stages
  ``MUL(v, 1.0)`` rounded to g's type (the dequantization's store rounding, so ``g`` is the
  value the graph has), ``SIGMOID`` with its 16-bit body's roundings, ``MUL`` rounded by the
  store: the silu op's stages (:func:`.silu.silu`) on the same ``g``.
* **up** (:func:`_product_post`): the dequantized result ``u`` read only by a product ``m = s *
  u`` (a plain elementwise ``mulf``, ``s`` another tensor of u's type and shape already
  produced: gate's silu) and, when ``m``'s only use is a one-input elementwise generic that maps
  to CVU stages (W8A8: the int8 ``QuantizeLinear``, ``DIV, ROUND, MAX, MIN, FTOI``), that too:
  post stages ``MUL(v, 1.0)`` rounded (``u``), ``MUL(s, u)`` rounded to the type where the graph
  rounds ``m`` (or by the store when nothing follows), then the quantize's own stages reading
  it. ``s`` is the matmul's ``post_in`` (an input of the scheduler op, ``attrs["post_in"]``,
  read from memory per piece as a [rows, cols] box).

* **the residual adds after wo and down** (:func:`_product_post` with ``addf``, :data:`RESIDUAL`):
  the dequantized result ``d`` read only by ``y = h + d``: post stages ``MUL(v, 1.0)`` rounded (``d``), ``ADD(h, d)`` rounded by
  the store; ``h`` is the ``post_in``. The layer's tail (a CVU op loading ``h``, copying ``d``
  from the matmul's TPBs and storing ``y`` after the last down piece) becomes each piece's own
  store of ``y``. The add after ``wo`` (``h = x + o``) too: the MLP's norm then loads no ``x``
  (8.4 MB at 7B, which kept the TCUs idle while the norm ran), ``wo`` loads it as its epilogue's
  operand while it computes (docs/llm.md, session 22; in session 18, at a 75 % share, it was
  longer).

Each value is the graph's bit for bit: every f16 intermediate is rounded where the linalg
rounds it (a float ``MUL`` stage with a rounding type, the 16-bit ``SIGMOID``), the quantize's
stages are the ones its generic has alone (:func:`.silu.silu_tail`'s argument).

How many stages the TCU may run is the machine's ``tcu_post_stages`` (``Builder.tcu_post_stages``;
model, docs/isa.md): gate's silu needs 3, up's product 2 and the quantize 5 more; what does not
fit stays a CVU op (the quantize alone, or all of it), and a machine with 0 runs the CVU ops of
session 14 (``Machine.replace(tcu_post_stages=0)``: the A/B of docs/llm.md).
"""

from __future__ import annotations

from xdsl.ir import Operation, SSAValue

from m100.passes.graph.common import FUSED_INTO, body_exprs
from m100.targets.m100.isa import CvuOp, Ref, RefKind, Stage

from ..graph import Op, ScheduleError
from ..ir_facts import Lowering, _dtype, _expr_stages, _shape, int_body_check
from .builder import Builder
from .silu import _SIGMOID_ROUND, _after, _elem, _plain_ew, _sole_user, silu_pair

_IN = lambda i: Ref(RefKind.INPUT, i)  # noqa: E731
_ST = lambda i: Ref(RefKind.STAGE, i)  # noqa: E731
_ONE = Ref(RefKind.IMM, imm=1.0)
#: the second operation of an epilogue with an operand: up's product ``s * u``, a residual add
#: ``s + d`` (both commutative: the graph's operand order does not change the value)
_BINARY = {"mulf": CvuOp.MUL, "addf": CvuOp.ADD}
#: the residual adds after ``wo`` / ``down`` (``y = h + d``) in those matmuls' epilogues: True
#: every one, ``"output"`` one whose sum is a result of the function only (the layer's last),
#: False none (CVU ops reading ``d`` from the matmul; docs/llm.md sessions 18 and 22: True since
#: session 22, when the 7B W8A8 prefill layer's plan at a 100 % share packs with it)
RESIDUAL = True


def _dequant_value(mm: Operation) -> SSAValue | None:
    """The result of matmul ``mm``'s fused dequantization generic (its only use)."""
    gid = mm.attributes.get("m100.group")
    us = [u.operation for u in mm.results[0].uses]
    if gid is None or len(us) != 1 or us[0].attributes.get(FUSED_INTO) != gid or \
            len(us[0].results) != 1:
        return None
    return us[0].results[0]


def _silu_post(ctx: Builder, g: SSAValue, rnd) -> tuple[list[Operation], SSAValue,
                                                         tuple[Stage, ...]] | None:
    users = {id(u.operation): u.operation for u in g.uses}
    if len(users) != 2:
        return None
    for op in users.values():
        pair = silu_pair(op)
        if pair is None:
            continue
        sig, root = pair
        if set(users) != {id(sig), id(root)} or sig.inputs[0] is not g:  # type: ignore[attr-defined]
            return None
        stages = (Stage(CvuOp.MUL, (_IN(0), _ONE), iparams=rnd),
                  Stage(CvuOp.SIGMOID, (_ST(0),), iparams=rnd),
                  Stage(CvuOp.MUL, (_ST(0), _ST(1))))
        return [sig, root], root.results[0], stages
    return None


def _residual(add: Operation) -> bool:
    """Is the residual add ``add`` taken into the epilogue (:data:`RESIDUAL`)?"""
    if RESIDUAL == "output":
        us = list(add.results[0].uses)
        return bool(us) and all(u.operation.name == "func.return" for u in us)
    return bool(RESIDUAL)


def _product_post(ctx: Builder, u: SSAValue, rnd, where: str
                  ) -> tuple[list[Operation], SSAValue, SSAValue, tuple[Stage, ...]] | None:
    m_op = _sole_user(u)
    if m_op is None or not _plain_ew(m_op, 2):
        return None
    ex = body_exprs(m_op)
    ins = list(m_op.inputs)  # type: ignore[attr-defined]
    if ex is None or len(ex) != 1 or ex[0].kind not in _BINARY or \
            sorted(a.val for a in ex[0].args if a.kind == "in") != [0, 1] or \
            (ex[0].kind == "addf" and not _residual(m_op)):
        return None
    s = ins[1] if ins[0] is u else ins[0]
    if s is u or s in ctx.consts or s in ctx.fills or s not in ctx.names or \
            _shape(s) != _shape(u) or len({_elem(s), _elem(u), _elem(m_op.results[0])}) != 1:
        return None
    q_op = _sole_user(m_op.results[0])
    q_st: tuple[Stage, ...] = ()
    if q_op is not None and _plain_ew(q_op, 1):
        qex = body_exprs(q_op)
        try:
            if qex is not None and len(qex) == 1:
                int_body_check(q_op, where)
                q_st = _expr_stages(qex, 1, where)
        except ScheduleError:
            q_st = ()
        if q_st and (2 + len(q_st) > ctx.tcu_post_stages or q_st[-1].op is not CvuOp.FTOI):
            q_st = ()
    stages = [Stage(CvuOp.MUL, (_IN(0), _ONE), iparams=rnd),
              Stage(_BINARY[ex[0].kind], (_IN(1), _ST(0)), iparams=rnd if q_st else ())]
    stages += [_after(st, 2, 1) for st in q_st]
    members = [m_op] + ([q_op] if q_st else [])
    return members, s, members[-1].results[0], tuple(stages)  # type: ignore[union-attr]


def tcu_post(ctx: Builder, o: Op, mm: Operation, lw: Lowering, where: str) -> None:
    """Take what follows the dequantized matmul ``mm`` (scheduler op ``o``) into its epilogue
    when it is gate's silu or up's product (+ quantize) (module docstring): sets ``lw.post``
    (and ``o.attrs["post_in"]``, appended to ``o.inputs``), absorbs the generics, and makes
    ``o``'s output the last one's value."""
    if not lw.dequant or ctx.tcu_post_stages < 2:
        return
    v = _dequant_value(mm)
    if v is None or _elem(v) not in _SIGMOID_ROUND or len(_shape(v)) != 2:
        return
    rnd = _SIGMOID_ROUND[_elem(v)]
    got = _silu_post(ctx, v, rnd) if ctx.tcu_post_stages >= 3 else None
    post_in = None
    if got is not None:
        members, last, stages = got
    else:
        got2 = _product_post(ctx, v, rnd, where)
        if got2 is None:
            return
        members, s, last, stages = got2
        post_in = ctx.tname(s)
    lw.post = stages
    for m in members:
        ctx.absorbed.add(id(m))
    out = o.outputs[0]
    ctx.names[last] = out
    t = ctx.g.tensors[out]
    ctx.g.tensors[out] = type(t)(t.name, t.shape, _dtype(last.type), t.kind)
    if post_in is not None:
        lw.post_in = post_in
        o.attrs["post_in"] = post_in
        o.inputs = o.inputs + (post_in,)


__all__ = ["tcu_post"]
