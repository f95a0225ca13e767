"""The numpy reference executor on hand-written linalg/tensor/arith IR, against numpy written from
each op's definition (never against the executor itself)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from m100.frontend import load_mlir
from m100.frontend.reference import ReferenceError, dense_to_numpy, run

RNG = np.random.default_rng(42)


def r(*s, dtype=np.float32):
    return RNG.standard_normal(s).astype(dtype)


_CTX = []


def run1(text, *inputs, func_name=None):
    if not _CTX:
        from m100.frontend import default_context

        _CTX.append(default_context())
    return run(load_mlir(text, _CTX[0]), list(inputs), func_name)


def test_matmul_fill_and_bias_relu_generic():
    text = """
    func.func @f(%a: tensor<5x7xf32>, %b: tensor<7x3xf32>, %bias: tensor<3xf32>) -> tensor<5x3xf32> {
      %z = arith.constant 0.0 : f32
      %e = tensor.empty() : tensor<5x3xf32>
      %c = linalg.fill ins(%z : f32) outs(%e : tensor<5x3xf32>) -> tensor<5x3xf32>
      %m = linalg.matmul ins(%a, %b : tensor<5x7xf32>, tensor<7x3xf32>) outs(%c : tensor<5x3xf32>) -> tensor<5x3xf32>
      %y = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>, affine_map<(i, j) -> (i, j)>],
                           iterator_types = ["parallel", "parallel"]}
           ins(%m, %bias : tensor<5x3xf32>, tensor<3xf32>) outs(%e : tensor<5x3xf32>) {
      ^bb0(%x: f32, %bb: f32, %o: f32):
        %s = arith.addf %x, %bb : f32
        %gt = arith.cmpf ugt, %s, %z : f32
        %v = arith.select %gt, %s, %z : f32
        linalg.yield %v : f32
      } -> tensor<5x3xf32>
      func.return %y : tensor<5x3xf32>
    }"""
    a, b, bias = r(5, 7), r(7, 3), r(3)
    (y,) = run1(text, a, b, bias)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, np.maximum(a @ b + bias, 0), rtol=1e-5, atol=1e-6)


def test_generic_transposed_and_broadcast_maps_and_reduction_to_constant_dim():
    """Output map (d0, d1, 0) like torch-mlir's keepdim reductions; input read transposed."""
    text = """
    func.func @f(%x: tensor<4x3x6xf32>) -> tensor<3x4x1xf32> {
      %z = arith.constant 0.0 : f32
      %e = tensor.empty() : tensor<3x4x1xf32>
      %c = linalg.fill ins(%z : f32) outs(%e : tensor<3x4x1xf32>) -> tensor<3x4x1xf32>
      %s = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d1, d0, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, 0)>],
                           iterator_types = ["parallel", "parallel", "reduction"]}
           ins(%x : tensor<4x3x6xf32>) outs(%c : tensor<3x4x1xf32>) {
      ^bb0(%in: f32, %acc: f32):
        %sq = arith.mulf %in, %in : f32
        %a = arith.addf %sq, %acc : f32
        linalg.yield %a : f32
      } -> tensor<3x4x1xf32>
      func.return %s : tensor<3x4x1xf32>
    }"""
    x = r(4, 3, 6)
    (s,) = run1(text, x)
    np.testing.assert_allclose(s, (x**2).sum(-1).T[..., None], rtol=1e-5)


