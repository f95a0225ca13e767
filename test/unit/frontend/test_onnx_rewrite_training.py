"""NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss / Dropout(training_mode) rewritten before
torch-mlir (:mod:`m100.frontend.onnx_rewrite_training`), through the whole stack (compile for
``tiny``, interpreter), against numpy written from the ONNX definitions (float64 loops for the
losses, not vectorized like the rewrite; the reference's legacy generator for Dropout)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from m100.errors import M100Error
from m100.tools.onnx_backend import M100Backend


def _model(op, shape, tshape, weight, out_shapes, **attrs):
    ins = ["x", "t"] + (["w"] if weight else [])
    outs = ["y", "lp"][:len(out_shapes)]
    vis = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape),
           helper.make_tensor_value_info("t", TensorProto.INT64, tshape)]
    if weight:
        vis.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [shape[1]]))
    g = helper.make_graph([helper.make_node(op, ins, outs, **attrs)], "loss", vis,
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, s)
                           for o, s in zip(outs, out_shapes)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 22)])


def _nll_oracle(logp, t, w, reduction, ii):
    """The ONNX definition, one element at a time in float64."""
    n, c = logp.shape[:2]
    lp = logp.reshape(n, c, -1).astype(np.float64)
    tt = t.reshape(n, -1)
    loss = np.zeros(tt.shape)
    applied = np.zeros(tt.shape)
    for i in range(n):
        for d in range(tt.shape[1]):
            k = int(tt[i, d])
            if ii is not None and k == ii:
                continue
            wk = 1.0 if w is None else float(w[k])
            loss[i, d] = -lp[i, k, d] * wk
            applied[i, d] = wk
    if reduction == "none":
        return loss.reshape(t.shape)
    if reduction == "sum":
        return np.array(loss.sum())
    return np.array(loss.sum() / applied.sum())


def _log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))


CASES = [  # (op, x shape, weight, reduction, ignore_index)
    ("NegativeLogLikelihoodLoss", [3, 5, 4], True, "mean", 1),
    ("NegativeLogLikelihoodLoss", [2, 4, 3, 2], False, "none", -1),
    ("NegativeLogLikelihoodLoss", [4, 3], True, "sum", None),
    ("SoftmaxCrossEntropyLoss", [2, 5, 3, 2], True, "mean", 2),
    ("SoftmaxCrossEntropyLoss", [3, 4, 5], False, "none", None),
]


@pytest.mark.parametrize("op,shape,weight,reduction,ii", CASES,
                         ids=[f"{c[0][:3]}-{len(c[1])}d-{c[3]}" for c in CASES])
def test_loss_matches_definition(op, shape, weight, reduction, ii):
    rng = np.random.default_rng(len(shape) * 7 + int(weight))
    n, c = shape[:2]
    tshape = [n] + shape[2:]
    x = rng.standard_normal(shape).astype(np.float32)
    t = rng.integers(0, c, tshape).astype(np.int64)
    if ii is not None:
        t.reshape(-1)[::3] = ii  # a third of the targets ignored
        assert (t != ii).any()
    w = rng.uniform(0.5, 2.0, c).astype(np.float32) if weight else None
    out_shape = tshape if reduction == "none" else []
    sce = op == "SoftmaxCrossEntropyLoss"
    attrs = {"reduction": reduction}
    if ii is not None:
        attrs["ignore_index"] = ii
    model = _model(op, shape, tshape, weight, [out_shape] + ([shape] if sce else []), **attrs)
    got = M100Backend.prepare(model, machine="tiny").run([x, t] + ([w] if weight else []))
    logp = _log_softmax(x) if sce else x
    exp = _nll_oracle(logp, t, w, reduction, ii)
    assert got[0].shape == exp.shape
    np.testing.assert_allclose(got[0], exp, rtol=2e-6, atol=1e-6)
    if sce:
        np.testing.assert_allclose(got[1], logp, rtol=2e-6, atol=1e-6)
    if not sce and reduction == "none":  # no rounding at all: -x[t] (* w), 0 where ignored
        assert np.array_equal(got[0], exp.astype(np.float32))


def test_nll_inf_log_probability_elsewhere_does_not_leak():
    """log p = -inf for a class that is not the target must not turn the loss into NaN
    (a one-hot *multiplication* would give 0 * -inf = NaN)."""
    with np.errstate(divide="ignore"):
        x = np.log(np.array([[0.5, 0.5, 0.0], [0.0, 0.25, 0.75]], np.float32))  # -inf entries
    t = np.array([0, 2], np.int64)
    model = _model("NegativeLogLikelihoodLoss", [2, 3], [2], False, [[2]], reduction="none")
    (got,) = M100Backend.prepare(model, machine="tiny").run([x, t])
    np.testing.assert_array_equal(got, -np.array([x[0, 0], x[1, 2]], np.float32))


def test_f64_loss_is_refused_in_one_line():
    """A float64 loss is not rewritten (it would be computed in f32): one clear error."""
    g = helper.make_graph(
        [helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["y"], reduction="sum")], "g",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [2, 3]),
         helper.make_tensor_value_info("t", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 22)])
    with pytest.raises(M100Error) as e:
        M100Backend.prepare(model, machine="tiny")
    msg = str(e.value)
    assert "\n" not in msg.strip() and ("f64" in msg or "float64" in msg or "nll_loss" in msg)


# --- Dropout with a training_mode input ---------------------------------------------------------
def _dropout_model(shape, seed=0, outs=("y", "m")):
    kw = {} if seed is None else {"seed": seed}
    node = helper.make_node("Dropout", ["x", "r", "t"], list(outs), **kw)
    out_vis = [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape),
               helper.make_tensor_value_info("m", TensorProto.BOOL, shape)][:len(outs)]
    g = helper.make_graph([node], "drop",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape),
                           helper.make_tensor_value_info("r", TensorProto.FLOAT, []),
                           helper.make_tensor_value_info("t", TensorProto.BOOL, [])], out_vis)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 22)])


def _dropout_oracle(x, r, t, seed):
    """The ONNX reference's dropout: numpy's legacy generator, float64 draw, mask = U >= r."""
    if not t or r == 0:
        return x, np.ones(x.shape, bool)
    np.random.seed(seed)
    mask = np.random.uniform(0, 1.0, x.shape) >= r
    return np.where(mask, x * (np.float32(1) / (np.float32(1) - np.float32(r))), 0), mask


@pytest.mark.parametrize("r,t", [(0.75, True), (0.5, True), (0.0, True), (0.6, False)])
def test_dropout_training_mode(r, t):
    x = np.random.default_rng(1).standard_normal((3, 4, 5)).astype(np.float32)
    rep = M100Backend.prepare(_dropout_model([3, 4, 5], seed=3), machine="tiny")
    y, m = rep.run([x, np.float32(r), np.bool_(t)])
    ey, em = _dropout_oracle(x, r, t, 3)
    np.testing.assert_array_equal(m, em)
    np.testing.assert_array_equal(y, ey.astype(np.float32))  # x * scale: one rounding, exact
    if not t or r == 0:
        assert np.array_equal(y, x) and m.all()


def test_dropout_ratio_between_draw_and_its_f32_rounding():
    """A ratio r (f32) with U < r <= round_f32(U) for one element: the reference keeps it out
    (U < r); a draw stored rounded to nearest would keep it in."""
    shape = [64]
    np.random.seed(0)
    u = np.random.uniform(0, 1.0, shape)
    up = np.nonzero(u.astype(np.float32).astype(np.float64) > u)[0]
    assert up.size
    k = int(up[0])
    r = u.astype(np.float32)[k]  # U[k] < r
    x = np.ones(shape, np.float32)
    y, m = M100Backend.prepare(_dropout_model(shape, seed=0), machine="tiny").run(
        [x, r, np.bool_(True)])
    assert not m[k] and y[k] == 0
    np.testing.assert_array_equal(m, u >= r)


def test_dropout_without_seed_is_refused_in_one_line():
    with pytest.raises(M100Error) as e:
        M100Backend.prepare(_dropout_model([2, 3], seed=None, outs=("y",)), machine="tiny")
    msg = str(e.value)
    assert "\n" not in msg.strip() and "Dropout" in msg and "seed" in msg
