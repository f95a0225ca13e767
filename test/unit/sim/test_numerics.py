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
