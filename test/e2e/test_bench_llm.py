"""`m100 bench llm --model tiny` (issue 13 step 4): the LLaMA path at toy size, with full numerics
of every (repeated) layer and the head against onnxruntime, decode with a KV cache and prefill
(the exported transformers layer of test/data passes `m100 check` in test_models.py)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"
KEYS = {"model", "phase", "quant", "context", "simulated_ms", "predicted_ms", "roofline_ms",
        "ddr_bandwidth_util", "tcu_util", "paper_ms"}


def _m100(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "m100.tools.m100_cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("phase,extra,run", [("decode", ["--batch", "2"], "w4a16"),
                                              ("prefill", [], "w8a8")])
def test_bench_llm_tiny_numerics_and_json(tmp_path, phase, extra, run):
    """Decode runs the paper's W4A16 (int4 weights streamed, dequantized by the TCU, f16
    activations and KV cache); prefill the paper's W8A8 (int8 weights by shape, i8 x i8 -> i32
    projections, f16 attention; numerics within bench.llm.w8_close of onnxruntime)."""
    out = tmp_path / "llm.json"
    r = _m100("bench", "llm", "--model", "tiny", "--phase", phase, "--context", "8",
              "--json", str(out), *extra, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    row = json.loads(out.read_text())
    assert KEYS <= set(row)
    assert row["numerics"] == "PASS"
    assert row["max_abs_error"] < {"f32": 1e-4, "w4a16": 2e-2, "w8a8": 0.2}[run]
    assert row["layers"] == 2 and row["phase"] == phase
    # what ran is reported; where it is not the requested scheme the row says so
    assert row["run_dtype"] == run and (("ran in f32" in r.stdout) == (run == "f32"))
    assert row["simulated_ms"] > 0 and row["predicted_ms"] > 0
    assert row["simulated_ms"] >= row["roofline_ms"]  # no program beats its roofline
    assert 0 < row["ddr_bandwidth_util"] <= 1 and 0 <= row["tcu_util"] <= 1
    assert row["paper_ms"] is None  # the paper has no tiny figure
    assert any(f"{row['simulated_ms']}" in line for line in r.stdout.splitlines())
    # the second run comes from the compile cache (out/cache/llm) with the same figures
    r2 = _m100("bench", "llm", "--model", "tiny", "--phase", phase, "--context", "8",
               "--json", str(out), *extra, cwd=tmp_path)
    row2 = json.loads(out.read_text())
    assert r2.returncode == 0 and row2["compile_cached"] is True
    assert row2["simulated_ms"] == row["simulated_ms"]


def test_roofline_of_the_paper_configurations():
    """The bound printed next to the paper: LLaMA2-7B decode W4A16 at context 1024 reads 3.4 GB of
    weights + 0.5 GB of f16 KV cache (about 14.3 ms at 273 GB/s, as the issue computes) + the
    token's 8 KB embedding row."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import llm as bench_llm

    from m100.frontend.llm import config
    from m100.targets.m100.machine import get_machine
    m = get_machine("m100")
    r = bench_llm.roofline_ms(config("llama2-7b"), "decode", 1024, 1, "w4a16", m)
    assert r["bound"] == "DDR"
    kv = 32 * 2 * 32 * 128 * 2 * 1025 + 4096 * 2  # + one f16 embedding row
    assert math.isclose(r["ddr_bytes"] - kv, (32 * 202_383_360 + 32000 * 4096) * (0.5 + 2 / 128))
    assert 13.5 < r["ms"] < 16.0
    p = bench_llm.roofline_ms(config("llama2-7b"), "prefill", 1024, 1, "w8a8", m)
    assert p["bound"] == "TCU" and 30 < p["ms"] < 60