def test_generic_matmul_as_einsum_and_as_loop_agree_with_numpy():
    """A contraction body (acc + a*b) and a non-combiner body (a*b + acc*0.5) of the same maps."""
    maps = ('[affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (k, n)>, '
            'affine_map<(m, n, k) -> (m, n)>]')
    body_mac = "%p = arith.mulf %a, %b : f32\n %s = arith.addf %o, %p : f32"
    body_odd = ("%p = arith.mulf %a, %b : f32\n %h = arith.constant 0.5 : f32\n"
                " %q = arith.mulf %o, %h : f32\n %s = arith.addf %q, %p : f32")
    a, b, c = r(3, 4), r(4, 2), r(3, 2)
    for body in (body_mac, body_odd):
        text = f"""
        func.func @f(%x: tensor<3x4xf32>, %y: tensor<4x2xf32>, %c: tensor<3x2xf32>) -> tensor<3x2xf32> {{
          %r = linalg.generic {{indexing_maps = {maps}, iterator_types = ["parallel", "parallel", "reduction"]}}
               ins(%x, %y : tensor<3x4xf32>, tensor<4x2xf32>) outs(%c : tensor<3x2xf32>) {{
          ^bb0(%a: f32, %b: f32, %o: f32):
            {body}
            linalg.yield %s : f32
          }} -> tensor<3x2xf32>
          func.return %r : tensor<3x2xf32>
        }}"""
        (got,) = run1(text, a, b, c)
        if body is body_mac:
            exp = c + a @ b
        else:  # sequential: o = o/2 + a[m,k] b[k,n] for k = 0..3
            exp = c.astype(np.float64).copy()
            for k in range(4):
                exp = exp * 0.5 + np.outer(a[:, k], b[k, :])
        np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-6)


def test_softmax_like_two_result_generic_and_index():
    text = """
    func.func @f(%x: tensor<2x5xf32>) -> (tensor<2xf32>, tensor<2xi64>, tensor<2x5xi64>) {
      %ninf = arith.constant 0xFF800000 : f32
      %z = arith.constant 0 : i64
      %e0 = tensor.empty() : tensor<2xf32>
      %e1 = tensor.empty() : tensor<2xi64>
      %e2 = tensor.empty() : tensor<2x5xi64>
      %m0 = linalg.fill ins(%ninf : f32) outs(%e0 : tensor<2xf32>) -> tensor<2xf32>
      %i0 = linalg.fill ins(%z : i64) outs(%e1 : tensor<2xi64>) -> tensor<2xi64>
      %r:2 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d0)>],
                             iterator_types = ["parallel", "reduction"]}
          ins(%x : tensor<2x5xf32>) outs(%m0, %i0 : tensor<2xf32>, tensor<2xi64>) {
      ^bb0(%in: f32, %acc: f32, %idx: i64):
        %j = linalg.index 1 : index
        %ji = arith.index_cast %j : index to i64
        %gt = arith.cmpf ogt, %in, %acc : f32
        %mx = arith.select %gt, %in, %acc : f32
        %ix = arith.select %gt, %ji, %idx : i64
        linalg.yield %mx, %ix : f32, i64
      } -> (tensor<2xf32>, tensor<2xi64>)
      %ij = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]}
          outs(%e2 : tensor<2x5xi64>) {
      ^bb0(%o: i64):
        %a = linalg.index 0 : index
        %b = linalg.index 1 : index
        %c10 = arith.constant 10 : index
        %t = arith.muli %a, %c10 : index
        %s = arith.addi %t, %b : index
        %si = arith.index_cast %s : index to i64
        linalg.yield %si : i64
      } -> tensor<2x5xi64>
      func.return %r#0, %r#1, %ij : tensor<2xf32>, tensor<2xi64>, tensor<2x5xi64>
    }"""
    x = r(2, 5)
    mx, ix, ij = run1(text, x)
    np.testing.assert_array_equal(mx, x.max(1))
    np.testing.assert_array_equal(ix, x.argmax(1))
    np.testing.assert_array_equal(ij, np.add.outer(np.arange(2) * 10, np.arange(5)))


def _conv_ref(x, w, stride, dil, groups=1):
    n, c, h, wd = x.shape
    f, cg, kh, kw = w.shape
    oh = (h - dil * (kh - 1) - 1) // stride + 1
    ow = (wd - dil * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, f, oh, ow))
    fg = f // groups
    for b, o, i, j in itertools.product(range(n), range(f), range(oh), range(ow)):
        g = o // fg
        patch = x[b, g * cg:(g + 1) * cg, i * stride:i * stride + dil * (kh - 1) + 1:dil,
                  j * stride:j * stride + dil * (kw - 1) + 1:dil]
        out[b, o, i, j] = (patch * w[o]).sum()
    return out


