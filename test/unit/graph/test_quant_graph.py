"""Quantized graphs at graph level (issue 11): onnxruntime's QDQ models (per-channel S8S8 conv net,
QDQ MLP) through ``m100-graph`` (raise-quant-casts + fold-quantized-contractions + fuse-epilogue):
the convolutions/matmuls become i8 x i8 -> i32 with a bias + requant TCU epilogue, the numpy
reference executor runs the graph before and after, and the quantized outputs match onnxruntime
within 1 LSB. The scheduler runs them (test/e2e/test_quant_e2e.py)."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from m100.context import make_context
from m100.errors import M100Error
from m100.frontend import quant_models as qm
from m100.frontend import reference
from m100.frontend.mlir_load import load_mlir
from m100.tools.onnx_backend import onnxruntime_run
from m100.frontend.onnx_import import load_onnx
from m100.passes.graph.m100_graph import M100Graph

pytest.importorskip("onnxruntime")

LIT = pathlib.Path(__file__).parents[2] / "lit" / "graph" / "fold_quantized_contractions.mlir"


def _out_scale(model) -> float:
    """The scale of the DequantizeLinear producing the graph output (1 LSB of the output)."""
    from onnx import numpy_helper

    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    out = model.graph.output[0].name
    node = next(n for n in model.graph.node if out in n.output)
    assert node.op_type == "DequantizeLinear"
    return float(inits[node.input[1]])


def _contractions(module):
    return [op for op in module.walk() if op.name in (
        "linalg.conv_2d_nhwc_hwcf", "linalg.conv_2d_nchw_fchw", "linalg.matmul")]


@pytest.fixture(scope="module")
def convnet():
    model = qm.qdq_convnet(hw=8, f=4)
    return model, load_onnx(model)


@pytest.mark.parametrize("which", ["convnet", "mlp", "qlinearconv"])
def test_qdq_model_int8_contractions_match_onnxruntime(which, convnet):
    """QDQ conv net (per-channel S8S8), QDQ MLP, and the QOperator conv net (QLinearConv, rewritten
    to QDQ at import)."""
    if which == "convnet":
        model, module = convnet
    else:
        model = qm.qdq_mlp() if which == "mlp" else qm.qdq_convnet(fmt="qoperator")
        module = load_onnx(model)
    shape = module.body.block.first_op.body.block.args[0].type.get_shape()
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal(shape).astype(np.float32) * s for s in (0.5, 1.0, 2.0)]
    before = [reference.run(module, [x])[0] for x in xs]
    M100Graph().apply(make_context(), module)
    module.verify()
    cs = _contractions(module)
    ints = [c for c in cs if str(c.operands[0].type).endswith("xi8>")]
    assert len(ints) == len(cs) == (3 if which == "mlp" else 2), [str(c.operands[0].type) for c in cs]
    for c in ints:
        assert str(c.results[0].type).endswith("xi32>")
        ep = [s.data for s in c.attributes["m100.epilogue"].data]
        assert ep[-1] == "requant"
        assert c.attributes["m100.requant_range"].data[0].value.data == -128
    lsb = _out_scale(model)
    n_exact = n_total = 0
    for x, b in zip(xs, before):
        after = reference.run(module, [x])[0]
        want = onnxruntime_run(model, [x])[0]
        diff = np.abs(after.astype(np.float64) - want) / lsb
        assert diff.max() <= 1.0 + 1e-6, diff.max()
        assert np.abs(after.astype(np.float64) - b).max() / lsb <= 1.0 + 1e-6
        n_exact += int((diff < 1e-6).sum())
        n_total += diff.size
    assert n_exact / n_total >= 0.99, (n_exact, n_total)


def test_scheduler_refuses_the_per_tensor_float_bias_form_with_one_line():
    # the per-channel forms are scheduled (test/e2e/test_quant_e2e.py); torch-mlir's per-tensor
    # form with a float bias in between keeps float<->i32 conversions no unit computes: one line
    from m100.passes.schedule.m100_schedule import M100Schedule

    module = load_onnx(qm.qdq_convnet(hw=8, f=4, per_channel=False))
    M100Graph().apply(make_context(), module)
    with pytest.raises(M100Error) as e:
        M100Schedule(machine="tiny").apply(make_context(), module)
    msg = str(e.value)
    # (its fptosi generics compile since the CVU's integer lane has ftoi, issue 11: the refusal
    # is now at the per-tensor quantized conv itself)
    assert "\n" not in msg and "@convnet, op #" in msg and "not supported" in msg, msg


def _qlinear_conv_oracle(xq, sx, zx, wq, sw, bq, sy, zy):
    """ONNX QLinearConv (stride 1, pad 1) from its definition: exact integer accumulation of
    (x - zx) * (w - 0) + bias, then y = saturate(round_half_even(acc * sx * sw[f] / sy) + zy)."""
    n, c, h, w_ = xq.shape
    f = wq.shape[0]
    xp = np.pad(xq.astype(np.int64) - zx, ((0, 0), (0, 0), (1, 1), (1, 1)))
    acc = np.zeros((n, f, h, w_), np.int64)
    for i in range(h):
        for j in range(w_):
            win = xp[:, :, i:i + 3, j:j + 3]
            acc[:, :, i, j] = np.einsum("nckl,fckl->nf", win, wq.astype(np.int64))
    acc += bq.reshape(1, f, 1, 1)
    real = acc * (sx * np.asarray(sw).reshape(1, f, 1, 1) / sy)
    return np.clip(np.rint(real) + zy, -128, 127).astype(np.int8)


def test_folded_lit_conv_matches_qlinearconv_oracle():
    """The lit test's conv (pad, per-channel weights, int32 bias) before and after folding vs the
    ONNX QLinearConv definition, on random int8 inputs: integer results within 1 LSB, and the
    folded one (exact integer accumulation, power-of-two multipliers) equal to the oracle."""
    from m100.passes.graph.fold_quantized_contractions import FoldQuantizedContractions

    module = load_mlir(LIT.read_text())
    rng = np.random.default_rng(3)
    xs = [rng.integers(-128, 128, (1, 1, 4, 4)).astype(np.int8) for _ in range(20)]
    before = [reference.run(module, [x], func_name="conv")[0] for x in xs]
    FoldQuantizedContractions().apply(make_context(), module)
    assert "linalg.conv_2d_nchw_fchw {" in str(module) and "xi8>, tensor<2x1x3x3xi8>" in str(module)
    w = np.array([[[[1, 2, 3], [4, 5, 6], [7, 8, 9]]], [[[-1, -2, -3], [-4, -5, -6], [-7, -8, -9]]]],
                 np.int8)
    mismatch = 0
    for x, b in zip(xs, before):
        after = reference.run(module, [x], func_name="conv")[0]
        want = _qlinear_conv_oracle(x, 0.5, 3, w, [0.25, 0.125], np.array([10, -20]), 2.0, -128)
        assert np.abs(after.astype(int) - want).max() <= 1
        assert np.abs(b.astype(int) - want).max() <= 1
        mismatch += int((after != want).sum())
    assert mismatch == 0  # multipliers are powers of two here: the f32 requant is exact


@pytest.mark.parametrize("fn", ["matmul", "matmul_relu", "gemm", "qmm_per_tensor"])
def test_folded_lit_matmuls_equal_the_float_graph(fn):
    """The lit test's matmul (per-column weights) and matmul -> ReLU -> QuantizeLinear: the folded
    int8 graph (i32 ReLU on the accumulator) gives the float graph's result on random inputs, and
    fuse-epilogue marks relu + requant on the contraction."""
    from m100.passes.graph.fold_quantized_contractions import FoldQuantizedContractions
    from m100.passes.graph.fuse_epilogue import FuseEpilogue

    module = load_mlir(LIT.read_text())
    rng = np.random.default_rng(11)
    xs = [rng.integers(-128, 128, (2, 3)).astype(np.int8) for _ in range(50)]
    before = [reference.run(module, [x], func_name=fn)[0] for x in xs]
    FoldQuantizedContractions().apply(make_context(), module)
    FuseEpilogue().apply(make_context(), module)
    for x, b in zip(xs, before):
        assert np.array_equal(reference.run(module, [x], func_name=fn)[0], b)
    fn_op = next(o for o in module.walk() if o.name == "func.func" and o.sym_name.data == fn)
    mm = next(o for o in fn_op.walk() if o.name == "linalg.matmul")
    want = {"matmul_relu": ["relu", "requant"], "gemm": ["bias", "requant"],
            "qmm_per_tensor": ["bias", "requant"]}.get(fn, ["requant"])
    assert [s.data for s in mm.attributes["m100.epilogue"].data] == want


def test_raised_quant_casts_compute_like_the_torch_mlir_generics():
    """raise-quant-casts on the lit test's functions: the quant ops give the generics' results
    bit-exactly, including ties (x / s = k + 0.5: half to even), saturation, inf and NaN."""
    from m100.passes.graph.raise_quant_casts import RaiseQuantCasts

    src = (pathlib.Path(__file__).parents[2] / "lit" / "graph" / "raise_quant_casts.mlir").read_text()
    module = load_mlir(src)
    rng = np.random.default_rng(2)
    ties = (np.arange(-300, 300) + 0.5).astype(np.float32) * np.float32(0.5)
    x = np.concatenate([ties, rng.standard_normal(400).astype(np.float32) * 100,
                        np.array([np.inf, -np.inf, 1e30, -1e30, 0.0, -0.0], np.float32)])[:1002]
    x = x[:1002 - 1002 % 6].reshape(-1, 2, 3)
    w = rng.integers(-128, 128, (2, 3)).astype(np.int8)
    before = [[reference.run(module, [xi], func_name="qdq")[0] for xi in x],
              [reference.run(module, [w, xi], func_name="per_axis") for xi in x[:20]]]
    RaiseQuantCasts().apply(make_context(), module)
    assert "quant.qcast" in str(module)
    for xi, b in zip(x, before[0]):
        assert np.array_equal(reference.run(module, [xi], func_name="qdq")[0], b)
    for xi, b in zip(x[:20], before[1]):
        for got, want in zip(reference.run(module, [w, xi], func_name="per_axis"), b):
            assert np.array_equal(got, want)


@pytest.mark.slow
def test_qdq_resnet18_all_int8_close_to_onnxruntime():
    """ResNet-18 (64x64, BatchNorm folded by quant_pre_process, QDQ per-channel S8S8): every conv
    and the Gemm become i8 contractions with a requant epilogue, and the reference executor's
    outputs are within 1 LSB of onnxruntime running *every* conv as an S8S8 integer kernel
    (``session.qdqisint8allowed=1``: QLinearConv + QLinearAdd). Measured on 10 inputs x 10 classes
    (seed 0): 94 % exact, 100 % within 1 LSB (acceptance: >= 99.9 %).

    Not the oracle: onnxruntime with default options, which runs 11 of the 20 convs in f32 (on x86
    its s8 -> u8 rewrite skips a QuantizeLinear with two output edges, i.e. every activation that
    feeds a conv and the residual Add / downsample conv; the QDQ conv group then mixes s8 and u8 and
    is not fused; docs/graph.md). Its f32 convs round near-ties differently, and a 1-LSB step early
    on reaches the logits through 20 layers: vs default onnxruntime 86 % exact, 94 % within 1 LSB,
    max 5 LSB on the same inputs (reported, not asserted)."""
    model = qm.qdq_resnet18(hw=64)
    module = load_onnx(model)
    M100Graph().apply(make_context(), module)
    cs = _contractions(module)
    assert len(cs) == 21 and all(str(c.operands[0].type).endswith("xi8>") for c in cs)
    assert all("requant" in [s.data for s in c.attributes["m100.epilogue"].data] for c in cs)
    lsb = _out_scale(model)
    rng = np.random.default_rng(0)
    int8 = {"session.qdqisint8allowed": "1"}
    steps, default_steps = [], []
    for x in (rng.standard_normal((1, 3, 64, 64)).astype(np.float32) for _ in range(10)):
        got = reference.run(module, [x])[0].astype(np.float64)
        # outputs are dequantized int8 values: differences in LSB are integers (rint: f32 noise)
        steps.append(np.rint(np.abs(got - onnxruntime_run(model, [x], int8)[0]) / lsb).ravel())
        default_steps.append(np.rint(np.abs(got - onnxruntime_run(model, [x])[0]) / lsb).ravel())
    s, d = np.concatenate(steps), np.concatenate(default_steps)
    summary = (f"vs int8 onnxruntime: {np.mean(s == 0):.1%} exact, {np.mean(s <= 1):.1%} within "
               f"1 LSB, max {s.max():.0f}; vs default: {np.mean(d == 0):.1%} exact, "
               f"{np.mean(d <= 1):.1%} within 1 LSB, max {d.max():.0f}")
    print(summary)
    assert np.mean(s <= 1) >= 0.999, summary
    assert np.mean(s == 0) >= 0.9, summary  # mostly bit-exact, not merely close


def test_fold_refuses_an_accumulator_that_could_wrap():
    """A bias so large that bias + sum(x * w) could leave int32 (the float graph would not wrap):
    the chain is left in float."""
    from m100.passes.graph.fold_quantized_contractions import FoldQuantizedContractions

    src = LIT.read_text().replace("dense<[10, -20]> : tensor<2xi32>",
                                  "dense<[2147483000, -20]> : tensor<2xi32>")
    module = load_mlir(src)
    FoldQuantizedContractions().apply(make_context(), module)
    conv = next(o for o in module.walk() if o.name == "linalg.conv_2d_nchw_fchw")
    assert str(conv.results[0].type).endswith("xf32>")
    mm = [o for o in module.walk() if o.name == "linalg.matmul"]
    assert any(str(o.operands[0].type).endswith("xi8>") for o in mm)  # the others still fold


@pytest.mark.slow
@pytest.mark.parametrize("make, n_int8", [
    # uint8 activations: their Q/DQ pairs become int8 with zero points - 128 at import
    # (onnx_rewrite_qint8.u8_qdq_to_s8), then fold like S8S8; uint8 weights with zero points are
    # not folded (a float contraction) -- all bit-exact
    (lambda: qm.qdq_convnet(activation="u8"), 2),                         # U8S8 per-channel
    (lambda: qm.qdq_mlp(activation="u8"), 3),
    (lambda: qm.qdq_mlp(activation="u8", weight="u8"), 0),                # U8U8
    (lambda: qm.qdq_mlp(fmt="qoperator", activation="u8"), 3),            # QLinearMatMul/Add, QGemm
    (lambda: qm.qdq_mlp(fmt="qoperator"), 3),
], ids=["conv_u8s8", "mlp_u8s8", "mlp_u8u8", "qop_mlp_u8", "qop_mlp_s8"])
def test_more_quantize_static_configurations_bit_exact(make, n_int8):
    model = make()
    module = load_onnx(model)
    shape = module.body.block.first_op.body.block.args[0].type.get_shape()
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal(shape).astype(np.float32) for _ in range(3)]
    M100Graph().apply(make_context(), module)
    cs = _contractions(module)
    assert sum(str(c.operands[0].type).endswith("xi8>") for c in cs) == n_int8
    for x in xs:
        assert np.array_equal(reference.run(module, [x])[0], onnxruntime_run(model, [x])[0])


def test_transposes_sink_through_quant_casts_and_cancel(convnet):
    # qcast/dcast/scast between convolutions used to pin a transpose pair around every conv
    # (6 in this conv net, 21+ in the QDQ ResNet-18): only the input and output ones remain
    model, module = convnet
    module = module.clone()
    M100Graph().apply(make_context(), module)
    assert sum(op.name == "linalg.transpose" for op in module.walk()) == 2
    x = np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_array_equal(reference.run(module, [x])[0], onnxruntime_run(model, [x])[0])
