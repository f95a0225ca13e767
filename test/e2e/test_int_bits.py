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


def test_unsigned_div_mod_uint8_full_range():
    # torch-mlir divides unsigned integers with divsi / remsi on the signless bits (uint8 161 / 6
    # gave 241, 200 % 7 gave 0): every uint8 dividend against divisors across the range
    a = np.tile(np.arange(256, dtype=np.uint8), 8).reshape(8, 256)
    b = np.array([1, 2, 6, 7, 127, 128, 200, 255], np.uint8).reshape(8, 1)
    np.testing.assert_array_equal(_run("Div", [a, b]), a // b)
    np.testing.assert_array_equal(_run("Mod", [a, b]), a % b)


@pytest.mark.parametrize("op", ["Div", "Mod"])
def test_unsigned_div_mod_uint16_full_range(op):
    # no Cast from uint16 in torch-mlir: a long division step with unsigned compares; divisors
    # on both sides of 2**15, dividends at the edges and random
    b = np.array([1, 2, 3, 255, 32767, 32768, 32769, 65535], np.uint16).reshape(8, 1)
    edges = [0, 1, 2, 32766, 32767, 32768, 32769, 65534, 65535]
    a = np.concatenate([np.tile(np.array(edges, np.uint16), (8, 1)),
                        RNG.integers(0, 1 << 16, size=(8, 55)).astype(np.uint16)], axis=1)
    want = a // b if op == "Div" else a % b
    np.testing.assert_array_equal(_run(op, [a, b]), want)


@pytest.mark.onnx_op("Mod", "Div", kind="negative")
@pytest.mark.parametrize("op", ["Mod", "Div"])
def test_mod_uint32_of_a_computed_value_is_one_line_refusal(op):
    # uint32 values held as i32: a computed value may be a wrapped pattern; remsi would be wrong
    x = np.array([[4000000000, 3]], np.uint32)
    g = h.make_graph([h.make_node("Add", ["x0", "x0"], ["s"]), h.make_node(op, ["s", "x0"], ["y"])],
                     "m", [h.make_tensor_value_info("x0", onnx.TensorProto.UINT32, x.shape)],
                     [h.make_tensor_value_info("y", onnx.TensorProto.UINT32, x.shape)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    with pytest.raises(M100Error, match=f"{op} 'y' of uint32 is not supported") as e:
        M100Backend.prepare(m, machine="tiny")
    assert "\n" not in str(e.value)


def _unsigned_values(dt):
    """Every uint8 value; uint16: the edges around 0, 2**15 and 2**16 and random ones."""
    if dt == np.uint8:
        return np.arange(256, dtype=np.uint8).reshape(4, 64)
    edges = np.array([0, 1, 2, 127, 128, 255, 32766, 32767, 32768, 32769, 65534, 65535], dt)
    return np.concatenate([edges, RNG.integers(0, 1 << 16, size=52).astype(dt)]).reshape(4, 16)


@pytest.mark.parametrize("dt", [np.uint8, np.uint16])
def test_unsigned_abs_sign_clip_are_unsigned(dt):
    # torch-mlir lowers Abs with math.absi and Clip with signed min/max on the signless bits
    # (uint8 254 -> 2, Clip(200, 3, 150) -> 150 via -56 < 3 ...): now identity / unsigned order
    x = _unsigned_values(dt)
    RNG.shuffle(x, axis=1)
    np.testing.assert_array_equal(_run("Abs", [x]), x)
    np.testing.assert_array_equal(_run("Sign", [x]), (x > 0).astype(dt))
    lo, hi = np.array(3, dt), np.array(150 if dt == np.uint8 else 40000, dt)
    np.testing.assert_array_equal(_run("Clip", [x, lo, hi]), np.clip(x, lo, hi))


@pytest.mark.parametrize("dt", [np.uint8, np.uint16])
def test_unsigned_topk_and_maxpool_order(dt):
    # TopK / MaxPool compared signed: TopK of [.., 200, 255] picked 127
    x = _unsigned_values(dt)
    RNG.shuffle(x, axis=1)
    k = np.array([5], np.int64)
    g = h.make_graph([h.make_node("TopK", ["x", "k"], ["v", "i"], axis=1)], "t",
                     [h.make_tensor_value_info("x", h.np_dtype_to_tensor_dtype(np.dtype(dt)),
                                               x.shape)],
                     [h.make_tensor_value_info("v", h.np_dtype_to_tensor_dtype(np.dtype(dt)),
                                               [4, 5]),
                      h.make_tensor_value_info("i", onnx.TensorProto.INT64, [4, 5])],
                     initializer=[onnx.numpy_helper.from_array(k, "k")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    v, i = M100Backend.prepare(m, machine="tiny").run([x])
    order = np.argsort(-x.astype(np.int64), axis=1, kind="stable")[:, :5]  # ties: lower index
    np.testing.assert_array_equal(np.asarray(i).reshape(4, 5), order)
    np.testing.assert_array_equal(np.asarray(v).reshape(4, 5), np.take_along_axis(x, order, 1))
    if dt == np.uint8:
        x4 = x.reshape(1, 4, 8, 8)
        u8 = onnx.TensorProto.UINT8
        g = h.make_graph([h.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
                         "p", [h.make_tensor_value_info("x", u8, x4.shape)],
                         [h.make_tensor_value_info("y", u8, [1, 4, 4, 4])])
        m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
        (pool,) = M100Backend.prepare(m, machine="tiny").run([x4])
        np.testing.assert_array_equal(pool, x4.reshape(1, 4, 4, 2, 4, 2).max(axis=(3, 5)))


def test_unsigned_topk_of_an_opset_13_model():
    # the frontend converts old models to a newer opset first: the rewrite applies there too
    x = np.array([[1, 200, 255, 127, 128]], np.uint8)
    u8 = onnx.TensorProto.UINT8
    g = h.make_graph([h.make_node("TopK", ["x", "k"], ["v", "i"], axis=1)], "t",
                     [h.make_tensor_value_info("x", u8, x.shape)],
                     [h.make_tensor_value_info("v", u8, [1, 2]),
                      h.make_tensor_value_info("i", onnx.TensorProto.INT64, [1, 2])],
                     initializer=[onnx.numpy_helper.from_array(np.array([2], np.int64), "k")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    v, i = M100Backend.prepare(m, machine="tiny").run([x])
    np.testing.assert_array_equal(np.asarray(v).reshape(1, 2), [[255, 200]])
    np.testing.assert_array_equal(np.asarray(i).reshape(1, 2), [[2, 1]])
