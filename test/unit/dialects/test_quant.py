"""The ``quant`` dialect: ``!quant.uniform`` types print and parse back identically (hypothesis over
storage widths/signedness/ranges, expressed types, scales, zero points, axes); text written from
MLIR's grammar parses to the intended fields; every verifier rule rejects what it must."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, Float64Type, TensorType
from xdsl.parser import Parser
from xdsl.utils.exceptions import VerifyException

from m100.context import make_context
from m100.dialects.quant import (UniformQuantizedPerAxisType, UniformQuantizedType, format_scale,
                                 storage_range)

_CTX = make_context()
_FLOATS = {"f16": Float16Type(), "bf16": BFloat16Type(), "f32": Float32Type(), "f64": Float64Type()}


def _parse_type(text: str):
    return Parser(_CTX, text).parse_type()


def _print(t) -> str:
    return str(t)


@st.composite
def quant_params(draw):
    width = draw(st.sampled_from([2, 4, 8, 16, 32]) | st.integers(1, 32))
    signed = draw(st.booleans())
    lo, hi = storage_range(width, signed)
    if draw(st.booleans()) and hi - lo >= 2:
        a = draw(st.integers(lo, hi - 1))
        b = draw(st.integers(a + 1, hi))
        lo, hi = a, b
    expressed = draw(st.sampled_from(sorted(_FLOATS)))
    scale_st = (st.floats(min_value=1e-30, max_value=1e30, allow_nan=False, allow_infinity=False)
                | st.floats(2.0**-26, 8.0, width=32) | st.sampled_from([0.0125, 1.0, 2.0, 1 / 127.5]))
    n = draw(st.integers(1, 6))
    scales = draw(st.lists(scale_st, min_size=n, max_size=n))
    zps = draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n))
    return width, signed, lo, hi, expressed, scales, zps


def _lit(x: float) -> str:
    """An MLIR float literal for x (digits from Python's repr; MLIR needs a '.')."""
    m, _, e = repr(x).partition("e")
    return (m if "." in m else m + ".0") + (f"e{e}" if e else "")


def _storage_text(width, signed, lo, hi):
    full = storage_range(width, signed)
    return f"{'i' if signed else 'u'}{width}" + ("" if (lo, hi) == full else f"<{lo}:{hi}>")


@settings(max_examples=150, deadline=None)
@given(quant_params(), st.booleans(), st.integers(0, 3))
def test_uniform_roundtrip_and_fields(params, per_axis, axis):
    """Text written from MLIR's grammar (with Python's own repr of each scale) parses to exactly the
    drawn fields; printing then parsing gives an equal type and the same text."""
    width, signed, lo, hi, expressed, scales, zps = params
    st_text = _storage_text(width, signed, lo, hi)
    if per_axis:
        qps = ", ".join(f"{_lit(s)}:{z}" for s, z in zip(scales, zps))
        text = f"!quant.uniform<{st_text}:{expressed}:{axis}, {{{qps}}}>"
    else:
        text = f"!quant.uniform<{st_text}:{expressed}, {_lit(scales[0])}:{zps[0]}>"
    t = _parse_type(text)
    assert (t.width, t.signed, t.qmin, t.qmax) == (width, signed, lo, hi)
    assert t.expressed_type == _FLOATS[expressed]
    if per_axis:
        assert isinstance(t, UniformQuantizedPerAxisType)
        assert t.quantized_dimension == axis
        assert t.scales == tuple(scales) and t.zero_points == tuple(zps)
    else:
        assert type(t) is UniformQuantizedType
        assert (t.scale, t.zero_point) == (scales[0], zps[0])
    printed = _print(t)
    again = _parse_type(printed)
    assert again == t
    assert _print(again) == printed
    # inside a tensor type, through a whole op in generic and pretty form
    tt = TensorType(t, [2] * (axis + 1) if not per_axis else [len(scales)] * (axis + 1))
    src = f'%x = "test.op"() : () -> {tt}'
    m = Parser(_CTX, src).parse_module()
    assert m.body.block.first_op.results[0].type == tt


@given(st.floats(min_value=1e-300, max_value=1e300, allow_nan=False, allow_infinity=False))
def test_format_scale_reads_back_exactly(x):
    s = format_scale(x)
    assert float(s) == x and "." in s
    if float(f"{x:.6e}") == x:
        assert s == f"{x:.6e}"  # MLIR's 6-digit %e form whenever it is exact


def test_mlir_examples_print_like_mlir():
    # CHECK lines of MLIR's test/Dialect/Quant/parse-uniform.mlir (zero point 0 not printed,
    # default storage range not printed, uN for unsigned)
    for text, want in [
        ("!quant.uniform<i8<-8:7>:f32, 0.99872:7>", "!quant.uniform<i8<-8:7>:f32, 9.987200e-01:7>"),
        ("!quant.uniform<u8:f32, 2.0e+2>", "!quant.uniform<u8:f32, 2.000000e+02>"),
        ("!quant.uniform<u8:f32:1, {2.0e+2,0.99872:120}>",
         "!quant.uniform<u8:f32:1, {2.000000e+02, 9.987200e-01:120}>"),
        ("!quant.uniform<i16:f32, 0.99872:127>", "!quant.uniform<i16:f32, 9.987200e-01:127>"),
    ]:
        assert _print(_parse_type(text)) == want


@pytest.mark.parametrize("make, msg", [
    (lambda: UniformQuantizedType("i8", Float32Type(), 0.0), "illegal scale: 0.0"),
    (lambda: UniformQuantizedType("i8", Float32Type(), math.inf), "illegal scale: inf"),
    (lambda: UniformQuantizedType("i8", Float32Type(), math.nan), "illegal scale: nan"),
    (lambda: UniformQuantizedType("u8", Float32Type(), 1.0, 256), "illegal zero point 256"),
    (lambda: UniformQuantizedType("i4", Float32Type(), 1.0, -9), "illegal zero point -9"),
    (lambda: UniformQuantizedType("i4", Float32Type(), 1.0, 0, -9, 7), "illegal storage min"),
    (lambda: UniformQuantizedType("u4", Float32Type(), 1.0, 0, 3, 3), "illegal storage min"),
    (lambda: UniformQuantizedType("i33", Float32Type(), 1.0), "illegal storage type size: 33"),
    (lambda: UniformQuantizedPerAxisType("i8", Float32Type(), -1, [1.0]), "illegal quantized dimension"),
    (lambda: UniformQuantizedPerAxisType("i8", Float32Type(), 0, [1.0, 2.0], [0]),
     "illegal number of scales and zeroPoints: 2, 1"),
    (lambda: UniformQuantizedPerAxisType("i8", Float32Type(), 0, []), "needs at least one scale"),
])
def test_verifier_rejects(make, msg):
    with pytest.raises(VerifyException, match=msg.replace("(", r"\(")):
        make()


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 16), st.booleans(), st.integers(-70000, 70000))
def test_zero_point_accepted_iff_in_storage_range(width, signed, zp):
    lo, hi = storage_range(width, signed)
    ok = lo <= zp <= hi
    try:
        UniformQuantizedType((width, signed), Float32Type(), 1.0, zp)
    except VerifyException:
        assert not ok
    else:
        assert ok


def test_storage_ranges_match_numpy():
    for w, np_t in [(8, np.int8), (16, np.int16), (32, np.int32)]:
        info = np.iinfo(np_t)
        assert storage_range(w, True) == (info.min, info.max)
        uinfo = np.iinfo(np.dtype(np_t.__name__.replace("int", "uint")))
        assert storage_range(w, False) == (uinfo.min, uinfo.max)
    assert storage_range(4, True) == (-8, 7) and storage_range(4, False) == (0, 15)
