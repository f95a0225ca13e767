"""Element-type numerics shared by the compiler (data segments) and the interpreter (no xDSL).

One place defines how a value of each :class:`~m100.targets.m100.isa.DType` is held in numpy, how it
is laid out in bytes, and how values convert between types:

======  ==================  ===============================================================
dtype   numpy value type    bytes
======  ==================  ===============================================================
i8      int8                1 byte, two's complement
i32     int32               4 bytes little endian
f16     float16             IEEE binary16, little endian
bf16    float32 (rounded)   the upper 16 bits of the binary32 pattern, little endian
f32     float32             IEEE binary32, little endian
i4      int8 in [-8, 7]     packed two per byte, element 2i in the low nibble of byte i
i16     int16               2 bytes little endian, two's complement
======  ==================  ===============================================================

Conversions (:func:`convert`) follow one rule set everywhere:

* float -> integer: round to nearest, ties to even (``np.rint``), saturate to the type's range,
  NaN -> 0;
* integer -> narrower integer: saturate;
* -> f16 / f32: IEEE round to nearest even (numpy), overflow -> inf;
* -> bf16: from the binary32 value, round to nearest even on the 16 dropped bits (overflow -> inf,
  NaN stays NaN).

:func:`erf` is a vectorized float erf (numpy has none) with a relative error < 1.2e-7, used by GELU.
"""

from __future__ import annotations

import numpy as np

from .isa import CvuOp, DType, RefKind

_VALUE = {DType.I8: np.int8, DType.I32: np.int32, DType.F16: np.float16, DType.BF16: np.float32,
          DType.F32: np.float32, DType.I4: np.int8, DType.I16: np.int16}
_INT_RANGE = {DType.I8: (-128, 127), DType.I32: (-(1 << 31), (1 << 31) - 1), DType.I4: (-8, 7),
              DType.I16: (-(1 << 15), (1 << 15) - 1)}


def value_dtype(dt: DType) -> np.dtype:
    """The numpy type that holds values of ``dt`` (bf16 values are float32 rounded to bf16)."""
    return np.dtype(_VALUE[DType(dt)])


def int_range(dt: DType) -> tuple[int, int]:
    return _INT_RANGE[DType(dt)]


def byte_size(dt: DType, count: int) -> int:
    """Bytes taken by ``count`` packed elements of ``dt``."""
    return (count * DType(dt).bits + 7) // 8


