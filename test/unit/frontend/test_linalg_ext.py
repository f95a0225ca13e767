"""The extended linalg dialect: the named ops xDSL 0.74 lacks and the multi-result generic parse,
checked by parsing pretty and generic forms, round-tripping, and executing against numpy loops."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from xdsl.dialects.linalg.ops import GenericOp as XdslGenericOp
from xdsl.printer import Printer

from m100.dialects.linalg_ext import EXTRA_OPS, GenericOp, LinalgExt
from m100.frontend import FrontendError, load_mlir
from m100.frontend.reference import run


def generic_text(module) -> str:
    import io

    s = io.StringIO()
    Printer(stream=s, print_generic_format=True).print_op(module)
    return s.getvalue()


def roundtrip(text: str):
    """pretty -> parse -> print pretty == print(parse(print generic))."""
    m = load_mlir(text)
    pretty = str(m)
    again = load_mlir(pretty)
    assert str(again) == pretty
    from_generic = load_mlir(generic_text(m))
    assert str(from_generic) == pretty
    return m


def test_dialect_contains_xdsl_ops_and_ours():
    names = {op.name for op in LinalgExt.operations}
    for n in ("linalg.matmul", "linalg.conv_2d_nchw_fchw", "linalg.reduce", "linalg.broadcast",
              "linalg.batch_matmul", "linalg.depthwise_conv_2d_nchw_chw",
              "linalg.depthwise_conv_2d_nhwc_hwc", "linalg.pooling_nchw_sum",
              "linalg.pooling_ndhwc_sum", "linalg.conv_1d_ncw_fcw", "linalg.pooling_nhwc_max"):
        assert n in names, n
    assert len(names) == len(list(LinalgExt.operations)), "an op name registered twice"
    assert all(op.name.startswith("linalg.") for op in EXTRA_OPS)


MULTI_RESULT = """
func.func @argmax(%x: tensor<4x6xf32>) -> (tensor<4xf32>, tensor<4xi64>) {
  %ninf = arith.constant 0xFF800000 : f32
  %z = arith.constant 0 : i64
  %e0 = tensor.empty() : tensor<4xf32>
  %e1 = tensor.empty() : tensor<4xi64>
  %m0 = linalg.fill ins(%ninf : f32) outs(%e0 : tensor<4xf32>) -> tensor<4xf32>
  %i0 = linalg.fill ins(%z : i64) outs(%e1 : tensor<4xi64>) -> tensor<4xi64>
  %r:2 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>,
                                          affine_map<(d0, d1) -> (d0)>],
                         iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4x6xf32>) outs(%m0, %i0 : tensor<4xf32>, tensor<4xi64>) {
  ^bb0(%in: f32, %acc: f32, %idx: i64):
    %j = linalg.index 1 : index
    %ji = arith.index_cast %j : index to i64
    %gt = arith.cmpf ogt, %in, %acc : f32
    %mx = arith.select %gt, %in, %acc : f32
    %ix = arith.select %gt, %ji, %idx : i64
    linalg.yield %mx, %ix : f32, i64
  } -> (tensor<4xf32>, tensor<4xi64>)
  func.return %r#0, %r#1 : tensor<4xf32>, tensor<4xi64>
}
"""


def test_multi_result_generic_pretty_form_parses_and_runs():
    m = roundtrip(MULTI_RESULT)
    gens = [op for op in m.walk() if op.name == "linalg.generic"]
    assert len(gens) == 1 and len(gens[0].results) == 2
    assert isinstance(gens[0], GenericOp) and isinstance(gens[0], XdslGenericOp)
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    mx, ix = run(m, [x])
    np.testing.assert_array_equal(mx, x.max(axis=1))
    np.testing.assert_array_equal(ix, x.argmax(axis=1))


def test_xdsl_linalg_alone_fails_on_multi_result_pretty_form():
    """The bug we work around is real: with xDSL's own linalg the same text does not parse."""
    from xdsl.context import Context
    from xdsl.dialects import get_all_dialects
    from xdsl.parser import Parser
    from xdsl.utils.exceptions import ParseError

    ctx = Context()
    for name, f in get_all_dialects().items():
        ctx.register_dialect(name, f)
    with pytest.raises(ParseError):
        Parser(ctx, MULTI_RESULT).parse_module()