@pytest.mark.parametrize("forms", [("concat", "heads"), ("heads", "concat")])
def test_prefill_layer_runs_the_o_quant_form_with_the_shorter_plan(forms, monkeypatch):
    """Session 19: ``bench/llm.py`` compiles a W8A8 prefill layer with the attention output
    quantized per head and after the concat of the heads (``llm.build``'s ``o_quant``; the
    same bits: test_llm_w8) and runs the one whose plan -- the scheduler's prediction -- is
    shorter, whatever the order it tries them in. The oracle: each form compiled here on its
    own by ``driver.compile`` (with the bench's prefetch shares, ``PREFILL_SHARES``, and its
    ``pack_largest_first``);
    ``o_quant`` reaches the graph (a QuantizeLinear per head and sequence, or one of ``o``)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import llm as bench_llm

    from m100.frontend import llm
    from m100.tools import driver
    cfg = llm.scaled(llm.config("tiny"), heads=4, kv_heads=2)
    pred = {}
    for oq in ("concat", "heads"):
        model, _ = llm.build(cfg, "layer", "prefill", context=8, weights="shape", quant="w8a8",
                             o_quant=oq)
        qs = sum(nd.op_type == "QuantizeLinear" for nd in model.graph.node)
        assert qs == (cfg.heads if oq == "heads" else 1) + 6  # + the six other projections
        cr = driver.compile(model, machine="m100", prefetch_shares=bench_llm.PREFILL_SHARES,
                            pack_largest_first=True)
        pred[oq] = int(cr.program.metadata["predicted_cycles"])
    assert pred["concat"] != pred["heads"]  # (else the choice is not tested)
    monkeypatch.setattr(bench_llm, "O_QUANT_FORMS", forms)
    monkeypatch.setattr(bench_llm, "_PROGRAMS", {})
    rep = bench_llm.programs(cfg, "prefill", 8, 1, "w8a8", "m100", None)[0]
    want = min(pred, key=pred.get)
    assert rep.metadata["llm_o_quant"] == want
    assert int(rep.metadata["predicted_cycles"]) == pred[want]
    with pytest.raises(llm.LlmBuildError, match="o_quant"):
        llm.build(cfg, "layer", "prefill", context=8, weights="shape", quant="w8a8",
                  o_quant="rows")


def test_f16_batched_matmul_rounds_on_store():
    """The attention GEMMs of an f16 decoder: a batched f16 MatMul (accumulated in f32, rounded
    on store) was refused ('batch_matmul supports a zero init and one activation'); vs onnxruntime."""
    from onnx import TensorProto, helper

    from m100.tools import driver
    g = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"])], "bmm16",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT16, [3, 4, 32]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT16, [3, 32, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [3, 4, 16])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    r = driver.check(m, machine="m100")
    assert r.passed, r.summary()


def test_batched_decode_layer_is_each_sequence_at_batch_1():
    """Batch B > 1 decode: one cache input per (sequence, KV head) (``past_kT.b.j``), one GEMV
    each, the new row's score as a product and a sum over hd. Oracle: onnxruntime on the batch-1
    layer (the form the figures and m100 check tests use) run for each sequence alone with the
    same weights; and the B = 3 layer compiled (GQA tiny, f32) matches onnxruntime."""
    import numpy as np

    from m100.frontend import llm
    from m100.tools import driver
    cfg = llm.scaled(llm.config("tiny"), heads=4, kv_heads=2)
    B, L, hd = 3, 8, cfg.head_dim
    model, _ = llm.build(cfg, "layer", "decode", context=L, batch=B, seed=4)
    names = [i.name for i in model.graph.input]
    assert names[3:] == [f"past_{c}.{b}.{j}" for c in ("kT", "v") for b in range(B)
                         for j in range(cfg.kv_heads)]
    rng = np.random.default_rng(0)
    feed = {"x": rng.standard_normal((B, cfg.hidden)).astype(np.float32)}
    cos, sin = llm.rope_tables(cfg, [L, L + 3, L + 5])  # each sequence at its own position
    feed["cos"], feed["sin"] = cos.reshape(B, 1, 1, hd), sin.reshape(B, 1, 1, hd)
    for b in range(B):
        for j in range(cfg.kv_heads):
            feed[f"past_kT.{b}.{j}"] = rng.standard_normal((hd, L)).astype(np.float32)
            feed[f"past_v.{b}.{j}"] = rng.standard_normal((L, hd)).astype(np.float32)
    from m100.frontend.ort_session import ort_session
    outs = ["y", "k_new", "v_new"]
    got = dict(zip(outs, ort_session(model).run(outs, feed)))
    one, _ = llm.build(cfg, "layer", "decode", context=L, batch=1, seed=4)
    s1 = ort_session(one)
    for b in range(B):
        f1 = {"x": feed["x"][b:b + 1], "cos": feed["cos"][b:b + 1], "sin": feed["sin"][b:b + 1]}
        for j in range(cfg.kv_heads):
            f1[f"past_kT.{j}"] = feed[f"past_kT.{b}.{j}"]
            f1[f"past_v.{j}"] = feed[f"past_v.{b}.{j}"]
        want = dict(zip(outs, s1.run(outs, f1)))
        for k in outs:
            np.testing.assert_allclose(got[k][b:b + 1], want[k], rtol=1e-5, atol=1e-5)
    prog = driver.compile(model, machine="m100").program
    res = driver.run(prog, feed).outputs
    for k in outs:
        np.testing.assert_allclose(res[k].reshape(got[k].shape), got[k], rtol=1e-4, atol=1e-4)


PREFILL_ROPE_DEFAULT = "rot"


def _llama_prefill_numpy(cfg, w: dict, x, cos, sin, B: int, T: int):
    """A LLaMA decoder layer over B sequences of T tokens in numpy (float64), written from the
    transformers definition: RMSNorm, Q/K/V, rotate-half RoPE, causal softmax attention per
    query head against its KV head (GQA), output projection + residual, SiLU-gated MLP."""
    import numpy as np
    hd, nh, kvh = cfg.head_dim, cfg.heads, cfg.kv_heads

    def rms(a, wn):
        return wn * (a / np.sqrt(np.mean(a * a, -1, keepdims=True) + cfg.eps))

    def rope(a):  # [T, n, hd]
        rot = np.concatenate([-a[..., hd // 2:], a[..., :hd // 2]], -1)
        return a * cos[:, None] + rot * sin[:, None]
    x = x.astype(np.float64)
    xn = rms(x, w["attn_norm"])
    q, k, v = (xn @ w[n] for n in ("wq", "wk", "wv"))
    o = np.zeros((B * T, nh * hd))
    kT, vc = np.zeros((B, kvh, hd, T)), np.zeros((B, kvh, T, hd))
    for b in range(B):
        r = slice(b * T, (b + 1) * T)
        qb, kb = rope(q[r].reshape(T, nh, hd)), rope(k[r].reshape(T, kvh, hd))
        vb = v[r].reshape(T, kvh, hd)
        kT[b], vc[b] = kb.transpose(1, 2, 0), vb.transpose(1, 0, 2)
        for h in range(nh):
            j = h // (nh // kvh)
            s = qb[:, h] @ kb[:, j].T / np.sqrt(hd) + np.triu(np.full((T, T), -np.inf), 1)
            p = np.exp(s - s.max(-1, keepdims=True))
            o[r, h * hd:(h + 1) * hd] = (p / p.sum(-1, keepdims=True)) @ vb[:, j]
    h1 = x + o @ w["wo"]
    hn = rms(h1, w["mlp_norm"])
    gate = hn @ w["wg"]
    return h1 + ((gate / (1 + np.exp(-gate))) * (hn @ w["wu"])) @ w["wd"], kT, vc


@pytest.mark.parametrize("heads,kv_heads,batch,rope,qgroup", [
    (4, 2, 2, "halves", 1), (2, 2, 1, "halves", 1), (4, 2, 2, "rows", 1), (4, 2, 2, "heads", 1),
    (4, 2, 2, "halves", 2), (4, 4, 1, "halves", 4), (4, 2, 2, "rot", 1), (2, 2, 1, "rot", 1)])
def test_prefill_layer_per_head_attention_matches_the_definition(heads, kv_heads, batch, rope,
                                                                 qgroup, monkeypatch):
    """The prefill layer's attention is a chain of 2-D ops per query head (GQA: a KV head's
    query heads share its K/V): onnxruntime on the builder's ONNX equals numpy written from the
    LLaMA definition (f32, batch 2, MHA and GQA), and the compiled layer matches onnxruntime
    (y and the cache it writes). Both RoPE forms of the builder (``llm.PREFILL_ROPE``); q's
    RoPE in one group or in groups of heads (``llm.PREFILL_Q_GROUPS``: GQA in 2 groups of whole
    KV-head groups, MHA one group per head)."""
    import numpy as np

    from m100.frontend import llm
    from m100.tools import driver
    monkeypatch.setattr(llm, "PREFILL_ROPE", rope)
    monkeypatch.setattr(llm, "PREFILL_Q_GROUPS", qgroup)
    cfg = llm.scaled(llm.config("tiny"), heads=heads, kv_heads=kv_heads)
    T = 8
    model, w = llm.build(cfg, "layer", "prefill", context=T, batch=batch, seed=2)
    rng = np.random.default_rng(5)
    cos, sin = llm.rope_tables(cfg, list(range(T)))
    feed = {"x": rng.standard_normal((batch * T, cfg.hidden)).astype(np.float32),
            "cos": cos, "sin": sin}
    from m100.frontend.ort_session import ort_session
    outs = ["y", "kT", "v"]
    sess = ort_session(model)
    got = dict(zip(outs, sess.run(outs, feed)))
    want = dict(zip(outs, _llama_prefill_numpy(cfg, w, feed["x"], cos, sin, batch, T)))
    for k in outs:  # the layer's output and the KV cache it writes (K after RoPE)
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-4)
    if rope != PREFILL_ROPE_DEFAULT:
        return  # the older form: its graph's semantics only (the compiler runs the default)
    res = driver.run(driver.compile(model, machine="m100").program, feed).outputs
    for k in outs:
        np.testing.assert_allclose(res[k].reshape(got[k].shape), got[k], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("batch", [1, 2])
def test_prefill_rope_halves_bit_exact_with_rows(batch, monkeypatch):
    """Session 13: RoPE on the halves of the heads' rows (the sign of rotate-half a subtraction,
    the halves read in place by the CVU op: no rotate matmul, no copies) gives the compiled W8A8
    prefill layer (f16 RoPE, MHA and GQA) the same bits as the rotate-matmul form it replaced
    (``x @ R`` is exact: one nonzero product per output), on y and on the K cache it writes."""
    import numpy as np

    from m100.frontend import llm
    from m100.tools import driver
    cfg = llm.scaled(llm.config("tiny"), heads=4, kv_heads=2)
    T = 8
    feed = _prefill_feed(cfg, T, batch, 7)
    got = {}
    for rope in ("rows", "halves"):
        monkeypatch.setattr(llm, "PREFILL_ROPE", rope)
        model, _ = llm.build(cfg, "layer", "prefill", context=T, batch=batch, seed=3,
                             quant="w8a8")
        res = driver.run(driver.compile(model, machine="m100").program, feed)
        assert res.ok and not res.reports
        got[rope] = res.outputs
    for k in ("y", "kT", "v"):
        np.testing.assert_array_equal(got["halves"][k], got["rows"][k])


@pytest.mark.parametrize("heads,kv_heads,batch", [(4, 2, 1), (4, 4, 2)])
def test_prefill_rope_rot_bit_exact_with_halves(heads, kv_heads, batch, monkeypatch):
    """Session 18: RoPE as one op per tensor, ``x * C + rot(x) * S'`` (the sign of rotate-half
    in the table ``S'``, ``rot(x)`` the concat of the swapped halves), gives the compiled W8A8
    prefill layer (f16 RoPE, GQA and MHA, batch 1 and 2) the bits of the halves form, on y and
    the KV cache; ``rot(x)`` is no copy (the same copies as the halves form: the v output's
    transpose), and each RoPE instruction reads ``x`` and ``rot(x)`` from ONE HBSM buffer, the
    second through a walk with a negative step (``from_ir/rotated``: without it the concat and
    its slices are DMA copies and ``rot(x)`` a buffer of its own)."""
    import numpy as np

    from m100.frontend import llm
    from m100.targets.m100.isa import CvuPipeline
    from m100.tools import driver
    cfg = llm.scaled(llm.config("tiny"), heads=heads, kv_heads=kv_heads)
    T = 8
    feed = _prefill_feed(cfg, T, batch, 13)
    got, ops, shared = {}, {}, {}
    for rope in ("halves", "rot"):
        monkeypatch.setattr(llm, "PREFILL_ROPE", rope)
        model, _ = llm.build(cfg, "layer", "prefill", context=T, batch=batch, seed=3,
                             quant="w8a8")
        prog = driver.compile(model, machine="m100").program
        res = driver.run(prog, feed)
        assert res.ok and not res.reports
        got[rope] = res.outputs
        ops[rope] = _copies(model)
        # CVU instructions reading two inputs at one base, one of them through a negative step
        shared[rope] = sum(
            1 for _, i in prog.instructions() if isinstance(i, CvuPipeline) and any(
                a.base == b.base and a.tpb == b.tpb and a is not b and
                any(lv.step < 0 for lv in b.levels) for a in i.inputs for b in i.inputs))
    for k in ("y", "kT", "v"):
        np.testing.assert_array_equal(got["rot"][k], got["halves"][k])
    assert ops["rot"] == ops["halves"]
    assert shared["halves"] == 0 and shared["rot"] >= 2 * batch  # q's and k's RoPE pieces


@pytest.mark.parametrize("heads,kv_heads,batch,groups", [(4, 2, 1, 2), (4, 4, 2, 4)])
def test_prefill_q_rope_in_groups_gives_the_same_bits(heads, kv_heads, batch, groups,
                                                      monkeypatch):
    """Session 17: q's RoPE in groups of heads (``llm.PREFILL_Q_GROUPS``: each group its own
    RoPE ops, its slices of the projection folded into their reads, its own head-major layout)
    gives the compiled W8A8 prefill layer the same bits as one RoPE over all heads (the same
    elementwise values), on y and the KV cache (GQA groups of whole KV-head groups, MHA per
    head); and no RoPE input is copied (the group's slices are offsets of the CVU op's reads)."""
    import numpy as np

    from m100.frontend import llm
    from m100.tools import driver
    cfg = llm.scaled(llm.config("tiny"), heads=heads, kv_heads=kv_heads)
    T = 8
    feed = _prefill_feed(cfg, T, batch, 11)
    got, ops = {}, {}
    for g in (1, groups):
        monkeypatch.setattr(llm, "PREFILL_Q_GROUPS", g)
        model, _ = llm.build(cfg, "layer", "prefill", context=T, batch=batch, seed=3,
                             quant="w8a8")
        assert sum(n.op_type == "Slice" for n in model.graph.node) > 0
        comp = driver.compile(model, machine="m100")
        res = driver.run(comp.program, feed)
        assert res.ok and not res.reports
        got[g] = res.outputs
        ops[g] = _copies(model)
    for k in ("y", "kT", "v"):
        np.testing.assert_array_equal(got[groups][k], got[1][k])
    assert ops[groups] == ops[1]  # the same copies (the v output's transpose), no slice copied


def _prefill_feed(cfg, T: int, batch: int, seed: int) -> dict:
    """The f16 inputs of a W8A8 prefill layer of ``batch`` x ``T`` tokens: random rows ``x``
    and the RoPE tables of positions 0 .. T-1."""
    import numpy as np

    from m100.frontend import llm
    rng = np.random.default_rng(seed)
    cos, sin = llm.rope_tables(cfg, list(range(T)))
    return {"x": rng.standard_normal((batch * T, cfg.hidden)).astype(np.float16),
            "cos": cos.astype(np.float16), "sin": sin.astype(np.float16)}


def _copies(model) -> list:
    """Shapes of the data-movement ops of ``model`` that move data (not views, not concats
    whose parts are all written in place), in the scheduler's graph after ``m100-graph``."""
    from m100.frontend.mlir_load import shared_context
    from m100.passes.graph.m100_graph import M100Graph
    from m100.passes.schedule.from_ir import from_module
    from m100.targets.m100.machine import get_machine
    from m100.tools.driver import load_model
    ctx = shared_context()
    module, _ = load_model(model, ctx)
    M100Graph().apply(ctx, module)
    mc = get_machine("m100")
    g = from_module(module, mc.cvu_max_stages, mc.mem_align, mc.tcu_post_stages).graph
    return sorted(g.tensors[o.outputs[0]].shape for o in g.ops if o.unit == "dtdu.copy" and
                  o.name not in g.view_ops and len(g.in_place.get(o.name, ())) < len(o.inputs))


