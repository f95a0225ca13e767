"""W8A8 LLaMA (issue 13): int8 weights compiled by shape (DDR symbols, no bytes in the program)
and run as i8 x i8 -> i32 TCU contractions. Oracles: numpy written from the ONNX definitions
(QuantizeLinear, MatMulInteger, Cast, Mul) and onnxruntime."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from m100.frontend.ort_session import ort_session
from m100.frontend import llm
from m100.targets.m100.isa import CvuPipeline, MatMul
from m100.tools import driver

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))


def _external(name, dt, dims):
    t = TP(name=name, data_type=dt, dims=dims)
    t.data_location = TP.EXTERNAL
    t.external_data.add(key="location", value=llm.SHAPE_ONLY_LOCATION)
    return t


def _projection(m, k, n, shape_only, w, dq):
    """y = Cast(Cast(MatMulInteger(QuantizeLinear(x, 1/32, 0), W), f32) * dq, f16)."""
    sx = np.float16(llm.W8_ACT_SCALE)
    inits = [numpy_helper.from_array(np.array(sx), "sx"),
             numpy_helper.from_array(np.array(0, np.int8), "zx")]
    if shape_only:
        inits += [_external("w", TP.INT8, [k, n]), _external("dq", TP.FLOAT, [n])]
    else:
        inits += [numpy_helper.from_array(w, "w"), numpy_helper.from_array(dq, "dq")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("MatMulInteger", ["xq", "w"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TP.FLOAT),
             helper.make_node("Mul", ["accf", "dq"], ["yf"]),
             helper.make_node("Cast", ["yf"], ["y"], to=TP.FLOAT16)]
    g = helper.make_graph(nodes, "w8", [helper.make_tensor_value_info("x", TP.FLOAT16, [m, k])],
                          [helper.make_tensor_value_info("y", TP.FLOAT16, [m, n])], inits)
    mo = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    mo.ir_version = 10
    return mo


@pytest.mark.parametrize("k", [64, 1536])
def test_w8a8_projection_by_shape_runs_int8_on_the_tcu_bit_exact(k):
    """K = 64 is below the f32 emulation's exactness bound (K * 128 * 128 < 2**24) where a run-time
    int8 weight used to become an f32 contraction; K = 1536 above it. Both must be the int8 TCU
    contraction with the weights as DDR symbols, bit-exact against numpy and onnxruntime."""
    m, n = 40, 96
    rng = np.random.default_rng(k)
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    dq = (rng.random(n) * 1e-3 + 1e-4).astype(np.float32)
    x = (rng.standard_normal((m, k)) * 2).astype(np.float16)
    x[0, :4] = [4.5 / 32, -1.5 / 32, 200.0, -200.0]  # ties to even, saturation both ways
    prog = driver.compile(_projection(m, k, n, True, None, None), machine="tiny").program
    syms = {s.name: s for s in prog.symbols}
    assert syms["w"].role == "weight" and syms["w"].dtype.name == "I8" and syms["w"].shape == (k, n)
    assert syms["dq"].role == "weight"
    assert sum(len(s.data) for s in prog.segments) < 64  # no weight bytes in the program
    mms = [i for _, i in prog.instructions() if isinstance(i, MatMul)]
    # i8 x i8 -> i32 on the TCU, dequantized by the last K chunk's epilogue into f16 (earlier
    # chunks of a K-split chain write the i32 accumulator); no CVU pass reads an i32 result
    assert mms and all((i.a.dtype.name, i.b.dtype.name) == ("I8", "I8") for i in mms)
    assert all((i.c.dtype.name, i.epilogue.dequant is not None) in (("I32", False), ("F16", True))
               for i in mms) and any(i.epilogue.dequant is not None for i in mms)
    assert not [i for _, i in prog.instructions() if isinstance(i, CvuPipeline)
                and any(w.dtype.name == "I32" for _, w, _ in i.walks())]
    res = driver.run(prog, {"x": x, "w": w, "dq": dq})
    assert res.ok, res.reports[:3]  # no races: the dequant scales' loads are synchronized
    got = res.outputs["y"].reshape(m, n)
    # numpy from the definitions: QuantizeLinear = saturate(round_half_even(x / s)) (exact: s is
    # a power of two), MatMulInteger in int64, Cast to f32, Mul in f32, Cast to f16
    xq = np.clip(np.rint(x.astype(np.float64) * 32), -128, 127).astype(np.int64)
    want = ((xq @ w.astype(np.int64)).astype(np.float32) * dq).astype(np.float16)
    assert np.array_equal(got, want)
    sess = ort_session(_projection(m, k, n, False, w, dq))
    assert np.array_equal(got, sess.run(["y"], {"x": x})[0])
    # the weights are read: other weights, other result
    got2 = driver.run(prog, {"x": x, "w": np.roll(w, 1, axis=1), "dq": dq}).outputs["y"]
    assert not np.array_equal(got2.reshape(m, n), want)


def test_llama_w8a8_builder_declares_int8_weights_by_shape():
    """Every projection of the W8A8 layer is QuantizeLinear -> MatMulInteger(int8 W) -> f16 with
    per-channel dequantization scales; shape-only weights are external int8 / f32 tensors."""
    cfg = llm.config("llama2-7b")
    mo, vals = llm.build(cfg, "layer", "prefill", context=64, weights="shape", fuse=True,
                         quant="w8a8")
    assert vals == {}
    ext = {t.name: t for t in mo.graph.initializer if t.data_location == TP.EXTERNAL}
    mmi = [nd for nd in mo.graph.node if nd.op_type == "MatMulInteger"]
    assert [nd.input[1] for nd in mmi] == ["wqkv", "wo", "wgu", "wd"]
    h, f = cfg.hidden, cfg.ffn
    assert [list(ext[n].dims) for n in ("wqkv", "wo", "wgu", "wd")] == \
        [[h, 3 * h], [h, h], [h, 2 * f], [f, h]]
    assert all(ext[n].data_type == TP.INT8 for n in ("wqkv", "wo", "wgu", "wd"))
    assert list(ext["wgu.dq"].dims) == [2 * f] and ext["wgu.dq"].data_type == TP.FLOAT
    assert not any(nd.op_type == "MatMul" and nd.input[1] in ext for nd in mo.graph.node)


def test_tiny_llama_w8a8_prefill_layer_matches_onnxruntime_and_wrong_weights_do_not():
    """The tiny W8A8 prefill layer compiled by shape, fed its int8 weights and scales at run time,
    against onnxruntime on the same ONNX with the weights as constants (bench.llm.w8_close); a
    layer fed another layer's weights fails the same criterion."""
    import llm as bench_llm
    cfg = llm.config("tiny")
    T = 8
    shape_model, _ = llm.build(cfg, "layer", "prefill", context=T, weights="shape", fuse=True,
                               quant="w8a8")
    prog = driver.compile(shape_model, machine="m100").program
    mms = [i for _, i in prog.instructions() if isinstance(i, MatMul)]
    assert sum(i.a.dtype.name == "I8" and i.b.dtype.name == "I8" for i in mms) >= 4
    rng = np.random.default_rng(3)
    cos, sin = (t.astype(np.float16) for t in llm.rope_tables(cfg, list(range(T))))
    x = rng.standard_normal((T, cfg.hidden)).astype(np.float16)
    feed = {"x": x, "cos": cos, "sin": sin}
    model, w = llm.build(cfg, "layer", "prefill", context=T, seed=5, fuse=True, quant="w8a8")
    _, other = llm.build(cfg, "layer", "prefill", context=T, seed=6, fuse=True, quant="w8a8")
    want = bench_llm._ort(model).run(["y"], feed)[0]
    got = driver.run(prog, feed | w).outputs["y"].reshape(want.shape)
    ok, rms = bench_llm.w8_close(got, want)
    assert ok, rms
    bad = driver.run(prog, feed | other).outputs["y"].reshape(want.shape)
    assert not bench_llm.w8_close(bad, want)[0]
    wrong_scale = dict(w, **{"wd.dq": w["wd.dq"] * 1.5})
    bad = driver.run(prog, feed | wrong_scale).outputs["y"].reshape(want.shape)
    assert not bench_llm.w8_close(bad, want)[0]


