"""Regression tests for the silent miscompiles of issue 10, through the whole stack.

Each model is compiled (``driver.check``: m100-pipeline + module_to_program), run on the reference
interpreter (race/deadlock checks on) and compared with onnxruntime on the same seeded inputs, on the
``tiny`` and ``m100`` machines. Before the fixes every case below compiled and ran "successfully" with
a wrong result:

* a bias that is a runtime value (a graph input, or a ``[1, N]`` residual that looks per-channel
  when M = 1) was fused into the TCU epilogue by fuse-epilogue and then dropped by the scheduler,
  which only reads biases from constants (``y = x @ w`` instead of ``x @ w + b``); a constant bias
  fused as an add *after* the contraction (not folded into the init) was dropped as well (LSTM);
* ``Gemm`` with ``alpha != 1`` and no C lost alpha in torch-mlir.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from m100.tools.onnx_backend import onnxruntime_run
from m100.tools import driver

F = TensorProto.FLOAT
MACHINES = ["tiny", "m100"]


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, F, s) for n, s in outputs], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _init(name, shape, seed):
    return numpy_helper.from_array(
        np.random.default_rng(seed).standard_normal(shape).astype(np.float32), name)


def _check(model, machine):
    ck = driver.check(model, machine=machine, seed=1)
    assert ck.oracle == "onnxruntime"
    assert ck.passed, ck.summary()
    return ck


# --- (a) a bias that is a runtime graph input ---------------------------------------------------
def bias_input_matmul(m=4):
    return _model([helper.make_node("MatMul", ["x", "w"], ["t"]),
                   helper.make_node("Add", ["t", "b"], ["y"])],
                  [("x", [m, 16]), ("w", [16, 8]), ("b", [8])], [("y", [m, 8])])


def bias_input_matmul_relu():
    """Bias input then ReLU: the ReLU must not be fused over a dropped bias either."""
    return _model([helper.make_node("MatMul", ["x", "w"], ["t"]),
                   helper.make_node("Add", ["t", "b"], ["s"]),
                   helper.make_node("Relu", ["s"], ["y"])],
                  [("x", [4, 16]), ("b", [1, 8])], [("y", [4, 8])], [_init("w", [16, 8], 3)])


def gemm_c_input(c_shape=(8,), alpha=1.0, beta=1.0):
    return _model([helper.make_node("Gemm", ["x", "w", "c"], ["y"], alpha=alpha, beta=beta)],
                  [("x", [4, 16]), ("w", [16, 8]), ("c", list(c_shape))], [("y", [4, 8])])


def recurrent(op, bias_input, seq=1, batch=1):
    """One-step RNN/GRU/LSTM (unrolled before torch-mlir, frontend/onnx_rewrite_rnn.py), bias B a
    graph input or an initializer."""
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    hid, inp = 5, 4
    inits = [_init("W", [1, gates * hid, inp], 1), _init("R", [1, gates * hid, hid], 2)]
    ins = [("X", [seq, batch, inp])]
    if bias_input:
        ins.append(("B", [1, 2 * gates * hid]))
    else:
        inits.append(_init("B", [1, 2 * gates * hid], 3))
    node = helper.make_node(op, ["X", "W", "R", "B"], ["Y", "Yh"], hidden_size=hid)
    return _model([node], ins, [("Yh", [1, batch, hid])], inits)


@pytest.mark.parametrize("machine", MACHINES)
@pytest.mark.parametrize("build", [bias_input_matmul, bias_input_matmul_relu, gemm_c_input,
                                   lambda: gemm_c_input((1, 8), alpha=0.5, beta=2.0),
                                   lambda: gemm_c_input((4, 8)), lambda: bias_input_matmul(1)],
                         ids=["matmul", "matmul_relu", "gemm", "gemm_alpha_beta", "gemm_c_mn",
                              "matmul_m1"])
def test_runtime_bias_is_added(build, machine):
    _check(build(), machine)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("bias_input", [True, False], ids=["B_input", "B_init"])
def test_recurrent_bias(op, bias_input):
    _check(recurrent(op, bias_input), "tiny")


@pytest.mark.parametrize("machine", MACHINES)
def test_lstm_bias_input_on_m100(machine):
    _check(recurrent("LSTM", True, batch=2), machine)


# --- (b) residual add fused into the matmul when M = 1 ------------------------------------------
def residual(m, k=64, n=64, order=("x", "t")):
    return _model([helper.make_node("MatMul", ["a", "W"], ["t"]),
                   helper.make_node("Add", list(order), ["y"])],
                  [("x", [m, n]), ("a", [m, k])], [("y", [m, n])], [_init("W", [k, n], 7)])


@pytest.mark.parametrize("machine", MACHINES)
@pytest.mark.parametrize("m", [1, 4, 16])
def test_residual_add_after_matmul(m, machine):
    _check(residual(m), machine)


@pytest.mark.parametrize("shape", [(1, 64, 32), (1, 8, 8)], ids=["k64n32", "k8n8"])
def test_residual_add_m1_other_shapes(shape):
    m, k, n = shape
    _check(residual(m, k, n, order=("t", "x")), "tiny")


def test_residual_add_after_conv_1x1_spatial():
    """The conv neighbour: N = H = W = 1, so a [1, F, 1, 1] residual looks per-channel."""
    model = _model([helper.make_node("Conv", ["a", "W"], ["t"]),
                    helper.make_node("Add", ["t", "x"], ["y"])],
                   [("a", [1, 8, 1, 1]), ("x", [1, 6, 1, 1])], [("y", [1, 6, 1, 1])],
                   [_init("W", [6, 8, 1, 1], 4)])
    _check(model, "tiny")


def test_residual_m1_fused_bias_and_residual():
    """A constant bias (fused) followed by a runtime residual (not fused) when M = 1."""
    model = _model([helper.make_node("MatMul", ["a", "W"], ["t"]),
                    helper.make_node("Add", ["t", "b"], ["u"]),
                    helper.make_node("Add", ["u", "x"], ["y"])],
                   [("x", [1, 32]), ("a", [1, 16])], [("y", [1, 32])],
                   [_init("W", [16, 32], 5), _init("b", [32], 6)])
    _check(model, "m100")


# --- (c) Gemm alpha without C --------------------------------------------------------------------
@pytest.mark.parametrize("machine", MACHINES)
@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm_alpha_without_c(ta, tb, machine):
    model = _model([helper.make_node("Gemm", ["x", "w"], ["y"], alpha=2.5, beta=0.25,
                                     transA=ta, transB=tb)],
                   [("x", [16, 4] if ta else [4, 16]), ("w", [8, 16] if tb else [16, 8])],
                   [("y", [4, 8])])
    _check(model, machine)


def test_gemm_alpha_rewrite_is_exact_on_the_frontend():
    """The ONNX-level rewrite alone (numpy reference executor on the frontend's output)."""
    from m100.frontend import load_onnx
    from m100.frontend.mlir_load import shared_context
    from m100.frontend.reference import run as ref_run

    model = _model([helper.make_node("Gemm", ["x", "w"], ["y"], alpha=-3.0, transB=1)],
                   [("x", [1, 5])], [("y", [1, 3])], [_init("w", [3, 5], 9)])
    x = np.random.default_rng(0).standard_normal((1, 5)).astype(np.float32)
    want = onnxruntime_run(model, [x])[0]
    got = ref_run(load_onnx(model, shared_context()), [x])[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    w = numpy_helper.to_array(model.graph.initializer[0])
    np.testing.assert_allclose(want, -3.0 * x @ w.T, rtol=1e-5, atol=1e-5)


# --- the scheduler reads a constant bias fused after the contraction -----------------------------
def test_post_add_constant_bias_without_fold_batchnorm():
    """With fold-bn=false the constant bias stays an add after the matmul, fused as the ``bias``
    stage; the scheduler must take the vector from it (it used to drop it)."""
    from m100.frontend import load_onnx
    from m100.frontend.mlir_load import shared_context
    from m100.passes.graph.m100_graph import M100Graph

    model = _model([helper.make_node("MatMul", ["x", "w"], ["t"]),
                    helper.make_node("Add", ["t", "b"], ["s"]),
                    helper.make_node("Relu", ["s"], ["y"])],
                   [("x", [3, 16]), ("w", [16, 8])], [("y", [3, 8])], [_init("b", [8], 2)])
    ctx = shared_context()
    mod = load_onnx(model, ctx)
    M100Graph(fold_bn=False).apply(ctx, mod)
    mm = [o for o in mod.walk() if o.name == "linalg.matmul"]
    assert [s.data for s in mm[0].attributes["m100.epilogue"].data] == ["bias", "relu"]
    assert mm[0].operands[-1].owner.name == "linalg.fill"  # the bias is not in the init
    cr = driver.compile(mod, machine="tiny")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 16)).astype(np.float32)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    got = driver.run(cr.program, {"x": x, "w": w}).outputs
    want = onnxruntime_run(model, [x, w])[0]
    np.testing.assert_allclose(list(got.values())[0].reshape(want.shape), want, rtol=1e-4,
                               atol=1e-4)


