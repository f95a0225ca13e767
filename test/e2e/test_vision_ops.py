"""Vision ops through the whole stack (ONNX -> program -> interpreter), each against a numpy oracle
written from the ONNX operator definition (not from our lowering), plus the clean refusals.

Issue 12 (vision half): runtime-filter / runtime-bias / depthwise / dilated / 1-D convolutions,
ConvTranspose, padded / dilated / Lp pooling, LRN, Resize, Pad. Small shapes: each case compiles in
about a second.
"""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from m100.errors import M100Error
from m100.tools import driver

RNG = np.random.default_rng(12)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    """An ONNX model; ``inputs``/``outputs`` are (name, shape); ``inits`` (name, array)."""
    g = helper.make_graph(
        nodes, "vision",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        [numpy_helper.from_array(a, n) for n, a in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(m).graph.output}
    for o in m.graph.output:
        if not o.type.tensor_type.HasField("shape"):
            o.CopyFrom(inferred[o.name])
    return m


def _run(model, feeds: dict, machine="m100", tpbs=4) -> np.ndarray:
    cr = driver.compile(model, machine=machine, tpbs=tpbs)
    out = driver.run(cr.program, feeds).outputs
    assert len(out) == 1
    return list(out.values())[0]


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# --- numpy oracles, written from the ONNX operator definitions -----------------------------------
def conv_ref(x, w, b=None, strides=None, pads=None, dilations=None, group=1):
    """ONNX Conv: y[n, f, o...] = b[f] + sum_{c in f's group, k} x_pad[n, c, o*s + k*d] w[f, c, k]."""
    nd = x.ndim - 2
    strides = strides or [1] * nd
    dilations = dilations or [1] * nd
    pads = pads or [0] * (2 * nd)
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(pads[i], pads[i + nd]) for i in range(nd)])
    F, cg = w.shape[0], w.shape[1]
    fg = F // group
    ks = w.shape[2:]
    outs = [(xp.shape[2 + i] - dilations[i] * (ks[i] - 1) - 1) // strides[i] + 1 for i in range(nd)]
    y = np.zeros((x.shape[0], F, *outs))
    for f in range(F):
        g = f // fg
        for k in itertools.product(*[range(k_) for k_ in ks]):
            sl = tuple(slice(k[i] * dilations[i], k[i] * dilations[i] + strides[i] * (outs[i] - 1) + 1,
                             strides[i]) for i in range(nd))
            patch = xp[(slice(None), slice(g * cg, (g + 1) * cg)) + sl]  # [N, cg, out...]
            y[:, f] += np.tensordot(patch, w[(f, slice(None)) + k].astype(np.float64), axes=([1], [0]))
        if b is not None:
            y[:, f] += b[f]
    return y.astype(np.float32)


# --- convolutions ---------------------------------------------------------------------------------
@pytest.mark.parametrize("case", [
    dict(pads=[0, 1, 2, 1], strides=[1, 1], dilations=[2, 2]),  # asymmetric pads + dilation
    dict(pads=[1, 0, 1, 2], strides=[2, 1], dilations=[1, 1]),
])
@pytest.mark.onnx_op("Conv", kind="oracle")
def test_conv_runtime_filter_and_bias(case):
    x, w, b = _f32(1, 3, 9, 9), _f32(5, 3, 3, 3), _f32(5)
    m = _model([helper.make_node("Conv", ["x", "w", "b"], ["y"], **case)],
               [("x", x.shape), ("w", w.shape), ("b", b.shape)], [("y", None)])
    got = _run(m, {"x": x, "w": w, "b": b})
    want = conv_ref(x, w, b, **case)
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("strides,dilations,tpbs", [([1, 1], [1, 1], 1), ([2, 2], [1, 1], 8),
                                                    ([1, 1], [2, 2], 4)])
@pytest.mark.onnx_op("Conv", kind="oracle")
def test_depthwise_conv(strides, dilations, tpbs):
    """Depthwise (group = channels, the MobileNet layer) on the TCU as a grouped conv; on 8 TPBs
    the channels are split into column parts (each reads its own groups' input channels)."""
    C = 128
    x, w, b = _f32(1, C, 10, 10), _f32(C, 1, 3, 3), _f32(C)
    pads = [1, 1, 1, 1] if dilations == [1, 1] else [2, 2, 2, 2]
    m = _model([helper.make_node("Conv", ["x", "w", "b"], ["y"], group=C, pads=pads,
                                 strides=strides, dilations=dilations)],
               [("x", x.shape)], [("y", None)], [("w", w), ("b", b)])
    got = _run(m, {"x": x}, tpbs=tpbs)
    want = conv_ref(x, w, b, strides, pads, dilations, group=C)
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("what,node,shapes,msg", [
    ("grouped", dict(group=2), ([1, 4, 6, 6], [6, 2, 3, 3]), "grouped convolution"),
    ("3-D", {}, ([1, 2, 4, 4, 4], [3, 2, 3, 3, 3]), "3-D convolution is not supported"),
])
def test_conv_refusals(what, node, shapes, msg):
    xs, ws = shapes
    m = _model([helper.make_node("Conv", ["x", "w"], ["y"], **node)], [("x", xs)], [("y", None)],
               [("w", _f32(*ws))])
    with pytest.raises(M100Error, match=msg):
        driver.compile(m, machine="tiny")


def test_conv_1d_runtime_filter():
    x, w, b = _f32(2, 3, 17), _f32(4, 3, 3), _f32(4)
    a = dict(pads=[2, 1], strides=[2], dilations=[2])
    m = _model([helper.make_node("Conv", ["x", "w", "b"], ["y"], **a)],
               [("x", x.shape), ("w", w.shape)], [("y", None)], [("b", b)])
    got = _run(m, {"x": x, "w": w})
    want = conv_ref(x, w, b, **a)
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)


