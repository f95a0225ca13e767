"""Exact matchers for ONNX QuantizeLinear / DequantizeLinear as torch-mlir lowers them (no pass here).

torch-mlir turns ``DequantizeLinear(q, s, zp)`` into an elementwise ``linalg.generic``

    yield mulf(sitofp(subi(extsi(q), ZP)), S)              (per tensor: ZP, S scalar constants)
    yield mulf(sitofp(subi(extsi(q), extsi(zp[c]))), s[c])  (per axis: 1-D constant operands)

and ``QuantizeLinear(x, s, zp)`` into

    yield fptosi(minimumf(maximumf(addf(roundeven(divf(x, S)), ZP), QMIN), QMAX))

(the ``subi``/``addf`` are absent when the zero point is 0 in some forms; scalar scales may be
``truncf`` of an f64 constant). :func:`match_dequant` / :func:`match_quant` recognize exactly these
forms (signed storage, f32 expressed type, constant parameters) and return the parameters; anything
else returns None, so a caller leaves the op alone (never a guess).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.dialects.builtin import Float32Type, IntegerType, TensorType
from xdsl.ir import Operation, SSAValue

from m100.passes.graph.common import (E, body_exprs, const_array, generic_maps, is_identity,
                                      is_elementwise_generic, map_dims, shape_of)


@dataclass(frozen=True)
class QParams:
    """Uniform quantization parameters: ``real = scale * (q - zero_point)``.

    ``scales``/``zero_points`` have one entry (per tensor, ``axis`` None) or one per index of
    dimension ``axis``. ``width``/``qmin``/``qmax`` describe the signed storage."""

    scales: tuple[float, ...]
    zero_points: tuple[int, ...]
    axis: int | None
    width: int
    qmin: int
    qmax: int

    def scale_array(self, rank: int | None = None) -> np.ndarray:
        """Scales as float32, shaped to broadcast against a tensor of ``rank`` (per-axis)."""
        s = np.asarray(self.scales, np.float32)
        if self.axis is None or rank is None:
            return s.reshape(()) if self.axis is None else s
        shape = [1] * rank
        shape[self.axis] = len(self.scales)
        return s.reshape(shape)

    def zp_array(self, rank: int | None = None) -> np.ndarray:
        z = np.asarray(self.zero_points, np.int64)
        if self.axis is None or rank is None:
            return z.reshape(()) if self.axis is None else z
        shape = [1] * rank
        shape[self.axis] = len(self.zero_points)
        return z.reshape(shape)


def _elem(v: SSAValue):
    t = v.type
    return t.get_element_type() if isinstance(t, TensorType) else None


def _param(e: E, op: Operation, rank: int, float_: bool):
    """A scale/zero-point leaf: ('c', value) for a scalar constant, ('axis', dim, array) for a 1-D
    constant operand read along one dim, else None. Looks through extsi / truncf."""
    while e.kind in ("extsi", "truncf", "extf") and len(e.args) == 1:
        e = e.args[0]
    if e.kind == "c":
        return ("c", float(e.val) if float_ else e.val)  # type: ignore[arg-type]
    if e.kind == "in" and isinstance(e.val, int) and e.val >= 1:
        v = op.inputs[e.val]  # type: ignore[attr-defined]
        arr = const_array(v)
        m = generic_maps(op)[e.val]
        if arr is None:
            return None
        try:
            dims = map_dims(m)
        except ValueError:
            return None
        if len(dims) != 1 or dims[0] is None or arr.ndim != 1:
            return None
        return ("axis", dims[0], arr)
    return None


def _combine(scale, zp, rank: int):
    """Per-tensor or per-axis parameters from two leaves (a scalar leaf broadcasts)."""
    axis = None
    n = 1
    for p in (scale, zp):
        if p[0] == "axis":
            if axis is not None and p[1] != axis:
                return None
            axis, n = p[1], len(p[2])
    if axis is not None:
        for p in (scale, zp):
            if p[0] == "axis" and len(p[2]) != n:
                return None

    def vals(p, kind):
        if p[0] == "c":
            return [kind(p[1])] * n
        return [kind(x) for x in p[2].tolist()]

    scales = vals(scale, lambda x: float(np.float32(x)))
    zps = vals(zp, float)
    if any(z != int(z) for z in zps) or any(not (s > 0 and np.isfinite(s)) for s in scales):
        return None
    return tuple(scales), tuple(int(z) for z in zps), axis


def _sole_input_is_identity(op: Operation) -> bool:
    maps = generic_maps(op)
    return is_identity(maps[0]) and is_identity(maps[-1])


def match_dequant(op: Operation) -> tuple[SSAValue, QParams] | None:
    """``(q, params)`` if ``op`` is exactly a signed-storage DequantizeLinear to f32, else None."""
    if op.name != "linalg.generic" or not is_elementwise_generic(op) or len(op.results) != 1 \
            or not op.inputs:  # type: ignore[attr-defined]  # a generator (no inputs): not a cast
        return None
    q = op.inputs[0]  # type: ignore[attr-defined]
    qt, rt = _elem(q), _elem(op.results[0])
    if not isinstance(qt, IntegerType) or not isinstance(rt, Float32Type) or qt.width.data > 32:
        return None
    if not _sole_input_is_identity(op):
        return None
    exprs = body_exprs(op)
    if not exprs or len(exprs) != 1:
        return None
    e = exprs[0]
    if e.kind != "mulf" or len(e.args) != 2:
        return None
    a, s = e.args
    if a.kind != "sitofp":
        a, s = s, a
    if a.kind != "sitofp":
        return None
    inner = a.args[0]
    zp_leaf: tuple = ("c", 0)
    if inner.kind == "subi":
        x, z = inner.args
        zp = _param(z, op, len(shape_of(q) or ()), False)
        if zp is None:
            return None
        zp_leaf = zp
        inner = x
    while inner.kind == "extsi":
        inner = inner.args[0]
    if not (inner.kind == "in" and inner.val == 0):
        return None
    sc = _param(s, op, len(shape_of(q) or ()), True)
    if sc is None:
        return None
    used = {leaf.val for leaf in _leaves(e) if leaf.kind == "in"}
    n_in = len(op.inputs)  # type: ignore[attr-defined]
    if used != set(range(n_in)):
        return None  # an input the formula does not explain
    comb = _combine(sc, zp_leaf, len(shape_of(q) or ()))
    if comb is None:
        return None
    scales, zps, axis = comb
    w = qt.width.data
    lo, hi = -(1 << (w - 1)), (1 << (w - 1)) - 1
    return q, QParams(scales, zps, axis, w, lo, hi)


def match_quant(op: Operation) -> tuple[SSAValue, QParams] | None:
    """``(x, params)`` if ``op`` is exactly a QuantizeLinear f32 -> signed iN (round half to even,
    saturate), else None. ``qmin``/``qmax`` are the clamp bounds (the storage range)."""
    if op.name != "linalg.generic" or not is_elementwise_generic(op) or len(op.results) != 1 \
            or not op.inputs:  # type: ignore[attr-defined]  # a generator (no inputs): not a cast
        return None
    x = op.inputs[0]  # type: ignore[attr-defined]
    xt, rt = _elem(x), _elem(op.results[0])
    if not isinstance(xt, Float32Type) or not isinstance(rt, IntegerType) or rt.width.data > 16:
        return None
    if not _sole_input_is_identity(op):
        return None
    exprs = body_exprs(op)
    if not exprs or len(exprs) != 1:
        return None
    e = exprs[0]
    if e.kind != "fptosi":
        return None
    e = e.args[0]
    if e.kind != "minimumf" or e.args[1].kind != "c":
        return None
    hi = e.args[1].val
    e = e.args[0]
    if e.kind != "maximumf" or e.args[1].kind != "c":
        return None
    lo = e.args[1].val
    e = e.args[0]
    zp_leaf: tuple = ("c", 0.0)
    if e.kind == "addf":
        zp = _param(e.args[1], op, len(shape_of(x) or ()), True)
        if zp is None:
            return None
        zp_leaf = zp
        e = e.args[0]
    if e.kind != "roundeven":
        return None
    e = e.args[0]
    if e.kind != "divf" or not (e.args[0].kind == "in" and e.args[0].val == 0):
        return None
    sc = _param(e.args[1], op, len(shape_of(x) or ()), True)
    if sc is None:
        return None
    w = rt.width.data
    slo, shi = -(1 << (w - 1)), (1 << (w - 1)) - 1
    if lo != int(lo) or hi != int(hi) or not slo <= lo < hi <= shi:
        return None
    used = {leaf.val for leaf in _leaves(exprs[0]) if leaf.kind == "in"}
    if used != set(range(len(op.inputs))):  # type: ignore[attr-defined]
        return None
    comb = _combine(sc, zp_leaf, len(shape_of(x) or ()))
    if comb is None:
        return None
    scales, zps, axis = comb
    return x, QParams(scales, zps, axis, w, int(lo), int(hi))


@dataclass(frozen=True)
class Requant:
    """int32 accumulator -> int: ``q = clamp(roundeven(acc * multipliers[c]) + zero_point, qmin,
    qmax)`` (``c`` the index along ``axis``, or one multiplier)."""

    multipliers: tuple[float, ...]
    axis: int | None
    zero_point: int
    qmin: int
    qmax: int


def match_requant(op: Operation) -> tuple[SSAValue, Requant] | None:
    """``(acc, requant)`` if ``op`` is exactly an elementwise i32 -> iN (N <= 8) requantization
    ``fptosi(minimumf(maximumf([addf](roundeven(mulf(sitofp(acc), M)), ZP), LO), HI))`` with
    constant ``M`` (scalar or per-axis), ``ZP``, ``LO``, ``HI``; else None."""
    if op.name != "linalg.generic" or not is_elementwise_generic(op) or len(op.results) != 1 \
            or not op.inputs:  # type: ignore[attr-defined]  # a generator (no inputs): not a cast
        return None
    acc = op.inputs[0]  # type: ignore[attr-defined]
    at, rt = _elem(acc), _elem(op.results[0])
    if not isinstance(at, IntegerType) or at.width.data != 32 or not isinstance(rt, IntegerType) \
            or rt.width.data > 8 or not _sole_input_is_identity(op):
        return None
    exprs = body_exprs(op)
    if not exprs or len(exprs) != 1 or exprs[0].kind != "fptosi":
        return None
    e = exprs[0].args[0]
    if e.kind != "minimumf" or e.args[1].kind != "c":
        return None
    hi = e.args[1].val
    e = e.args[0]
    if e.kind != "maximumf" or e.args[1].kind != "c":
        return None
    lo = e.args[1].val
    e = e.args[0]
    zp = 0.0
    if e.kind == "addf":
        if e.args[1].kind != "c":
            return None
        zp = e.args[1].val
        e = e.args[0]
    if e.kind != "roundeven" or e.args[0].kind != "mulf":
        return None
    x, m = e.args[0].args
    if x.kind != "sitofp":
        x, m = m, x
    if x.kind != "sitofp" or not (x.args[0].kind == "in" and x.args[0].val == 0):
        return None
    rank = len(shape_of(acc) or ())
    leaf = _param(m, op, rank, True)
    if leaf is None:
        return None
    used = {lf.val for lf in _leaves(exprs[0]) if lf.kind == "in"}
    if used != set(range(len(op.inputs))):  # type: ignore[attr-defined]
        return None
    w = rt.width.data
    slo, shi = -(1 << (w - 1)), (1 << (w - 1)) - 1
    if any(v != int(v) for v in (lo, hi, zp)) or not slo <= lo < hi <= shi:  # type: ignore[arg-type]
        return None
    if leaf[0] == "c":
        mults, axis = (float(np.float32(leaf[1])),), None
    else:
        mults, axis = tuple(float(np.float32(v)) for v in leaf[2].tolist()), leaf[1]
    if any(not (v > 0 and np.isfinite(v)) for v in mults):
        return None
    return acc, Requant(mults, axis, int(zp), int(lo), int(hi))  # type: ignore[arg-type]


def _leaves(e: E):
    if not e.args:
        yield e
    for a in e.args:
        yield from _leaves(a)


__all__ = ["QParams", "Requant", "match_dequant", "match_quant", "match_requant"]
