"""Lowering facts of classified linalg IR: element types, shapes, affine maps, CVU stages, norms.

Split out of :mod:`.from_ir` (size rule): the per-op helpers (:class:`Lowering`, :class:`IRGraph`,
dtype/shape/strides/constant readers, the body-expression -> CVU stage translation and the norm
idiom role matching) that the graph walk in :func:`.from_ir.from_module` uses.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.ir.affine import AffineMap

from m100.dialects.quant import QuantizedType
from m100.passes.graph.common import body_exprs
from m100.targets.m100.isa import Act, CvuOp, DType, Ref, RefKind, Stage

from .graph import OpGraph, ScheduleError

# bf16 tensors are stored as bf16 (constants rounded to nearest even by numerics.to_bytes) and
# computed in f32 like f16: the CVU widens its inputs exactly and rounds its result once.
# Integer tensors (docs/isa.md "CVU lanes"): the M100 has no 64-bit integers, so i64 is narrowed
# to i32 (constants are checked here, program inputs by the interpreter/runtime, every integer
# CVU result traps on i32 overflow); i1 (bool) is held as i8 0/1.
_DT = {"f32": "f32", "f16": "f16", "bf16": "bf16", "i8": "i8", "i32": "i32", "i4": "i4", "i16": "i16",
       "i64": "i32", "i1": "i8"}
I32_RANGE = (-(1 << 31), (1 << 31) - 1)
ACTS = {"relu": Act.RELU, "gelu": Act.GELU, "silu": Act.SILU, "sigmoid": Act.SIGMOID,
        "tanh": Act.TANH}


def _dtype(t) -> str:
    e = t.get_element_type() if isinstance(t, TensorType) else t
    if isinstance(e, QuantizedType):  # a quantized tensor is its storage buffer
        from .quant_facts import storage_dtype
        return storage_dtype(e)
    s = str(e)
    if s not in _DT:
        raise ScheduleError(f"element type {s} is not supported by the scheduler (the M100 computes "
                            "f32, f16, bf16, i32, i16, i8, i4; cast the tensor in the model)")
    return _DT[s]


def narrow_const(arr: np.ndarray, t, what: str) -> np.ndarray:
    """``arr`` (a constant of IR type ``t``) as the scheduler holds it: i64 values narrowed to
    int32 (a ScheduleError naming ``what`` when one does not fit), i1 as int8 0/1."""
    e = str(t.get_element_type() if isinstance(t, TensorType) else t)
    a = np.asarray(arr)
    if e == "i64":
        if a.size and (int(a.min()) < I32_RANGE[0] or int(a.max()) > I32_RANGE[1]):
            raise ScheduleError(f"{what}: i64 constant values in [{int(a.min())}, {int(a.max())}] "
                                "do not fit i32 (the M100 has no 64-bit integers; i64 tensors "
                                "are narrowed to i32)")
        return a.astype(np.int32)
    if e == "i1":
        return a.astype(np.int8)
    return a


def _shape(v: SSAValue) -> tuple[int, ...]:
    t = v.type
    if not isinstance(t, TensorType):
        raise ScheduleError(f"expected a tensor value, got {t}")
    return tuple(int(x) for x in t.get_shape())


def linear_map(m: AffineMap) -> list[tuple[tuple[int, ...], int]]:
    """Per result: (coefficient per dim, constant) of a pure affine map."""
    zero = [0] * m.num_dims
    c0 = m.eval(zero, [])
    out = []
    for r in range(len(m.results)):
        coeffs = []
        for d in range(m.num_dims):
            unit = list(zero)
            unit[d] = 1
            coeffs.append(m.eval(unit, [])[r] - c0[r])
        out.append((tuple(coeffs), c0[r]))
    return out


@dataclass
class Lowering:
    """How the emitter lowers one scheduler op (the IR facts the OpGraph does not carry)."""
    kind: str  # matmul conv cvu pool transpose broadcast pad reshape copy
    act: Act = Act.NONE
    bias: str | None = None  # weight tensor name of the bias vector
    stages: tuple[Stage, ...] = ()
    in_maps: list[list[tuple[tuple[int, ...], int]]] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    # the requantize stage of an integer contraction (quant_facts.requant_params) and the name of
    # its per-channel [2, F] i32 table (None: one multiplier for all channels)
    requant: dict[str, Any] | None = None
    requant_table: str | None = None
    # the dequantize stage of an integer contraction (fuse-dequant's ``dequant`` epilogue): the
    # tensor of its per-channel f32 scales [F]
    dequant: str | None = None
    # what follows the dequantization in the TCU epilogue (``from_ir.tcu_post``): CVU stages
    # (``isa.MatMul.post``) and the tensor of their second input (``post_in``), if any
    post: tuple[Stage, ...] = ()
    post_in: str | None = None


@dataclass
class IRGraph:
    graph: OpGraph
    lowering: dict[str, Lowering]
    data: dict[str, np.ndarray]  # constant tensors (weights, fills)
    inputs: list[str]
    outputs: list[str]
    func_name: str
    # the program's symbol name of each input / output (the model's names, ``m100.name`` on the
    # function's arguments/results, else ``arg<i>`` / ``result<i>``)
    input_symbols: list[str] = field(default_factory=list)
    output_symbols: list[str] = field(default_factory=list)
    # compile by shape: weight tensors without data (``{m100.weight}`` function arguments) ->
    # their program symbol name (role ``weight``; the caller supplies the bytes at run time)
    weight_symbols: dict[str, str] = field(default_factory=dict)


def _vec(op: Operation, name: str) -> list[int]:
    """A 2-element strides/dilations attribute (property or attribute), default [1, 1]."""
    a = op.properties.get(name) or op.attributes.get(name)
    if a is None:
        return [1, 1]
    vals = a.get_values() if hasattr(a, "get_values") else a.data  # type: ignore[union-attr]
    vals = [int(v) for v in vals]
    return vals * 2 if len(vals) == 1 else vals


def _dense(op: Operation) -> np.ndarray | None:
    """The value of a dense constant op: a read-only view of its bytes where they are the
    decoded array as stored (:func:`m100.dialects.dense.dense_view`: a weight's bytes reach the
    emitted segment without a copy, :func:`m100.passes.schedule.emit_core.const_bytes`), else
    the decoded copy. Nothing of the scheduler writes into a constant's array."""
    from m100.dialects.dense import dense_to_numpy, dense_view
    v = op.properties.get("value") or op.attributes.get("value")
    if isinstance(v, DenseIntOrFPElementsAttr):
        view = dense_view(v)
        return view if view is not None else dense_to_numpy(v)
    return None