def conv_transpose_ref(x, w, b, strides, pads, dilations, output_padding, group=1):
    """ONNX ConvTranspose by its scatter definition: y[n, g*Fg + f, i*s + k*d - pad_begin] +=
    x[n, g*Cg + c, i] * w[g*Cg + c, f, k]."""
    N, C, H, W = x.shape
    _, Fg, kh, kw = w.shape
    Cg = C // group
    full = [strides[i] * ((H, W)[i] - 1) + output_padding[i] + (w.shape[2 + i] - 1) * dilations[i] + 1
            for i in range(2)]
    y = np.zeros((N, Fg * group, full[0], full[1]))
    for n, c, i, j, ki, kj in itertools.product(range(N), range(C), range(H), range(W), range(kh),
                                                range(kw)):
        g = c // Cg
        y[n, g * Fg:(g + 1) * Fg, i * strides[0] + ki * dilations[0],
          j * strides[1] + kj * dilations[1]] += x[n, c, i, j] * w[c, :, ki, kj]
    y = y[:, :, pads[0]:full[0] - pads[2], pads[1]:full[1] - pads[3]]
    if b is not None:
        y += b[None, :, None, None]
    return y.astype(np.float32)


@pytest.mark.parametrize("case", [
    dict(k=2, strides=[2, 2], pads=[0, 0, 0, 0], dilations=[1, 1], output_padding=[0, 0], rt=False),
    dict(k=3, strides=[2, 2], pads=[1, 1, 1, 1], dilations=[1, 1], output_padding=[1, 1], rt=False),
    dict(k=3, strides=[2, 1], pads=[0, 2, 1, 0], dilations=[1, 2], output_padding=[1, 0], rt=True),
    dict(k=3, strides=[2, 2], pads=[1, 1, 1, 1], dilations=[1, 1], output_padding=[0, 0], rt=True,
         group=4),  # depthwise, runtime filter
])
@pytest.mark.onnx_op("ConvTranspose", kind="oracle")
def test_conv_transpose(case):
    """k == stride: a MatMul + pixel shuffle; otherwise zero insertion + a stride-1 conv of the
    flipped filter (a runtime filter is flipped by exchange-matrix MatMuls)."""
    k, rt = case.pop("k"), case.pop("rt")
    fg = 1 if case.get("group", 1) > 1 else 3
    x, w, b = _f32(1, 4, 5, 6), _f32(4, fg, k, k), _f32(fg * case.get("group", 1))
    inputs = [("x", x.shape)] + ([("w", w.shape)] if rt else [])
    m = _model([helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **case)], inputs,
               [("y", None)], ([] if rt else [("w", w)]) + [("b", b)])
    got = _run(m, {"x": x, "w": w} if rt else {"x": x})
    want = conv_transpose_ref(x, w, b, **case)
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)