def test_hex_floats_in_dense_lists_are_bit_patterns():
    text = """
    func.func @f() -> tensor<3xf32> {
      %c = arith.constant dense<[0.0, 0xFF800000, 0x7F800000]> : tensor<3xf32>
      func.return %c : tensor<3xf32>
    }"""
    m = roundtrip(text)
    (c,) = run(m, [])
    assert c[0] == 0 and c[1] == -np.inf and c[2] == np.inf


BATCH_MATMUL = """
func.func @bmm(%a: tensor<2x3x4xf32>, %b: tensor<2x4x5xf32>) -> tensor<2x3x5xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x3x5xf32>
  %c = linalg.fill ins(%z : f32) outs(%e : tensor<2x3x5xf32>) -> tensor<2x3x5xf32>
  %r = linalg.batch_matmul ins(%a, %b : tensor<2x3x4xf32>, tensor<2x4x5xf32>) outs(%c : tensor<2x3x5xf32>) -> tensor<2x3x5xf32>
  func.return %r : tensor<2x3x5xf32>
}
"""


def test_batch_matmul():
    m = roundtrip(BATCH_MATMUL)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    b = rng.standard_normal((2, 4, 5)).astype(np.float32)
    (r,) = run(m, [a, b])
    np.testing.assert_allclose(r, np.matmul(a, b), rtol=1e-5, atol=1e-6)


def test_batch_matmul_generic_form_with_upstream_properties():
    """torch-mlir prints batch_matmul with an explicit indexing_maps property and its region."""
    text = """
    "builtin.module"() ({
      "func.func"() <{function_type = (tensor<1x2x3xf32>, tensor<1x3x2xf32>, tensor<1x2x2xf32>) -> tensor<1x2x2xf32>, sym_name = "f"}> ({
      ^bb0(%a: tensor<1x2x3xf32>, %b: tensor<1x3x2xf32>, %c: tensor<1x2x2xf32>):
        %r = "linalg.batch_matmul"(%a, %b, %c) <{indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>], operandSegmentSizes = array<i32: 2, 1>}> ({
        ^bb0(%x: f32, %y: f32, %o: f32):
          %m = "arith.mulf"(%x, %y) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
          %s = "arith.addf"(%o, %m) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
          "linalg.yield"(%s) : (f32) -> ()
        }) : (tensor<1x2x3xf32>, tensor<1x3x2xf32>, tensor<1x2x2xf32>) -> tensor<1x2x2xf32>
        "func.return"(%r) : (tensor<1x2x2xf32>) -> ()
      }) : () -> ()
    }) : () -> ()
    """
    m = load_mlir(text)
    assert "linalg.batch_matmul ins(" in str(m)
    a = np.arange(6, dtype=np.float32).reshape(1, 2, 3)
    b = np.arange(6, dtype=np.float32).reshape(1, 3, 2)
    c = np.ones((1, 2, 2), np.float32)
    (r,) = run(m, [a, b, c])
    np.testing.assert_allclose(r, a @ b + 1)


def _conv_text(op: str, in_t: str, w_t: str, out_t: str, strides, dilations) -> str:
    n = len(strides)
    return f"""
func.func @f(%x: tensor<{in_t}xf32>, %w: tensor<{w_t}xf32>, %o: tensor<{out_t}xf32>) -> tensor<{out_t}xf32> {{
  %r = linalg.{op} {{dilations = dense<{list(dilations)}> : tensor<{n}xi64>, strides = dense<{list(strides)}> : tensor<{n}xi64>}}
       ins(%x, %w : tensor<{in_t}xf32>, tensor<{w_t}xf32>) outs(%o : tensor<{out_t}xf32>) -> tensor<{out_t}xf32>
  func.return %r : tensor<{out_t}xf32>
}}
"""


