"""MatMulInteger with constant 8-bit weights on the int8 TCU (issue 11,
frontend/onnx_rewrite_qint8.py): ``a' @ (B - zb) + (o - za) * colsum(B - zb)`` with ``a'`` int8
(uint8 ``a`` shifted by 128), compiled to i8 x i8 -> i32 TCU instructions, bit-exact against the
ONNX definition ``(a - za) @ (B - zb)`` in int64 numpy and onnxruntime; the forms that do not fit
int8 stay on the exact f32 emulation (onnx_rewrite_qruntime.py), also checked exactly."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from m100.targets.m100.isa import Conv2D, MatMul
from m100.tools import driver
from m100.tools.onnx_backend import M100Backend, onnxruntime_run

U8, I8, I32 = TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32
_NP = {U8: np.uint8, I8: np.int8}


def _model(k, ta, tb, za, zb, runtime_za=False, m=6, n=24, seed=0, batch=()):
    """MatMulInteger(a [*batch, m, k], B const [k, n], za, zb); B spans its whole type's range."""
    rng = np.random.default_rng(seed)
    lo, hi = (0, 256) if tb == U8 else (-128, 128)
    w = rng.integers(lo, hi, (k, n)).astype(_NP[tb])
    w[0, :2] = [lo, hi - 1]
    inits, ins = [numpy_helper.from_array(w, "w")], ["x", "w"]
    gin = [helper.make_tensor_value_info("x", ta, [*batch, m, k])]
    if runtime_za:
        gin.append(helper.make_tensor_value_info("za", ta, []))
        ins.append("za")
    elif za is not None or zb is not None:
        inits.append(numpy_helper.from_array(np.array(za or 0, _NP[ta]), "za"))
        ins.append("za")
    if zb is not None:
        zbv = np.asarray(zb, _NP[tb])
        inits.append(numpy_helper.from_array(zbv, "zb"))
        ins.append("zb")
    g = helper.make_graph([helper.make_node("MatMulInteger", ins, ["y"])], "mmi", gin,
                          [helper.make_tensor_value_info("y", I32, [*batch, m, n])], inits)
    mo = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    mo.ir_version = 8
    return mo, w


def _inputs(mo, rng):
    xs = []
    for vi in mo.graph.input:
        t = vi.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        lo, hi = (0, 256) if t.elem_type == U8 else (-128, 128)
        v = rng.integers(lo, hi, shape).astype(_NP[t.elem_type])
        if v.ndim == 2:
            v[0, :2] = [lo, hi - 1]  # the extremes of a's type
        xs.append(v)
    return xs