@pytest.mark.parametrize("stride,dil", [(1, 1), (2, 1), (2, 2)])
def test_conv_2d_nchw_fchw(stride, dil):
    x, w = r(2, 3, 9, 10), r(4, 3, 3, 3)
    exp = _conv_ref(x, w, stride, dil)
    o = exp.shape
    shp = lambda a: "x".join(map(str, a))  # noqa: E731
    text = f"""
    func.func @f(%x: tensor<{shp(x.shape)}xf32>, %w: tensor<{shp(w.shape)}xf32>) -> tensor<{shp(o)}xf32> {{
      %z = arith.constant 0.0 : f32
      %e = tensor.empty() : tensor<{shp(o)}xf32>
      %c = linalg.fill ins(%z : f32) outs(%e : tensor<{shp(o)}xf32>) -> tensor<{shp(o)}xf32>
      %r = linalg.conv_2d_nchw_fchw {{dilations = dense<{dil}> : tensor<2xi64>, strides = dense<{stride}> : tensor<2xi64>}}
           ins(%x, %w : tensor<{shp(x.shape)}xf32>, tensor<{shp(w.shape)}xf32>) outs(%c : tensor<{shp(o)}xf32>) -> tensor<{shp(o)}xf32>
      func.return %r : tensor<{shp(o)}xf32>
    }}"""
    (got,) = run1(text, x, w)
    np.testing.assert_allclose(got, exp, rtol=1e-4, atol=1e-5)


def test_grouped_conv_ngchw_gfchw():
    G, N, C, F, H = 2, 1, 2, 3, 6
    x, w = r(N, G, C, H, H), r(G, F, C, 3, 3)
    exp = _conv_ref(x.reshape(N, G * C, H, H), w.reshape(G * F, C, 3, 3), 1, 1, groups=G)
    exp = exp.reshape(N, G, F, H - 2, H - 2)
    text = """
    func.func @f(%x: tensor<1x2x2x6x6xf32>, %w: tensor<2x3x2x3x3xf32>, %o: tensor<1x2x3x4x4xf32>) -> tensor<1x2x3x4x4xf32> {
      %r = linalg.conv_2d_ngchw_gfchw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
           ins(%x, %w : tensor<1x2x2x6x6xf32>, tensor<2x3x2x3x3xf32>) outs(%o : tensor<1x2x3x4x4xf32>) -> tensor<1x2x3x4x4xf32>
      func.return %r : tensor<1x2x3x4x4xf32>
    }"""
    (got,) = run1(text, x, w, np.zeros(exp.shape, np.float32))
    np.testing.assert_allclose(got, exp, rtol=1e-4, atol=1e-5)


def test_tensor_ops_pad_slices_reshapes_concat():
    text = """
    func.func @f(%x: tensor<2x3x4xf32>, %y: tensor<2x1x4xf32>) -> (tensor<2x5x6xf32>, tensor<2x2xf32>, tensor<6x4xf32>, tensor<2x4x4xf32>, tensor<2x3x4xf32>) {
      %v = arith.constant -1.5 : f32
      %p = tensor.pad %x low[0, 1, 2] high[0, 1, 0] {
      ^bb0(%i: index, %j: index, %k: index):
        tensor.yield %v : f32
      } : tensor<2x3x4xf32> to tensor<2x5x6xf32>
      %s = tensor.extract_slice %x[0, 1, 0] [2, 1, 2] [1, 1, 2] : tensor<2x3x4xf32> to tensor<2x2xf32>
      %c = tensor.collapse_shape %x [[0, 1], [2]] : tensor<2x3x4xf32> into tensor<6x4xf32>
      %k = tensor.concat dim(1) %x, %y : (tensor<2x3x4xf32>, tensor<2x1x4xf32>) -> tensor<2x4x4xf32>
      %ins = tensor.insert_slice %y into %x[0, 2, 0] [2, 1, 4] [1, 1, 1] : tensor<2x1x4xf32> into tensor<2x3x4xf32>
      func.return %p, %s, %c, %k, %ins : tensor<2x5x6xf32>, tensor<2x2xf32>, tensor<6x4xf32>, tensor<2x4x4xf32>, tensor<2x3x4xf32>
    }"""
    x, y = r(2, 3, 4), r(2, 1, 4)
    p, s, c, k, ins = run1(text, x, y)
    np.testing.assert_array_equal(p, np.pad(x, [(0, 0), (1, 1), (2, 0)], constant_values=-1.5))
    np.testing.assert_array_equal(s, x[:, 1, 0:4:2])
    np.testing.assert_array_equal(c, x.reshape(6, 4))
    np.testing.assert_array_equal(k, np.concatenate([x, y], 1))
    exp = x.copy()
    exp[:, 2:3, :] = y
    np.testing.assert_array_equal(ins, exp)


