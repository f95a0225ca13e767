"""Integer bit ops through the whole stack (issue 12): BitShift, BitwiseAnd/Or/Xor/Not, Mod of
integers, unsigned compares / Max / Min, compiled, run on the interpreter and compared exactly
with numpy oracles written from the ONNX operator definitions (not from our lowering)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper as h

from m100.errors import M100Error
from m100.tools.onnx_backend import M100Backend

RNG = np.random.default_rng(1212)


def _model(op, xs, out_dtype=None, **attrs):
    """One ONNX node ``op`` over inputs ``xs`` (numpy arrays: their dtypes and shapes)."""
    names = [f"x{i}" for i in range(len(xs))]
    tt = lambda a: h.np_dtype_to_tensor_dtype(np.dtype(a))  # noqa: E731
    ins = [h.make_tensor_value_info(n, tt(x.dtype), x.shape) for n, x in zip(names, xs)]
    shape = np.broadcast_shapes(*[x.shape for x in xs])
    out = h.make_tensor_value_info("y", tt(out_dtype or xs[0].dtype), shape)
    g = h.make_graph([h.make_node(op, names, ["y"], **attrs)], "bits", ins, [out])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    onnx.checker.check_model(m)
    return m


def _run(op, xs, out_dtype=None, **attrs):
    (y,) = M100Backend.prepare(_model(op, xs, out_dtype, **attrs), machine="tiny").run(xs)
    return y


# --- oracles from the ONNX definitions -----------------------------------------------------------
def onnx_shift(x, s, left):
    """ONNX BitShift with Python integers: bits past the type's width are dropped (left); an
    amount < 0 or >= the width gives 0, or -1 for a right shift of a negative signed x."""
    bits = x.dtype.itemsize * 8
    out = []
    for a, k in zip(x.reshape(-1).tolist(), s.reshape(-1).tolist()):
        if not 0 <= k < bits:
            r = -1 if (not left and a < 0) else 0
        elif left:
            r = (a << k) % (1 << bits)
            if x.dtype.kind == "i" and r >= 1 << (bits - 1):
                r -= 1 << bits
        else:
            r = a >> k
        out.append(r)
    return np.array(out, dtype=x.dtype).reshape(x.shape)


def onnx_mod(a, b, fmod):
    """ONNX Mod of integers: fmod 0 -> a - floor(a / b) * b (sign of b), fmod 1 -> C's %."""
    r = [x % y if not fmod else int(np.fmod(x, y)) for x, y in zip(a.reshape(-1).tolist(),
                                                                 b.reshape(-1).tolist())]
    return np.array(r, dtype=a.dtype).reshape(a.shape)


@pytest.mark.parametrize("dt", [np.int8, np.int32])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift_signed_any_amount(dt, direction):
    info = np.iinfo(dt)
    x = RNG.integers(int(info.min), int(info.max) + 1, size=(3, 16)).astype(dt)
    s = RNG.integers(-4, np.dtype(dt).itemsize * 8 + 4, size=(3, 16)).astype(dt)
    y = _run("BitShift", [x, s], direction=direction)
    np.testing.assert_array_equal(y, onnx_shift(x, s, direction == "LEFT"))


def test_bitshift_uint16_right_logical_and_left_wrap():
    # uint16 values are held as i16 patterns; the inputs must fit i16 (the runtime checks that),
    # the results may not: 0x7fff << 1 = 0xfffe comes back as the uint16 value
    x = RNG.integers(0, 1 << 15, size=(2, 24)).astype(np.uint16)
    s = RNG.integers(0, 20, size=(2, 24)).astype(np.uint16)
    x[0, 0], s[0, 0] = 0x7FFF, 1
    for d in ("LEFT", "RIGHT"):
        np.testing.assert_array_equal(_run("BitShift", [x, s], direction=d),
                                      onnx_shift(x, s, d == "LEFT"))


def test_bitwise_ops_int16_full_range():
    a = RNG.integers(-(1 << 15), 1 << 15, size=(4, 8)).astype(np.int16)
    b = RNG.integers(-(1 << 15), 1 << 15, size=(8,)).astype(np.int16)  # broadcast
    for op, f in (("BitwiseAnd", np.bitwise_and), ("BitwiseOr", np.bitwise_or),
                  ("BitwiseXor", np.bitwise_xor)):
        np.testing.assert_array_equal(_run(op, [a, b]), f(a, b))
    np.testing.assert_array_equal(_run("BitwiseNot", [a]), np.invert(a))


@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_int32_signs(fmod):
    a = RNG.integers(-(1 << 30), 1 << 30, size=(4, 16)).astype(np.int32)
    b = (RNG.integers(1, 5000, size=(4, 16)) * RNG.choice([-1, 1], size=(4, 16))).astype(np.int32)
    a[0, :4], b[0, :4] = [7, -7, 7, -7], [3, 3, -3, -3]
    np.testing.assert_array_equal(_run("Mod", [a, b], fmod=fmod), onnx_mod(a, b, fmod))


def test_unsigned_compare_and_max_uint16():
    a = RNG.integers(0, 1 << 15, size=(3, 20)).astype(np.uint16)
    b = RNG.integers(0, 1 << 15, size=(3, 20)).astype(np.uint16)
    b[0] = a[0]
    np.testing.assert_array_equal(_run("Less", [a, b], np.bool_), a < b)
    np.testing.assert_array_equal(_run("GreaterOrEqual", [a, b], np.bool_), a >= b)
    np.testing.assert_array_equal(_run("Max", [a, b]), np.maximum(a, b))
    np.testing.assert_array_equal(_run("Min", [a, b]), np.minimum(a, b))


def test_uint8_full_range_bits_mod_compare():
    # u8 tensors are held as the same i8 bits (200 as -56): unsigned ops read them zero-extended;
    # Mod is rewritten to int64 (torch-mlir's remsi on the bits gave 200 % 7 = 0)
    a = np.array([[200, 255, 129, 7, 0, 128, 254, 3]], np.uint8)
    b = np.array([[7, 16, 128, 200, 5, 127, 255, 3]], np.uint8)
    np.testing.assert_array_equal(_run("Mod", [a, b]), a % b)
    np.testing.assert_array_equal(_run("Less", [a, b], np.bool_), a < b)
    np.testing.assert_array_equal(_run("Max", [a, b]), np.maximum(a, b))
    np.testing.assert_array_equal(_run("BitwiseAnd", [a, b]), a & b)
    np.testing.assert_array_equal(_run("BitShift", [a, b % 9], direction="RIGHT"),
                                  onnx_shift(a, b % 9, False))


def test_mod_uint16_is_one_line_refusal():
    # torch-mlir computes an unsigned Mod signed and cannot lower a Cast from uint16
    a = np.array([[40000, 3]], np.uint16)
    with pytest.raises(M100Error, match="Mod 'y' of uint16 is not supported") as e:
        _run("Mod", [a, a])
    assert "\n" not in str(e.value)