def _imm(v: float) -> Ref:
    return Ref(RefKind.IMM, 0, float(v))


def _poly_odd(emit, x: Ref, coeffs: tuple[float, ...]) -> Ref:
    """x * (c0 + c1 x^2 + c2 x^4 + ...) by Horner's rule in x^2."""
    x2 = emit(CvuOp.MUL, (x, x))
    acc = _imm(coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc = emit(CvuOp.ADD, (emit(CvuOp.MUL, (acc, x2)), _imm(c)))
    return emit(CvuOp.MUL, (x, acc))


def _small(emit, x: Ref, series: Ref, other: Ref, bound: float) -> Ref:
    """``series`` where |x| < bound else ``other``."""
    return emit(CvuOp.SELECT, (emit(CvuOp.CMP_GT, (_imm(bound), emit(CvuOp.ABS, (x,)))), series,
                               other))


def _log1p(emit, x: Ref) -> Ref:
    # log(u) * (x / (u - 1)) with u = 1 + x rounded (Goldberg): a few ulps; x where u == 1
    u = emit(CvuOp.ADD, (x, _imm(1.0)))
    um1 = emit(CvuOp.SUB, (u, _imm(1.0)))
    q = emit(CvuOp.MUL, (emit(CvuOp.LOG, (u,)), emit(CvuOp.DIV, (x, um1))))
    return emit(CvuOp.SELECT, (emit(CvuOp.CMP_EQ, (u, _imm(1.0))), x, q))


def _expm1(emit, x: Ref) -> Ref:
    # (u - 1) * x / log(u) with u = exp(x) rounded (Kahan): a few ulps; x where u == 1
    u = emit(CvuOp.EXP, (x,))
    um1 = emit(CvuOp.SUB, (u, _imm(1.0)))
    q = emit(CvuOp.DIV, (emit(CvuOp.MUL, (um1, x)), emit(CvuOp.LOG, (u,))))
    big = emit(CvuOp.SELECT, (emit(CvuOp.CMP_GT, (x, _imm(80.0))), um1, q))  # log(u) = inf
    return emit(CvuOp.SELECT, (emit(CvuOp.CMP_EQ, (u, _imm(1.0))), x, big))


def _sinh(emit, x: Ref) -> Ref:
    e = emit(CvuOp.EXP, (x,))
    far = emit(CvuOp.MUL, (emit(CvuOp.SUB, (e, emit(CvuOp.RECIP, (e,)))), _imm(0.5)))
    near = _poly_odd(emit, x, (1.0, 1 / 6, 1 / 120, 1 / 5040))  # |x| < 0.25: error < x^9/9!
    return _small(emit, x, near, far, 0.25)


def _cosh(emit, x: Ref) -> Ref:
    e = emit(CvuOp.EXP, (x,))
    return emit(CvuOp.MUL, (emit(CvuOp.ADD, (e, emit(CvuOp.RECIP, (e,)))), _imm(0.5)))


def _asinh(emit, x: Ref) -> Ref:
    a = emit(CvuOp.ABS, (x,))
    # log(|x| + sqrt(x^2 + 1)); for |x| > 2^60 x^2 overflows: log(2|x|)
    r = emit(CvuOp.SQRT, (emit(CvuOp.ADD, (emit(CvuOp.MUL, (a, a)), _imm(1.0))),))
    far = emit(CvuOp.LOG, (emit(CvuOp.ADD, (a, r)),))
    huge = emit(CvuOp.ADD, (emit(CvuOp.LOG, (a,)), _imm(math.log(2.0))))
    far = emit(CvuOp.SELECT, (emit(CvuOp.CMP_GT, (a, _imm(2.0 ** 60))), huge, far))
    far = emit(CvuOp.MUL, (emit(CvuOp.SIGN, (x,)), far))
    near = _poly_odd(emit, x, (1.0, -1 / 6, 3 / 40, -15 / 336, 105 / 3456))  # |x| < 0.25
    return _small(emit, x, near, far, 0.25)


def _acosh(emit, x: Ref) -> Ref:
    # log1p((x - 1) + sqrt((x - 1)(x + 1))) (x - 1 is exact near 1); NaN below 1
    xm1 = emit(CvuOp.SUB, (x, _imm(1.0)))
    t = emit(CvuOp.SQRT, (emit(CvuOp.MUL, (xm1, emit(CvuOp.ADD, (x, _imm(1.0))))),))
    far = _log1p(emit, emit(CvuOp.ADD, (xm1, t)))
    huge = emit(CvuOp.ADD, (emit(CvuOp.LOG, (x,)), _imm(math.log(2.0))))
    return emit(CvuOp.SELECT, (emit(CvuOp.CMP_GT, (x, _imm(2.0 ** 60))), huge, far))


def _atanh(emit, x: Ref) -> Ref:
    # 0.5 * (log1p(x) - log1p(-x)): 1 +- x is exact near +-1, no cancellation near 0
    d = emit(CvuOp.SUB, (_log1p(emit, x), _log1p(emit, emit(CvuOp.NEG, (x,)))))
    return emit(CvuOp.MUL, (d, _imm(0.5)))


def _asin(emit, x: Ref) -> Ref:
    # atan(x / sqrt((1 - x)(1 + x))); +-1 -> atan(+-inf) = +-pi/2
    d = emit(CvuOp.SQRT, (emit(CvuOp.MUL, (emit(CvuOp.SUB, (_imm(1.0), x)),
                                           emit(CvuOp.ADD, (_imm(1.0), x)))),))
    return emit(CvuOp.ATAN, (emit(CvuOp.DIV, (x, d)),))


def _acos(emit, x: Ref) -> Ref:
    # 2 atan(sqrt((1 - x) / (1 + x))): accurate near 1; -1 -> 2 atan(inf) = pi
    q = emit(CvuOp.DIV, (emit(CvuOp.SUB, (_imm(1.0), x)), emit(CvuOp.ADD, (_imm(1.0), x))))
    return emit(CvuOp.MUL, (emit(CvuOp.ATAN, (emit(CvuOp.SQRT, (q,)),)), _imm(2.0)))


def _tan(emit, x: Ref) -> Ref:
    return emit(CvuOp.DIV, (emit(CvuOp.SIN, (x,)), emit(CvuOp.COS, (x,))))


#: math ops without a CVU op of their own, as short stage sequences of CVU ops. Accuracy (f32,
#: checked against numpy in float64 over wide ranges in test/unit/schedule/test_elementary.py):
#: a few ulps for log1p/expm1 (Goldberg/Kahan), polynomials near 0 where the closed forms cancel.
ELEMENTARY = {"tan": _tan, "asin": _asin, "acos": _acos, "sinh": _sinh, "cosh": _cosh,
              "asinh": _asinh, "acosh": _acosh, "atanh": _atanh, "log1p": _log1p, "expm1": _expm1}

# arith.cmpi predicate numbers (MLIR's arith::CmpIPredicate)
_CMPI = {0: "eq", 1: "ne", 2: "slt", 3: "sle", 4: "sgt", 5: "sge", 6: "ult", 7: "ule", 8: "ugt",
         9: "uge"}


#: 16-bit float types of body values and the DType their rounding stage names
_HALF = {"f16": DType.F16, "bf16": DType.BF16}
#: body ops whose 16-bit result is exact without a rounding when their operands are 16-bit values
#: (the CVU computes in f32: a 16-bit add / mul / exp / truncf ... must be rounded where the body
#: rounds it, or a chain of them differs from the linalg in the last bit -- and a quantize after
#: it in an int8 step: fuzz quant seed 1 #11)
_EXACT_IN_HALF = frozenset({"in", "out", "c", "idx", "extf", "negf", "absf", "maximumf",
                            "minimumf", "maxnumf", "minnumf", "floor", "ceil", "roundeven",
                            "select"})
#: binary stages that round their own result to ``iparams[0]`` (docs/isa.md, CVU stages)
_ROUNDING_BINOPS = (CvuOp.ADD, CvuOp.SUB, CvuOp.MUL, CvuOp.DIV)


def _expr_stages(exprs, n_in: int, where: str) -> tuple[Stage, ...]:
    """CVU stages computing a generic's single yielded expression. A 16-bit float value inside
    the body (not its root: the store rounds that) is rounded where the body rounds it
    (``_EXACT_IN_HALF`` says where no rounding is needed)."""
    stages: list[Stage] = []
    memo: dict[int, Ref] = {}
    binop = {"addf": CvuOp.ADD, "subf": CvuOp.SUB, "mulf": CvuOp.MUL, "divf": CvuOp.DIV,
             "maximumf": CvuOp.MAX, "maxnumf": CvuOp.MAX, "minimumf": CvuOp.MIN,
             "minnumf": CvuOp.MIN, "powf": CvuOp.POW, "remf": CvuOp.REM,
             # integer max/min (torch-mlir's ReLU on a quantized i8 tensor: max(q, zp)): exact in
             # the CVU's integer lane
             "maxsi": CvuOp.MAX, "minsi": CvuOp.MIN}
    unop = {"negf": CvuOp.NEG, "exp": CvuOp.EXP, "log": CvuOp.LOG, "sqrt": CvuOp.SQRT,
            "rsqrt": CvuOp.RSQRT, "tanh": CvuOp.TANH, "erf": CvuOp.ERF, "absf": CvuOp.ABS,
            "floor": CvuOp.FLOOR, "ceil": CvuOp.CEIL, "sin": CvuOp.SIN, "cos": CvuOp.COS,
            "atan": CvuOp.ATAN, "roundeven": CvuOp.ROUND}
    # math ops composed of several stages (ELEMENTARY: the formulas and their accuracy)
    composed = set(ELEMENTARY) | {"extf", "truncf", "sitofp", "fpowi", "uitofp(cmpf)",
                                  "extui/uitofp/fptoui(i8/i16)"}
    # integer ops (the CVU's integer lane): signed arithmetic, conversions, i1 logic on 0/1
    # values (bitwise logic of wider integers, shifts, unsigned ops: branches in go()) (CVU integer lane: and/or/xor/shl/shr/rem and zext/sext (width-aware) stages; BitShift (ONNX rule for amounts outside [0, w)), BitwiseAnd/Or/Xor/Not, integer Mod, unsigned compares/max/min/uitofp/extui, trunci/extsi(i1) lowered exactly; an i8/i16 add feeding a compare/div/max is sext'd first (it was compared unwrapped: silent wrong); node tests of these ops 37 -> 108 of 122 (metric))
    binop |= {"addi": CvuOp.ADD, "subi": CvuOp.SUB, "muli": CvuOp.MUL, "divsi": CvuOp.DIV,
              "maxsi": CvuOp.MAX, "minsi": CvuOp.MIN, "andi": CvuOp.MIN, "ori": CvuOp.MAX}
    unop |= {"absi": CvuOp.ABS, "sitofp": CvuOp.ITOF, "uitofp": CvuOp.ITOF,
             "fptosi": CvuOp.FTOI}
    value_preserving = ("extsi", "extui", "trunci", "index_cast")

    def emit(op: CvuOp, args: tuple[Ref, ...], iparams: tuple[int, ...] = ()) -> Ref:
        stages.append(Stage(op, args, iparams=iparams))
        return Ref(RefKind.STAGE, len(stages) - 1)

    # The integer lane holds a value of MLIR type iw congruent to it mod 2**w: an addi/subi/muli
    # (or absi: |-128| = 128 is -128 in i8, as ONNX Abs / numpy give) of i8/i16 is not wrapped where it feeds another add/sub/mul (100 + 100 stays 200), the
    # generic's result is (sext, below). An op that reads its operand as a number (compare, div/rem, max/min, sitofp, extsi,
    # shifts do it themselves) takes the wrapped signed value (sext), an unsigned op the low w
    # bits as an unsigned number (zext; u32/u64 values >= 2**31 fault, they are held as i32).
    def signed(e) -> Ref:
        r = go(e)
        w = _width(e.ty)
        if w is not None and 1 < w < 32 and e.kind in ("addi", "subi", "muli", "absi"):
            r = emit(CvuOp.SEXT, (r,), (w,))
        return r

    def unsigned(e) -> Ref:
        w = _width(e.ty)
        if w is None:
            raise ScheduleError(f"{where}: an unsigned op on a non-integer value ({e.ty})")
        if w == 1:  # a boolean 0/1
            return go(e)
        if e.kind == "c":  # a constant: its unsigned value as the immediate
            v = int(e.val) % (1 << w)
            if v > I32_RANGE[1]:
                raise ScheduleError(f"{where}: the unsigned constant {v} (i{w}) does not fit the "
                                    "i32 integer lane")
            return _imm(v)
        return emit(CvuOp.ZEXT, (go(e),), (w,))

    def wrapped(e, r: Ref) -> Ref:
        """An unsigned result (in [0, 2**w)) as the i``w`` value's signed pattern."""
        w = _width(e.ty)
        return emit(CvuOp.SEXT, (r,), (w,)) if w is not None and w < 32 else r

    def go(e) -> Ref:
        key = id(e)
        if key in memo:
            return memo[key]
        k = e.kind
        if k == "extf":  # f16/bf16 -> f32: the CVU reads its inputs as f32 anyway
            r = go(e.args[0])
        elif k == "truncf" and e is exprs[0]:  # f32 -> f16 last: the store rounds to the output
            r = go(e.args[0])
        elif k == "in":
            r = Ref(RefKind.INPUT, int(e.val))
        elif k == "c":
            r = Ref(RefKind.IMM, 0, float(e.val))
        elif k in ("extui", "uitofp") and e.val in UNSIGNED_WIDTHS:
            # an unsigned iN (N <= 16) held as signed bits: value = x + 2**N where x < 0, exact
            # in the integer lane (|value| < 2**16)
            x = go(e.args[0])
            r = emit(CvuOp.SELECT, (emit(CvuOp.CMP_GT, (_imm(0), x)),
                                    emit(CvuOp.ADD, (x, _imm(1 << e.val))), x))
            if k == "uitofp":
                r = emit(CvuOp.ITOF, (r,))
        elif k == "fptoui" and e.val in UNSIGNED_WIDTHS:
            # float -> unsigned iN: truncate toward zero in the integer lane, then the signed
            # bits of the unsigned value (v - 2**N where v >= 2**(N-1)); a value outside
            # [0, 2**N) stays outside the output type and faults at the store
            t = emit(CvuOp.FTOI, (go(e.args[0]),))
            r = emit(CvuOp.SELECT, (emit(CvuOp.CMP_GE, (t, _imm(1 << (e.val - 1)))),
                                    emit(CvuOp.SUB, (t, _imm(1 << e.val))), t))
        elif k == "extsi" and _width(e.args[0].ty) == 1:  # i1 true -> -1
            r = emit(CvuOp.SEXT, (go(e.args[0]),), (1,))
        elif k == "extsi":
            r = signed(e.args[0])
        elif k == "extui" and _width(e.args[0].ty) != 1:
            r = unsigned(e.args[0])
        elif k == "trunci" and _width(e.ty) == 1:  # the low bit, as a boolean 0/1
            r = emit(CvuOp.AND, (go(e.args[0]), _imm(1)))
        elif k == "trunci" and (_width(e.ty) or 32) < 32:  # wrap-around to the narrow type
            r = emit(CvuOp.SEXT, (go(e.args[0]),), (_width(e.ty),))
        elif k in value_preserving:  # checked: the value is unchanged (see int_body_check)
            r = go(e.args[0])
        elif k in ("andi", "ori", "xori") and _width(e.ty) != 1:  # bitwise on two's complement
            r = emit({"andi": CvuOp.AND, "ori": CvuOp.OR, "xori": CvuOp.XOR}[k],
                     (go(e.args[0]), go(e.args[1])))
        elif k == "xori":  # i1 only: a != b
            eq = emit(CvuOp.CMP_EQ, (go(e.args[0]), go(e.args[1])))
            r = emit(CvuOp.CMP_EQ, (eq, Ref(RefKind.IMM, 0, 0.0)))
        elif k in ("shli", "shrsi", "shrui"):  # the ops read their operands' w bits themselves
            w = _width(e.ty)
            prm = (w,) if k == "shli" else (w, int(k == "shrui"))
            r = emit(CvuOp.SHL if k == "shli" else CvuOp.SHR, (go(e.args[0]), go(e.args[1])), prm)
        elif k in ("remsi", "divsi", "maxsi", "minsi"):
            op_ = {"remsi": CvuOp.REM, "divsi": CvuOp.DIV, "maxsi": CvuOp.MAX,
                   "minsi": CvuOp.MIN}[k]
            r = emit(op_, (signed(e.args[0]), signed(e.args[1])))
        elif k in ("remui", "divui", "maxui", "minui"):
            op_ = {"remui": CvuOp.REM, "divui": CvuOp.DIV, "maxui": CvuOp.MAX,
                   "minui": CvuOp.MIN}[k]
            r = wrapped(e, emit(op_, (unsigned(e.args[0]), unsigned(e.args[1]))))
        elif k in ("sitofp", "absi"):
            r = emit(CvuOp.ITOF if k == "sitofp" else CvuOp.ABS, (signed(e.args[0]),))
        elif k == "uitofp" and e.args[0].kind != "cmpf":
            r = emit(CvuOp.ITOF, (unsigned(e.args[0]),))
        elif k == "cmpi":
            a, b = e.args
            p = _CMPI.get(e.val, e.val)
            if p in ("ult", "ule", "ugt", "uge"):
                x, y = unsigned(a), unsigned(b)
            else:
                x, y = signed(a), signed(b)
            if p in ("sgt", "slt", "ugt", "ult"):
                r = emit(CvuOp.CMP_GT, (x, y) if p[1:] == "gt" else (y, x))
            elif p in ("sge", "sle", "uge", "ule"):
                r = emit(CvuOp.CMP_GE, (x, y) if p[1:] == "ge" else (y, x))
            elif p == "eq":
                r = emit(CvuOp.CMP_EQ, (x, y))
            elif p == "ne":
                eq = emit(CvuOp.CMP_EQ, (x, y))
                r = emit(CvuOp.CMP_EQ, (eq, Ref(RefKind.IMM, 0, 0.0)))
            else:
                raise ScheduleError(f"{where}: integer comparison '{p}' has no CVU stage")
        elif k in binop:
            r = emit(binop[k], (go(e.args[0]), go(e.args[1])))
        elif k in unop:
            r = emit(unop[k], (go(e.args[0]),))
        elif k in ("extf", "truncf", "sitofp"):
            # f32 <-> f64 around a comparison or arithmetic in a torch-mlir body: the CVU
            # computes in f32 (tensors of f64 are refused by the scheduler); sitofp is the
            # integer lane's itof (unop above)
            r = go(e.args[0])
        elif k in ("uitofp", "extui") and e.args[0].kind == "cmpf":
            # an i1 comparison as a number: the CVU compare stage already yields 1.0 / 0.0
            r = go(e.args[0])
        elif k == "fpowi":
            # x ** n with a constant integer n (torch-mlir's Pow by an integer scalar): x * x for
            # n = 2, else the CVU pow with n as an immediate (exact for a negative base too)
            n = e.args[1]
            if n.kind != "c" or float(n.val) != int(n.val):
                raise ScheduleError(f"{where}: fpowi by a non-constant exponent has no CVU stage")
            x = go(e.args[0])
            r = emit(CvuOp.MUL, (x, x)) if int(n.val) == 2 else emit(CvuOp.POW, (x, _imm(int(n.val))))
        elif k in ELEMENTARY:
            r = ELEMENTARY[k](emit, go(e.args[0]))
        elif k == "fma":  # math.fma: one rounding, the CVU's fused multiply-add
            r = emit(CvuOp.FMA, tuple(go(a) for a in e.args))
        elif k == "select":
            c, a, b = e.args
            # relu idiom: select(x > c, x, c) -> max(x, c)
            if c.kind == "cmpf" and c.val in ("ugt", "ogt", "uge", "oge") and \
                    c.args[0] is a and c.args[1] is b:
                r = emit(CvuOp.MAX, (go(a), go(b)))
            else:
                r = emit(CvuOp.SELECT, (go(c), go(a), go(b)))
        elif k == "cmpf":
            a, b = e.args
            p = e.val
            if p in ("ogt", "ugt"):
                r = emit(CvuOp.CMP_GT, (go(a), go(b)))
            elif p in ("oge", "uge"):
                r = emit(CvuOp.CMP_GE, (go(a), go(b)))
            elif p in ("olt", "ult"):
                r = emit(CvuOp.CMP_GT, (go(b), go(a)))
            elif p in ("ole", "ule"):
                r = emit(CvuOp.CMP_GE, (go(b), go(a)))
            elif p in ("oeq", "ueq"):
                r = emit(CvuOp.CMP_EQ, (go(a), go(b)))
            elif p == "one":  # a < b or a > b: false for NaN
                r = emit(CvuOp.MAX, (emit(CvuOp.CMP_GT, (go(a), go(b))),
                                     emit(CvuOp.CMP_GT, (go(b), go(a)))))
            elif p == "une":  # not (a == b): true for NaN
                eq = emit(CvuOp.CMP_EQ, (go(a), go(b)))
                r = emit(CvuOp.CMP_EQ, (eq, Ref(RefKind.IMM, 0, 0.0)))
            else:
                raise ScheduleError(f"{where}: comparison '{p}' has no CVU stage")
        else:
            raise ScheduleError(f"{where}: body op '{k}' has no CVU stage (supported: "
                                f"{', '.join(sorted(binop) + sorted(unop) + sorted(composed))}, "
                                "cmpf, cmpi, select, xori, shli, shrsi, shrui, remsi, remui, "
                                "divui, maxui, minui)")
        if e.ty in _HALF and e is not exprs[0] and k not in _EXACT_IN_HALF:
            r = rounded(r, _HALF[e.ty])
        memo[key] = r
        return r

    def rounded(r: Ref, dt: DType) -> Ref:
        """``r`` rounded to the 16-bit ``dt`` (nearest even), as the body's 16-bit value is: an
        ``add``/``sub``/``mul``/``div`` stage just emitted rounds its own result (``iparams``),
        anything else is followed by ``mul(r, #1.0){dt}`` (exact but for the rounding)."""
        last = stages[-1] if stages and r == Ref(RefKind.STAGE, len(stages) - 1) else None
        if last is not None and last.op in _ROUNDING_BINOPS and not last.iparams:
            stages[-1] = Stage(last.op, last.args, axis=last.axis, fparam=last.fparam,
                               iparams=(dt.value,))
            return r
        return emit(CvuOp.MUL, (r, Ref(RefKind.IMM, 0, 1.0)), (dt.value,))

    # the result wraps to its type like arith.addi/subi/muli (ONNX Add/Sub/Mul of int8/int16
    # wrap too): without it 100 + 100 in i8 faulted at the store instead of giving -56
    res = signed(exprs[0])
    if res.kind is not RefKind.STAGE:  # a pure copy / constant: one COPY stage
        emit(CvuOp.COPY, (res,))
    return tuple(stages)


#: unsigned integer widths the CVU's signed integer lane converts exactly (extui/uitofp from,
#: fptoui to): the unsigned value of an iN held as signed bits is below 2**16, inside i32
UNSIGNED_WIDTHS = (8, 16)


def _width(t) -> int | None:
    s = str(t)
    return int(s[1:]) if s.startswith("i") and s[1:].isdigit() else None


def int_body_check(op: Operation, where: str) -> None:
    """Refuse the integer body ops whose value the CVU lanes would not reproduce exactly:
    fptoui to other than i8/i16 (bitwise logic, shifts, unsigned ops, extensions and wrap-around
    truncation have exact integer-lane stages: ``_expr_stages``)."""
    for o in op.regions[0].blocks[0].ops:
        n = o.name
        if not n.startswith("arith."):
            continue
        k = n[6:]
        dst = _width(o.results[0].type) if o.results else None
        if k == "fptoui" and dst not in UNSIGNED_WIDTHS:
            raise ScheduleError(f"{where}: unsigned conversion (fptoui) to i{dst} is not "
                                "supported (the CVU integer lane is signed: unsigned i8/i16 only)")
        if k == "index_cast":
            raise ScheduleError(f"{where}: index_cast outside a gather is not supported")


def _norm_roles(members: list[Operation], params: list[SSAValue], mset: set[int]) -> list:
    """gamma (multiplied) then beta (added) among a norm group's parameter inputs."""
    gamma = beta = None
    for mo in members:
        if mo.name != "linalg.generic":
            continue
        exprs = body_exprs(mo)
        ins_of = list(mo.inputs)  # type: ignore[attr-defined]
        if not exprs:
            continue
        top = exprs[0]
        for i, v in enumerate(ins_of):
            if v not in params:
                continue
            uses_direct = any(a.kind == "in" and a.val == i for a in top.args)
            if top.kind == "mulf" and uses_direct:
                gamma = v
            elif top.kind in ("addf", "subf") and uses_direct:
                beta = v
    out = []
    if gamma is not None:
        out.append(gamma)
    if beta is not None:
        if gamma is None:
            raise ScheduleError("a norm with a shift but no scale is not supported")
        out.append(beta)
    if len(out) != len(params):
        raise ScheduleError("could not tell the scale/shift inputs of a norm idiom apart")
    return out