# --- pooling --------------------------------------------------------------------------------------
def pool_windows(x, ks, strides, pads, dilations, out):
    """For every output position: the list of window coordinates (hi, wi) per the ONNX pooling
    definition (coordinates in the unpadded input, may be outside it)."""
    res = {}
    for oh, ow in itertools.product(range(out[0]), range(out[1])):
        res[oh, ow] = [(oh * strides[0] + i * dilations[0] - pads[0],
                        ow * strides[1] + j * dilations[1] - pads[1])
                       for i in range(ks[0]) for j in range(ks[1])]
    return res


def avgpool_ref(x, ks, strides, pads, cip, out):
    """ONNX AveragePool: the mean over window elements inside the input; with count_include_pad
    the divisor also counts the window elements inside the padding (not those past it)."""
    N, C, H, W = x.shape
    y = np.zeros((N, C, *out), np.float64)
    for (oh, ow), pts in pool_windows(x, ks, strides, pads, [1, 1], out).items():
        inside = [(h, w) for h, w in pts if 0 <= h < H and 0 <= w < W]
        padded = [(h, w) for h, w in pts if -pads[0] <= h < H + pads[2] and -pads[1] <= w < W + pads[3]]
        s = sum(x[:, :, h, w].astype(np.float64) for h, w in inside)
        y[:, :, oh, ow] = s / (len(padded) if cip else len(inside))
    return y.astype(np.float32)


@pytest.mark.parametrize("pads,cip,ceil", [([1, 1, 1, 1], 0, 0), ([1, 0, 2, 1], 0, 0),
                                           ([0, 0, 0, 0], 0, 1), ([1, 1, 1, 1], 1, 1),
                                           ([0, 0, 0, 0], 1, 1)])
@pytest.mark.onnx_op("AveragePool", kind="oracle")
def test_average_pool_padding(pads, cip, ceil):
    """count_include_pad 0 used to be refused ('sitofp has no CVU stage'); count_include_pad 1 with
    ceil_mode gave wrong numbers (divided by kh*kw, not by the window clipped to input + pads)."""
    x = _f32(1, 3, 8, 9)
    a = dict(kernel_shape=[3, 3], strides=[2, 2], pads=pads, count_include_pad=cip, ceil_mode=ceil)
    m = _model([helper.make_node("AveragePool", ["x"], ["y"], **a)], [("x", x.shape)], [("y", None)])
    got = _run(m, {"x": x})
    out = [int((np.ceil if ceil else np.floor)((n + pads[i] + pads[i + 2] - 3) / 2)) + 1
           for i, n in enumerate((8, 9))]
    out = [o - (1 if ceil and (o - 1) * 2 >= n + pads[i] else 0) for i, (o, n) in
           enumerate(zip(out, (8, 9)))]  # the last window must start inside input + begin pad
    want = avgpool_ref(x, [3, 3], [2, 2], pads, cip, out)
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-5, atol=1e-6)