CASES = {  # name: (k, a type, B type, za, zb, runtime za, TCU dtype)
    "s8_no_zero_points": (64, I8, I8, None, None, False, "I8"),
    "s8_za": (64, I8, I8, -7, None, False, "I8"),
    "u8_za": (64, U8, I8, 131, None, False, "I8"),
    "u8_za_zb_per_column_fits": (48, U8, I8, 3, "percol", False, "I8"),
    "u8_runtime_za": (96, U8, I8, None, None, True, "I8"),  # DynamicQuantizeLinear's form
    "u8_runtime_za_zb0": (40, U8, I8, None, 0, True, "I8"),
    # B - zb leaves int8 (127 - (-2)), uint8 weights: B - 128 and the weight zero point moved out
    # (- (rowsum(a') + K c) * (zb - 128)); these were f32 matmuls (K = 2048: refused) before
    "s8_zb_overflows_int8": (64, I8, I8, 3, -2, False, "I8"),
    "u8_weights": (64, U8, U8, 5, 9, False, "I8"),
    "u8_weights_runtime_za": (80, U8, U8, None, 200, True, "I8"),
    "s8_zb_k2048": (2048, I8, I8, -3, 5, False, "I8"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_matmul_integer_const_weights_int8_tcu_bit_exact(name):
    k, ta, tb, za, zb, rt, tcu_dt = CASES[name]
    n = 24
    if zb == "percol":  # per-column zero points chosen so that B - zb stays in int8
        zb = None
        mo, w = _model(k, ta, tb, za, None, rt, n=n)
        w64 = w.astype(np.int64)
        zbv = np.clip(np.arange(n) % 5 - 2, w64.max(0) - 127, w64.min(0) + 128).astype(np.int8)
        mo.graph.initializer.append(numpy_helper.from_array(zbv, "zb"))
        mo.graph.node[0].input.append("zb")
    else:
        mo, w = _model(k, ta, tb, za, zb, rt, n=n)
    cr = driver.compile(mo, machine="tiny")
    tcu = [i for s in cr.program.streams.values() for i in s if isinstance(i, (MatMul, Conv2D))]
    assert tcu and {(i.a.dtype.name, i.b.dtype.name) for i in tcu} == {(tcu_dt, tcu_dt)}
    if tcu_dt == "I8":
        assert {i.c.dtype.name for i in tcu} == {"I32"}
    rng = np.random.default_rng(5)
    inits = {t.name: numpy_helper.to_array(t) for t in mo.graph.initializer}
    backend = M100Backend.prepare(mo, machine="tiny")
    for _ in range(2):
        xs = _inputs(mo, rng)
        feeds = dict(zip([i.name for i in mo.graph.input], xs))
        (y,) = backend.run(xs)
        zav = feeds.get("za", inits.get("za", 0))
        zbv = inits.get("zb", 0)
        want = (feeds["x"].astype(np.int64) - np.int64(zav)) @ (w.astype(np.int64) - np.asarray(zbv, np.int64))
        np.testing.assert_array_equal(np.asarray(y).astype(np.int64), want)
        np.testing.assert_array_equal(onnxruntime_run(mo, xs)[0].astype(np.int64), want)


def test_int8_rewrite_declines_when_int32_could_overflow():
    """K * 128 * max|B'| + 255 * max|colsum B'| beyond int32: not taken (the f32 emulation or
    torch-mlir decides); just inside the bound: taken."""
    from onnx import numpy_helper as nh

    from m100.frontend.onnx_rewrite_qint8 import matmul_integer_i8

    def attempt(k):
        node = helper.make_node("MatMulInteger", ["a", "w", "za"], ["y"])
        inits = {"w": np.full((k, 1), 127, np.int8), "za": np.array(0, np.uint8)}
        c = iter(range(1000))
        return matmul_integer_i8(node, inits, {"a": U8, "w": I8, "za": U8}, {"a": [1, k]},
                                 lambda p: f"{p}{next(c)}", helper, nh)

    # bound: k * 128 * 127 + 255 * 127 * k = k * 48641 <= 2**31 - 1  <=>  k <= 44149
    assert attempt(44149) is not None
    assert attempt(44150) is None


def test_u8_quantize_that_is_a_graph_output_keeps_uint8():
    """u8_qdq_to_s8 retypes a uint8 Q/DQ pair only when the quantized value is read by
    DequantizeLinears alone: here it is also a graph output (uint8 bits expected) -- kept; the
    results equal onnxruntime's for the whole uint8 range (zero point 250: clipping at 255)."""
    F32 = TensorProto.FLOAT
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "s"),
             numpy_helper.from_array(np.array(250, np.uint8), "z")]
    g = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
         helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])], "q",
        [helper.make_tensor_value_info("x", F32, [4, 16])],
        [helper.make_tensor_value_info("q", U8, [4, 16]), helper.make_tensor_value_info("y", F32, [4, 16])],
        inits)
    mo = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    mo.ir_version = 8
    x = np.linspace(-140, 20, 64).astype(np.float32).reshape(4, 16)
    q, y = M100Backend.prepare(mo, machine="tiny").run([x])
    want_q, want_y = onnxruntime_run(mo, [x])
    assert q.dtype == np.uint8 and np.array_equal(q, want_q) and np.array_equal(y, want_y)
    assert q.min() == 0 and q.max() == 255


@pytest.mark.parametrize("batch,ta,za,zb,rt", [((2,), U8, 131, None, False),
                                              ((2, 3), I8, 3, -2, False),
                                              ((3,), U8, None, None, True)])
def test_batched_matmul_integer_is_one_int8_contraction(batch, ta, za, zb, rt):
    """a [*batch, M, K] @ constant B [K, N] (a transformer's activations): flattened to one
    [prod(batch) * M, K] i8 x i8 -> i32 contraction and reshaped back (was an f32 matmul),
    bit-exact vs the ONNX definition in int64 numpy and onnxruntime; with a zero point that
    moves B out of int8 (the rowsum correction) and a run-time za."""
    k, m, n = 40, 5, 16
    mo, w = _model(k, ta, I8, za, zb, rt, m=m, n=n, batch=batch)
    cr = driver.compile(mo, machine="tiny")
    tcu = [i for s in cr.program.streams.values() for i in s if isinstance(i, (MatMul, Conv2D))]
    assert tcu and {(i.a.dtype.name, i.b.dtype.name, i.c.dtype.name) for i in tcu} == \
        {("I8", "I8", "I32")}
    rng = np.random.default_rng(8)
    inits = {t.name: numpy_helper.to_array(t) for t in mo.graph.initializer}
    xs = _inputs(mo, rng)
    feeds = dict(zip([i.name for i in mo.graph.input], xs))
    (y,) = M100Backend.prepare(mo, machine="tiny").run(xs)
    zav = feeds.get("za", inits.get("za", 0))
    want = (feeds["x"].astype(np.int64) - np.int64(zav)) @ \
        (w.astype(np.int64) - np.asarray(inits.get("zb", 0), np.int64))
    assert want.shape == (*batch, m, n)
    np.testing.assert_array_equal(np.asarray(y).astype(np.int64).reshape(want.shape), want)
    np.testing.assert_array_equal(onnxruntime_run(mo, xs)[0].astype(np.int64), want)
