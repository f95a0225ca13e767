"""float16 / bfloat16 Softmax and LogSoftmax through the whole stack, bit-exact against their ONNX
definition: the function body (ReduceMax, Sub, Exp, ReduceSum, Div / Log + Sub) with every step
rounded to the input type, written here in numpy (float64 per step, then rounded) and checked
against ``onnx.reference``. torch-mlir computes them in f32 with one rounding, which was 2 f16 ulp
off the suite's expected output in ``test_attention_4d_causal_fp16_expanded``; the fused CVU
softmax keeps the body's roundings (``Stage(SOFTMAX, iparams=(dtype,))``)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

from m100.tools.onnx_backend import M100Backend

RNG = np.random.default_rng(1612)
F64 = np.float64


def _bf16(x: np.ndarray) -> np.ndarray:
    """float64 -> the nearest bfloat16 value (ties to even), as float64 (via the f32 bit pattern:
    f64 -> f32 is exact for the values here only up to rounding, so round from f64 directly)."""
    x = np.asarray(x, F64)
    m, e = np.frexp(x)  # x = m * 2**e, 0.5 <= |m| < 1: 8 significant bits -> m * 256
    with np.errstate(invalid="ignore"):
        r = np.ldexp(np.round(m * 256.0), e - 8)  # np.round: ties to even
    return np.where(np.isfinite(x), r, x)


ROUND = {T.FLOAT16: lambda v: np.asarray(v, F64).astype(np.float16).astype(F64), T.BFLOAT16: _bf16}


def body(x: np.ndarray, axis: int, log: bool, rnd) -> np.ndarray:
    """The ONNX function body of (Log)Softmax, each node's output rounded by ``rnd``."""
    x = np.asarray(x, F64)
    d = rnd(x - x.max(axis=axis, keepdims=True))
    e = rnd(np.exp(d))
    s = rnd(e.sum(axis=axis, keepdims=True))
    return rnd(d - rnd(np.log(s))) if log else rnd(e / s)


def _model(op, shape, axis, et):
    g = h.make_graph([h.make_node(op, ["x"], ["y"], axis=axis)], "t",
                     [h.make_tensor_value_info("x", et, shape)],
                     [h.make_tensor_value_info("y", et, shape)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 21)])
    onnx.checker.check_model(m)
    return m


@pytest.mark.parametrize("op,axis", [("Softmax", -1), ("Softmax", 0), ("LogSoftmax", -1),
                                     ("LogSoftmax", 1)])
@pytest.mark.onnx_op("Softmax", "LogSoftmax", kind="oracle")
def test_f16_softmax_is_its_function_body(op, axis):
    shape = (6, 40, 3) if axis != -1 else (8, 48)
    x = (RNG.standard_normal(shape) * 3).astype(np.float16)
    m = _model(op, shape, axis, T.FLOAT16)
    want = body(x, axis, op == "LogSoftmax", ROUND[T.FLOAT16]).astype(np.float16)
    if axis == -1 and op == "Softmax":
        # the oracle is onnx.reference's. Not along another axis: there numpy sums f16 in f16,
        # step by step (ReduceSum's output is then not the rounded sum that the definition and the
        # CVU give). Not for LogSoftmax: onnx.reference computes log(softmax(x)), the probabilities
        # rounded to f16 first (-15.95 for -16.22 where they are small), not the function body.
        np.testing.assert_array_equal(ReferenceEvaluator(m).run(None, {"x": x})[0], want)
    # the inputs tell the body from one rounding at the end
    once = body(x, axis, op == "LogSoftmax", lambda v: v).astype(np.float16)
    assert np.sum(once != want) > 0
    (got,) = M100Backend.prepare(m, machine="tiny").run([x])
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, want)


def test_bf16_softmax_is_its_function_body():
    shape = (8, 48)
    x64 = _bf16(RNG.standard_normal(shape) * 3)
    x = x64.astype(np.float32)  # bf16 values, fed as float32 arrays (exact)
    m = _model("Softmax", shape, -1, T.BFLOAT16)
    want = body(x64, -1, False, _bf16)
    once = _bf16(body(x64, -1, False, lambda v: v))
    assert np.sum(once != want) > 0
    (got,) = M100Backend.prepare(m, machine="tiny").run([x])
    np.testing.assert_array_equal(np.asarray(got, F64), want)
