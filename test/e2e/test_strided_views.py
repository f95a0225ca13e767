"""Strided views (session 17, issue 13): a column slice of a fused projection and every slice /
reshape of it read in place through an affine walk over the root (``from_ir.strided_views``,
``OpGraph.rmap``), no copy. Checked against numpy written from the ops' definitions with the
interpreter's race checks on, and against the same model compiled with ``ENABLED = False``
(the slices come back as DMA copies; the values are the same, bit for bit)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP, helper as h, numpy_helper as nh

from m100.passes.schedule.from_ir import strided_views as sv
from m100.tools import driver

from e2e_helpers import op_graph as _graph  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

T, N, HD, H = 64, 4, 16, 32
W, HALF = N * HD, HD // 2


def _ints(name, vals):
    return nh.from_array(np.array(vals, np.int64), name)


def _model(dtype=TP.FLOAT):
    """``y = x @ wqkv`` [T, 3W] cut into q, k, v by column slices (as ``llm.build(fuse=...)``):
    RoPE on the halves of q's heads (``q [T, W] -> [T, N, HD]``, halves folded into the CVU op's
    reads), k's heads times a table, v reshaped and transposed into the output ``v [1, N, T, HD]``
    and per head ``o_i = p @ v[:, i HD:(i+1) HD]`` side by side in ``O``."""
    npdt = np.float32 if dtype == TP.FLOAT else np.float16
    inits = [_ints("one", [1]), _ints("z", [0]), _ints("h", [HALF]), _ints("e", [HD]),
             _ints("ax2", [2]), _ints("s3", [T, N, HD]), _ints("sv", [1, T, N, HD]),
             _ints("w0", [0]), _ints("w1", [W]), _ints("w2", [2 * W]), _ints("w3", [3 * W])]
    inits += [_ints(f"c{i}", [i * HD]) for i in range(N + 1)]
    inits.append(nh.from_array((np.random.default_rng(5).standard_normal((H, 3 * W)) / 6)
                               .astype(npdt), "wqkv"))
    nodes = [h.make_node("MatMul", ["x", "wqkv"], ["y"]),
             h.make_node("Slice", ["y", "w0", "w1", "one", "one"], ["q"]),
             h.make_node("Slice", ["y", "w1", "w2", "one", "one"], ["k"]),
             h.make_node("Slice", ["y", "w2", "w3", "one", "one"], ["vp"]),
             h.make_node("Reshape", ["q", "s3"], ["q3"]),
             h.make_node("Slice", ["q3", "z", "h", "ax2", "one"], ["ql"]),
             h.make_node("Slice", ["q3", "h", "e", "ax2", "one"], ["qh"]),
             h.make_node("Slice", ["cs", "z", "h", "ax2", "one"], ["cl"]),
             h.make_node("Slice", ["cs", "h", "e", "ax2", "one"], ["ch"]),
             h.make_node("Mul", ["ql", "cl"], ["qa"]), h.make_node("Mul", ["qh", "ch"], ["qb"]),
             h.make_node("Sub", ["qa", "qb"], ["rq_lo"]),
             h.make_node("Mul", ["qh", "cl"], ["qc"]), h.make_node("Mul", ["ql", "ch"], ["qd"]),
             h.make_node("Add", ["qc", "qd"], ["rq_hi"]),
             h.make_node("Reshape", ["k", "s3"], ["k3"]),
             h.make_node("Mul", ["k3", "cs"], ["kr"]),
             h.make_node("Reshape", ["vp", "sv"], ["v4"]),
             h.make_node("Transpose", ["v4"], ["v"], perm=[0, 2, 1, 3])]
    for i in range(N):
        nodes += [h.make_node("Slice", ["vp", f"c{i}", f"c{i + 1}", "one", "one"], [f"vh{i}"]),
                  h.make_node("MatMul", ["p", f"vh{i}"], [f"o{i}"])]
    nodes.append(h.make_node("Concat", [f"o{i}" for i in range(N)], ["O"], axis=1))
    g = h.make_graph(nodes, "fused_qkv",
                     [h.make_tensor_value_info("x", dtype, [T, H]),
                      h.make_tensor_value_info("cs", dtype, [T, 1, HD]),
                      h.make_tensor_value_info("p", dtype, [T, T])],
                     [h.make_tensor_value_info("rq_lo", dtype, [T, N, HALF]),
                      h.make_tensor_value_info("rq_hi", dtype, [T, N, HALF]),
                      h.make_tensor_value_info("kr", dtype, [T, N, HD]),
                      h.make_tensor_value_info("v", dtype, [1, N, T, HD]),
                      h.make_tensor_value_info("O", dtype, [T, N * HD])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    onnx.checker.check_model(m, full_check=True)
    return m


def _dmas(program) -> int:
    return sum(1 for _, ins in program.instructions() if type(ins).__name__ == "Dma")


def test_fused_projection_slices_read_in_place_exact(monkeypatch):
    m = _model()
    rng = np.random.default_rng(3)
    feed = {"x": rng.standard_normal((T, H)).astype(np.float32),
            "cs": rng.standard_normal((T, 1, HD)).astype(np.float32),
            "p": rng.standard_normal((T, T)).astype(np.float32) / 8}
    wqkv = nh.to_array([i for i in m.graph.initializer if i.name == "wqkv"][0])
    y = feed["x"].astype(np.float64) @ wqkv
    q3, k3 = y[:, :W].reshape(T, N, HD), y[:, W:2 * W].reshape(T, N, HD)
    vp = y[:, 2 * W:]
    c = feed["cs"].astype(np.float64)
    want = {"rq_lo": q3[..., :HALF] * c[..., :HALF] - q3[..., HALF:] * c[..., HALF:],
            "rq_hi": q3[..., HALF:] * c[..., :HALF] + q3[..., :HALF] * c[..., HALF:],
            "kr": k3 * c, "v": vp.reshape(T, N, HD).transpose(1, 0, 2)[None],
            "O": np.concatenate([feed["p"] @ vp[:, i * HD:(i + 1) * HD] for i in range(N)], 1)}

    found = {}
    real = sv.find_strided_views

    def spy(*a):
        found["r"] = real(*a)
        return found["r"]
    monkeypatch.setattr(sv, "find_strided_views", spy)
    on = driver.compile(m, machine="m100")
    rmap = found["r"]
    # q, k, v and below them q's and k's heads, v's 4-D view and v's head columns
    assert len(rmap) == 3 + 4 + N  # + q's heads and their halves, k's heads, v's 4-D view
    assert all(r == next(iter(rmap.values()))[0] for r, _, _ in rmap.values())  # one root: y
    got = driver.run(on.program, feed)
    assert got.ok and not got.reports
    for k, w in want.items():
        np.testing.assert_allclose(got.outputs[k].astype(np.float64), w, rtol=1e-4, atol=1e-4,
                                   err_msg=k)
    monkeypatch.setattr(sv, "ENABLED", False)
    off = driver.compile(m, machine="m100")
    got_off = driver.run(off.program, feed)
    assert got_off.ok and not got_off.reports
    for k in want:
        np.testing.assert_array_equal(got.outputs[k], got_off.outputs[k])
    assert _dmas(on.program) < _dmas(off.program)


def test_reshape_strides_match_numpy():
    """``reshape_strides`` gives numpy's element strides of a no-copy reshape of a strided
    array, and None exactly where numpy must copy."""
    base = np.arange(10_000)
    cases = [((4, 6), (12, 1), (4, 2, 3)), ((4, 6), (12, 1), (24,)), ((4, 6), (12, 1), (2, 12)),
             ((4, 6), (12, 1), (1, 4, 1, 6)), ((2, 3, 4), (40, 4, 1), (2, 12)),
             ((2, 3, 4), (40, 4, 1), (6, 4)), ((2, 3, 4), (12, 4, 1), (24,)),
             ((1, 8), (0, 2), (2, 4)), ((3, 4), (1, 3), (12,)), ((3, 4), (1, 3), (3, 2, 2))]
    for shape, strides, new in cases:
        a = np.lib.stride_tricks.as_strided(base, shape, [s * 8 for s in strides])
        got = sv.reshape_strides(shape, strides, new)
        b = a.reshape(new)
        if np.shares_memory(a, b):
            assert got is not None, (shape, strides, new)
            idx = np.zeros(new, np.int64)
            for d, s in enumerate(got):
                sh = [1] * len(new)
                sh[d] = new[d]
                idx = idx + (np.arange(new[d]) * s).reshape(sh)
            np.testing.assert_array_equal(base[idx], b)
        else:
            assert got is None, (shape, strides, new)


def _slice(offs, sizes):
    return {"offsets": offs, "sizes": sizes, "strides": [1] * len(sizes)}


def test_find_strided_views_rules():
    """Taken: a column slice of a matmul's result read by a CVU op, a reshape of it read by a
    transpose copy. Not taken: a slice read by an op that does not load through a walk (a
    reduction), a reshape that is no affine walk (merging strided columns with rows)."""
    g, low = _graph([("x", (4, 8), "f32", "input"), ("y", (4, 24)), ("q", (4, 8)),
                     ("q3", (4, 2, 4)), ("r", (4, 8)), ("t", (2, 4, 4)), ("k", (4, 8)),
                     ("ks", (4, 1)), ("v", (4, 8)), ("vf", (32,)), ("vo", (32,))],
                    [("mm", "tcu.matmul", None, ["x"], ["y"], {}),
                     ("sq", "dtdu.copy", "slice", ["y"], ["q"], _slice([0, 0], [4, 8])),
                     ("rq", "dtdu.copy", "reshape", ["q"], ["q3"], {}),
                     ("e", "cvu.elementwise", "cvu", ["q"], ["r"], {}),
                     ("tr", "dtdu.copy", "transpose", ["q3"], ["t"], {"perm": [1, 0, 2]}),
                     ("sk", "dtdu.copy", "slice", ["y"], ["k"], _slice([0, 8], [4, 8])),
                     ("red", "cvu.reduction", "reduce", ["k"], ["ks"], {}),
                     ("svv", "dtdu.copy", "slice", ["y"], ["v"], _slice([0, 16], [4, 8])),
                     ("rv", "dtdu.copy", "reshape", ["v"], ["vf"], {}),
                     ("ev", "cvu.elementwise", "cvu", ["vf"], ["vo"], {})])
    views = {"q3": ("q", 0), "vf": ("v", 0)}
    rmap = sv.find_strided_views(g, low, views, {}, {}, {}, {}, {"rq", "rv"})
    assert rmap == {"q": ("y", (24, 1), 0), "q3": ("y", (24, 4, 1), 0)}
    assert views == {"vf": ("v", 0)}  # q3 is a strided view now; v (and its view) stay


@pytest.mark.parametrize("batch,fuse", [(1, ("qkv",)), (2, True)])
def test_tiny_w8a8_prefill_fused_projections_give_the_bits_of_separate_ones(batch, fuse):
    """The tiny LLaMA W8A8 prefill layer with Q/K/V (and gate/up) as one GEMM each, compiled by
    shape and fed the separate weights side by side (int8 products, per-column dequantization:
    the same values), gives the separate layer's ``y``, ``kT`` and ``v`` bit for bit; and the
    separate layer is within the W8A8 criterion of onnxruntime (``bench.llm.w8_close``)."""
    import llm as bench_llm
    from m100.frontend import llm
    cfg = llm.config("tiny")
    T = 8
    rng = np.random.default_rng(7)
    cos, sin = (t.astype(np.float16) for t in llm.rope_tables(cfg, list(range(T))))
    feed = {"x": (rng.standard_normal((batch * T, cfg.hidden)) * 2).astype(np.float16),
            "cos": cos, "sin": sin}
    model, w = llm.build(cfg, "layer", "prefill", context=T, batch=batch, seed=5, quant="w8a8")
    fw = {k: v for k, v in w.items() if k[:2] not in ("wq", "wk", "wv", "wg", "wu")}
    for fused, names in (("wqkv", ("wq", "wk", "wv")), ("wgu", ("wg", "wu"))):
        if fuse is not True and fused[1:] not in fuse:
            fw.update({k: v for k, v in w.items() if k.split(".")[0] in names})
            continue
        fw[fused] = np.concatenate([w[n] for n in names], axis=1)
        fw[fused + ".dq"] = np.concatenate([w[n + ".dq"] for n in names])
    outs = {}
    for f, weights in ((False, w), (fuse, fw)):
        sm, _ = llm.build(cfg, "layer", "prefill", context=T, batch=batch, weights="shape",
                          quant="w8a8", fuse=f)
        got = driver.run(driver.compile(sm, machine="m100").program, feed | weights)
        assert got.ok and not got.reports
        outs[f is not False] = got.outputs
    for k in ("y", "kT", "v"):
        np.testing.assert_array_equal(outs[True][k], outs[False][k], err_msg=k)
    want = bench_llm._ort(model).run(["y"], feed)[0]
    assert bench_llm.w8_close(outs[False]["y"].reshape(want.shape), want)[0]