# --- bf16 ---------------------------------------------------------------------------------------
def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (uint16) of float32 values, round to nearest even, NaN kept quiet."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounding = ((b >> 16) & 1) + np.uint32(0x7FFF)
    out = ((b + rounding) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    if nan.any():
        out = np.where(nan, ((b >> 16) | 0x40).astype(np.uint16), out)
    return out


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


def round_bf16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bf16 value (kept as float32)."""
    return bf16_bits_to_f32(f32_to_bf16_bits(x))


# --- conversion ---------------------------------------------------------------------------------
def convert(values: np.ndarray | float | int, dt: DType) -> np.ndarray:
    """Convert ``values`` to the numpy value type of ``dt`` by the rules in the module doc."""
    dt = DType(dt)
    v = np.asarray(values)
    if dt.is_int:
        lo, hi = _INT_RANGE[dt]
        if v.dtype.kind == "f":
            with np.errstate(invalid="ignore"):
                r = np.rint(v.astype(np.float64))
                r = np.nan_to_num(r, nan=0.0, posinf=hi, neginf=lo)
                return np.clip(r, lo, hi).astype(_VALUE[dt])
        if v.dtype.kind == "b":
            v = v.astype(np.int64)
        if v.dtype == _VALUE[dt] and dt is not DType.I4:
            return v
        return np.clip(v.astype(np.int64), lo, hi).astype(_VALUE[dt])
    with np.errstate(over="ignore", invalid="ignore"):
        if dt is DType.F32:
            return v.astype(np.float32)
        if dt is DType.F16:
            return v.astype(np.float16)
        return round_bf16(v.astype(np.float32))  # BF16


# --- bytes --------------------------------------------------------------------------------------
def to_bytes(values: np.ndarray, dt: DType) -> np.ndarray:
    """The little-endian byte image (uint8, flat) of ``values`` converted to ``dt``."""
    dt = DType(dt)
    v = convert(np.asarray(values).reshape(-1), dt)
    if dt is DType.I4:
        nib = (v.astype(np.int16) & 0xF).astype(np.uint8)
        if nib.size % 2:
            nib = np.append(nib, np.uint8(0))
        return (nib[0::2] | (nib[1::2] << 4)).astype(np.uint8)
    if dt is DType.BF16:
        return f32_to_bf16_bits(v).astype("<u2").view(np.uint8)
    return np.ascontiguousarray(v.astype(v.dtype.newbyteorder("<"))).view(np.uint8)


def from_bytes(raw: np.ndarray, dt: DType, count: int | None = None) -> np.ndarray:
    """Values (flat) of ``dt`` from a little-endian byte image."""
    dt = DType(dt)
    raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
    if dt is DType.I4:
        n = raw.size * 2 if count is None else count
        nib = np.empty(raw.size * 2, dtype=np.uint8)
        nib[0::2] = raw & 0xF
        nib[1::2] = raw >> 4
        return unpack_nibbles(nib[:n])
    size = dt.bits // 8
    n = raw.size // size if count is None else count
    raw = raw[:n * size]
    if dt is DType.BF16:
        return bf16_bits_to_f32(raw.view("<u2"))
    return raw.view(np.dtype(_VALUE[dt]).newbyteorder("<")).astype(_VALUE[dt])


def unpack_nibbles(nib: np.ndarray) -> np.ndarray:
    """Signed values of 4-bit two's complement nibbles (uint8 0..15) as int8."""
    n = nib.astype(np.int8)
    return np.where(n > 7, n - 16, n).astype(np.int8)


# --- requantization -----------------------------------------------------------------------------
def quantize_multiplier(real: float) -> tuple[int, int]:
    """``(multiplier, shift)`` of the TCU's requant (``isa.Requant``) for a real multiplier
    ``real > 0`` (``x_scale * w_scale / y_scale``): ``multiplier`` in ``[2**30, 2**31)`` and
    ``real ~= multiplier / 2**shift`` with a relative error <= 2**-31 (multiplier rounded to
    nearest); exact for an f32 ``real`` (its 24-bit significand fits), which the ``f32-rne`` requant
    mode reads back as that f32 value. Raises ValueError when ``shift`` would leave ``[0, 63]`` (``real`` >= 2**31 or
    < 2**-33)."""
    import math

    real = float(real)
    if not (real > 0.0 and math.isfinite(real)):
        raise ValueError(f"requant multiplier must be finite and > 0, not {real}")
    mant, exp = math.frexp(real)  # real = mant * 2**exp, mant in [0.5, 1)
    shift = 31 - exp
    mult = round(mant * (1 << 31))
    if mult == 1 << 31:
        mult //= 2
        shift -= 1
    if not 0 <= shift <= 63:
        raise ValueError(f"requant multiplier {real} needs shift {shift}, outside [0, 63]")
    return int(mult), int(shift)


# --- fused multiply-add -------------------------------------------------------------------------
def fma_f32(a, b, c) -> np.ndarray:
    """``a * b + c`` of f32 values with ONE rounding to f32 (IEEE fusedMultiplyAdd, round to
    nearest even; what x86 ``vfmadd`` and MLIR ``math.fma`` on f32 compute), vectorized.

    ``a * b`` is exact in f64 (two 24-bit significands); the f64 sum is rounded *to odd* (the
    exact error of the f64 addition, Knuth's TwoSum, decides the last bit), and rounding that to
    f32 is the correctly rounded f32 result because f64 has more than 24 + 2 bits (Boldo and
    Melquiond, "Emulation of FMA and correctly rounded sums", IEEE TC 2008)."""
    a = np.asarray(a, dtype=np.float32).astype(np.float64)
    b = np.asarray(b, dtype=np.float32).astype(np.float64)
    c = np.asarray(c, dtype=np.float32).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        p = a * b
        s = p + c
        v = s - p
        e = (p - (s - v)) + (c - v)  # s + e == p + c exactly (finite s)
        bits = np.asarray(s).view(np.int64)
        odd = np.isfinite(s) & np.isfinite(e) & (e != 0) & ((bits & 1) == 0)
        if np.any(odd):
            s = np.where(odd, np.nextafter(s, np.where(e > 0, np.inf, -np.inf)), s)
        return np.asarray(s).astype(np.float32)


# --- math ---------------------------------------------------------------------------------------
def erf(x: np.ndarray) -> np.ndarray:
    """Vectorized erf (Numerical Recipes ``erfcc`` Chebyshev fit, fractional error < 1.2e-7)."""
    x = np.asarray(x, dtype=np.float64)
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = (-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (
            -0.82215223 + t * 0.17087277)))))))))
    with np.errstate(under="ignore", over="ignore"):
        erfc = t * np.exp(poly)
    return np.where(x >= 0, 1.0 - erfc, erfc - 1.0)