def test_transpose_broadcast_reduce_expand():
    text = """
    func.func @f(%x: tensor<2x3xf32>) -> (tensor<3x2xf32>, tensor<2x4x3xf32>, tensor<3xf32>, tensor<1x2x3x1xf32>) {
      %e0 = tensor.empty() : tensor<3x2xf32>
      %t = linalg.transpose ins(%x : tensor<2x3xf32>) outs(%e0 : tensor<3x2xf32>) permutation = [1, 0]
      %e1 = tensor.empty() : tensor<2x4x3xf32>
      %b = linalg.broadcast ins(%x : tensor<2x3xf32>) outs(%e1 : tensor<2x4x3xf32>) dimensions = [1]
      %ninf = arith.constant 0xFF800000 : f32
      %e2 = tensor.empty() : tensor<3xf32>
      %i = linalg.fill ins(%ninf : f32) outs(%e2 : tensor<3xf32>) -> tensor<3xf32>
      %m = linalg.reduce ins(%x : tensor<2x3xf32>) outs(%i : tensor<3xf32>) dimensions = [0]
        (%in: f32, %init: f32) {
          %mx = arith.maximumf %in, %init : f32
          linalg.yield %mx : f32
        }
      %ex = tensor.expand_shape %x [[0, 1], [2, 3]] output_shape [1, 2, 3, 1] : tensor<2x3xf32> into tensor<1x2x3x1xf32>
      func.return %t, %b, %m, %ex : tensor<3x2xf32>, tensor<2x4x3xf32>, tensor<3xf32>, tensor<1x2x3x1xf32>
    }"""
    x = r(2, 3)
    t, b, m, ex = run1(text, x)
    np.testing.assert_array_equal(t, x.T)
    np.testing.assert_array_equal(b, np.broadcast_to(x[:, None, :], (2, 4, 3)))
    np.testing.assert_array_equal(m, x.max(0))
    np.testing.assert_array_equal(ex, x.reshape(1, 2, 3, 1))