# --- found by the fuzzer: a matmul whose B operand is produced in its own segment ----------------
@pytest.mark.parametrize("machine", MACHINES)
@pytest.mark.parametrize("case", ["w_at_tanh", "t_at_t", "softmax_rhs"])
def test_matmul_rhs_produced_on_chip(case, machine):
    """The scheduler streamed a matmul's B operand from a producer of the same pipeline segment,
    but the emitter reads B whole from memory, where it was never stored: W @ tanh(x) gave
    zeros (the tensor was never written), tanh(x) @ tanh(x) raced. B is now read whole (the
    producer stores it, the matmul waits for the last band)."""
    if case == "w_at_tanh":
        model = _model([helper.make_node("Tanh", ["x"], ["t"]),
                        helper.make_node("MatMul", ["w", "t"], ["y"])],
                       [("x", [1, 4])], [("y", [16, 4])], [_init("w", [16, 1], 1)])
    elif case == "t_at_t":
        model = _model([helper.make_node("Tanh", ["x"], ["t"]),
                        helper.make_node("MatMul", ["t", "t"], ["y"])],
                       [("x", [16, 16])], [("y", [16, 16])])
    else:
        model = _model([helper.make_node("Softmax", ["x"], ["t"], axis=-1),
                        helper.make_node("MatMul", ["w", "t"], ["u"]),
                        helper.make_node("Sub", ["c", "u"], ["y"])],
                       [("x", [16, 4])], [("y", [1, 4])],
                       [_init("w", [1, 16], 2), _init("c", [1, 1], 3)])
    _check(model, machine)


