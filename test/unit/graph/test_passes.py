"""Each graph pass on its own preserves semantics (numpy reference executor before/after, plus
numpy written from the op definitions for the layout / transpose properties), and the
annotation passes find what they should."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from m100.context import make_context
from m100.errors import M100Error
from m100.frontend import load_mlir_text
from m100.frontend.reference import run
from m100.passes.graph import common
from m100.passes.graph.check_supported import CheckSupported, UnsupportedOpError
from m100.passes.graph.classify_ops import UNITS, ClassifyOps
from m100.passes.graph.fold_batchnorm import FoldBatchnorm
from m100.passes.graph.fold_constants import FoldConstants
from m100.passes.graph.fuse_epilogue import FuseEpilogue
from m100.passes.graph.layout_nhwc import LayoutNhwc
from m100.passes.graph.recognize_idioms import RecognizeIdioms
from m100.passes.graph.simplify_algebra import SimplifyAlgebra

LIT = Path(__file__).resolve().parents[2] / "lit" / "graph"
PASSES = [FoldConstants(), SimplifyAlgebra(), LayoutNhwc(), FoldBatchnorm(), RecognizeIdioms(),
          FuseEpilogue(), ClassifyOps()]
# lit inputs that run as whole functions (classify_ops' @units needs i64 indices: given below)
FILES = ["fold_constants.mlir", "simplify_algebra.mlir", "layout_nhwc.mlir",
         "fold_batchnorm.mlir", "recognize_idioms.mlir", "fuse_epilogue.mlir", "m100_graph.mlir"]


def _inputs(fn, rng):
    out = []
    for t in fn.function_type.inputs.data:
        shape = tuple(t.get_shape())
        et = str(t.get_element_type())
        if et == "i64":  # indices (gathers)
            out.append(rng.integers(0, 2, shape).astype(np.int64))
        elif et.startswith("i"):
            out.append(rng.integers(-50, 50, shape).astype(f"int{et[1:]}"))
        else:
            out.append(rng.standard_normal(shape).astype(np.float32))
    return out


def _funcs(module):
    from xdsl.dialects import func
    return [op for op in module.body.block.ops if isinstance(op, func.FuncOp)]


@pytest.mark.parametrize("fname", FILES)
@pytest.mark.parametrize("pass_", PASSES, ids=lambda p: p.name)
def test_pass_preserves_semantics(fname, pass_):
    text = (LIT / fname).read_text()
    ctx = make_context()
    before = load_mlir_text(text, ctx)
    after = load_mlir_text(text, ctx)
    if isinstance(pass_, ClassifyOps):  # it rejects unfolded scalar arith (as check-supported)
        FoldConstants().apply(ctx, after)
    pass_.apply(ctx, after)
    after.verify()
    rng = np.random.default_rng(0)
    for fb in _funcs(before):
        name = fb.sym_name.data
        args = _inputs(fb, rng)
        ref = run(before, args, name)
        got = run(after, args, name)
        for r, g in zip(ref, got):
            np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5, err_msg=f"{fname}:{name}")


# --- layout-nhwc on random convolutions: the original NCHW conv vs numpy definition vs NHWC ----
CONV = """
func.func @f(%x: tensor<{n}x{c}x{h}x{w}xf32>) -> tensor<{n}x{f}x{oh}x{ow}xf32> {{
  %wt = arith.constant dense<{wv}> : tensor<{f}x{c}x{kh}x{kw}xf32>
  %zero = arith.constant 0.0 : f32
  %b = arith.constant dense<{bv}> : tensor<{f}xf32>
  %e = tensor.empty() : tensor<{n}x{f}x{oh}x{ow}xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<{n}x{f}x{oh}x{ow}xf32>) -> tensor<{n}x{f}x{oh}x{ow}xf32>
  %y = linalg.conv_2d_nchw_fchw {{dilations = dense<{d}> : vector<2xi64>, strides = dense<{s}> : vector<2xi64>}} ins(%x, %wt : tensor<{n}x{c}x{h}x{w}xf32>, tensor<{f}x{c}x{kh}x{kw}xf32>) outs(%z : tensor<{n}x{f}x{oh}x{ow}xf32>) -> tensor<{n}x{f}x{oh}x{ow}xf32>
  %r = linalg.generic {{indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d1)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}} ins(%y, %b : tensor<{n}x{f}x{oh}x{ow}xf32>, tensor<{f}xf32>) outs(%e : tensor<{n}x{f}x{oh}x{ow}xf32>) {{
  ^bb0(%in: f32, %bi: f32, %out: f32):
    %a = arith.addf %in, %bi : f32
    %m = arith.maximumf %a, %zero : f32
    linalg.yield %m : f32
  }} -> tensor<{n}x{f}x{oh}x{ow}xf32>
  func.return %r : tensor<{n}x{f}x{oh}x{ow}xf32>
}}
"""


def _conv_ref(x, wt, b, s, d):
    """Direct definition: y[n,f,i,j] = sum_{c,p,q} x[n,c,i*s+p*d,j*s+q*d] * w[f,c,p,q]."""
    n, c, h, w = x.shape
    f, _, kh, kw = wt.shape
    oh, ow = (h - d * (kh - 1) - 1) // s + 1, (w - d * (kw - 1) - 1) // s + 1
    y = np.zeros((n, f, oh, ow), np.float64)
    for p in range(kh):
        for q in range(kw):
            patch = x[:, :, p * d: p * d + s * (oh - 1) + 1: s, q * d: q * d + s * (ow - 1) + 1: s]
            y += np.einsum("nchw,fc->nfhw", patch, wt[:, :, p, q])
    return np.maximum(y + b[None, :, None, None], 0)


@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 2), c=st.integers(1, 3), f=st.integers(1, 4), h=st.integers(3, 7),
       w=st.integers(3, 7), k=st.integers(1, 3), s=st.integers(1, 2), d=st.integers(1, 2),
       seed=st.integers(0, 1000))
def test_layout_nhwc_random_convs(n, c, f, h, w, k, s, d, seed):
    if d * (k - 1) + 1 > min(h, w):
        return
    rng = np.random.default_rng(seed)
    wt = rng.standard_normal((f, c, k, k)).astype(np.float32)
    b = rng.standard_normal(f).astype(np.float32)
    oh, ow = (h - d * (k - 1) - 1) // s + 1, (w - d * (k - 1) - 1) // s + 1
    bv = "[" + ", ".join(repr(float(v)) for v in b) + "]"
    text = CONV.format(n=n, c=c, h=h, w=w, f=f, kh=k, kw=k, oh=oh, ow=ow, s=s, d=d,
                       wv=_dense(wt), bv=bv)
    ctx = make_context()
    m = load_mlir_text(text, ctx)
    LayoutNhwc().apply(ctx, m)
    SimplifyAlgebra().apply(ctx, m)
    m.verify()
    names = [o.name for o in m.walk()]
    assert "linalg.conv_2d_nchw_fchw" not in names and "linalg.conv_2d_nhwc_hwcf" in names
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    (got,) = run(m, [x])
    np.testing.assert_allclose(got, _conv_ref(x.astype(np.float64), wt, b, s, d), rtol=1e-4,
                               atol=1e-4)


def _dense(a):
    return np.array2string(a, separator=", ", threshold=10 ** 9, floatmode="unique").replace(
        "\n", "")


# --- simplify-algebra: random transpose chains vs numpy ----------------------------------------
@settings(max_examples=25, deadline=None)
@given(perms=st.lists(st.permutations(range(4)), min_size=1, max_size=4))
def test_transpose_chains(perms):
    shape = [2, 3, 4, 5]
    lines, cur, cur_shape = [], "%x", shape
    for i, p in enumerate(perms):
        out = [cur_shape[j] for j in p]
        ts = "x".join(map(str, cur_shape))
        to = "x".join(map(str, out))
        lines.append(f"  %e{i} = tensor.empty() : tensor<{to}xf32>")
        lines.append(f"  %t{i} = linalg.transpose ins({cur} : tensor<{ts}xf32>) outs(%e{i} : "
                     f"tensor<{to}xf32>) permutation = [{', '.join(map(str, p))}]")
        cur, cur_shape = f"%t{i}", out
    to = "x".join(map(str, cur_shape))
    text = (f"func.func @f(%x: tensor<2x3x4x5xf32>) -> tensor<{to}xf32> {{\n" + "\n".join(lines)
            + f"\n  func.return {cur} : tensor<{to}xf32>\n}}\n")
    ctx = make_context()
    m = load_mlir_text(text, ctx)
    SimplifyAlgebra().apply(ctx, m)
    m.verify()
    n_t = sum(o.name == "linalg.transpose" for o in m.walk())
    expect = np.arange(120, dtype=np.float32).reshape(shape)
    want = expect
    for p in perms:
        want = np.transpose(want, p)
    assert n_t == (0 if want.shape == tuple(shape) and np.array_equal(want, expect) else 1)
    (got,) = run(m, [expect])
    np.testing.assert_array_equal(got, want)


# --- activations are recognized from their values, not their spelling --------------------------
@pytest.mark.parametrize("name,f", [
    ("relu", lambda x: np.where(x > 0, x, 0.0)),
    ("sigmoid", lambda x: np.exp(x) / (np.exp(x) + 1.0)),
    ("tanh", lambda x: 2.0 / (1.0 + np.exp(-2 * x)) - 1.0),
    ("gelu", lambda x: x * 0.5 * (1.0 + common._erf(x * 0.7071067811865476))),
    ("silu", lambda x: x * (1.0 / (1.0 + np.exp(-x)))),
    ("gelu_tanh", lambda x: 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))),
])
def test_classify_unary(name, f):
    assert common.classify_unary(f) == (name, None)


def test_classify_unary_rejects_near_misses():
    assert common.classify_unary(lambda x: x / (1.0 + np.exp(-2.0 * x))) is None  # x*sigmoid(2x)
    assert common.classify_unary(lambda x: np.maximum(x, 0.01 * x)) is None  # leaky relu
    assert common.classify_unary(lambda x: np.clip(x, -1.0, 6.0)) == ("clamp", (-1.0, 6.0))


# --- check-supported / classify-ops contract ---------------------------------------------------
def test_unsupported_is_user_error():
    text = (LIT / "Inputs" / "unsupported_cbrt.mlir").read_text()
    ctx = make_context()
    m = load_mlir_text(text, ctx)
    with pytest.raises(UnsupportedOpError) as info:
        CheckSupported().apply(ctx, m)
    assert isinstance(info.value, M100Error)
    msg = str(info.value)
    assert "\n" not in msg and "math.cbrt" in msg and "@cbrt" in msg and "1 more" in msg
    with pytest.raises(UnsupportedOpError):
        ClassifyOps().apply(ctx, m)


def test_units_constant():
    assert len(UNITS) == len(set(UNITS)) == 14
    assert all(u.split(".")[0] in ("tcu", "cvu", "dtdu", "csu") for u in UNITS)
    doc = (Path(__file__).resolve().parents[3] / "docs" / "graph.md").read_text()
    for u in UNITS:
        assert f"`{u}`" in doc, f"{u} not documented in docs/graph.md"
