"""Attention (opset 24) with ``nonpad_kv_seqlen`` and with float16 inputs, decomposed before
torch-mlir (:mod:`m100.frontend.onnx_rewrite_attention`), through the whole stack (compile for
``tiny``, interpreter), against numpy written from the ONNX definition (float64, explicit loops over
batch, head and query row)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper

from m100.tools.onnx_backend import M100Backend


def _vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def _oracle(q, k, v, nonpad, causal, lw=-1, rw=-1):
    """Y[b, h, i] = softmax over the allowed keys j of q.k * scale, then @ v (0 if none allowed);
    key j allowed iff j < n[b], and with p = i + n[b] - S: j <= p (causal), p - lw <= j (lw >= 0),
    j <= p + rw (rw >= 0). K/V heads repeated for grouped-query attention."""
    B, H, S, D = q.shape
    kvh, L = k.shape[1], k.shape[2]
    y = np.zeros((B, H, S, v.shape[3]))
    for b in range(B):
        for h in range(H):
            kh = h // (H // kvh)
            for i in range(S):
                p = i + int(nonpad[b]) - S
                ok = [j for j in range(L) if j < nonpad[b] and (not causal or j <= p)
                      and (lw < 0 or j >= p - lw) and (rw < 0 or j <= p + rw)]
                if not ok:
                    continue
                s = np.array([np.dot(q[b, h, i].astype(np.float64), k[b, kh, j]) / math.sqrt(D)
                              for j in ok])
                w = np.exp(s - s.max())
                w /= w.sum()
                y[b, h, i] = sum(wj * v[b, kh, j].astype(np.float64) for wj, j in zip(w, ok))
    return y


def _model(qs, ks, vs, B, t=TensorProto.FLOAT, **attrs):
    node = helper.make_node("Attention", ["Q", "K", "V", "", "", "", "n"], ["Y"], **attrs)
    g = helper.make_graph([node], "attn",
                          [_vi("Q", qs, t), _vi("K", ks, t), _vi("V", vs, t),
                           _vi("n", [B], TensorProto.INT64)],
                          [_vi("Y", qs[:3] + [vs[3]], t)])
    opset = 26 if "left_window_size" in attrs else 24  # the window attributes came with opset 26
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("causal,lw,rw,nonpad", [
    (1, -1, -1, [6, 3]),   # causal, bottom-right per batch
    (0, -1, -1, [2, 6]),   # padding mask only
    (1, 2, -1, [5, 6]),    # causal + left window
    (1, -1, -1, [1, 6]),   # n < S: rows with no key give 0
], ids=["causal", "pad", "window", "empty_rows"])
def test_nonpad_matches_definition(causal, lw, rw, nonpad):
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 4, 2, 8)).astype(np.float32)
    k = rng.standard_normal((2, 2, 6, 8)).astype(np.float32)
    v = rng.standard_normal((2, 2, 6, 5)).astype(np.float32)
    n = np.array(nonpad, np.int64)
    attrs = {"is_causal": causal}
    if lw >= 0:
        attrs["left_window_size"] = lw
    m = _model(list(q.shape), list(k.shape), list(v.shape), 2, **attrs)
    (y,) = M100Backend.prepare(m, machine="tiny").run([q, k, v, n])
    want = _oracle(q, k, v, n, causal, lw, rw)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
    if nonpad[0] < 2:  # row 0 of batch 0 sees no key
        assert np.all(y[0, :, 0] == 0)


def test_fp16_attention_is_f32_rounded_once():
    """float16 Q/K/V: the result is the f32 computation rounded once to f16 (within 1 f16 ulp of
    the float64 definition rounded to f16)."""
    rng = np.random.default_rng(5)
    q = rng.standard_normal((1, 2, 3, 8)).astype(np.float16)
    k = rng.standard_normal((1, 2, 5, 8)).astype(np.float16)
    v = rng.standard_normal((1, 2, 5, 8)).astype(np.float16)
    n = np.array([4], np.int64)
    m = _model([1, 2, 3, 8], [1, 2, 5, 8], [1, 2, 5, 8], 1, TensorProto.FLOAT16, is_causal=1)
    (y,) = M100Backend.prepare(m, machine="tiny").run([q, k, v, n])
    assert y.dtype == np.float16
    want = _oracle(q, k, v, n, 1)
    ulp = np.spacing(np.abs(want).astype(np.float16)).astype(np.float64)
    assert np.all(np.abs(y.astype(np.float64) - want) <= ulp)
