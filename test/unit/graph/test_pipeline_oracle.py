"""Semantics oracle for the graph pipeline: the numpy reference executor (m100.frontend.reference,
written from the ops' definitions, independent of the passes) runs each model before and after
``m100-graph``; the results must agree (rtol 1e-5). onnxruntime is a second, outside oracle."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from m100.context import make_context  # noqa: E402
from m100.frontend import load_onnx  # noqa: E402
from m100.frontend import models  # noqa: E402
from m100.frontend.reference import run  # noqa: E402
from m100.passes.graph.classify_ops import UNITS  # noqa: E402
from m100.passes.graph.common import EPILOGUE, FUSED_INTO, IDIOM, IDIOM_ROOT, UNIT  # noqa: E402
from m100.passes.graph.m100_graph import M100Graph  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
LLAMA = next((p for p in (ROOT / "test/data/llama_layer_small.onnx",
                          Path("/work/shared/models/llama_layer_small.onnx")) if p.exists()), None)


def _f(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _model(nodes, inputs, outputs, inits, opset=17):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                       for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                           for n, s in outputs],
                          [numpy_helper.from_array(a, n) for n, a in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def bn_residual_net():
    """Conv -> BatchNorm -> Relu -> Conv(1x1, bias) -> Add(residual) -> Relu: exercises the
    layout propagation through BN/residual generics and the bias-init epilogue."""
    rng = np.random.default_rng(1)
    inits = {"W1": _f(rng, 4, 3, 3, 3, scale=0.3), "s": _f(rng, 4), "b": _f(rng, 4),
             "mu": _f(rng, 4), "var": np.abs(_f(rng, 4)) + 0.5, "W2": _f(rng, 4, 4, 1, 1),
             "B2": _f(rng, 4)}
    nodes = [helper.make_node("Conv", ["x", "W1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c1", "s", "b", "mu", "var"], ["bn"]),
             helper.make_node("Relu", ["bn"], ["r1"]),
             helper.make_node("Conv", ["r1", "W2", "B2"], ["c2"]),
             helper.make_node("Add", ["c2", "r1"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    return _model(nodes, [("x", [1, 3, 8, 8])], [("y", [1, 4, 8, 8])], inits)


def grouped_net():
    """Grouped conv (torch-mlir: expand to NGCHW, conv_2d_ngchw_gfchw, collapse) + BatchNorm +
    Relu, then a depthwise conv + BatchNorm (ShuffleNet/MobileNet blocks)."""
    rng = np.random.default_rng(4)
    inits = {"W": _f(rng, 6, 2, 3, 3, scale=0.3), "s": _f(rng, 6), "b": _f(rng, 6),
             "m": _f(rng, 6), "v": np.abs(_f(rng, 6)) + 0.5, "D": _f(rng, 6, 1, 3, 3),
             "s2": _f(rng, 6), "b2": _f(rng, 6), "m2": _f(rng, 6), "v2": np.abs(_f(rng, 6)) + 0.5}
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], group=2, pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["bn"]),
             helper.make_node("Relu", ["bn"], ["r"]),
             helper.make_node("Conv", ["r", "D"], ["dc"], group=6, pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["dc", "s2", "b2", "m2", "v2"], ["y"])]
    return _model(nodes, [("x", [1, 4, 6, 6])], [("y", [1, 6, 6, 6])], inits)


def norms_net():
    """MatMul -> Gelu, LayerNormalization, Softmax (torch-mlir decompositions of each)."""
    rng = np.random.default_rng(2)
    inits = {"W": _f(rng, 16, 16, scale=0.25), "g": _f(rng, 16), "b": _f(rng, 16)}
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]),
             helper.make_node("Gelu", ["h"], ["ge"]),
             helper.make_node("LayerNormalization", ["ge", "g", "b"], ["ln"], axis=-1),
             helper.make_node("Softmax", ["ln"], ["y"], axis=-1)]
    return _model(nodes, [("x", [2, 4, 16])], [("y", [2, 4, 16])], inits, opset=20)


def decomposed_net():
    """The same idioms spelled with primitive ONNX ops (as older exporters write them):
    LayerNorm via ReduceMean/Sub/Pow/Sqrt/Div, tanh-GELU via Pow/Tanh, softmax via Exp/ReduceSum/Div
    (no max subtraction), RMSNorm via Mul/ReduceMean/Add/Sqrt/Reciprocal."""
    rng = np.random.default_rng(3)
    c = lambda v: np.array(v, np.float32)  # noqa: E731
    inits = {"W": _f(rng, 16, 16, scale=0.25), "g": _f(rng, 16), "b": _f(rng, 16),
             "two": c(2.0), "eps": c(1e-5), "half": c(0.5), "one": c(1.0), "k": c(0.044715),
             "s2pi": c(0.7978845608), "three": c(3.0), "axes": np.array([-1], np.int64)}
    n = helper.make_node
    nodes = [n("MatMul", ["x", "W"], ["h"]),
             # layernorm
             n("ReduceMean", ["h", "axes"], ["mu"]), n("Sub", ["h", "mu"], ["d"]),
             n("Pow", ["d", "two"], ["d2"]), n("ReduceMean", ["d2", "axes"], ["var"]),
             n("Add", ["var", "eps"], ["ve"]), n("Sqrt", ["ve"], ["sd"]),
             n("Div", ["d", "sd"], ["nrm"]), n("Mul", ["nrm", "g"], ["sc"]),
             n("Add", ["sc", "b"], ["ln"]),
             # tanh gelu
             n("Pow", ["ln", "three"], ["c3"]), n("Mul", ["c3", "k"], ["kc3"]),
             n("Add", ["ln", "kc3"], ["inner"]), n("Mul", ["inner", "s2pi"], ["arg"]),
             n("Tanh", ["arg"], ["th"]), n("Add", ["th", "one"], ["th1"]),
             n("Mul", ["ln", "th1"], ["xt"]), n("Mul", ["xt", "half"], ["ge"]),
             # rmsnorm
             n("Mul", ["ge", "ge"], ["sq"]), n("ReduceMean", ["sq", "axes"], ["ms"]),
             n("Add", ["ms", "eps"], ["mse"]), n("Sqrt", ["mse"], ["rms"]),
             n("Reciprocal", ["rms"], ["inv"]), n("Mul", ["ge", "inv"], ["rn"]),
             # softmax without max subtraction
             n("Exp", ["rn"], ["ex"]), n("ReduceSum", ["ex", "axes"], ["se"]),
             n("Div", ["ex", "se"], ["y"])]
    return _model(nodes, [("x", [2, 4, 16])], [("y", [2, 4, 16])], inits, opset=18)


CASES = {
    "grouped": (grouped_net, {"x": (1, 4, 6, 6)}),
    "decomposed": (decomposed_net, {"x": (2, 4, 16)}),
    "mlp": (lambda: models.mlp(), {"x": (4, 16)}),
    "convnet": (lambda: models.conv_relu_maxpool(), {"x": (1, 3, 16, 16)}),
    "bn_residual": (bn_residual_net, {"x": (1, 3, 8, 8)}),
    "norms": (norms_net, {"x": (2, 4, 16)}),
}
if LLAMA is not None:
    CASES["llama_layer"] = (lambda: onnx.load(str(LLAMA)), {"x": (1, 8, 32)})
    LM = LLAMA.parent / "llama_lm_small.onnx"
    if LM.exists():  # token ids in: the embedding lookup is a gather
        CASES["llama_lm"] = (lambda: onnx.load(str(LM)), {"x": ((1, 8), "int64", 128)})


def _compile(model):
    ctx = make_context()
    before = load_onnx(model, ctx)
    after = load_onnx(model, ctx)
    M100Graph().apply(ctx, after)
    after.verify()
    return before, after


@pytest.fixture(scope="module", params=sorted(CASES))
def compiled(request):
    build, shapes = CASES[request.param]
    model = build()
    before, after = _compile(model)
    rng = np.random.default_rng(0)
    inputs = [rng.integers(0, s[2], s[0]).astype(s[1]) if isinstance(s[0], tuple)
              else rng.standard_normal(s).astype(np.float32) for s in shapes.values()]
    return request.param, model, before, after, inputs


def test_semantics_preserved(compiled):
    name, model, before, after, inputs = compiled
    ref = run(before, inputs)
    got = run(after, inputs)
    assert len(ref) == len(got)
    for r, g in zip(ref, got):
        assert r.shape == g.shape
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5, err_msg=name)


def test_matches_onnxruntime(compiled):
    pytest.importorskip("onnxruntime")
    from m100.frontend.ort_session import ort_session
    name, model, _, after, inputs = compiled
    sess = ort_session(model)
    feeds = {i.name: x for i, x in zip(sess.get_inputs(), inputs)}
    want = sess.run(None, feeds)
    got = run(after, inputs)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=name)


def _graph_ops(module):
    from xdsl.dialects import func
    for f in module.walk():
        if isinstance(f, func.FuncOp):
            yield from f.body.blocks[0].ops


def test_every_linalg_op_classified(compiled):
    name, _, _, after, _ = compiled
    n = 0
    for op in _graph_ops(after):
        if op.name.startswith(("linalg.", "tensor.")) and op.name != "tensor.empty":
            unit = op.attributes.get(UNIT)
            assert unit is not None, f"{name}: {op.name} has no m100.unit"
            assert unit.data in UNITS
            n += 1
    assert n > 0


def _units(module):
    out: dict[str, int] = {}
    for op in _graph_ops(module):
        if UNIT in op.attributes:
            u = op.attributes[UNIT].data
            out[u] = out.get(u, 0) + 1
    return out


def _idioms(module):
    return sorted(op.attributes[IDIOM].data for op in _graph_ops(module)
                  if IDIOM_ROOT in op.attributes)


def test_expected_structure(compiled):
    name, _, _, after, _ = compiled
    units = _units(after)
    epilogues = [[s.data for s in op.attributes[EPILOGUE].data] for op in _graph_ops(after)
                 if EPILOGUE in op.attributes]
    names = [op.name for op in _graph_ops(after)]
    if name == "mlp":
        assert units["tcu.matmul"] == 3
        assert epilogues == [["bias", "relu"], ["bias", "relu"], ["bias"]]
        assert "cvu.elementwise" not in units
    elif name == "convnet":
        assert "linalg.conv_2d_nchw_fchw" not in names
        assert names.count("linalg.conv_2d_nhwc_hwcf") == 2
        assert epilogues == [["bias", "relu"], ["relu"]]
        # only at the input and the output: the max-pool runs NHWC too
        assert names.count("linalg.transpose") == 2
        assert "linalg.pooling_nhwc_max" in names and "linalg.pooling_nchw_max" not in names
    elif name == "bn_residual":
        assert names.count("linalg.conv_2d_nhwc_hwcf") == 2
        # input transpose + one back to NCHW at the output: the pair between the convs cancelled
        assert names.count("linalg.transpose") == 2
    elif name == "norms":
        assert _idioms(after) == ["gelu", "layernorm", "softmax"]
        assert epilogues == [["gelu"]]
        assert units.get("cvu.layernorm", 0) > 3 and units.get("cvu.softmax", 0) > 3
    elif name == "grouped":
        # both BatchNorms folded into the convolutions: only the ReLU generic is left; the
        # depthwise conv's folded bias is its epilogue (grouped convs get no epilogue yet)
        assert names.count("linalg.generic") == 1
        assert epilogues == [["bias"]]
    elif name == "decomposed":
        assert _idioms(after) == ["gelu_tanh", "layernorm", "rmsnorm", "softmax"]
    elif name == "llama_lm":
        assert _idioms(after) == ["rmsnorm", "rmsnorm", "rmsnorm", "silu", "softmax"]
        assert units["csu.gather"] == 1
    elif name == "llama_layer":
        assert _idioms(after) == ["rmsnorm", "rmsnorm", "silu", "softmax"]
        assert epilogues == [["silu"]]
        assert units["tcu.matmul"] == 9  # q, k, v, q@k, p@v, o, gate, up, down
        fused = [op for op in _graph_ops(after) if FUSED_INTO in op.attributes]
        assert len(fused) == 2 and all(op.attributes[UNIT].data == "tcu.epilogue" for op in fused)