__all__ = ["value_dtype", "int_range", "byte_size", "f32_to_bf16_bits", "bf16_bits_to_f32",
           "round_bf16", "convert", "to_bytes", "from_bytes", "unpack_nibbles", "erf",
           "quantize_multiplier", "fma_f32"]


# --- CVU lanes (docs/isa.md "CVU lanes") ----------------------------------------------------------
#: unary ops that stay in the integer lane on an integer argument (floor/ceil/round/ftoi: identity)
CVU_INT_UNARY = frozenset({CvuOp.COPY, CvuOp.NEG, CvuOp.ABS, CvuOp.RELU, CvuOp.SQUARE, CvuOp.FLOOR,
                           CvuOp.CEIL, CvuOp.ROUND, CvuOp.SIGN, CvuOp.FTOI})
CVU_INT_BINARY = frozenset({CvuOp.ADD, CvuOp.SUB, CvuOp.MUL, CvuOp.DIV, CvuOp.MAX, CvuOp.MIN,
                            CvuOp.REM})
CVU_CMP = frozenset({CvuOp.CMP_GT, CvuOp.CMP_GE, CvuOp.CMP_EQ})
CVU_INT_REDUCE = frozenset({CvuOp.RSUM, CvuOp.RMAX, CvuOp.RMIN, CvuOp.RPROD})
#: ops of the integer lane only (an argument of the float lane is a run-time fault): width
#: conversions, bitwise logic, shifts (``rem`` is in both lanes: C ``%`` / IEEE ``fmod``)
CVU_INT_ONLY = frozenset({CvuOp.ZEXT, CvuOp.SEXT, CvuOp.AND, CvuOp.OR, CvuOp.XOR, CvuOp.SHL,
                          CvuOp.SHR})


def cvu_stage_lanes(stages, input_is_int: list[bool]) -> list[bool]:
    """Per stage: True if it computes in (and yields) the integer lane, by the rule the
    interpreter applies to the values (an integer-typed argument set with integral immediates;
    comparisons and ftoi always yield integers, itof floats). The compiler uses it to type the
    intermediate tensors of a pipeline it splits."""
    out: list[bool] = []

    def kinds(refs):
        ks = []
        for r in refs:
            if r.kind is RefKind.INPUT:
                ks.append(input_is_int[r.index])
            elif r.kind is RefKind.STAGE:
                ks.append(out[r.index])
            else:
                ks.append(None if float(r.imm).is_integer() else False)  # None: an integral imm
        return ks

    def int_lane(ks) -> bool:
        real = [k for k in ks if k is not None]
        return bool(real) and all(real) and all(k is not False for k in ks)

    for st in stages:
        ks = kinds(st.args)
        op = st.op
        if op is CvuOp.FTOI or op in CVU_CMP or op in CVU_INT_ONLY:
            out.append(True)
        elif op is CvuOp.ITOF:
            out.append(False)
        elif int(op) < 32:
            out.append(op in CVU_INT_UNARY and ks[0] is True)
        elif op in CVU_INT_BINARY:
            out.append(int_lane(ks))
        elif op is CvuOp.SELECT:
            out.append(int_lane(ks[1:]))
        elif op in CVU_INT_REDUCE:
            out.append(ks[0] is True)
        else:
            out.append(False)
    return out