@pytest.mark.onnx_op("MaxPool", kind="oracle")
def test_maxpool_dilated_ceil():
    x = _f32(1, 3, 9, 10)
    a = dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 1, 1, 1], dilations=[2, 3], ceil_mode=1)
    m = _model([helper.make_node("MaxPool", ["x"], ["y"], **a)], [("x", x.shape)], [("y", None)])
    got = _run(m, {"x": x})
    out = list(got.shape[2:])
    H, W = x.shape[2:]
    want = np.full((1, 3, *out), -np.inf, np.float32)
    for (oh, ow), pts in pool_windows(x, [3, 2], [2, 2], [1, 1], [2, 3], out).items():
        for h, w in pts:
            if 0 <= h < H and 0 <= w < W:
                want[:, :, oh, ow] = np.maximum(want[:, :, oh, ow], x[:, :, h, w])
    assert out == [4, 5]  # ceil((9 + 2 - 5) / 2) + 1, ceil((10 + 2 - 4) / 2) + 1
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("p,dil", [(1, [1, 1]), (2, [1, 1]), (3, [2, 1])])
@pytest.mark.onnx_op("LpPool", kind="oracle")
def test_lp_pool(p, dil):
    x = _f32(1, 3, 7, 7)
    a = dict(kernel_shape=[2, 3], strides=[2, 1], pads=[1, 0, 0, 1], p=p, dilations=dil)
    m = _model([helper.make_node("LpPool", ["x"], ["y"], **a)], [("x", x.shape)], [("y", None)],
               opset=18)
    got = _run(m, {"x": x})
    out = list(got.shape[2:])
    want = np.zeros((1, 3, *out))
    for (oh, ow), pts in pool_windows(x, [2, 3], [2, 1], [1, 0], dil, out).items():
        want[:, :, oh, ow] = sum(np.abs(x[:, :, h, w].astype(np.float64)) ** p for h, w in pts
                                 if 0 <= h < 7 and 0 <= w < 7) ** (1.0 / p)
    assert out == ([4, 6] if dil == [1, 1] else [3, 6])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cip", [0, 1])
def test_average_pool_dilated(cip):
    x = _f32(1, 2, 8, 7)
    a = dict(kernel_shape=[2, 2], strides=[1, 2], pads=[1, 1, 0, 1], dilations=[2, 3],
             count_include_pad=cip)
    m = _model([helper.make_node("AveragePool", ["x"], ["y"], **a)], [("x", x.shape)],
               [("y", None)], opset=19)
    got = _run(m, {"x": x})
    out = list(got.shape[2:])
    assert out == [7, 3]  # (8 + 1 - 3) / 1 + 1, (7 + 2 - 4) / 2 + 1
    want = np.zeros((1, 2, *out))
    for (oh, ow), pts in pool_windows(x, [2, 2], [1, 2], [1, 1], [2, 3], out).items():
        inside = [(h, w) for h, w in pts if 0 <= h < 8 and 0 <= w < 7]
        div = len(pts) if cip else len(inside)
        want[:, :, oh, ow] = sum(x[:, :, h, w].astype(np.float64) for h, w in inside) / div
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.onnx_op("GlobalAveragePool", "GlobalMaxPool", kind="oracle")
def test_global_pools():
    x = _f32(2, 5, 6, 7)
    for op, ref in (("GlobalAveragePool", np.mean), ("GlobalMaxPool", np.max)):
        m = _model([helper.make_node(op, ["x"], ["y"])], [("x", x.shape)], [("y", None)])
        got = _run(m, {"x": x})
        np.testing.assert_allclose(got.reshape(2, 5), ref(x, axis=(2, 3)), rtol=1e-5, atol=1e-6)


@pytest.mark.onnx_op("LRN", kind="oracle")
def test_lrn():
    """LRN: x / (bias + alpha/size * sum over the channel band of x^2) ^ beta."""
    x = _f32(1, 7, 4, 5) * 3
    size, alpha, beta, bias = 4, 0.05, 0.7, 1.5
    m = _model([helper.make_node("LRN", ["x"], ["y"], size=size, alpha=alpha, beta=beta, bias=bias)],
               [("x", x.shape)], [("y", None)])
    got = _run(m, {"x": x})
    lo, hi = (size - 1) // 2, int(np.ceil((size - 1) / 2))
    x64 = x.astype(np.float64)
    sq = np.stack([np.sum(x64[:, max(0, c - lo):min(6, c + hi) + 1] ** 2, axis=1) for c in range(7)], 1)
    want = x64 / (bias + alpha / size * sq) ** beta
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


