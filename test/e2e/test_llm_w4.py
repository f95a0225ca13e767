"""W4A16 (issue 13): int4 weights stay int4 in DDR (packed two per byte, f16 scales per block of K)
and the TCU dequantizes them on the fly (``isa.MatMul.scale``); f16 activations and KV cache.
Oracles: onnxruntime on the same ONNX (``DequantizeLinear(int4, axis=0, block_size)`` ->
``MatMul``, QDQ fusion off so that it computes the ONNX definition) and numpy from the definitions."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from m100.frontend import llm
from m100.frontend.shape_only import INT4_KEY, int4_weights, lift_shape_only_weights
from m100.targets.m100.isa import DType, MatMul
from m100.tools import driver


def _matmuls(prog):
    return [i for s in prog.streams.values() for i in s if isinstance(i, MatMul)]


def test_tiny_llama_w4a16_decode_passes_check_with_int4_in_ddr(tmp_path):
    """A small LLaMA decoder layer (KV cache inputs, GQA) in W4A16 passes `m100 check`; every
    projection is an i4 x f16 matmul with its scales, and the program holds the weights as int4
    (no f16 copy: segments are the int4 bytes + scales + the f16 norm weights and constants)."""
    cfg = llm.config("tiny")
    m, w = llm.build(cfg, "layer", "decode", context=8, batch=1, fuse=True, quant="w4a16",
                     block=16, seed=3)
    onnx.save(m, tmp_path / "w4.onnx")
    ck = driver.check(tmp_path / "w4.onnx", machine="m100", seed=3)
    assert ck.passed, ck.summary()
    mm = _matmuls(ck.compile.program)
    w4 = [i for i in mm if i.b.dtype is DType.I4]
    assert len(w4) >= 4 and all(i.scale is not None and i.block == 16 for i in w4)
    assert all(i.a.dtype is DType.F16 for i in mm)
    proj = {n: a for n, a in w.items() if a.dtype == np.int8}
    w4_bytes = sum(a.size // 2 + w[f"{n}.scale"].nbytes for n, a in proj.items())
    seg = sum(len(s.data) for s in ck.compile.program.segments)
    f16_proj = sum(a.size * 2 for a in proj.values())
    assert w4_bytes <= seg < w4_bytes + 1024 < f16_proj


def test_shape_only_w4_weights_become_int4_symbols_and_match_onnxruntime(tmp_path):
    """The bench's path: the layer compiled by shape; the int4 values and scales supplied at run
    time by their ONNX names; vs onnxruntime on the materialized layer (f16 tolerance of check)."""
    from m100.frontend.ort_session import ort_session
    cfg = llm.config("tiny")
    kw = dict(context=8, batch=1, fuse=True, quant="w4a16", block=16)
    ms, _ = llm.build(cfg, "layer", "decode", weights="shape", **kw)
    mr, w = llm.build(cfg, "layer", "decode", seed=5, **kw)
    cr = driver.compile(ms, machine="m100")
    sym = {s.name: s for s in cr.program.symbols if s.role == "weight"}
    assert sym["wqkv"].dtype is DType.I4 and sym["wqkv.scale"].dtype is DType.F16
    assert sym["wqkv.scale"].shape == (cfg.hidden // 16, (cfg.heads + 2 * cfg.kv_heads)
                                       * cfg.head_dim)
    assert "wqkv.dq" not in sym
    rng = np.random.default_rng(1)
    feed = {vi.name: rng.standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim])
            .astype(np.float16) for vi in mr.graph.input}
    sess = ort_session(mr, {"session.disable_quant_qdq": "1"})
    names = [o.name for o in mr.graph.output]
    want = dict(zip(names, sess.run(names, feed)))
    got = driver.run(cr.program, feed | w, machine=cr.machine)
    assert got.ok
    for n in names:
        g = got.outputs[n].reshape(want[n].shape).astype(np.float64)
        tol = driver.F16_TOL
        assert np.all(np.abs(g - want[n]) <= tol + tol * np.abs(want[n])), n
    # wrong scales give wrong numbers (the supplied scales are what the TCU applies)
    bad = dict(w)
    bad["wqkv.scale"] = (w["wqkv.scale"] * 2).astype(np.float16)
    got2 = driver.run(cr.program, feed | bad, machine=cr.machine)
    assert not np.allclose(got2.outputs["k_new"].reshape(want["k_new"].shape), want["k_new"],
                           atol=0.05)


def _w4_graph(axis=0, zp=False):
    k, n, b = 32, 8, 16
    q = helper.make_tensor("q", TensorProto.INT4, [k, n], [0] * (k * n))
    sdims = [k // b, n] if axis == 0 else [k, n // 4]
    s = helper.make_tensor("s", TensorProto.FLOAT16, sdims, [0.0] * (sdims[0] * sdims[1]))
    ins = ["q", "s"] + (["z"] if zp else [])
    inits = [q, s] + ([helper.make_tensor("z", TensorProto.INT4, sdims, [1] * (sdims[0] * sdims[1]))]
                      if zp else [])
    for t in inits:  # shape-only: external data that is not there
        t.ClearField("int32_data")
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        t.external_data.add(key="location", value="absent.bin")
    g = helper.make_graph(
        [helper.make_node("DequantizeLinear", ins, ["wd"], axis=axis, block_size=16 if axis == 0
                          else 4), helper.make_node("MatMul", ["x", "wd"], ["y"])], "w4",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2, n])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m


def test_lift_records_the_int4_weight_and_its_scales():
    m = _w4_graph()
    lift_shape_only_weights(m)
    assert [n.op_type for n in m.graph.node] == ["MatMul"]
    (wd,) = [v for v in m.graph.input if v.name == "wd"]
    assert wd.type.tensor_type.elem_type == TensorProto.FLOAT16
    assert [d.dim_value for d in wd.type.tensor_type.shape.dim] == [32, 8]
    assert int4_weights(m) == {"wd": {"q": "q", "scale": "s", "block": 16}}
    assert any(p.key == INT4_KEY for p in m.metadata_props)


@pytest.mark.parametrize("axis,zp", [(1, False), (0, True)])
def test_other_shape_only_int4_forms_are_one_clear_error(tmp_path, axis, zp):
    onnx.save(_w4_graph(axis, zp), tmp_path / "m.onnx")
    with pytest.raises(Exception) as e:
        driver.compile(tmp_path / "m.onnx", machine="tiny")
    msg = str(e.value)
    assert "shape-only int4 weight" in msg and "\n" not in msg


def test_f16_matmul_split_along_k_accumulates_in_f32_and_rounds_once(tmp_path):
    """A long-K f16 GEMM on the small machine runs in K chunks: the chunks accumulate in f32 and
    the last one reads them as ``acc`` and rounds once to f16 (before, f16 results kept K whole);
    vs onnxruntime (check) and numpy from the definition (f32 sums, one f16 rounding: within one
    f16 ulp, the f32 summation order differs)."""
    from onnx import numpy_helper
    rng = np.random.default_rng(0)
    k, n = 4096, 256
    w = (rng.standard_normal((k, n)) / 64).astype(np.float16)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [4, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [4, n])],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "m.onnx")
    ck = driver.check(tmp_path / "m.onnx", machine="tiny", seed=1)
    assert ck.passed, ck.summary()
    mm = _matmuls(ck.compile.program)
    assert any(i.acc is not None for i in mm) and all(i.k < k for i in mm)
    x = rng.standard_normal((4, k)).astype(np.float16)
    got = driver.run(ck.compile.program, {"x": x}, machine=ck.compile.machine).outputs["y"]
    want = (x.astype(np.float64) @ w.astype(np.float64)).astype(np.float16)
    ulp = np.abs(np.spacing(want.astype(np.float16))).astype(np.float64)
    assert np.all(np.abs(got.reshape(4, n).astype(np.float64) - want) <= ulp)


def _w4_gemv(k: int, n: int, b: int = 128):
    """x [1, k] f16 @ DequantizeLinear(q int4 [k, n], s f16 [k/b, n], axis 0, block b), the
    weights shape-only (supplied at run time as ``q`` and ``s``)."""
    m = _w4_graph()
    g = m.graph
    for t, dims in ((g.initializer[0], [k, n]), (g.initializer[1], [k // b, n])):
        del t.dims[:]
        t.dims.extend(dims)
    g.node[0].attribute[1].i = b  # block_size
    g.input[0].type.tensor_type.shape.dim[0].dim_value = 1
    g.input[0].type.tensor_type.shape.dim[1].dim_value = k
    g.output[0].type.tensor_type.shape.dim[0].dim_value = 1
    g.output[0].type.tensor_type.shape.dim[1].dim_value = n
    return m


def test_w4_gemv_streams_every_weight_byte_once_and_scales_arrive_before_use():
    """A streamed W4 GEMV on the M100 (K = 11008 = 86 blocks of 128, LLaMA2-7B's down
    projection: its K chunks hold whole blocks, 4 to 8 of them per TPB): every int4 weight is
    read from DDR by exactly one DMA and every scale by exactly one (the scales of a TPB's
    column part -- or of its weight group's column parts, ``wshare`` -- in one load or
    broadcast, not one per K chunk: each TPB receives its scales by exactly one DMA); each
    matmul starts after the DMA that wrote its scales ended (timing run); numerics vs numpy
    from the DequantizeLinear definition."""
    from m100.sim.simulator import Simulator
    from m100.targets.m100.isa import Dma, Space, tpbs_of
    k, n, b = 11008, 256, 128
    cr = driver.compile(_w4_gemv(k, n, b), machine="m100")
    prog = cr.program
    sym = {s.name: s for s in prog.symbols if s.role == "weight"}
    mm = [i for i in _matmuls(prog) if i.scale is not None]
    assert mm and all(i.k % b == 0 for i in mm)
    per_tpb: dict[int, list] = {}
    for i in mm:
        per_tpb.setdefault(i.tpb, []).append(i)
    assert all(4 <= len(v) <= 8 for v in per_tpb.values()), {t: len(v) for t, v in per_tpb.items()}
    dmas = [i for s in prog.streams.values() for i in s if isinstance(i, Dma)]
    for name, dt_bits, count in (("q", 4, k * n), ("s", 16, k // b * n)):
        s = sym[name]
        seen = np.zeros(count, np.int64)
        receivers = []
        for d in dmas:
            if d.src.space is Space.DDR and s.address <= d.src.base < s.address + s.nbytes:
                first = (d.src.base - s.address) * 8 // dt_bits
                np.add.at(seen, first + d.src.offsets(), 1)
                receivers += tpbs_of(d.tpb_mask) if d.tpb_mask else [d.dst.tpb]
        assert seen.min() == 1 and seen.max() == 1, name
        if name == "s":  # each TPB receives its scales by one DMA
            assert sorted(receivers) == sorted(per_tpb)
    rng = np.random.default_rng(4)
    q = rng.integers(-8, 8, (k, n)).astype(np.int8)
    sc = (rng.random((k // b, n)) / 64 + 1e-3).astype(np.float16)
    x = rng.standard_normal((1, k)).astype(np.float16)
    feed = {"x": x, "q": q, "s": sc}
    res = Simulator(prog, mode="timing", check_races=False).run({})
    ends = {}  # HBSM (tpb, byte) written by a DMA -> its end
    for r in res.records:
        if isinstance(r.inst, Dma) and r.inst.dst.space is Space.HBSM and \
                r.inst.src.space is Space.DDR and r.inst.src.base >= sym["s"].address and \
                r.inst.src.base < sym["s"].address + sym["s"].nbytes:
            w = r.inst.dst
            for tp in tpbs_of(r.inst.tpb_mask) if r.inst.tpb_mask else [w.tpb]:
                for o in (w.base + 2 * w.offsets()).tolist():
                    ends[(tp, o)] = r.end
    ids = {id(i) for i in mm}
    checked = 0
    for r in res.records:
        if id(r.inst) in ids:
            w = r.inst.scale
            assert all(ends[(w.tpb, o)] <= r.start for o in (w.base + 2 * w.offsets()).tolist())
            checked += 1
    assert checked == len(mm)
    got = driver.run(prog, feed, machine=cr.machine).outputs["y"].astype(np.float64)
    wdq = (q.astype(np.float32) * np.repeat(sc.astype(np.float32), b, axis=0)).astype(np.float16)
    want = x.astype(np.float64) @ wdq.astype(np.float64)
    assert np.allclose(got.reshape(1, n), want, rtol=2e-3, atol=2e-3 * np.abs(want).max())
