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
def test_conv_runtime_filter_and_bias(case):
    x, w, b = _f32(1, 3, 9, 9), _f32(5, 3, 3, 3), _f32(5)
    m = _model([helper.make_node("Conv", ["x", "w", "b"], ["y"], **case)],
               [("x", x.shape), ("w", w.shape), ("b", b.shape)], [("y", None)])
    got = _run(m, {"x": x, "w": w, "b": b})
    want = conv_ref(x, w, b, **case)
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("strides,dilations,tpbs", [([1, 1], [1, 1], 1), ([2, 2], [1, 1], 8),
                                                    ([1, 1], [2, 2], 4)])
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