# --- Resize and Pad -------------------------------------------------------------------------------
def resize_ref_1d(v, n_out, scale, mode, ctm, nearest_mode="round_prefer_floor"):
    """1-D ONNX Resize along the last axis (the definition: output coordinate -> input coordinate
    by ``ctm``, then nearest / linear interpolation with clamped edges)."""
    n_in = v.shape[-1]
    y = np.zeros(v.shape[:-1] + (n_out,))
    for i in range(n_out):
        if ctm == "half_pixel":
            xo = (i + 0.5) / scale - 0.5
        elif ctm == "align_corners":
            xo = 0.0 if n_out == 1 else i * (n_in - 1) / (n_out - 1)
        elif ctm == "asymmetric":
            xo = i / scale
        elif ctm == "pytorch_half_pixel":
            xo = (i + 0.5) / scale - 0.5 if n_out > 1 else 0.0
        else:
            raise ValueError(ctm)
        if mode == "nearest":
            if nearest_mode == "floor":
                k = int(np.floor(xo))
            elif nearest_mode == "ceil":
                k = int(np.ceil(xo))
            elif nearest_mode == "round_prefer_ceil":
                k = int(np.floor(xo + 0.5))
            else:
                k = int(np.ceil(xo - 0.5))
            y[..., i] = v[..., min(max(k, 0), n_in - 1)]
        else:
            xo = min(max(xo, 0.0), n_in - 1)
            k0 = int(np.floor(xo))
            k1 = min(k0 + 1, n_in - 1)
            t = xo - k0
            y[..., i] = v[..., k0] * (1 - t) + v[..., k1] * t
    return y


@pytest.mark.parametrize("mode,ctm,nm,scales", [
    ("nearest", "asymmetric", "floor", [1, 1, 2, 2]),  # the YOLO upsample: DMAs only
    ("nearest", "half_pixel", "round_prefer_floor", [1, 1, 1.5, 3]),
    ("linear", "half_pixel", None, [1, 1, 2, 1.5]),
    ("linear", "align_corners", None, [1, 1, 1.75, 2]),
    ("linear", "pytorch_half_pixel", None, [1, 1, 0.5, 2]),
])
@pytest.mark.onnx_op("Resize", kind="oracle")
def test_resize(mode, ctm, nm, scales):
    x = _f32(1, 3, 4, 6)
    a = dict(mode=mode, coordinate_transformation_mode=ctm)
    if nm:
        a["nearest_mode"] = nm
    m = _model([helper.make_node("Resize", ["x", "", "s"], ["y"], **a)], [("x", x.shape)],
               [("y", None)], [("s", np.array(scales, np.float32))])
    got = _run(m, {"x": x})
    oh, ow = int(4 * scales[2]), int(6 * scales[3])
    t = resize_ref_1d(x.astype(np.float64), ow, scales[3], mode, ctm, nm or "round_prefer_floor")
    t = resize_ref_1d(np.swapaxes(t, 2, 3), oh, scales[2], mode, ctm, nm or "round_prefer_floor")
    want = np.swapaxes(t, 2, 3)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])
@pytest.mark.onnx_op("Pad", kind="oracle")
def test_pad_modes(mode):
    """ONNX Pad's reflect/edge/wrap are numpy's pad modes (the definition's own reference)."""
    x = _f32(1, 2, 5, 6)
    pads = [0, 0, 2, 1, 0, 0, 1, 3]
    m = _model([helper.make_node("Pad", ["x", "p"], ["y"], mode=mode)], [("x", x.shape)],
               [("y", None)], [("p", np.array(pads, np.int64))], opset=19)
    got = _run(m, {"x": x})
    want = np.pad(x, [(pads[i], pads[i + 4]) for i in range(4)], mode=mode)
    np.testing.assert_array_equal(got, want)