@pytest.mark.parametrize("batch", [1, 2])
def test_prefill_head_computes_the_last_tokens_logits_exactly(batch):
    """The prefill head computes only each sequence's last-token logits (``logits='last'``, what
    generation reads): onnxruntime on it equals the last rows of onnxruntime on the every-row head
    (``logits='all'``) bit for bit (RMSNorm and the W8A8 projection are row-wise), and the W8A8
    head compiled by shape, fed the same weights, is bit-exact against it."""
    import llm as bench_llm
    cfg = llm.config("tiny")
    T = 8
    full, _ = llm.build(cfg, "head", "prefill", context=T, batch=batch, seed=7, quant="w8a8",
                        logits="all")
    last, w = llm.build(cfg, "head", "prefill", context=T, batch=batch, seed=7, quant="w8a8")
    x = np.random.default_rng(1).standard_normal((batch * T, cfg.hidden)).astype(np.float16)
    want_all = bench_llm._ort(full).run(["logits"], {"x": x})[0]
    want = bench_llm._ort(last).run(["logits"], {"x": x})[0]
    assert want.shape == (batch, cfg.vocab)
    assert np.array_equal(want, want_all[T - 1::T])
    shape_model, _ = llm.build(cfg, "head", "prefill", context=T, batch=batch, weights="shape",
                               quant="w8a8")
    got = driver.run(driver.compile(shape_model, machine="m100").program, {"x": x} | w)
    assert np.array_equal(got.outputs["logits"].reshape(want.shape), want)
    with pytest.raises(llm.LlmBuildError, match="logits"):
        llm.build(cfg, "head", "prefill", context=T, logits="first")


