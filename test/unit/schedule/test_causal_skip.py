"""The causal half of attention skipped (``from_ir/causal.py``, ``passes/schedule/causal.py``): a
piece of rows ``[r0, r1)`` of ``q @ kT -> softmax(. + triu(-1e4, 1)) -> @ v`` computes only the
score columns ``[0, r1)``; the masked ones contribute exactly ``+0``.

Oracles: numpy written from the ONNX definitions (the f16 ops each rounded, the 16-bit Softmax
function body) on inputs for which ``q @ kT`` is exact (small integers), and the same graph
compiled without the skip (``causal.ENABLED = False``): the same bits. A copy of the clip that
drops one needed column must fail that comparison (the test can see a dropped column); masks
that are not causal (a general one, ``k = 0``, a mild value) must not take the skip.
"""

import numpy as np
import pytest

from m100.frontend.models import _onnx
from m100.targets.m100.isa import CvuPipeline, MatMul
from m100.tools import driver

HD = 32


def _attention(mask: np.ndarray, T: int):
    onnx, TP, helper, nph = _onnx()
    et = TP.FLOAT16
    nodes = [helper.make_node("MatMul", ["q", "kT"], ["s"]),
             helper.make_node("Add", ["s", "mask"], ["a"]),
             helper.make_node("Softmax", ["a"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["o"])]
    ins = [("q", [T, HD]), ("kT", [HD, T]), ("v", [T, HD])]
    g = helper.make_graph(nodes, "attn", [helper.make_tensor_value_info(n, et, s) for n, s in ins],
                          [helper.make_tensor_value_info("o", et, [T, HD])],
                          [nph.from_array(mask, "mask")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _feed(T: int, rng):
    # small integers: q @ kT is exact in f16 (|s| <= 32 * 9 = 288)
    return {"q": rng.integers(-3, 4, (T, HD)).astype(np.float16),
            "kT": rng.integers(-3, 4, (HD, T)).astype(np.float16),
            "v": rng.standard_normal((T, HD)).astype(np.float16)}


def _oracle(feed, mask):
    """numpy from the ONNX definitions: f16 MatMul (exact here), f16 Add rounded, the 16-bit
    Softmax body each op rounded, the last MatMul in float64 (compared with a tolerance)."""
    r = lambda x: np.asarray(x, np.float64).astype(np.float16).astype(np.float64)  # noqa: E731
    f64 = {k: v.astype(np.float64) for k, v in feed.items()}
    a = r(f64["q"] @ f64["kT"] + mask.astype(np.float64))
    d = r(a - a.max(-1, keepdims=True))
    e = r(np.exp(d))
    p = r(e / r(e.sum(-1, keepdims=True)))
    return p @ f64["v"]


def _run(model, feed, machine, on, monkeypatch):
    from m100.passes.schedule.from_ir import causal
    monkeypatch.setattr(causal, "ENABLED", on)
    prog = driver.compile(model, machine=machine).program
    res = driver.run(prog, feed)
    assert res.ok and not res.reports
    return prog, res.outputs["o"].reshape(feed["q"].shape[0], HD)


def _score_cols(prog, T):
    """Columns of every softmax CVU instruction, and the TCU MACs of the program."""
    cols = [i.out_shape[-1] for _, i in prog.instructions() if isinstance(i, CvuPipeline)]
    macs = sum(i.m * i.n * i.k for _, i in prog.instructions() if isinstance(i, MatMul))
    return cols, macs


@pytest.mark.parametrize("T,machine", [(64, "tiny"), (256, "m100")])
def test_causal_skip_gives_the_bits_of_every_column(T, machine, monkeypatch):
    rng = np.random.default_rng(5)
    mask = np.triu(np.full((T, T), -1e4), 1).astype(np.float16)
    model, feed = _attention(mask, T), _feed(T, rng)
    prog_off, off = _run(model, feed, machine, False, monkeypatch)
    prog_on, on = _run(model, feed, machine, True, monkeypatch)
    np.testing.assert_array_equal(on.view(np.uint16), off.view(np.uint16))
    np.testing.assert_allclose(on.astype(np.float64), _oracle(feed, mask), rtol=2e-3, atol=2e-3)
    # the skip was taken: narrower softmax pieces, fewer MACs (QK and PV: about half of theirs
    # with many bands; the tiny machine's two bands of 32 rows keep 3/4)
    cols_off, macs_off = _score_cols(prog_off, T)
    cols_on, macs_on = _score_cols(prog_on, T)
    assert set(cols_off) == {T} and min(cols_on) < T
    assert macs_on <= (0.9 if machine == "tiny" else 0.7) * macs_off


def test_dropping_a_needed_column_is_seen(monkeypatch):
    """The comparison above sees one column too few: a clip one column short (the diagonal of
    each piece's last row dropped; the diagonal leads each row here) gives other bits."""
    from m100.passes.schedule import causal as sched_causal
    T = 64
    rng = np.random.default_rng(5)
    mask = np.triu(np.full((T, T), -1e4), 1).astype(np.float16)
    model, feed = _attention(mask, T), _feed(T, rng)
    feed["kT"] = np.ascontiguousarray(feed["q"].T)  # the diagonal score |q_r|^2 leads each row
    _, good = _run(model, feed, "tiny", True, monkeypatch)
    np.testing.assert_allclose(good.astype(np.float64), _oracle(feed, mask), rtol=2e-3, atol=2e-3)
    real = sched_causal.piece

    def short(s, op, clip, *a):
        return real(s, op, (clip[0], clip[1] - 1) + tuple(clip[2:]), *a)
    monkeypatch.setattr(sched_causal, "piece", short)
    _, bad = _run(model, feed, "tiny", True, monkeypatch)
    assert not np.array_equal(bad.view(np.uint16), good.view(np.uint16))


@pytest.mark.parametrize("kind", ["general", "k0", "mild"])
def test_masks_that_are_not_causal_do_not_skip(kind, monkeypatch):
    T = 64
    rng = np.random.default_rng(9)
    mask = {"general": (rng.standard_normal((T, T)) * 5),
            # k = 0: row 0 has no unmasked column (its softmax is over masked scores)
            "k0": np.triu(np.full((T, T), -1e4), 0),
            # a mask value whose exp does not vanish
            "mild": np.triu(np.full((T, T), -3.5), 1)}[kind].astype(np.float16)
    model, feed = _attention(mask, T), _feed(T, rng)
    prog, out = _run(model, feed, "tiny", True, monkeypatch)
    cols, _ = _score_cols(prog, T)
    assert cols and set(cols) == {T}
    np.testing.assert_allclose(out.astype(np.float64), _oracle(feed, mask), rtol=2e-3, atol=2e-3)


def test_tiny_w8a8_prefill_layer_skip_gives_the_same_bits(monkeypatch):
    """The tiny W8A8 prefill layer (64 tokens; its heads take the skip) gives the bits of the
    layer without it on ``y``, ``kT``, ``v`` (the layer itself is checked against onnxruntime
    by test_bench_llm / test_llm_w8)."""
    from m100.frontend import llm
    from m100.passes.schedule.from_ir import causal
    cfg = llm.config("tiny")
    T = 64
    rng = np.random.default_rng(11)
    cos, sin = llm.rope_tables(cfg, list(range(T)))
    feed = {"x": (rng.standard_normal((T, cfg.hidden)) * 2).astype(np.float16),
            "cos": cos.astype(np.float16), "sin": sin.astype(np.float16)}
    model, _ = llm.build(cfg, "layer", "prefill", context=T, seed=4, quant="w8a8")
    got, macs = {}, {}
    for on in (False, True):
        monkeypatch.setattr(causal, "ENABLED", on)
        prog = driver.compile(model, machine="m100").program
        res = driver.run(prog, feed)
        assert res.ok and not res.reports
        got[on] = res.outputs
        macs[on] = _score_cols(prog, T)[1]
    for k in ("y", "kT", "v"):
        np.testing.assert_array_equal(got[True][k], got[False][k])
    assert macs[True] < macs[False]