def test_arith_math_semantics_on_tensors_and_scalars():
    text = """
    func.func @f(%x: tensor<6xf32>, %n: tensor<6xi32>) -> (tensor<6xf32>, tensor<6xi32>, tensor<6xf32>) {
      %e = tensor.empty() : tensor<6xf32>
      %ei = tensor.empty() : tensor<6xi32>
      %g = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
           ins(%x : tensor<6xf32>) outs(%e : tensor<6xf32>) {
      ^bb0(%a: f32, %o: f32):
        %t = math.tanh %a : f32
        %er = math.erf %a : f32
        %s = arith.addf %t, %er : f32
        %ex = math.exp %a : f32
        %q = arith.divf %s, %ex : f32
        %ng = arith.negf %q : f32
        %two = arith.constant 2 : i64
        %pw = math.fpowi %ng, %two : f32, i64
        linalg.yield %pw : f32
      } -> tensor<6xf32>
      %d = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
           ins(%n : tensor<6xi32>) outs(%ei : tensor<6xi32>) {
      ^bb0(%a: i32, %o: i32):
        %m3 = arith.constant -3 : i32
        %q = arith.divsi %a, %m3 : i32
        %rm = arith.remsi %a, %m3 : i32
        %s = arith.addi %q, %rm : i32
        linalg.yield %s : i32
      } -> tensor<6xi32>
      %c = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
           ins(%n : tensor<6xi32>) outs(%e : tensor<6xf32>) {
      ^bb0(%a: i32, %o: f32):
        %f = arith.sitofp %a : i32 to f32
        %h = arith.constant 0.5 : f32
        %m = arith.mulf %f, %h : f32
        %fl = math.floor %m : f32
        linalg.yield %fl : f32
      } -> tensor<6xf32>
      func.return %g, %d, %c : tensor<6xf32>, tensor<6xi32>, tensor<6xf32>
    }"""
    import math

    x = np.array([-2.0, -0.5, 0.0, 0.3, 1.0, 3.0], np.float32)
    n = np.array([-7, -1, 0, 4, 8, 100], np.int32)
    g, d, c = run1(text, x, n)
    exp_g = [((math.tanh(v) + math.erf(v)) / math.exp(v)) ** 2 for v in x.tolist()]
    np.testing.assert_allclose(g, exp_g, rtol=1e-5, atol=1e-6)
    # C semantics: truncating division, remainder with the dividend's sign
    exp_d = [int(v / -3) + int(math.fmod(v, -3)) for v in n.tolist()]
    np.testing.assert_array_equal(d, exp_d)
    assert d.dtype == np.int32 and g.dtype == np.float32
    np.testing.assert_array_equal(c, np.floor(n * 0.5))


def test_dense_hex_constant_is_bit_exact():
    vals = np.array([[1.5, -0.0, 3.25e-8], [np.pi, 1e30, -7]], np.float32)
    hexs = vals.tobytes().hex().upper()
    text = f"""
    func.func @f() -> tensor<2x3xf32> {{
      %c = arith.constant dense<"0x{hexs}"> : tensor<2x3xf32>
      func.return %c : tensor<2x3xf32>
    }}"""
    m = load_mlir(text)
    (c,) = run(m, [])
    assert c.tobytes() == vals.tobytes()
    const = next(op for op in m.walk() if op.name == "arith.constant")
    assert dense_to_numpy(const.value).tobytes() == vals.tobytes()


def test_func_call_and_func_name():
    text = """
    func.func private @sq(%x: tensor<3xf32>) -> tensor<3xf32> {
      %e = tensor.empty() : tensor<3xf32>
      %y = linalg.mul ins(%x, %x : tensor<3xf32>, tensor<3xf32>) outs(%e : tensor<3xf32>) -> tensor<3xf32>
      func.return %y : tensor<3xf32>
    }
    func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
      %a = func.call @sq(%x) : (tensor<3xf32>) -> tensor<3xf32>
      %b = func.call @sq(%a) : (tensor<3xf32>) -> tensor<3xf32>
      func.return %b : tensor<3xf32>
    }"""
    x = np.array([1, 2, 3], np.float32)
    (y,) = run1(text, x)
    np.testing.assert_array_equal(y, x**4)
    (y2,) = run1(text, x, func_name="sq")
    np.testing.assert_array_equal(y2, x**2)
    with pytest.raises(ReferenceError, match="no function @nope"):
        run1(text, x, func_name="nope")


def test_unsupported_op_and_bad_inputs_are_clear_errors():
    text = """
    func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
      %y = "foo.bar"(%x) : (tensor<4xf32>) -> tensor<4xf32>
      func.return %y : tensor<4xf32>
    }"""
    from m100.context import make_context

    m = load_mlir(text, make_context(allow_unregistered=True))
    with pytest.raises(ReferenceError) as e:
        run(m, [np.zeros(4, np.float32)])
    assert str(e.value).startswith("'foo.bar' (%y, op #0 in @f)") and "\n" not in str(e.value)
    ok = load_mlir("func.func @g(%x: tensor<4xf32>) -> tensor<4xf32> {\n func.return %x : tensor<4xf32>\n}")
    with pytest.raises(ReferenceError, match="does not match"):
        run(ok, [np.zeros(5, np.float32)])
    with pytest.raises(ReferenceError, match="takes 1 inputs"):
        run(ok, [])


