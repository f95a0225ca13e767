"""Quantized values in the scheduler (issue 11): ``!quant.uniform`` tensors, ``quant.*`` casts and
the requantize epilogue of an integer contraction.

* A ``tensor<..x!quant.uniform<i8:f32, s:z>>`` is its storage: an ``i8`` buffer
  (:func:`storage_dtype`); ``quant.scast`` (quantized <-> storage type) is an alias, no instruction.
* ``quant.qcast`` (f32 -> i8, per tensor) is one CVU pipeline computing ONNX QuantizeLinear exactly
  as onnxruntime's CPU kernel does (``x / s`` in f32, round half to even, ``+ zp``, saturate):
  ``v = min(max(x / s, qmin - zp), qmax - zp)``, then ``(v + 1.5 * 2**23) - 1.5 * 2**23`` (each
  stage rounds to f32, so this is round-half-even of ``v`` for ``|v| < 2**22``; the clamp first keeps
  it in range), then ``+ zp`` (an exact integer) and the CVU's saturating store to i8. Adding the
  zero point *before* rounding would be wrong: ``0.49999997 + 15`` rounds to the f32 tie ``15.5``.
* ``quant.dcast`` (i8 -> f32): ``(q - zp) * s`` (exact subtraction, one f32 rounding), the ONNX
  DequantizeLinear definition in f32.
* The ``requant`` epilogue stage (``m100.requant_scale/zp/range`` of ``fold-quantized-contractions``)
  -> ``isa.Requant``: each real multiplier ``m`` (an f32 value: onnxruntime computes
  ``x_scale * w_scale / y_scale`` in f32) as ``numerics.quantize_multiplier(m)``, which holds it
  exactly (``m == multiplier * 2**-shift``); the TCU rounds ``f32(f32(acc) * m)`` half to even
  (the machine's ``tcu_requant`` mode ``f32-rne``, docs/isa.md section 5), exactly the IR's
  ``fptosi(clamp(roundeven(sitofp(acc) * m) + zp))``; one value -> the
  instruction's (multiplier, shift), several -> a per-channel i32 table ``[2, F]`` (row 0 the
  multipliers, row 1 the shifts; the emitter walks it as ``[F, 2]``).

Per-axis quantized activations and u8 storage are refused with one line (the graph passes leave
those forms in float, so they do not reach here from ONNX).
"""
from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import IntegerType, TensorType
from xdsl.ir import Operation, SSAValue

from m100.dialects.quant import QuantizedType, UniformQuantizedType
from m100.passes.graph.common import FUSED_INTO, GROUP
from m100.targets.m100.isa import CvuOp, Ref, RefKind, Stage
from m100.targets.m100.numerics import quantize_multiplier

from .graph import ScheduleError

#: 1.5 * 2**23: adding and subtracting it rounds an f32 value half to even (for |v| < 2**22)
ROUND_MAGIC = 12582912.0

REQUANT_SCALE, REQUANT_ZP, REQUANT_RANGE = "m100.requant_scale", "m100.requant_zp", \
    "m100.requant_range"


def storage_dtype(qt: QuantizedType, where: str = "") -> str:
    """The scheduler dtype of a quantized element type's storage (i8 only)."""
    if qt.width == 8 and qt.signed:
        return "i8"
    what = f"{where}: " if where else ""
    raise ScheduleError(f"{what}quantized storage {qt.storage_text} is not supported by the "
                        "scheduler (signed 8-bit storage only)")


def _per_tensor(t, where: str) -> UniformQuantizedType:
    e = t.get_element_type()
    if not isinstance(e, UniformQuantizedType):
        raise ScheduleError(f"{where}: per-axis quantized activations are not supported by the "
                            "scheduler (per-tensor only)")
    storage_dtype(e, where)
    return e


def _s(i: int) -> Ref:
    return Ref(RefKind.STAGE, i)


def cast_stages(op: Operation, where: str) -> tuple[Stage, ...]:
    """CVU stages of a per-tensor ``quant.qcast`` (f32 -> i8) or ``quant.dcast`` (i8 -> f32)."""
    x = Ref(RefKind.INPUT, 0)
    if op.name == "quant.qcast":
        q = _per_tensor(op.results[0].type, where)
        s, zp = float(np.float32(q.scale)), int(q.zero_point)
        imm = lambda v: Ref(RefKind.IMM, 0, float(v))  # noqa: E731
        return (Stage(CvuOp.DIV, (x, imm(s))),
                Stage(CvuOp.MAX, (_s(0), imm(q.qmin - zp))),
                Stage(CvuOp.MIN, (_s(1), imm(q.qmax - zp))),
                Stage(CvuOp.ADD, (_s(2), imm(ROUND_MAGIC))),
                Stage(CvuOp.SUB, (_s(3), imm(ROUND_MAGIC))),
                Stage(CvuOp.ADD, (_s(4), imm(zp))))
    if op.name == "quant.dcast":
        q = _per_tensor(op.operands[0].type, where)
        return (Stage(CvuOp.SUB, (x, Ref(RefKind.IMM, 0, float(q.zero_point)))),
                Stage(CvuOp.MUL, (_s(0), Ref(RefKind.IMM, 0, float(np.float32(q.scale))))))
    raise ScheduleError(f"{where}: {op.name} is not a quantize/dequantize cast")


