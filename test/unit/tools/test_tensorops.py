"""Issue 12 (tensor ops) through the whole stack: ONNX -> m100 compile (machine ``tiny``) ->
interpreter, against numpy written from the ONNX definitions; the shape-parameter binding of the
ONNX backend; the node-test harness's acceptance metric."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from m100.errors import M100Error
from m100.tools import node_tests
from m100.tools.onnx_backend import M100Backend, bind_inputs, shape_param_inputs


def _model(nodes, inputs, outputs, inits=(), opset=18):
    g = helper.make_graph(nodes, "t", inputs, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def _run(model, *xs):
    return M100Backend.prepare(model, machine="tiny").run(list(xs))


def _red_out_shape(shape, axes, keep):
    axes = [a % len(shape) for a in axes] if axes else list(range(len(shape)))
    return [1 if d in axes else s for d, s in enumerate(shape) if keep or d not in axes]


# numpy oracles from the ONNX definitions (float64)
RED = {
    "ReduceSum": lambda x, a, k: np.sum(x, axis=a, keepdims=k),
    "ReduceMean": lambda x, a, k: np.mean(x, axis=a, keepdims=k),
    "ReduceMax": lambda x, a, k: np.max(x, axis=a, keepdims=k),
    "ReduceMin": lambda x, a, k: np.min(x, axis=a, keepdims=k),
    "ReduceProd": lambda x, a, k: np.prod(x, axis=a, keepdims=k),
    "ReduceL1": lambda x, a, k: np.sum(np.abs(x), axis=a, keepdims=k),
    "ReduceL2": lambda x, a, k: np.sqrt(np.sum(x * x, axis=a, keepdims=k)),
    "ReduceSumSquare": lambda x, a, k: np.sum(x * x, axis=a, keepdims=k),
    "ReduceLogSumExp": lambda x, a, k: np.log(np.sum(np.exp(x), axis=a, keepdims=k)),
}
CASES = [("ReduceSum", (0,), 1), ("ReduceMean", (1,), 0), ("ReduceMax", (0, 2), 1),
         ("ReduceMin", (-1, 0), 0), ("ReduceProd", (1,), 1), ("ReduceL1", (), 0),
         ("ReduceL2", (0, 1), 1), ("ReduceSumSquare", (2, 0), 0), ("ReduceLogSumExp", (1,), 1)]


@pytest.mark.parametrize("op,axes,keep", CASES)
def test_reduce_any_axes(op, axes, keep):
    shape = [3, 4, 5]
    x = np.random.default_rng(len(op)).uniform(0.5, 1.5, shape).astype(np.float32)
    out = _red_out_shape(shape, axes, keep)
    inits = [numpy_helper.from_array(np.array(axes, np.int64), "axes")] if axes else []
    node = helper.make_node(op, ["x", "axes"] if axes else ["x"], ["y"], keepdims=keep)
    (y,) = _run(_model([node], [_vi("x", shape)], [_vi("y", out)], inits), x)
    want = RED[op](x.astype(np.float64), tuple(axes) if axes else None, bool(keep))
    assert y.shape == tuple(out)
    np.testing.assert_allclose(y, want, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [0, 1])
def test_softmax_any_axis(op, axis):
    x = np.random.default_rng(axis).standard_normal((3, 4, 5)).astype(np.float32) * 3
    node = helper.make_node(op, ["x"], ["y"], axis=axis)
    (y,) = _run(_model([node], [_vi("x", [3, 4, 5])], [_vi("y", [3, 4, 5])]), x)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=axis, keepdims=True))
    sm = e / e.sum(axis=axis, keepdims=True)
    np.testing.assert_allclose(y, sm if op == "Softmax" else np.log(sm), rtol=1e-5, atol=1e-6)


UNARY = {
    "Sin": np.sin, "Cos": np.cos, "Tan": np.tan, "Asin": np.arcsin, "Acos": np.arccos,
    "Atan": np.arctan, "Sinh": np.sinh, "Cosh": np.cosh, "Asinh": np.arcsinh,
    "Atanh": np.arctanh, "Sign": np.sign, "Round": np.round,
    "Softplus": lambda x: np.log1p(np.exp(x)),
    "Mish": lambda x: x * np.tanh(np.log1p(np.exp(x))),
}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_math(op):
    rng = np.random.default_rng(3)
    lo, hi = (-0.99, 0.99) if op in ("Asin", "Acos", "Atanh") else (-4.0, 4.0)
    x = rng.uniform(lo, hi, (4, 16)).astype(np.float32)
    if op == "Round":
        x[0, :6] = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]  # ties to even
    if op == "Sign":
        x[0, 0] = 0.0
    (y,) = _run(_model([helper.make_node(op, ["x"], ["y"])], [_vi("x", [4, 16])],
                       [_vi("y", [4, 16])]), x)
    np.testing.assert_allclose(y, UNARY[op](x.astype(np.float64)), rtol=2e-6, atol=1e-6)


def test_acosh_and_prelu_broadcast():
    rng = np.random.default_rng(4)
    x = rng.uniform(1.0, 20.0, (3, 8)).astype(np.float32)
    (y,) = _run(_model([helper.make_node("Acosh", ["x"], ["y"])], [_vi("x", [3, 8])],
                       [_vi("y", [3, 8])]), x)
    np.testing.assert_allclose(y, np.arccosh(x.astype(np.float64)), rtol=2e-6)
    s = rng.standard_normal(8).astype(np.float32)
    x = rng.standard_normal((3, 8)).astype(np.float32)
    m = _model([helper.make_node("PRelu", ["x", "s"], ["y"])], [_vi("x", [3, 8]), _vi("s", [8])],
               [_vi("y", [3, 8])])
    (y,) = _run(m, x, s)
    np.testing.assert_allclose(y, np.where(x < 0, x * s, x), rtol=1e-6)


def test_unsupported_body_op_is_one_line():
    """An int32 base to a float exponent (torch-mlir computes it in f64, which no unit runs): one
    clean line. (Float Mod, the example before, is supported now: arith.remf is the CVU rem.)"""
    m = _model([helper.make_node("Pow", ["a", "b"], ["y"])],
               [_vi("a", [4], TensorProto.INT32), _vi("b", [4])], [_vi("y", [4], TensorProto.INT32)])
    with pytest.raises(M100Error) as ei:
        _run(m, np.ones(4, np.int32), np.ones(4, np.float32))
    assert "f64" in str(ei.value) and "\n" not in str(ei.value)


def test_batched_linear_with_bias_and_broadcast_batch_matmul():
    """[B, S, D] @ W + b (one weight for every batch, bias fused) and [B, H, S, D] @ [H, D, T]
    (batch dims broadcast), against numpy matmul."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((8, 6)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    m = _model([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])],
               [_vi("x", [2, 5, 8])], [_vi("y", [2, 5, 6])],
               [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    x = rng.standard_normal((2, 5, 8)).astype(np.float32)
    (y,) = _run(m, x)
    np.testing.assert_allclose(y, x.astype(np.float64) @ w + b, rtol=1e-5, atol=1e-5)
    m = _model([helper.make_node("MatMul", ["p", "q"], ["y"])], [_vi("p", [2, 3, 4, 5]), _vi("q", [3, 5, 2])],
               [_vi("y", [2, 3, 4, 2])])
    p = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    q = rng.standard_normal((3, 5, 2)).astype(np.float32)
    (y,) = _run(m, p, q)
    np.testing.assert_allclose(y, np.matmul(p.astype(np.float64), q), rtol=1e-5, atol=1e-5)


def test_identity_and_returned_constant_are_copied():
    m = _model([helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Relu", ["x"], ["z"])],
               [_vi("x", [3, 4])], [_vi("y", [3, 4]), _vi("z", [3, 4])])
    x = np.random.default_rng(6).standard_normal((3, 4)).astype(np.float32)
    y, z = _run(m, x)
    np.testing.assert_array_equal(y, x)
    np.testing.assert_array_equal(z, np.maximum(x, 0))


# --- the backend's shape-parameter binding ---------------------------------------------------------
def test_shape_params_are_bound_per_value():
    m = _model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
               [_vi("x", [2, 6]), _vi("shape", [2], TensorProto.INT64)], [_vi("y", ["a", "b"])])
    assert shape_param_inputs(m) == ["shape"]
    rep = M100Backend.prepare(m, machine="tiny")
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    (a,) = rep.run([x, np.array([3, 4], np.int64)])
    (b,) = rep.run([x, np.array([4, 3], np.int64)])
    np.testing.assert_array_equal(a, x.reshape(3, 4))
    np.testing.assert_array_equal(b, x.reshape(4, 3))
    assert len(rep._programs) == 2
    bound = bind_inputs(m, {"shape": np.array([3, 4], np.int64)})
    assert [i.name for i in bound.graph.input] == ["x"]


def test_an_input_also_used_as_data_is_not_bound():
    m = _model([helper.make_node("Reshape", ["x", "s"], ["y"]), helper.make_node("Add", ["s", "s"], ["z"])],
               [_vi("x", [2, 6]), _vi("s", [2], TensorProto.INT64)],
               [_vi("y", ["a", "b"]), _vi("z", [2], TensorProto.INT64)])
    assert shape_param_inputs(m) == []


# --- the harness's acceptance metric ----------------------------------------------------------------
def test_metric_population():
    cases = {tc.name: tc for tc in node_tests.collect(["ReduceL2", "SequenceInsert", "Relu"])}
    assert node_tests.in_metric(cases["test_reduce_l2_keep_dims_example"])
    assert not node_tests.in_metric(cases["test_reduce_l2_keep_dims_example_expanded"])
    assert not node_tests.in_metric(cases["test_sequence_insert_at_back"])  # sequence input
    rs = [node_tests.CaseResult("a", "X", "pass"), node_tests.CaseResult("b", "X", "unsupported"),
          node_tests.CaseResult("c", "X", "pass", metric=False)]
    assert node_tests.metric(rs) == (1, 2)
    doc = node_tests.render_docs(rs, {"onnx": "1"})
    assert "Acceptance metric (issue 12): **1 of 2 = 50.0 %**" in doc and "non-expanded" in doc


# --- Attention (opset 23) decomposed before torch-mlir (frontend/onnx_rewrite_attention.py) --------
def _attention_model(q, k, v, mask=None, past=None, n_out=1, opset=23, **attrs):
    ins = [_vi("Q", list(q.shape)), _vi("K", list(k.shape)), _vi("V", list(v.shape))]
    names = ["Q", "K", "V"]
    if mask is not None:
        ins.append(_vi("mask", list(mask.shape)))
        names.append("mask")
    if past is not None:
        names += ([""] if mask is None else []) + ["pk", "pv"]
        ins += [_vi("pk", list(past[0].shape)), _vi("pv", list(past[1].shape))]
    outs = ["Y", "present_key", "present_value", "qk"][:n_out]
    node = helper.make_node("Attention", names, outs, **attrs)
    ranks = [q.ndim, 4, 4, 4]
    return _model([node], ins, [_vi(o, [f"{o}{i}" for i in range(r)]) for o, r in zip(outs, ranks)],
                  opset=opset)


@pytest.mark.parametrize("case", ["4d_gqa_causal_softcap_mask", "3d_past_mode2", "masked_row"])
def test_attention_against_onnx_reference(case):
    from onnx.reference import ReferenceEvaluator
    rng = np.random.default_rng(7)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    if case == "4d_gqa_causal_softcap_mask":
        feeds = dict(Q=f(1, 4, 3, 8), K=f(1, 2, 5, 8), V=f(1, 2, 5, 6), mask=f(3, 5))
        m = _attention_model(feeds["Q"], feeds["K"], feeds["V"], feeds["mask"], is_causal=1,
                             softcap=2.0)
    elif case == "3d_past_mode2":
        feeds = dict(Q=f(2, 3, 12), K=f(2, 3, 12), V=f(2, 3, 12), mask=f(3, 7), pk=f(2, 3, 4, 4),
                     pv=f(2, 3, 4, 4))
        m = _attention_model(feeds["Q"], feeds["K"], feeds["V"], feeds["mask"],
                             past=(feeds["pk"], feeds["pv"]), n_out=4, q_num_heads=3,
                             kv_num_heads=3, qk_matmul_output_mode=2)
    else:  # a runtime mask with one fully masked row: that row of Y is 0, not NaN
        mask = f(4, 6)
        mask[1, :] = -np.inf
        mask[2, :3] = -np.inf
        feeds = dict(Q=f(1, 2, 4, 8), K=f(1, 2, 6, 8), V=f(1, 2, 6, 8), mask=mask)
        m = _attention_model(feeds["Q"], feeds["K"], feeds["V"], feeds["mask"])
    names = [i.name for i in m.graph.input]
    got = M100Backend.prepare(m, machine="tiny").run([feeds[n] for n in names])
    want = ReferenceEvaluator(m).run(None, feeds)
    for g_, w_ in zip(got, want):
        np.testing.assert_allclose(g_, w_, rtol=1e-4, atol=1e-5)
    if case == "masked_row":
        assert np.all(got[0][:, :, 1, :] == 0)


def test_attention_refusals_are_one_line():
    q = np.zeros((1, 2, 4, 8), np.float32)
    m = _attention_model(q, q, q, past=(q, q), opset=24)  # nonpad with a past cache: undefined
    m.graph.node[0].input.extend(["nonpad"])
    m.graph.input.append(_vi("nonpad", [1], TensorProto.INT64))
    with pytest.raises(M100Error) as ei:
        M100Backend.prepare(m, machine="tiny", bind=False)
    assert "nonpad_kv_seqlen" in str(ei.value) and "\n" not in str(ei.value)


def test_lp_normalization_zero_norm_gives_zero():
    """ONNX LpNormalization: 0 where the norm is 0 (torch-mlir's form gave NaN: 0/0)."""
    x = np.array([[[1, 2, 2], [3, 4, 0]], [[0, 5, 5], [6, 8, 0]]], np.float32)
    for p in (1, 2):
        m = _model([helper.make_node("LpNormalization", ["x"], ["y"], axis=0, p=p)],
                   [_vi("x", [2, 2, 3])], [_vi("y", [2, 2, 3])])
        (y,) = _run(m, x)
        norm = np.sum(np.abs(x.astype(np.float64)) ** p, axis=0, keepdims=True) ** (1 / p)
        want = np.where(norm == 0, 0.0, x / np.where(norm == 0, 1, norm))
        np.testing.assert_allclose(y, want, rtol=1e-6)
        assert y[0, 1, 2] == 0 and not np.isnan(y).any()


def test_instance_norm_and_int_exponent_pow():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    s, b = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    m = _model([helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-3)],
               [_vi("x", [2, 3, 4, 5]), _vi("s", [3]), _vi("b", [3])], [_vi("y", [2, 3, 4, 5])])
    (y,) = _run(m, x, s, b)
    x64 = x.astype(np.float64)
    mu, var = x64.mean(axis=(2, 3), keepdims=True), x64.var(axis=(2, 3), keepdims=True)
    want = s.reshape(3, 1, 1) * (x64 - mu) / np.sqrt(var + 1e-3) + b.reshape(3, 1, 1)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
    e = np.array([[0, 1, 2, 3], [-1, 2, 3, 1]], np.int32)
    base = rng.uniform(0.5, 2.0, (2, 4)).astype(np.float32)
    m = _model([helper.make_node("Pow", ["x", "e"], ["y"])],
               [_vi("x", [2, 4]), _vi("e", [2, 4], TensorProto.INT32)], [_vi("y", [2, 4])])
    (y,) = _run(m, base, e)
    np.testing.assert_allclose(y, base.astype(np.float64) ** e, rtol=2e-6)