@pytest.mark.parametrize("batch,heads,kv_heads", [(1, 4, 2), (2, 2, 2)])
def test_prefill_heads_quantized_each_give_the_bits_of_the_concat_quantized(batch, heads,
                                                                             kv_heads,
                                                                             monkeypatch):
    """Session 15: W8A8 prefill quantizes each head's [T, hd] output for ``wo`` (the last op of
    the head's pipeline, ``llm.PREFILL_O_QUANT = "heads"``) instead of the concat of all heads
    after the last one (``"concat"``). QuantizeLinear is per tensor and elementwise, so the two
    graphs are the same function: onnxruntime gives both the same bits, and so do the two
    compiled layers (y and the KV cache), MHA and GQA, batch 1 and 2."""
    cfg = llm.scaled(llm.config("tiny"), heads=heads, kv_heads=kv_heads)
    T = 8
    rng = np.random.default_rng(11)
    cos, sin = (t.astype(np.float16) for t in llm.rope_tables(cfg, list(range(T))))
    feed = {"x": rng.standard_normal((batch * T, cfg.hidden)).astype(np.float16),
            "cos": cos, "sin": sin}
    ort, got = {}, {}
    for form in ("concat", "heads"):
        monkeypatch.setattr(llm, "PREFILL_O_QUANT", form)
        model, _ = llm.build(cfg, "layer", "prefill", context=T, batch=batch, seed=3,
                             quant="w8a8")
        qs = [nd for nd in model.graph.node if nd.op_type == "QuantizeLinear"]
        # one per head and sequence (or one of o), and those of the six other projections
        assert len(qs) == (batch * heads if form == "heads" else 1) + 6
        ort[form] = ort_session(model).run(["y"], feed)[0]
        res = driver.run(driver.compile(model, machine="m100").program, feed)
        assert res.ok and not res.reports
        got[form] = res.outputs
    np.testing.assert_array_equal(ort["heads"], ort["concat"])
    for k in ("y", "kT", "v"):
        np.testing.assert_array_equal(got["heads"][k], got["concat"][k])