def test_affine_apply_and_extract_gather_in_body():
    text = """
    func.func @f(%t: tensor<10xf32>, %ids: tensor<2x3xi64>) -> tensor<2x3xf32> {
      %e = tensor.empty() : tensor<2x3xf32>
      %g = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]}
           ins(%ids : tensor<2x3xi64>) outs(%e : tensor<2x3xf32>) {
      ^bb0(%i: i64, %o: f32):
        %ix = arith.index_cast %i : i64 to index
        %j = affine.apply affine_map<(d0)[s0] -> ((d0 * 3 + s0) mod 10)>(%ix)[%ix]
        %v = tensor.extract %t[%j] : tensor<10xf32>
        linalg.yield %v : f32
      } -> tensor<2x3xf32>
      func.return %g : tensor<2x3xf32>
    }"""
    t = np.arange(10, dtype=np.float32) * 1.5
    ids = np.array([[0, 1, 2], [7, 8, 9]], np.int64)
    (g,) = run1(text, t, ids)
    np.testing.assert_array_equal(g, t[(ids * 4) % 10])


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@st.composite
def _perm_reduce_case(draw):
    rank = draw(st.integers(1, 4))
    shape = draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    perm = draw(st.permutations(range(rank)))
    reduced = draw(st.lists(st.booleans(), min_size=rank, max_size=rank))
    combiner = draw(st.sampled_from(["arith.addf", "arith.maximumf", "arith.mulf"]))
    return shape, list(perm), reduced, combiner


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_perm_reduce_case())
def test_generic_permuted_reductions_match_numpy(case):
    """Input read through a random permutation map, a random subset of loops reduced with a random
    combiner: equals numpy's transpose + ufunc.reduce."""
    shape, perm, reduced, combiner = case
    rank = len(shape)
    loops = [shape[perm.index(d)] for d in range(rank)]  # loop d reads input axis perm.index(d)
    dims = ", ".join(f"d{i}" for i in range(rank))
    in_map = f"({dims}) -> ({', '.join(f'd{perm[i]}' for i in range(rank))})"
    kept = [d for d in range(rank) if not reduced[d]]
    out_map = f"({dims}) -> ({', '.join(f'd{d}' for d in kept)})"
    out_shape = [loops[d] for d in kept]
    t = lambda s: f"tensor<{'x'.join(map(str, s)) + 'x' if s else ''}f32>"  # noqa: E731
    its = ", ".join('"reduction"' if r else '"parallel"' for r in reduced)
    text = f"""
    func.func @f(%x: {t(shape)}, %init: {t(out_shape)}) -> {t(out_shape)} {{
      %r = linalg.generic {{indexing_maps = [affine_map<{in_map}>, affine_map<{out_map}>], iterator_types = [{its}]}}
           ins(%x : {t(shape)}) outs(%init : {t(out_shape)}) {{
      ^bb0(%a: f32, %acc: f32):
        %s = {combiner} %a, %acc : f32
        linalg.yield %s : f32
      }} -> {t(out_shape)}
      func.return %r : {t(out_shape)}
    }}"""
    x = RNG.uniform(0.5, 1.5, shape).astype(np.float32)
    init = RNG.uniform(0.5, 1.5, out_shape).astype(np.float32)
    (got,) = run1(text, x, init)
    # loop space view of x: axis d of the loop space is input axis perm[d]
    xl = np.transpose(x, np.argsort(perm))
    uf = {"arith.addf": np.add, "arith.maximumf": np.maximum, "arith.mulf": np.multiply}[combiner]
    red_axes = tuple(d for d in range(rank) if reduced[d])
    exp = uf(init, uf.reduce(xl.astype(np.float64), axis=red_axes)) if red_axes else uf(init, xl)
    np.testing.assert_allclose(got, exp, rtol=1e-5)


