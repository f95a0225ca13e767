"""The add before a softmax (the attention's ``scores + mask``) is the first stage of the
softmax's CVU op (``from_ir.cvu.softmax_addend``): ``q @ kT -> + mask -> softmax -> @ v`` is
three ops, not four, and the values are those of the graph -- the 16-bit ``SOFTMAX`` stage
rounds its argument to the type first, so ``ADD`` then ``SOFTMAX`` is the f16 add, rounded, then
the f16 softmax body. Oracle: numpy written from the ONNX definitions (f16 ops each rounded,
the 16-bit Softmax function body of ``frontend/onnx_rewrite_half.py``), with inputs for which
the matmuls are exact (small integers), so the comparison is bit for bit.
"""

import numpy as np
import pytest

from m100.frontend.models import _onnx
from m100.targets.m100.isa import CvuOp, CvuPipeline, DType, Ref, RefKind, Stage
from m100.tools import driver

T, HD = 16, 32


def _attention(mask: np.ndarray, dt: str, with_pv: bool, extra_use: bool = False):
    onnx, TP, helper, nph = _onnx()
    et = {"f16": TP.FLOAT16, "f32": TP.FLOAT}[dt]
    nodes = [helper.make_node("MatMul", ["q", "kT"], ["s"]),
             helper.make_node("Add", ["s", "mask"], ["a"]),
             helper.make_node("Softmax", ["a"], ["p"], axis=-1)]
    outs = [("p", [T, T])]
    if with_pv:
        nodes.append(helper.make_node("MatMul", ["p", "v"], ["o"]))
        outs.append(("o", [T, HD]))
    if extra_use:  # the masked scores are an output too: the add keeps its own op
        outs.append(("a", [T, T]))
    ins = [("q", [T, HD]), ("kT", [HD, T])] + ([("v", [T, HD])] if with_pv else [])
    g = helper.make_graph(nodes, "attn", [helper.make_tensor_value_info(n, et, s) for n, s in ins],
                          [helper.make_tensor_value_info(n, et, s) for n, s in outs],
                          [nph.from_array(mask, "mask")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _feed(dt, rng):
    npdt = np.float16 if dt == "f16" else np.float32
    # small integers: q @ kT is exact in f16 (|s| <= 32 * 9 = 288 < 2048), so is p @ v's
    # reference up to the f32 accumulation of the TCU (compared with a tolerance)
    return {"q": rng.integers(-3, 4, (T, HD)).astype(npdt),
            "kT": rng.integers(-3, 4, (HD, T)).astype(npdt),
            "v": rng.standard_normal((T, HD)).astype(npdt)}


def _softmax_def(a: np.ndarray, dt: str) -> np.ndarray:
    """ONNX Softmax(axis=-1): f32 computed in float64 and rounded once (torch-mlir's f32 form
    has f32 roundings: compared with a tolerance), f16 by its function body, each op rounded."""
    if dt == "f32":
        e = np.exp(a - a.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    r = lambda x: np.asarray(x, np.float64).astype(np.float16).astype(np.float64)  # noqa: E731
    d = r(a - a.max(-1, keepdims=True))
    e = r(np.exp(d))
    return r(e / r(e.sum(-1, keepdims=True)))


def _masks(rng, dt):
    npdt = np.float16 if dt == "f16" else np.float32
    causal = np.triu(np.full((T, T), -1e4), 1).astype(npdt)
    # a general additive mask whose sums with the scores round in f16 (fractional values)
    general = (rng.standard_normal((T, T)) * 5).astype(npdt)
    return {"causal": causal, "general": general}


def _cvu_ops(prog):
    return [i for _, i in prog.instructions() if isinstance(i, CvuPipeline)]


@pytest.mark.parametrize("dt", ["f16", "f32"])
@pytest.mark.parametrize("kind", ["causal", "general"])
def test_mask_add_is_the_softmax_ops_first_stage_and_exact(dt, kind):
    rng = np.random.default_rng(3)
    mask = _masks(rng, dt)[kind]
    model = _attention(mask, dt, with_pv=True)
    feed = _feed(dt, rng)
    prog = driver.compile(model, machine="tiny").program
    ops = _cvu_ops(prog)
    # the causal mask computed from a column and a row iota (no [T, T] load), another one read
    want_ops = [CvuOp.CMP_GT, CvuOp.SELECT, CvuOp.ADD, CvuOp.SOFTMAX] if kind == "causal" else \
        [CvuOp.ADD, CvuOp.SOFTMAX]
    assert ops and all([st.op for st in i.stages] == want_ops for i in ops)
    iparams = (DType.F16.value,) if dt == "f16" else ()
    assert all(i.stages[-1].iparams == iparams for i in ops)
    res = driver.run(prog, feed).outputs
    f64 = {k: v.astype(np.float64) for k, v in feed.items()}
    s = f64["q"] @ f64["kT"]  # exact
    a = s + mask.astype(np.float64)
    if dt == "f16":
        a = a.astype(np.float16).astype(np.float64)  # the f16 Add rounds
    p = _softmax_def(a, dt)
    got_p = res["p"].reshape(T, T).astype(np.float64)
    if dt == "f16":
        np.testing.assert_array_equal(got_p, p)
        # rounding the add's f32 sum matters for these inputs: without it another result
        p_unrounded = _softmax_def(s + mask.astype(np.float64), dt)
        if kind == "general":
            assert np.any(p_unrounded != p)
    else:
        np.testing.assert_allclose(got_p, p, rtol=1e-5, atol=1e-7)  # f32 exp and sum
    o = got_p @ f64["v"]
    tol = 2e-3 if dt == "f16" else 1e-5
    np.testing.assert_allclose(res["o"].reshape(T, HD).astype(np.float64), o, rtol=tol, atol=tol)


def test_an_add_read_elsewhere_too_stays_its_own_op():
    """The masked scores are also an output: the add is its own CVU op, the softmax reads it."""
    rng = np.random.default_rng(4)
    mask = _masks(rng, "f16")["general"]
    model = _attention(mask, "f16", with_pv=False, extra_use=True)
    feed = _feed("f16", rng)
    del feed["v"]
    prog = driver.compile(model, machine="tiny").program
    kinds = {tuple(st.op for st in i.stages) for i in _cvu_ops(prog)}
    assert (CvuOp.SOFTMAX,) in kinds and (CvuOp.ADD,) in kinds
    res = driver.run(prog, feed).outputs
    f64 = {k: v.astype(np.float64) for k, v in feed.items()}
    a = (f64["q"] @ f64["kT"] + mask).astype(np.float16).astype(np.float64)
    np.testing.assert_array_equal(res["a"].reshape(T, T), a)
    np.testing.assert_array_equal(res["p"].reshape(T, T).astype(np.float64), _softmax_def(a, "f16"))


def test_f16_softmax_stage_rounds_its_argument_first():
    """docs/isa.md: the 16-bit SOFTMAX rounds its argument to the type first; an ADD stage of
    two f16 inputs before it is then the f16 add (f32 sum rounded once)."""
    from m100.sim.semantics import cvu_eval
    rng = np.random.default_rng(5)
    s = (rng.standard_normal((8, 24)) * 40).astype(np.float16)
    m = (rng.standard_normal((8, 24)) * 3).astype(np.float16)
    st = [Stage(CvuOp.ADD, (Ref(RefKind.INPUT, 0), Ref(RefKind.INPUT, 1))),
          Stage(CvuOp.SOFTMAX, (Ref(RefKind.STAGE, 0),), axis=-1, iparams=(DType.F16.value,))]
    got = cvu_eval(st, [s.astype(np.float32), m.astype(np.float32)])
    a = (s.astype(np.float64) + m).astype(np.float16).astype(np.float64)
    want = _softmax_def(a, "f16")
    np.testing.assert_array_equal(got.astype(np.float16).astype(np.float64), want)
    unrounded = _softmax_def(s.astype(np.float64) + m, "f16")
    assert np.any(unrounded != want)  # the inputs tell the two apart


def test_a_full_size_mask_fits_a_softmax_row_band():
    """At 1024 tokens an f16 mask (not the causal one: that is computed) is 2 MB, the HBSM: the tiler charges the rows of
    it a tile reads (what ``kinds/cvu`` loads per piece: ``input_box``), double-buffered, not
    the whole mask -- which no row band would fit next to its scores."""
    from m100.frontend.mlir_load import default_context
    from m100.passes.schedule.cost import CostModel
    from m100.passes.schedule.from_ir import from_module
    from m100.passes.schedule.partition import tile_piece
    from m100.targets.m100.machine import get_machine
    from m100.tools.onnx_backend import compile_onnx
    n = 1024
    mask = (np.random.default_rng(6).standard_normal((n, n)) * 3).astype(np.float16)
    _, TP, helper, nph = _onnx()
    nodes = [helper.make_node("Add", ["s", "mask"], ["a"]),
             helper.make_node("Softmax", ["a"], ["p"], axis=-1)]
    gr = helper.make_graph(nodes, "sm", [helper.make_tensor_value_info("s", TP.FLOAT16, [n, n])],
                          [helper.make_tensor_value_info("p", TP.FLOAT16, [n, n])],
                          [nph.from_array(mask, "mask")])
    model = helper.make_model(gr, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    g = from_module(compile_onnx(model, default_context(), graph=True)).graph
    (op,) = [o for o in g.ops if o.unit == "cvu.softmax"]
    assert [g.tensors[t].kind for t in op.inputs] == ["input", "weight"]
    m = get_machine("m100")
    tp = tile_piece(CostModel(m), g, op, 37, n)
    (wb,) = [b for b in tp.buffers if b.role == "weight"]
    assert wb.slots == 2 and wb.slot_bytes < tp.tr * n * 2 + 4096  # a tile's rows of it
    assert tp.footprint <= m.hbsm_bytes


@pytest.mark.parametrize("k,v", [(1, -1e4), (0, -3.5), (3, -65504.0)])
def test_band_masks_are_computed_others_loaded(k, v):
    """``np.triu(full(v), k)`` masks (any diagonal, any finite value) are computed from two
    iotas; one element off the band, or a -0 in it, and the mask is loaded instead (both
    exact: checked against numpy of the definitions)."""
    rng = np.random.default_rng(7)
    band = np.triu(np.full((T, T), v), k).astype(np.float16)
    off = band.copy()
    off[T - 1, 0] = np.float16(v)
    negz = band.copy()
    negz[T - 1, 0] = np.float16(-0.0)
    for mask, computed in ((band, True), (off, False), (negz, False)):
        prog = driver.compile(_attention(mask, "f16", with_pv=False), machine="tiny").program
        ops = _cvu_ops(prog)
        assert ops and all((i.stages[0].op == CvuOp.CMP_GT) == computed for i in ops)
        assert all(len(i.inputs) == (3 if computed else 2) for i in ops)
        feed = _feed("f16", rng)
        del feed["v"]
        res = driver.run(prog, feed).outputs
        f64 = {k_: x.astype(np.float64) for k_, x in feed.items()}
        with np.errstate(over="ignore"):  # v = -65504: scores + v round to -inf
            a = (f64["q"] @ f64["kT"] + mask).astype(np.float16).astype(np.float64)
            p = _softmax_def(a, "f16")
        np.testing.assert_array_equal(res["p"].reshape(T, T), p)