def test_engine_time_accounts_for_every_dma():
    """engine_time (docs/llm.md section 4): on the tiny W4A16 decode head's timing run every DMA
    instruction of the program is counted on its engine once; an engine's DDR bytes are the sum
    of its DDR transfers' element bytes; they take no less than their time at the AXI master
    rate; busy + idle is the run's length."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import llm as bench_llm

    from m100.frontend.llm import config
    from m100.sim.simulator import Simulator
    from m100.targets.m100.isa import Dma, Space
    from m100.targets.m100.machine import get_machine
    m = get_machine("m100")
    _, head, _, _, _ = bench_llm.programs(config("tiny"), "decode", 8, 1, "w4a16", "m100", None)
    res = Simulator(head, mode="timing", check_races=False).run({})
    rows = bench_llm.engine_time(res, m)
    dmas = [i for s in head.streams.values() for i in s if isinstance(i, Dma)]
    assert dmas and sum(e["from_ddr"] + e["to_ddr"] + e["other"] for e in rows) == len(dmas)
    total = res.stats["total_cycles"]
    for e in rows:
        mine = [d for d in dmas if d.engine == e["engine"]]
        assert e["from_ddr"] == sum(d.src.space is Space.DDR for d in mine)
        ddr = sum(d.src.num_elements * d.src.dtype.bits / 8 for d in mine
                  if Space.DDR in (d.src.space, d.dst.space))
        assert math.isclose(e["ddr_bytes"], ddr)
        assert e["ddr_data"] <= e["busy"] + 1e-6
        assert math.isclose(e["busy"] + e["idle"], total)