def fold_cast(op: Operation, arr: np.ndarray, where: str) -> np.ndarray:
    """``quant.dcast`` / ``quant.qcast`` of a constant, evaluated here (per tensor or per axis):
    a weight the graph passes left as ``dcast(i8 constant)`` (e.g. a batch matmul's) becomes its
    f32 value, so the contraction runs in float rather than being refused."""
    from m100.dialects.quant import UniformQuantizedPerAxisType

    qtype = (op.operands[0] if op.name == "quant.dcast" else op.results[0]).type.get_element_type()
    shape = np.shape(arr)
    if isinstance(qtype, UniformQuantizedPerAxisType):
        ax = qtype.quantized_dimension
        bshape = [1] * len(shape)
        bshape[ax] = shape[ax]
        s = np.asarray(qtype.scales, np.float32).reshape(bshape)
        z = np.asarray(qtype.zero_points, np.float32).reshape(bshape)
    elif isinstance(qtype, UniformQuantizedType):
        s, z = np.float32(qtype.scale), np.float32(qtype.zero_point)
    else:
        raise ScheduleError(f"{where}: {op.name} of an unknown quantized type")
    if op.name == "quant.dcast":
        return ((np.asarray(arr).astype(np.float32) - z) * s).astype(np.float32)
    v = np.rint((np.asarray(arr, np.float32) / s).astype(np.float32)) + z
    return np.clip(v, qtype.qmin, qtype.qmax).astype(np.int64)


def _body_kinds(exprs) -> set[str]:
    seen, out, todo = set(), set(), list(exprs)
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        out.add(e.kind)
        todo.extend(getattr(e, "args", ()) or ())
    return out


def _int_bits(v: SSAValue) -> int:
    """The width of ``v``'s integer element type (its storage for a quantized one), 0 for floats."""
    e = v.type.get_element_type() if isinstance(v.type, TensorType) else v.type
    if isinstance(e, QuantizedType):
        return e.width
    return e.width.data if isinstance(e, IntegerType) else 0


def epilogue_result(op: Operation) -> SSAValue:
    """The value of the last op fused into contraction ``op`` (its single-use chain)."""
    gid = op.attributes[GROUP]
    cur = op.results[0]
    while True:
        us = [u.operation for u in cur.uses]
        if len(us) != 1 or us[0].attributes.get(FUSED_INTO) != gid:
            return cur
        cur = us[0].results[0]


def check_int_minmax(exprs, values, where: str) -> None:
    """Refuse an elementwise body with integer max/min (``maxsi``/``minsi``: the CVU computes them
    in f32, exact only for <= 16-bit integers) on wider integer ``values``."""
    if any(k in ("maxsi", "minsi") for k in _body_kinds(exprs)) and \
            any(_int_bits(v) > 16 for v in values):
        raise ScheduleError(f"{where}: integer max/min of wider than 16-bit values is not "
                            "supported (the CVU computes in f32)")


def requant_params(op: Operation, where: str) -> dict:
    """The requantize stage of contraction ``op``: ``dict(mult=[..], shift=[..], zp, qmin, qmax)``
    (one entry per output channel, or one)."""
    try:
        scale = [float(a.value.data) for a in op.attributes[REQUANT_SCALE].data]  # type: ignore
        zp = int(op.attributes[REQUANT_ZP].value.data)  # type: ignore[union-attr]
        lo, hi = (int(a.value.data) for a in op.attributes[REQUANT_RANGE].data)  # type: ignore
    except (KeyError, AttributeError, ValueError) as e:
        raise ScheduleError(f"{where}: the requant epilogue lacks its m100.requant_* "
                            f"attributes ({e})") from None
    if not (-128 <= lo <= hi <= 127 and lo <= zp <= hi):
        raise ScheduleError(f"{where}: requant range [{lo}, {hi}] / zero point {zp} is not i8")
    mult, shift = [], []
    for m in scale:
        if float(np.float32(m)) != m:  # fold-quantized-contractions stores f32 values
            raise ScheduleError(f"internal: {where}: requant multiplier {m!r} is not an f32 value")
        try:
            a, b = quantize_multiplier(m)
        except ValueError as e:
            raise ScheduleError(f"{where}: {e}") from None
        # the pair holds the f32 value exactly (24-bit significand in the 31-bit multiplier), so
        # both requant modes of the machine (Machine.tcu_requant) see the same real multiplier
        assert a * 2.0 ** -b == m, (m, a, b)
        mult.append(a)
        shift.append(b)
    return dict(mult=mult, shift=shift, zp=zp, qmin=lo, qmax=hi)


def requant_table(rq: dict) -> np.ndarray:
    """The per-channel ``[2, F]`` i32 table (multipliers, shifts) of :func:`requant_params`."""
    return np.ascontiguousarray(np.array([rq["mult"], rq["shift"]], dtype=np.int64)
                                .astype(np.int32))


__all__ = ["ROUND_MAGIC", "cast_stages", "check_int_minmax", "epilogue_result", "fold_cast", "requant_params", "requant_table", "storage_dtype"]
