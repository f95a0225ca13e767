"""fuse-elementwise through the whole stack (ONNX -> program for ``tiny`` -> interpreter), exact
against numpy from the definition the pass documents: a fused f16 tree computes in f32 and rounds
ONCE at the store (``passes/graph/fuse_elementwise.py``, the session-11 numerics decision); a
fused f32 tree is bit-identical with the unfused ops.

What this would catch: a fused body that still rounds per op somewhere (the reference executor
or the CVU stages disagreeing with the f32 body), a dropped / duplicated leaf or a broadcast
table read with the wrong map (RoPE's ``x * C + rot * S`` with ``C``/``S`` [T, 1, hd] broadcast
over the heads), a producer with two users computed twice or lost.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper as h

from m100.tools.onnx_backend import M100Backend

T, N, HD = 6, 3, 16


def _model(dt, nodes, inputs, outputs):
    t = h.np_dtype_to_tensor_dtype(np.dtype(dt))
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info(n, t, s) for n, s in inputs],
                     [h.make_tensor_value_info(n, t, s) for n, s in outputs])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    onnx.checker.check_model(m, full_check=True)
    return m


def _rope_model(dt):
    nodes = [h.make_node("Mul", ["x", "c"], ["a"]), h.make_node("Mul", ["r", "s"], ["b"]),
             h.make_node("Add", ["a", "b"], ["y"])]
    return _model(dt, nodes, [("x", [T, N, HD]), ("c", [T, 1, HD]), ("r", [T, N, HD]),
                              ("s", [T, 1, HD])], [("y", [T, N, HD])])


def _operands(dt, seed=3):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((T, N, HD)) * 4
    r = rng.standard_normal((T, N, HD)) * 4
    c = np.cos(rng.uniform(0, 6.3, (T, 1, HD)))
    s = np.sin(rng.uniform(0, 6.3, (T, 1, HD)))
    return [v.astype(dt) for v in (x, c, r, s)]


def test_rope_f16_tree_is_rounded_once():
    x, c, r, s = _operands(np.float16)
    f = np.float32
    want = (x.astype(f) * c.astype(f) + r.astype(f) * s.astype(f)).astype(np.float16)
    per_op = ((x * c).astype(np.float16) + (r * s).astype(np.float16)).astype(np.float16)
    assert (want != per_op).any()  # the two definitions differ on these operands
    (got,) = M100Backend.prepare(_rope_model(np.float16), machine="tiny").run([x, c, r, s])
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, want)
    # and within a few f16 ulps of the per-op (ONNX) definition
    np.testing.assert_allclose(got.astype(f), per_op.astype(f), rtol=0, atol=4 * 2.0 ** -10 * 16)


def test_rope_f32_tree_is_unchanged():
    x, c, r, s = _operands(np.float32)
    want = x * c + r * s  # numpy f32: every op rounds to f32, as before the fusion
    (got,) = M100Backend.prepare(_rope_model(np.float32), machine="tiny").run([x, c, r, s])
    np.testing.assert_array_equal(got, want)


def test_shared_producer_and_chain():
    """``a = x * x`` feeds two users (kept as a tensor, read by both); ``(-a - z) / w`` is a tree
    of three ops over a kept producer; outputs exact against the one-rounding definition."""
    nodes = [h.make_node("Mul", ["x", "x"], ["a"]), h.make_node("Neg", ["a"], ["n"]),
             h.make_node("Sub", ["n", "z"], ["m"]), h.make_node("Div", ["m", "w"], ["y"]),
             h.make_node("Max", ["a", "z"], ["y2"])]
    shp = [T, N * HD]
    model = _model(np.float16, nodes, [("x", shp), ("z", shp), ("w", shp)],
                   [("y", shp), ("y2", shp)])
    rng = np.random.default_rng(7)
    x, z = (rng.standard_normal(shp).astype(np.float16) for _ in range(2))
    w = (rng.uniform(0.5, 2.0, shp) * rng.choice([-1, 1], shp)).astype(np.float16)
    f = np.float32
    a = (x * x).astype(np.float16)  # a tensor of its own (two users): rounded to f16
    want = ((-a.astype(f) - z.astype(f)) / w.astype(f)).astype(np.float16)
    want2 = np.maximum(a, z)
    got, got2 = M100Backend.prepare(model, machine="tiny").run([x, z, w])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got2, want2)