# --- refusals (one line, no traceback) ------------------------------------------------------------
@pytest.mark.parametrize("what,nodes,inputs,inits,msg", [
    ("resize runtime scales", [helper.make_node("Resize", ["x", "", "s"], ["y"])],
     [("x", [1, 1, 4, 4]), ("s", [4])], [], "runtime scales/sizes"),
    ("resize tf_crop", [helper.make_node("Resize", ["x", "r", "s"], ["y"],
                                         coordinate_transformation_mode="tf_crop_and_resize")],
     [("x", [1, 1, 4, 4])], [("r", np.array([0, 0, 0, 0, 1, 1, 1, 1], np.float32)),
                              ("s", np.array([1, 1, 2, 2], np.float32))], "tf_crop_and_resize"),
    ("lppool ceil", [helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 2], ceil_mode=1)],
     [("x", [1, 1, 5, 5])], [], "ceil_mode"),
    ("convT grouped (2 channels per group)", [helper.make_node("ConvTranspose", ["x", "w"], ["y"], group=2,
                                                strides=[2, 2])],
     [("x", [1, 4, 3, 3]), ("w", [4, 1, 3, 3])], [], "grouped convolution with more than one"),
])
def test_vision_refusals(what, nodes, inputs, inits, msg):
    m = _model(nodes, inputs, [("y", None)], inits, opset=18)
    with pytest.raises(M100Error, match=msg):
        driver.compile(m, machine="tiny")


@pytest.mark.parametrize("mode,scales", [
    ("nearest", [1, 1, 2, 2]), ("nearest", [1, 1, 1.25, 3]), ("linear", [1, 1, 2, 1.5])])
@pytest.mark.onnx_op("Upsample", kind="oracle")
def test_upsample_opset9(mode, scales):
    """Upsample (opset 9, deprecated) reaches Resize through the version converter. Its definition
    (onnxruntime; the onnx reference's integer-scale repeat) samples ``x_in = x_out / scale``
    (asymmetric), nearest taking the floor; the converter's Resize defaulted to half_pixel (linear
    x2 was off by up to 0.7; nearest x1.25 picked other rows)."""
    x = _f32(1, 2, 4, 4)
    m = _model([helper.make_node("Upsample", ["x", "s"], ["y"], mode=mode)], [("x", x.shape)],
               [("y", None)], [("s", np.array(scales, np.float32))], opset=9)
    got = _run(m, {"x": x})
    oh, ow = int(4 * scales[2]), int(4 * scales[3])
    t = resize_ref_1d(x.astype(np.float64), ow, scales[3], mode, "asymmetric", "floor")
    t = resize_ref_1d(np.swapaxes(t, 2, 3), oh, scales[2], mode, "asymmetric", "floor")
    want = np.swapaxes(t, 2, 3)
    if scales == [1, 1, 2, 2]:
        np.testing.assert_array_equal(want, x.repeat(2, axis=2).repeat(2, axis=3))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.onnx_op("Upsample", kind="negative")
def test_upsample_nearest_downscale_refused():
    """A nearest Upsample with a scale < 1 (onnxruntime rounds those up, not down) is refused in
    one line naming the op and the node."""
    m = _model([helper.make_node("Upsample", ["x", "s"], ["y"], mode="nearest", name="up")],
               [("x", [1, 1, 4, 4])], [("y", None)],
               [("s", np.array([1, 1, 0.5, 2], np.float32))], opset=9)
    with pytest.raises(M100Error) as ei:
        driver.compile(m, machine="tiny")
    msg = str(ei.value)
    assert "\n" not in msg and "Upsample 'up'" in msg and "scale < 1" in msg, msg