def test_unsupported_op_inside_a_body_names_the_enclosing_op():
    text = """
    func.func @g(%x: tensor<4xi32>) -> tensor<4xi32> {
      %e = tensor.empty() : tensor<4xi32>
      %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
           ins(%x : tensor<4xi32>) outs(%e : tensor<4xi32>) {
      ^bb0(%a: i32, %o: i32):
        %c = math.ctlz %a : i32
        linalg.yield %c : i32
      } -> tensor<4xi32>
      func.return %r : tensor<4xi32>
    }"""
    with pytest.raises(ReferenceError) as e:
        run1(text, np.arange(4, dtype=np.int32))
    assert str(e.value) == ("'math.ctlz' (%c, op #0 in the body of 'linalg.generic' op #1 in @g): "
                            "op not supported by the reference executor")


def test_scalar_and_zero_d_inputs_with_dynamic_slice_offsets():
    text = """
    func.func @f(%x: tensor<8xf32>, %i: index, %s: tensor<f32>) -> (tensor<2xf32>, tensor<f32>) {
      %sl = tensor.extract_slice %x[%i] [2] [1] : tensor<8xf32> to tensor<2xf32>
      %e = tensor.empty() : tensor<f32>
      %d = linalg.generic {indexing_maps = [affine_map<() -> ()>, affine_map<() -> ()>], iterator_types = []}
           ins(%s : tensor<f32>) outs(%e : tensor<f32>) {
      ^bb0(%a: f32, %o: f32):
        %t = arith.addf %a, %a : f32
        linalg.yield %t : f32
      } -> tensor<f32>
      func.return %sl, %d : tensor<2xf32>, tensor<f32>
    }"""
    x = np.arange(8, dtype=np.float32)
    sl, d = run1(text, x, np.int64(5), np.float32(1.25))
    np.testing.assert_array_equal(sl, x[5:7])
    assert d.shape == () and d == 2.5


def test_rank_reducing_dynamic_slice_scf_for_and_clipped_gather():
    text = """
    func.func @f(%x: tensor<4x1x6xf32>, %n: index) -> (tensor<?xf32>, tensor<f32>, tensor<3xf32>) {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %sl = tensor.extract_slice %x[1, 0, 2] [1, 1, %n] [1, 1, 1] : tensor<4x1x6xf32> to tensor<?xf32>
      %zero = arith.constant 0.0 : f32
      %e = tensor.empty() : tensor<f32>
      %init = linalg.fill ins(%zero : f32) outs(%e : tensor<f32>) -> tensor<f32>
      %sum = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %init) -> (tensor<f32>) {
        %v = tensor.extract %sl[%i] : tensor<?xf32>
        %a = tensor.extract %acc[] : tensor<f32>
        %b = arith.addf %a, %v : f32
        %t = tensor.insert %b into %acc[] : tensor<f32>
        scf.yield %t : tensor<f32>
      }
      %e3 = tensor.empty() : tensor<3xf32>
      %g = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} outs(%e3 : tensor<3xf32>) {
      ^bb0(%o: f32):
        %i = linalg.index 0 : index
        %c4 = arith.constant 4 : index
        %j = arith.muli %i, %c4 : index
        %v = tensor.extract %sl[%j] : tensor<?xf32>
        linalg.yield %v : f32
      } -> tensor<3xf32>
      func.return %sl, %sum, %g : tensor<?xf32>, tensor<f32>, tensor<3xf32>
    }"""
    x = r(4, 1, 6)
    sl, total, g = run1(text, x, np.int64(3))
    np.testing.assert_array_equal(sl, x[1, 0, 2:5])
    np.testing.assert_allclose(total, x[1, 0, 2:5].sum(), rtol=1e-6)
    # indices 0, 4, 8 into a 3-element slice: 4 and 8 are out of range, clipped (values undefined)
    np.testing.assert_array_equal(g, sl[[0, 2, 2]])
