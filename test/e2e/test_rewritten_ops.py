"""ONNX ops rewritten before torch-mlir into ops m100 runs (issue 12), through the whole stack and
compared with numpy oracles written from the ONNX operator definitions: ScatterElements /
ScatterND (one-hot masks; every reduction, duplicates, negative indices), 3-D MaxPool /
AveragePool (two 2-D poolings), CausalConvWithState, LinearAttention (unrolled recurrence)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from m100.tools.onnx_backend import M100Backend

RNG = np.random.default_rng(1214)
F = T.FLOAT


def _run(node, ins, outs, opset=18):
    """One node over float inputs ``ins`` {name: array}; ``outs`` {name: shape}."""
    g = h.make_graph([node], "t", [h.make_tensor_value_info(n, h.np_dtype_to_tensor_dtype(a.dtype),
                                                            a.shape) for n, a in ins.items()],
                     [h.make_tensor_value_info(n, F, s) for n, s in outs.items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    onnx.checker.check_model(m)
    return M100Backend.prepare(m, machine="tiny").run(list(ins.values()))


# --- scatter -------------------------------------------------------------------------------------
_RED = {"none": lambda a, b: b, "add": np.add, "mul": np.multiply, "max": np.maximum,
        "min": np.minimum}


def scatter_elements_ref(data, idx, upd, axis, red):
    """The ONNX loop: out[.., idx[j], ..] = f(out[.., idx[j], ..], upd[j]) in index order."""
    out = data.copy()
    for j in np.ndindex(idx.shape):
        t = list(j)
        t[axis] = idx[j] % data.shape[axis]
        out[tuple(t)] = _RED[red](out[tuple(t)], upd[j])
    return out


@pytest.mark.parametrize("red", ["none", "add", "mul", "max", "min"])
@pytest.mark.onnx_op("ScatterElements", kind="oracle")
def test_scatter_elements_axis1_duplicates_negative(red):
    data = RNG.standard_normal((3, 6)).astype(np.float32)
    idx = np.array([[1, -1, 1], [0, 5, 2], [-6, 3, 3]], np.int64)  # duplicates, negatives
    if red == "none":
        idx = np.array([[1, -1, 2], [0, 5, 2], [-6, 3, 4]], np.int64)  # 'none': distinct
    upd = RNG.standard_normal((3, 3)).astype(np.float32)
    (y,) = _run(h.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=1, reduction=red),
                {"x": data, "i": idx, "u": upd}, {"y": [3, 6]})
    np.testing.assert_allclose(y, scatter_elements_ref(data, idx, upd, 1, red), rtol=1e-6)


def test_scatter_elements_none_duplicates_last_wins():
    # ONNX leaves duplicates with reduction 'none' to the order; the CSU scatter routine and the
    # reference loop keep the last one, and so does the rewrite (never a sum of them)
    data = np.zeros((2, 4), np.float32)
    idx = np.array([[2, 2, 2], [0, 1, 0]], np.int64)
    upd = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)
    (y,) = _run(h.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=1),
                {"x": data, "i": idx, "u": upd}, {"y": [2, 4]})
    np.testing.assert_array_equal(y, scatter_elements_ref(data, idx, upd, 1, "none"))


@pytest.mark.parametrize("red", ["none", "add"])
@pytest.mark.onnx_op("ScatterND", kind="oracle")
def test_scatter_nd_slices(red):
    # data [4, 3, 2], index tuples of length 1 and 2 (slices of [3, 2] and of [2])
    data = RNG.standard_normal((4, 3, 2)).astype(np.float32)
    for idx in (np.array([[3], [-4]], np.int64), np.array([[[1, 2], [3, 0]], [[0, 0], [2, -1]]])):
        upd = RNG.standard_normal(idx.shape[:-1] + data.shape[idx.shape[-1]:]).astype(np.float32)
        (y,) = _run(h.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction=red),
                    {"x": data, "i": idx.astype(np.int64), "u": upd}, {"y": list(data.shape)})
        ref = data.copy()
        for j in np.ndindex(idx.shape[:-1]):
            t = tuple(int(v) for v in idx[j])
            ref[t] = _RED[red](ref[t], upd[j])
        np.testing.assert_allclose(y, ref, rtol=1e-6)


# --- 3-D pooling ---------------------------------------------------------------------------------
def pool3d_ref(x, k, s, d, pads, is_max, include_pad, ceil):
    """ONNX Max/AveragePool 3-D, loop form: windows clipped to input (+ pads if include_pad)."""
    n, c = x.shape[:2]
    sp = x.shape[2:]
    out_sz = []
    for i in range(3):
        span = sp[i] + pads[i] + pads[i + 3] - ((k[i] - 1) * d[i] + 1)
        o = (math.ceil(span / s[i]) if ceil else span // s[i]) + 1
        if ceil and (o - 1) * s[i] >= sp[i] + pads[i]:
            o -= 1
        out_sz.append(o)
    y = np.zeros((n, c, *out_sz), np.float64)
    for o in itertools.product(*[range(v) for v in out_sz]):
        vals, cnt = [], 0
        for t in itertools.product(*[range(v) for v in k]):
            pos = [o[i] * s[i] - pads[i] + t[i] * d[i] for i in range(3)]
            inside = all(0 <= pos[i] < sp[i] for i in range(3))
            in_pad = all(-pads[i] <= pos[i] < sp[i] + pads[i + 3] for i in range(3))
            if inside:
                vals.append(x[:, :, pos[0], pos[1], pos[2]])
            cnt += inside or (include_pad and in_pad)
        y[(slice(None), slice(None), *o)] = np.max(vals, axis=0) if is_max else \
            np.sum(vals, axis=0) / cnt
    return y.astype(np.float32)


@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", dict(kernel_shape=[2, 3, 2], strides=[1, 2, 1], pads=[0, 1, 1, 1, 0, 0])),
    ("AveragePool", dict(kernel_shape=[3, 2, 2], strides=[2, 1, 2], pads=[1, 0, 1, 1, 1, 0])),
    ("AveragePool", dict(kernel_shape=[2, 2, 3], strides=[2, 2, 1], pads=[1, 1, 0, 0, 1, 1],
                         count_include_pad=1)),
    ("MaxPool", dict(kernel_shape=[2, 2, 2], dilations=[2, 1, 2], ceil_mode=1, strides=[2, 2, 2])),
])
@pytest.mark.onnx_op("MaxPool", "AveragePool", kind="oracle")
def test_pool3d(op, attrs):
    x = RNG.standard_normal((1, 2, 5, 6, 5)).astype(np.float32)
    ref = pool3d_ref(x, attrs["kernel_shape"], attrs.get("strides", [1] * 3),
                     attrs.get("dilations", [1] * 3), attrs.get("pads", [0] * 6), op == "MaxPool",
                     attrs.get("count_include_pad", 0), attrs.get("ceil_mode", 0))
    (y,) = _run(h.make_node(op, ["x"], ["y"], **attrs), {"x": x}, {"y": list(ref.shape)})
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


# --- CausalConvWithState / LinearAttention ---------------------------------------------------------
@pytest.mark.onnx_op("CausalConvWithState", kind="oracle")
def test_causal_conv_with_state_silu_past():
    b, c, length, k = 2, 3, 5, 3
    x = RNG.standard_normal((b, c, length)).astype(np.float32)
    w = RNG.standard_normal((c, 1, k)).astype(np.float32)
    bias = RNG.standard_normal(c).astype(np.float32)
    past = RNG.standard_normal((b, c, k - 1)).astype(np.float32)
    y, st = _run(h.make_node("CausalConvWithState", ["x", "w", "b", "p"], ["y", "s"],
                             activation="silu"),
                 {"x": x, "w": w, "b": bias, "p": past}, {"y": [b, c, length], "s": [b, c, k - 1]},
                 opset=27)
    pad = np.concatenate([past, x], axis=2).astype(np.float64)
    conv = np.stack([sum(pad[:, :, t + j] * w[:, 0, j] for j in range(k)) + bias
                     for t in range(length)], axis=2)
    np.testing.assert_allclose(y, conv / (1 + np.exp(-conv)), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(st, pad[:, :, length:].astype(np.float32))


@pytest.mark.onnx_op("LinearAttention", kind="oracle")
def test_linear_attention_gated_delta_gqa_with_past():
    bsz, t, hq, hkv, dk, dv = 1, 3, 4, 2, 4, 3
    q = RNG.standard_normal((bsz, t, hq * dk)).astype(np.float32)
    k = (RNG.standard_normal((bsz, t, hkv * dk)) * 0.5).astype(np.float32)
    v = RNG.standard_normal((bsz, t, hkv * dv)).astype(np.float32)
    past = RNG.standard_normal((bsz, hkv, dk, dv)).astype(np.float32)
    g = -np.abs(RNG.standard_normal((bsz, t, hkv))).astype(np.float32)  # per-head log decay
    beta = RNG.random((bsz, t, hkv)).astype(np.float32)
    o, st = _run(h.make_node("LinearAttention", ["q", "k", "v", "p", "g", "b"], ["o", "s"],
                             q_num_heads=hq, kv_num_heads=hkv),
                 {"q": q, "k": k, "v": v, "p": past, "g": g, "b": beta},
                 {"o": [bsz, t, hq * dv], "s": [bsz, hkv, dk, dv]}, opset=27)
    # the definition's recurrence (gated_delta), float64
    S = past.astype(np.float64).copy()
    outs = np.zeros((bsz, t, hq, dv))
    for i in range(t):
        for hk in range(hkv):
            kt, vt = k[0, i, hk * dk:(hk + 1) * dk], v[0, i, hk * dv:(hk + 1) * dv]
            S[0, hk] *= np.exp(g[0, i, hk])
            vt = beta[0, i, hk] * (vt - S[0, hk].T @ kt)
            S[0, hk] += np.outer(kt, vt)
        for hh in range(hq):
            outs[0, i, hh] = q[0, i, hh * dk:(hh + 1) * dk] @ S[0, hh // (hq // hkv)] / math.sqrt(dk)
    np.testing.assert_allclose(o, outs.reshape(bsz, t, hq * dv), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(st, S, rtol=1e-4, atol=1e-5)


def test_scatter_of_int_data_is_one_line_refusal():
    # only float32 scatters are rewritten; an int64 one stays torch-mlir's tm_tensor.scatter
    from m100.errors import M100Error
    data = np.zeros((2, 3), np.int64)
    with pytest.raises(M100Error, match="tm_tensor.scatter") as e:
        g = h.make_graph([h.make_node("ScatterElements", ["x", "i", "u"], ["y"])], "t",
                         [h.make_tensor_value_info(n, T.INT64, [2, 3]) for n in "xiu"],
                         [h.make_tensor_value_info("y", T.INT64, [2, 3])])
        m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
        M100Backend.prepare(m, machine="tiny").run([data, data, data])
    assert "\n" not in str(e.value)
