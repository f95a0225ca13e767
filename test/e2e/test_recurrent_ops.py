"""RNN / GRU / LSTM unrolled before torch-mlir (frontend/onnx_rewrite_rnn.py) through the whole
stack against onnxruntime, on the forms the node tests do not cover: sequences shorter than the input
(``sequence_lens``, run time), ``clip``, GRU ``linear_before_reset``, named activations (layout 1:
the node tests; onnxruntime has no batch-first recurrent ops);
and the refused forms (one line naming the op and the node)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from m100.errors import M100Error
from m100.tools import driver

RNG = np.random.default_rng(5)
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _model(op, seq, batch, inp, hid, *, dirs=1, layout=0, lens=False, init_state=False,
           peep=False, **attrs):
    g = GATES[op]
    w = RNG.standard_normal((dirs, g * hid, inp)).astype(np.float32) * 0.6
    r = RNG.standard_normal((dirs, g * hid, hid)).astype(np.float32) * 0.6
    b = RNG.standard_normal((dirs, 2 * g * hid)).astype(np.float32) * 0.3
    inits = [nh.from_array(w, "W"), nh.from_array(r, "R"), nh.from_array(b, "B")]
    xs = [batch, seq, inp] if layout else [seq, batch, inp]
    ins = [h.make_tensor_value_info("X", T.FLOAT, xs)]
    names = ["X", "W", "R", "B", "", ""]
    if lens:
        ins.append(h.make_tensor_value_info("L", T.INT32, [batch]))
        names[4] = "L"
    if init_state:
        hs = [batch, dirs, hid] if layout else [dirs, batch, hid]
        ins.append(h.make_tensor_value_info("H0", T.FLOAT, hs))
        names[5] = "H0"
        if op == "LSTM":
            ins.append(h.make_tensor_value_info("C0", T.FLOAT, hs))
            names.append("C0")
    if peep:
        names += [""] * (7 - len(names)) + ["P"]
        inits.append(nh.from_array(RNG.standard_normal((dirs, 3 * hid)).astype(np.float32), "P"))
    outs = ["Y", "Yh"] + (["Yc"] if op == "LSTM" else [])
    direction = {1: "forward", 2: "bidirectional"}[dirs] if "direction" not in attrs else \
        attrs.pop("direction")
    node = h.make_node(op, names, outs, hidden_size=hid, direction=direction, layout=layout,
                       **attrs)
    y_s = [batch, seq, dirs, hid] if layout else [seq, dirs, batch, hid]
    hs = [batch, dirs, hid] if layout else [dirs, batch, hid]
    gr = h.make_graph([node], "rnn", ins,
                      [h.make_tensor_value_info("Y", T.FLOAT, y_s)] +
                      [h.make_tensor_value_info(o, T.FLOAT, hs) for o in outs[1:]], inits)
    m = h.make_model(gr, opset_imports=[h.make_opsetid("", 22)])
    onnx.checker.check_model(m, full_check=True)
    return m


def _feeds(m, seq):
    out = {}
    for vi in m.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.name == "L":  # every length from 1 to seq, the longest once
            out["L"] = np.array([seq] + [1 + i % seq for i in range(shape[0] - 1)], np.int32)
        else:
            out[vi.name] = RNG.standard_normal(shape).astype(np.float32)
    return out


CASES = {
    "lstm_peephole_lens_clip": dict(op="LSTM", seq=3, batch=2, inp=3, hid=3, lens=True,
                                    init_state=True, peep=True, clip=1.5),
    "gru_reverse_lbr_lens": dict(op="GRU", seq=3, batch=2, inp=3, hid=3, lens=True,
                                 direction="reverse", linear_before_reset=1, init_state=True),
    "rnn_relu_bidir_lens": dict(op="RNN", seq=3, batch=2, inp=2, hid=3, dirs=2, lens=True,
                                activations=["Relu", "Tanh"]),
    "gru_hardsigmoid_softsign": dict(op="GRU", seq=2, batch=1, inp=3, hid=3,
                                     activations=["HardSigmoid", "Softsign"]),
}
#: bigger: every LSTM feature in both directions (make test-slow)
SLOW_CASES = {
    "lstm_bidir_peephole_lens_clip": dict(op="LSTM", seq=4, batch=3, inp=3, hid=4, dirs=2,
                                          lens=True, init_state=True, peep=True, clip=1.5),
}


@pytest.mark.parametrize("case", sorted(CASES) + [
    pytest.param(c, marks=pytest.mark.slow) for c in sorted(SLOW_CASES)])
@pytest.mark.onnx_op("RNN", "GRU", "LSTM", kind="oracle")
def test_recurrent_against_onnxruntime(case):
    from m100.frontend.ort_session import ort_session

    kw = dict(CASES.get(case) or SLOW_CASES[case])
    m = _model(kw.pop("op"), **kw)
    feeds = _feeds(m, kw["seq"])
    want = ort_session(m).run(None, feeds)
    cr = driver.compile(m, machine="tiny")
    got = driver.run(cr.program, feeds).outputs
    for name, w in zip([o.name for o in m.graph.output], want):
        np.testing.assert_allclose(got[name], w, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("attrs,msg", [
    (dict(activations=["ScaledTanh"], activation_alpha=[1.0], activation_beta=[1.0]),
     "activation_alpha / activation_beta is not supported"),
    (dict(activations=["Affine"]), "activation 'Affine' is not supported"),
])
@pytest.mark.onnx_op("RNN", kind="negative")
def test_recurrent_refusals(attrs, msg):
    m = _model("RNN", 2, 1, 2, 3, **attrs)
    m.graph.node[0].name = "rnn0"
    with pytest.raises(M100Error) as ei:
        driver.compile(m, machine="tiny")
    text = str(ei.value)
    assert "\n" not in text and "RNN 'rnn0'" in text and msg in text, text
