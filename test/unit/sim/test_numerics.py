"""targets/m100/numerics.py: conversions vs oracles written with Python integers / math."""

import math
import struct

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from m100.targets.m100 import numerics
from m100.targets.m100.isa import DType


def bf16_oracle(x: float) -> float:
    """Nearest bf16 by exhaustive choice between the two neighbours (ties: even mantissa)."""
    b = struct.unpack("<I", struct.pack("<f", x))[0]
    lo = b & 0xFFFF0000
    hi = lo + 0x10000
    to_f = lambda v: struct.unpack("<f", struct.pack("<I", v & 0xFFFFFFFF))[0]  # noqa: E731
    flo, fhi = to_f(lo), to_f(hi) if hi <= 0xFFFFFFFF else math.inf
    x64 = to_f(b)
    dlo, dhi = abs(x64 - flo), abs(fhi - x64) if math.isfinite(fhi) else math.inf
    if dlo < dhi or (dlo == dhi and not (lo >> 16) & 1):
        return flo
    return fhi


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False, width=32))
def test_bf16_round_nearest_even(x):
    got = float(numerics.round_bf16(np.array([x], np.float32))[0])
    assert got == bf16_oracle(x) or (math.isinf(got) and abs(x) > 3.38e38)


def test_bf16_bytes_roundtrip_and_ties():
    v = np.array([1.0, 1.00390625, 1.01171875, -2.5, 0.0], np.float32)  # 1+2^-8 tie->1, 1+3*2^-8 tie->1+2^-6
    r = numerics.convert(v, DType.BF16)
    assert list(r) == [1.0, 1.0, 1.015625, -2.5, 0.0]
    raw = numerics.to_bytes(r, DType.BF16)
    assert raw.size == 10 and list(raw[:2]) == [0x80, 0x3F]
    assert np.array_equal(numerics.from_bytes(raw, DType.BF16), r)


def test_float_to_int_saturates_and_rounds_half_even():
    v = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 200.0, -200.0, np.nan, np.inf, -np.inf])
    assert list(numerics.convert(v, DType.I8)) == [0, 2, 2, 0, -2, 127, -128, 0, 127, -128]
    assert list(numerics.convert(v, DType.I4)) == [0, 2, 2, 0, -2, 7, -8, 0, 7, -8]
    assert list(numerics.convert(np.array([3e9, -3e9]), DType.I32)) == [2**31 - 1, -2**31]
    assert list(numerics.convert(np.array([300, -300], np.int32), DType.I8)) == [127, -128]


@given(st.lists(st.integers(-8, 7), min_size=1, max_size=33))
def test_i4_pack_unpack(vals):
    raw = numerics.to_bytes(np.array(vals), DType.I4)
    assert raw.size == (len(vals) + 1) // 2
    for i, v in enumerate(vals):  # element 2i in the low nibble of byte i
        nib = (int(raw[i // 2]) >> (4 * (i % 2))) & 0xF
        assert nib == v & 0xF
    assert list(numerics.from_bytes(raw, DType.I4, len(vals))) == vals


def test_erf_accuracy():
    x = np.linspace(-6, 6, 2001)
    ref = np.array([math.erf(v) for v in x])
    assert np.max(np.abs(numerics.erf(x) - ref)) < 2e-7


def _f32_bits(x) -> int:
    return struct.unpack("<I", struct.pack("<f", float(x)))[0]


def fma_oracle(a: float, b: float, c: float) -> float:
    """The f32 nearest to the exact ``a * b + c`` (exact rationals), ties to the even
    significand: chosen among the f32 candidates around the f64 value by exact distance."""
    from fractions import Fraction

    exact = Fraction(a) * Fraction(b) + Fraction(c)
    guess = np.float32(float(exact))  # within one f32 ulp of the answer (double rounding)
    cands = {float(guess), float(np.nextafter(guess, np.float32(np.inf))),
             float(np.nextafter(guess, np.float32(-np.inf)))}
    cands = [v for v in cands if math.isfinite(v)]
    best = min(cands, key=lambda v: (abs(Fraction(v) - exact), _f32_bits(v) & 1))
    return best


_F32 = st.floats(allow_nan=False, allow_infinity=False, width=32, min_value=-2.0 ** 60,
                max_value=2.0 ** 60)


@settings(max_examples=400, deadline=None)
@given(_F32, _F32, _F32)
def test_fma_f32_is_one_rounding(a, b, c):
    got = numerics.fma_f32(np.float32(a), np.float32(b), np.float32(c))
    assert float(got) == fma_oracle(a, b, c)


def test_fma_f32_differs_from_two_roundings_where_the_product_rounds():
    f = np.float32
    e = f(2.0 ** -23)
    # (1 + e)^2 = 1 + 2e + e^2: the product rounds to 1 + 2e, the fused result keeps e^2
    a = f(1) + e
    assert numerics.fma_f32(a, a, f(-1) - f(2) * e) == f(2.0 ** -46)
    assert f(a * a) - (f(1) + f(2) * e) == 0
    # ties of the final rounding go to even: 1 + 2**-24 (exactly half an ulp above 1) -> 1,
    # 1 + 3 * 2**-24 -> 1 + 2**-22
    assert numerics.fma_f32(f(2.0 ** -12), f(2.0 ** -12), f(1)) == f(1)
    assert numerics.fma_f32(f(3 * 2.0 ** -12), f(2.0 ** -12), f(1)) == f(1) + f(2.0 ** -22)
    # vectorized, broadcasting, an exactly representable case
    np.testing.assert_array_equal(numerics.fma_f32(np.arange(4, dtype=f), f(3), f(1)),
                                  np.array([1, 4, 7, 10], f))
    # double rounding: a * b = 2**-24 - 2**-70, c = 1 + 2**-23: the exact sum lies just below the
    # tie between 1 + 2**-23 and 1 + 2**-22; rounding it to f64 first lands on the tie (-> even,
    # 1 + 2**-22, wrong); one rounding gives 1 + 2**-23
    a, b, c = f(2.0 ** -12 * (1 + 2.0 ** -23)), f(2.0 ** -12 * (1 - 2.0 ** -23)), f(1) + e
    assert f(np.float64(a) * np.float64(b) + np.float64(c)) == f(1) + f(2.0 ** -22)
    assert numerics.fma_f32(a, b, c) == f(1) + e
    assert fma_oracle(float(a), float(b), float(c)) == float(f(1) + e)