def test_center_crop_pad_odd_differences():
    """Crop 7 -> 4 (start 1) on axis 0 and pad 3 -> 6 (1 before, 2 after) on axis 1."""
    x = np.arange(21, dtype=np.float32).reshape(7, 3)
    m = _model([helper.make_node("CenterCropPad", ["x", "s"], ["y"])], [_vi("x", [7, 3])],
               [_vi("y", [4, 6])], [numpy_helper.from_array(np.array([4, 6], np.int64), "s")])
    (y,) = _run(m, x)
    want = np.zeros((4, 6), np.float32)
    want[:, 1:4] = x[1:5]
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("axis", [0, -1])
def test_hardmax_first_maximum_with_ties_and_inf(axis):
    x = np.array([[1, 3, 3, 0], [2, 2, 2, 2], [-1, np.inf, 5, np.inf], [0, -2, 7, 7]], np.float32)
    (y,) = _run(_model([helper.make_node("Hardmax", ["x"], ["y"], axis=axis)], [_vi("x", [4, 4])],
                       [_vi("y", [4, 4])]), x)
    want = np.zeros_like(x)
    idx = np.argmax(x, axis=axis)  # numpy: the first maximum, like ONNX
    if axis == 0:
        want[idx, np.arange(4)] = 1
    else:
        want[np.arange(4), idx] = 1
    np.testing.assert_array_equal(y, want)