def _shape(s):
    return "x".join(map(str, s))


def _rand(*s):
    return np.random.default_rng(sum(s)).standard_normal(s).astype(np.float32)


@pytest.mark.parametrize("stride,dil", [(1, 1), (2, 1), (1, 2), (2, 2)])
def test_depthwise_conv_nchw_chw(stride, dil):
    N, C, H, W, K = 1, 3, 9, 8, 3
    OH, OW = (H - dil * (K - 1) - 1) // stride + 1, (W - dil * (K - 1) - 1) // stride + 1
    x, w, o = _rand(N, C, H, W), _rand(C, K, K), _rand(N, C, OH, OW)
    m = roundtrip(_conv_text("depthwise_conv_2d_nchw_chw", _shape(x.shape), _shape(w.shape),
                             _shape(o.shape), (stride, stride), (dil, dil)))
    (r,) = run(m, [x, w, o])
    exp = o.astype(np.float64).copy()
    for n, c, oh, ow, kh, kw in itertools.product(*map(range, (N, C, OH, OW, K, K))):
        exp[n, c, oh, ow] += x[n, c, oh * stride + kh * dil, ow * stride + kw * dil] * w[c, kh, kw]
    np.testing.assert_allclose(r, exp, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_conv_nhwc_hwc(stride):
    N, H, W, C, K = 2, 7, 7, 4, 3
    OH = OW = (H - K) // stride + 1
    x, w, o = _rand(N, H, W, C), _rand(K, K, C), _rand(N, OH, OW, C)
    m = roundtrip(_conv_text("depthwise_conv_2d_nhwc_hwc", _shape(x.shape), _shape(w.shape),
                             _shape(o.shape), (stride, stride), (1, 1)))
    (r,) = run(m, [x, w, o])
    exp = o.astype(np.float64).copy()
    for n, oh, ow, c, kh, kw in itertools.product(*map(range, (N, OH, OW, C, K, K))):
        exp[n, oh, ow, c] += x[n, oh * stride + kh, ow * stride + kw, c] * w[kh, kw, c]
    np.testing.assert_allclose(r, exp, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("stride,dil", [(1, 1), (2, 1), (1, 3)])
def test_conv_1d_ncw_fcw(stride, dil):
    N, C, W, F, K = 2, 3, 11, 4, 3
    OW = (W - dil * (K - 1) - 1) // stride + 1
    x, w, o = _rand(N, C, W), _rand(F, C, K), _rand(N, F, OW)
    m = roundtrip(_conv_text("conv_1d_ncw_fcw", _shape(x.shape), _shape(w.shape), _shape(o.shape),
                             (stride,), (dil,)))
    (r,) = run(m, [x, w, o])
    exp = o.astype(np.float64).copy()
    for n, f, ow, c, kw in itertools.product(*map(range, (N, F, OW, C, K))):
        exp[n, f, ow] += x[n, c, ow * stride + kw * dil] * w[f, c, kw]
    np.testing.assert_allclose(r, exp, rtol=1e-5, atol=1e-5)


def _pool_text(op, in_t, k_t, out_t, strides, dilations):
    n = len(strides)
    return f"""
func.func @f(%x: tensor<{in_t}xf32>, %o: tensor<{out_t}xf32>) -> tensor<{out_t}xf32> {{
  %k = tensor.empty() : tensor<{k_t}xf32>
  %r = linalg.{op} {{dilations = dense<{list(dilations)}> : tensor<{n}xi64>, strides = dense<{list(strides)}> : tensor<{n}xi64>}}
       ins(%x, %k : tensor<{in_t}xf32>, tensor<{k_t}xf32>) outs(%o : tensor<{out_t}xf32>) -> tensor<{out_t}xf32>
  func.return %r : tensor<{out_t}xf32>
}}
"""


@pytest.mark.parametrize("kind", ["sum", "max", "min"])
def test_pooling_nchw(kind):
    N, C, H, W, K, S = 1, 2, 7, 6, 3, 2
    OH, OW = (H - K) // S + 1, (W - K) // S + 1
    x, o = _rand(N, C, H, W), _rand(N, C, OH, OW)
    op = f"pooling_nchw_{kind}"
    m = roundtrip(_pool_text(op, _shape(x.shape), f"{K}x{K}", _shape(o.shape), (S, S), (1, 1)))
    (r,) = run(m, [x, o])
    f = {"sum": np.sum, "max": np.max, "min": np.min}[kind]
    comb = {"sum": np.add, "max": np.maximum, "min": np.minimum}[kind]
    exp = np.empty_like(o)
    for n, c, oh, ow in itertools.product(*map(range, (N, C, OH, OW))):
        exp[n, c, oh, ow] = comb(o[n, c, oh, ow], f(x[n, c, oh * S:oh * S + K, ow * S:ow * S + K]))
    np.testing.assert_allclose(r, exp, rtol=1e-5, atol=1e-6)


def test_pooling_ndhwc_sum():
    N, D, H, W, C, K = 1, 4, 4, 5, 3, 2
    x, o = _rand(N, D, H, W, C), np.zeros((N, D - 1, H - 1, W - 1, C), np.float32)
    m = roundtrip(_pool_text("pooling_ndhwc_sum", _shape(x.shape), f"{K}x{K}x{K}", _shape(o.shape),
                             (1, 1, 1), (1, 1, 1)))
    (r,) = run(m, [x, o])
    exp = np.zeros_like(o)
    for d, h, w in itertools.product(range(D - 1), range(H - 1), range(W - 1)):
        exp[0, d, h, w] = x[0, d:d + K, h:h + K, w:w + K].sum(axis=(0, 1, 2))
    np.testing.assert_allclose(r, exp, rtol=1e-5, atol=1e-5)


def test_named_op_maps_match_upstream_definition():
    """depthwise nchw: input map (n, c, oh*s + kh*d, ow*s + kw*d) with the op's own strides/dilations."""
    m = load_mlir(_conv_text("depthwise_conv_2d_nchw_chw", "1x2x9x11", "2x3x3", "1x2x3x3", (2, 3), (1, 2)))
    op = next(o for o in m.walk() if o.name == "linalg.depthwise_conv_2d_nchw_chw")
    maps = [str(a.data) for a in op.get_indexing_maps()]
    assert maps[0] == "(d0, d1, d2, d3, d4, d5) -> (d0, d1, ((d2 * 2) + d4), ((d3 * 3) + (d5 * 2)))"
    assert maps[1] == "(d0, d1, d2, d3, d4, d5) -> (d1, d4, d5)"
    assert [str(i.data) for i in op.get_iterator_types()] == ["parallel"] * 4 + ["reduction"] * 2


def test_bad_mlir_is_one_line_error(tmp_path):
    p = tmp_path / "bad.mlir"
    p.write_text("func.func @f() {\n  %x = linalg.bogus_op\n}\n")
    with pytest.raises(FrontendError) as e:
        load_mlir(str(p))
    msg = str(e.value)
    assert "\n" not in msg and "bad.mlir:" in msg and "linalg.bogus_op" in msg
    with pytest.raises(FrontendError, match="no such file"):
        load_mlir(str(tmp_path / "missing.mlir"))


def test_quantized_conv_nchw_q_and_batch_matmul_q_int8():
    """int8 x int8 -> i32 with zero points, against an int64 numpy computation."""
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (1, 2, 6, 6)).astype(np.int8)
    w = rng.integers(-128, 128, (3, 2, 3, 3)).astype(np.int8)
    a = rng.integers(-128, 128, (2, 3, 4)).astype(np.int8)
    b = rng.integers(-128, 128, (2, 4, 5)).astype(np.int8)
    text = """
    func.func @f(%x: tensor<1x2x6x6xi8>, %w: tensor<3x2x3x3xi8>, %a: tensor<2x3x4xi8>, %b: tensor<2x4x5xi8>) -> (tensor<1x3x4x4xi32>, tensor<2x3x5xi32>) {
      %xz = arith.constant 3 : i32
      %wz = arith.constant -2 : i32
      %z = arith.constant 0 : i32
      %e = tensor.empty() : tensor<1x3x4x4xi32>
      %c = linalg.fill ins(%z : i32) outs(%e : tensor<1x3x4x4xi32>) -> tensor<1x3x4x4xi32>
      %r = linalg.conv_2d_nchw_fchw_q {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
           ins(%x, %w, %xz, %wz : tensor<1x2x6x6xi8>, tensor<3x2x3x3xi8>, i32, i32) outs(%c : tensor<1x3x4x4xi32>) -> tensor<1x3x4x4xi32>
      %e2 = tensor.empty() : tensor<2x3x5xi32>
      %c2 = linalg.fill ins(%z : i32) outs(%e2 : tensor<2x3x5xi32>) -> tensor<2x3x5xi32>
      %m = linalg.quantized_batch_matmul ins(%a, %b, %xz, %wz : tensor<2x3x4xi8>, tensor<2x4x5xi8>, i32, i32) outs(%c2 : tensor<2x3x5xi32>) -> tensor<2x3x5xi32>
      func.return %r, %m : tensor<1x3x4x4xi32>, tensor<2x3x5xi32>
    }"""
    m = roundtrip(text)
    r, mm = run(m, [x, w, a, b])
    xs, ws = x.astype(np.int64) - 3, w.astype(np.int64) + 2
    exp = np.zeros((1, 3, 4, 4), np.int64)
    for f, i, j in itertools.product(range(3), range(4), range(4)):
        exp[0, f, i, j] = (xs[0, :, i:i + 3, j:j + 3] * ws[f]).sum()
    assert r.dtype == np.int32
    np.testing.assert_array_equal(r, exp)
    np.testing.assert_array_equal(mm, np.matmul(a.astype(np.int64) - 3, b.astype(np.int64) + 2))


@pytest.mark.parametrize("name,ref", [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                                      ("max", np.maximum), ("min", np.minimum)])
def test_xdsl_elementwise_named_op_bodies(name, ref):
    """The pretty forms of xDSL's own elementwise named ops get correct hidden bodies (unlike its
    pooling_nchw_max, which we had to fix)."""
    t = f"""func.func @f(%a: tensor<5xf32>, %b: tensor<5xf32>, %o: tensor<5xf32>) -> tensor<5xf32> {{
      %r = linalg.{name} ins(%a, %b : tensor<5xf32>, tensor<5xf32>) outs(%o : tensor<5xf32>) -> tensor<5xf32>
      func.return %r : tensor<5xf32>
    }}"""
    a, b, o = (_rand(5 + i)[:5] for i in range(3))
    (r,) = run(load_mlir(t), [a, b, o])
    np.testing.assert_array_equal(r, ref(a, b))


def test_pooling_max_built_with_xdsls_class_has_the_fixed_body():
    from xdsl.dialects.linalg.ops import PoolingNchwMaxOp as XdslPoolMax

    text = _pool_text("pooling_nchw_max", "1x1x4x4", "2x2", "1x1x2x2", (2, 2), (1, 1))
    m = load_mlir(text)
    op = next(o for o in m.walk() if o.name == "linalg.pooling_nchw_max")
    built = XdslPoolMax(list(op.inputs), list(op.outputs), [op.results[0].type],
                        strides=op.strides, dilations=op.dilations)
    names = [o.name for o in built.body.block.ops]
    assert names == ["arith.maximumf", "linalg.yield"]
    mx = next(iter(built.body.block.ops))
    assert mx.operands[0] is built.body.block.args[2] and mx.operands[1] is built.body.block.args[0]