# --- (e) a norm over several trailing axes taken as a norm over the last one -----------------------
def _mean_square_norm(axes, layer):
    """x / sqrt(mean((x - mu)^2 or x^2 over ``axes``) + eps) in primitive ops (what torch-mlir makes of
    RMSNormalization / a LayerNormalization written out)."""
    nodes, xin = [], "x"
    if layer:
        nodes += [helper.make_node("ReduceMean", ["x"], ["mu"], axes=axes, keepdims=1),
                  helper.make_node("Sub", ["x", "mu"], ["d"])]
        xin = "d"
    nodes += [helper.make_node("Mul", [xin, xin], ["sq"]),
              helper.make_node("ReduceMean", ["sq"], ["ms"], axes=axes, keepdims=1),
              helper.make_node("Add", ["ms", "eps"], ["v"]),
              helper.make_node("Sqrt", ["v"], ["r"]),
              helper.make_node("Div", [xin, "r"], ["y"])]
    eps = numpy_helper.from_array(np.array(1e-5, np.float32), "eps")
    return _model(nodes, [("x", [2, 3, 4, 5])], [("y", [2, 3, 4, 5])], [eps])


@pytest.mark.parametrize("layer", [False, True], ids=["rms", "layer"])
@pytest.mark.parametrize("axes", [[1, 2, 3], [2, 3]], ids=["axes123", "axes23"])
def test_norm_over_several_axes(axes, layer):
    """recognize-idioms matched a mean over several axes as an rmsnorm/layernorm over the last axis
    only (test_rms_normalization_4d_axis1 gave wrong numbers once RMSNormalization compiled)."""
    _check(_mean_square_norm(axes, layer), "m100")


# --- (f) x == x folded to true by torch-mlir (wrong for NaN) ------------------------------------------
@pytest.mark.parametrize("op", ["Equal", "GreaterOrEqual", "LessOrEqual", "Greater", "Less"])
def test_self_compare_with_nan(op):
    """``x == x`` (the usual NaN test) compiled to a constant true: NaN elements came out equal.
    The oracle is numpy's IEEE comparison of the same array."""
    g = helper.make_graph([helper.make_node(op, ["x", "x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", F, [4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.BOOL, [4, 8])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    x[0, 0] = x[1, 3] = x[3, 7] = np.nan
    res = driver.run(driver.compile(model, machine="m100").program, {"x": x})
    want = {"Equal": x == x, "GreaterOrEqual": x >= x, "LessOrEqual": x <= x,
            "Greater": x > x, "Less": x < x}[op]
    got = np.asarray(next(iter(res.outputs.values()))).astype(bool)
    np.testing.assert_array_equal(got, want)


# --- (f) a transpose of a concat of matmuls side by side (fuzz heads family, session 24) --------
def concat_columns_transposed(m: int, tail: str):
    """``[x0 @ w0 | x1 @ w1]`` (the matmuls store straight into the concat's columns:
    ``OpGraph.strided``), then transposed -- by a Transpose, or by ``Gemm(transA=1)``. The
    transpose was made a write map of the concat's result (``writer_maps.find_transpose_writes``)
    while its parts still stored into that result's rows: the emitter's internal error on both
    machines (the heads family's seed 20: ``Concat`` of three heads, then ``Gemm`` transA)."""
    nodes = [helper.make_node("MatMul", ["x0", "w0"], ["o0"]),
             helper.make_node("MatMul", ["x1", "w1"], ["o1"]),
             helper.make_node("Concat", ["o0", "o1"], ["c"], axis=-1)]
    inits = [_init("w0", [16, 4], 1), _init("w1", [16, 16], 2)]
    if tail == "transpose":
        nodes.append(helper.make_node("Transpose", ["c"], ["y"], perm=[1, 0]))
        out = [20, m]
    else:
        nodes.append(helper.make_node("Gemm", ["c", "g"], ["y"], transA=1))
        inits.append(_init("g", [m, 3], 3))
        out = [20, 3]
    return _model(nodes, [("x0", [m, 16]), ("x1", [m, 16])], [("y", out)], inits)


@pytest.mark.parametrize("machine", MACHINES)
@pytest.mark.parametrize("tail", ["transpose", "gemm_t"])
@pytest.mark.parametrize("m", [2, 16])
def test_transpose_of_concat_columns(m, tail, machine):
    _check(concat_columns_transposed(m, tail), machine)