def test_group_norm_and_squared_pow():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 6, 3, 2)).astype(np.float32)
    s, b = rng.standard_normal(6).astype(np.float32), rng.standard_normal(6).astype(np.float32)
    m = _model([helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3,
                                 epsilon=1e-4)],
               [_vi("x", [2, 6, 3, 2]), _vi("s", [6]), _vi("b", [6])], [_vi("y", [2, 6, 3, 2])],
               opset=21)
    (y,) = _run(m, x, s, b)
    xg = x.astype(np.float64).reshape(2, 3, -1)
    norm = ((xg - xg.mean(-1, keepdims=True)) / np.sqrt(xg.var(-1, keepdims=True) + 1e-4))
    want = norm.reshape(x.shape) * s.reshape(6, 1, 1) + b.reshape(6, 1, 1)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
    m = _model([helper.make_node("MeanVarianceNormalization", ["x"], ["y"], axes=[0, 2, 3])],
               [_vi("x", [2, 6, 3, 2])], [_vi("y", [2, 6, 3, 2])], opset=13)
    (y,) = _run(m, x)
    x64 = x.astype(np.float64)
    mu = x64.mean(axis=(0, 2, 3), keepdims=True)
    want = (x64 - mu) / np.sqrt((x64 ** 2).mean(axis=(0, 2, 3), keepdims=True) - mu ** 2 + 1e-9)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
