"""Quantized ONNX models through the whole stack (issue 11): import, ``m100-graph`` (quantized
contractions folded to i8 x i8 -> i32 with a requantize epilogue), the scheduler/emitter (i8
buffers, i32 bias, per-channel requant tables, QuantizeLinear/DequantizeLinear on the CVU), the
interpreter. Oracle: onnxruntime (its integer kernels) on the same inputs; quantized outputs are
compared in LSB by ``m100 check``."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from m100.frontend import quant_models as qm
from m100.targets.m100.isa import Conv2D, DType, MatMul
from m100.targets.m100.machine import get_machine
from m100.tools import driver
from m100.tools.onnx_backend import onnxruntime_run

MODELS = {
    "qdq-convnet": lambda: qm.qdq_convnet(),
    "qdq-mlp": lambda: qm.qdq_mlp(),
    "qlinear-convnet": lambda: qm.qdq_convnet(fmt="qoperator"),  # QLinearConv
    "qlinear-mlp": lambda: qm.qdq_mlp(fmt="qoperator"),  # QLinearMatMul, QLinearAdd, QGemm
    # uint8 activations (quantize_static's default U8S8): Q/DQ retyped to int8 at import
    "qdq-convnet-u8s8": lambda: qm.qdq_convnet(activation="u8"),
    "qlinear-mlp-u8s8": lambda: qm.qdq_mlp(fmt="qoperator", activation="u8"),
}


def _tcu_instructions(program):
    return [i for s in program.streams.values() for i in s if isinstance(i, (MatMul, Conv2D))]


@pytest.mark.parametrize("name", list(MODELS))
def test_quantized_model_runs_int8_and_matches_onnxruntime(tmp_path, name):
    path = tmp_path / f"{name}.onnx"
    onnx.save(MODELS[name](), path)
    ck = driver.check(path, machine="tiny", seed=1)
    assert ck.passed and ck.problems == [], ck.summary()
    (err,) = ck.errors
    assert err.lsb is not None and err.lsb > 0  # the output is a DequantizeLinear: compared in LSB
    assert err.exact_pct == 100.0, ck.summary()
    # every contraction runs on the TCU as i8 x i8 with the requantize epilogue (no float path)
    tcu = _tcu_instructions(ck.compile.program)
    assert tcu
    for ins in tcu:
        a, b, c = (ins.a, ins.b, ins.c) if isinstance(ins, MatMul) else (ins.x, ins.w, ins.y)
        assert (a.dtype, b.dtype, c.dtype) == (DType.I8, DType.I8, DType.I8), ins
        assert ins.epilogue.requant is not None and ins.epilogue.bias is not None


def test_per_channel_requant_table_is_split_across_column_tiles(tmp_path):
    # 4 TPBs on m100: the MLP's output columns are split, each part reads its slice of the
    # (multiplier, shift) table; a wrong slice changes the numbers
    path = tmp_path / "m.onnx"
    onnx.save(qm.qdq_mlp(seed=3), path)
    ck = driver.check(path, machine="m100", tpbs=4, seed=4)
    assert ck.passed and ck.errors[0].exact_pct == 100.0, ck.summary()
    assert any(i.epilogue.requant.per_channel is not None
               for i in _tcu_instructions(ck.compile.program))


def _qdq_model(scale: float, zp: int, n: int):
    """y = DequantizeLinear(QuantizeLinear(x, scale, zp)) on an int8 zero point."""
    inits = [numpy_helper.from_array(np.array(scale, np.float32), "s"),
             numpy_helper.from_array(np.array(zp, np.int8), "z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _quantize_linear(x, s, zp):
    """ONNX QuantizeLinear (round half to even, saturate to int8), computed in f32 like the spec."""
    v = np.rint((x.astype(np.float32) / np.float32(s)).astype(np.float32))
    return np.clip(v + zp, -128, 127)


@pytest.mark.parametrize("scale,zp", [(0.5, 15), (0.1, -7), (0.0213, 0)])
def test_quantize_linear_rounds_half_to_even_like_onnx(tmp_path, scale, zp):
    s = np.float32(scale)
    ties = (np.arange(-40, 40, dtype=np.float32) + np.float32(0.5)) * s  # exact ties when s = 0.5
    below = np.nextafter(np.float32(0.5), np.float32(0)) * s  # 0.49999997 * s: not a tie
    rng = np.random.default_rng(7)
    x = np.concatenate([ties, [below, -below, 1e30, -1e30, 200 * s, -200 * s, 0.0],
                        rng.standard_normal(45).astype(np.float32) * 3]).astype(np.float32)
    path = tmp_path / "qdq.onnx"
    model = _qdq_model(scale, zp, x.size)
    onnx.save(model, path)
    ck = driver.check(path, machine="tiny", inputs={"x": x[None, :]})
    want = (_quantize_linear(x, s, zp) - zp) * s
    got = np.asarray(ck.result.outputs["y"]).reshape(-1)
    np.testing.assert_array_equal(got, want.astype(np.float32))
    np.testing.assert_array_equal(got, onnxruntime_run(model, [x[None, :]])[0].reshape(-1))
    assert ck.passed and ck.errors[0].exact_pct == 100.0


def test_compare_in_lsb_counts_elements_within_one_step():
    want = np.arange(2000, dtype=np.float32) * 0.25
    got = want.copy()
    got[:2] += 0.25  # two elements 1 LSB off: still within 1 LSB everywhere
    e = driver.compare("y", got, want, 1e-3, 1e-4, lsb=0.25)
    assert e.ok and e.exact_pct == pytest.approx(99.9) and e.within1_pct == 100.0
    assert e.max_lsb == 1.0
    got[2:5] += 0.5  # three elements 2 LSB off: 99.85 % within 1 LSB < 99.9 %
    e = driver.compare("y", got, want, 1e-3, 1e-4, lsb=0.25)
    assert not e.ok and e.within1_pct == pytest.approx(99.85) and e.max_lsb == 2.0
    assert "within 1 LSB" in e.describe()


def test_lsb_of_an_output_is_the_dequantize_scale_or_one_for_int8():
    m = _qdq_model(0.125, 3, 4)
    assert driver.output_lsb(m, "y") == 0.125
    m.graph.output[0].type.tensor_type.elem_type = TensorProto.INT8
    assert driver.output_lsb(m, "y") == 1.0
    assert driver.output_lsb(None, "y") is None


def _qlinear_matmul(xs, ws, ys, b):
    """y = QLinearMatMul(a[1, k] int8, b int8 constant), all zero points 0."""
    f = np.float32
    inits = [numpy_helper.from_array(np.array(v, dt), n) for v, dt, n in
             ((xs, f, "xs"), (0, np.int8, "xz"), (b, np.int8, "b"), (ws, f, "ws"),
              (0, np.int8, "wz"), (ys, f, "ys"), (0, np.int8, "yz"))]
    node = helper.make_node("QLinearMatMul", ["a", "xs", "xz", "b", "ws", "wz", "ys", "yz"], ["y"])
    k, n = np.shape(b)
    g = helper.make_graph([node], "qlm", [helper.make_tensor_value_info("a", TensorProto.INT8, [1, k])],
                          [helper.make_tensor_value_info("y", TensorProto.INT8, [1, n])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_requant_multiplier_is_computed_in_f32_like_onnxruntime(tmp_path):
    # x_scale * w_scale / y_scale: in f32 (onnxruntime) 1 ulp away from the f64 quotient rounded
    # to f32; acc = -119 * 38 = -4522 then requantizes to -44 (f32 multiplier) vs -43 (f64)
    f = np.float32
    xs, ws, ys = f(0.029887596), f(0.016503189), f(0.05127435)
    assert f(f(xs * ws) / ys) != f(np.float64(xs) * np.float64(ws) / np.float64(ys))
    model = _qlinear_matmul(xs, ws, ys, [[38, 7]])
    a = np.array([[-119]], np.int8)
    want = onnxruntime_run(model, [a])[0]
    assert want[0, 0] == -44
    onnx.save(model, tmp_path / "m.onnx")
    ck = driver.check(tmp_path / "m.onnx", machine="tiny", inputs={"a": a})
    np.testing.assert_array_equal(ck.result.outputs["y"].reshape(want.shape), want)


def test_requant_rounds_the_f32_product_half_to_even_like_onnxruntime(tmp_path):
    """onnxruntime requantizes ``round_half_even(f32(f32(acc) * m))``: the f32 product can land on
    a tie that the exact product is not on: acc = -2903 gives the exact -87.49999805 but the f32
    product -87.5 -> -88. The M100's requant (``Machine.tcu_requant = "f32-rne"``, docs/isa.md
    section 5) computes the same f32 product: bit-exact. The ``fixed-half-up`` mode (a machine
    file may select it) rounds the exact product: -87, one LSB off, which the check reports."""
    f = np.float32
    xs, ws, ys = f(0.046575177), f(0.051239517), f(0.07917691)
    model = _qlinear_matmul(xs, ws, ys, [[23, 5], [9, -3]])
    a = np.array([[-127, 2]], np.int8)  # acc = -127 * 23 + 2 * 9 = -2903
    want = onnxruntime_run(model, [a])[0]
    m = f(f(xs * ws) / ys)
    assert f(f(-2903) * m) == -87.5 and np.rint(-2903 * np.float64(m)) == -87
    assert want[0, 0] == -88  # onnxruntime: the f32 product's tie, to even
    onnx.save(model, tmp_path / "m.onnx")
    ck = driver.check(tmp_path / "m.onnx", machine="tiny", inputs={"a": a})
    np.testing.assert_array_equal(ck.result.outputs["y"].reshape(want.shape), want)
    assert ck.errors[0].exact_pct == 100.0 and ck.passed
    fixed = get_machine("tiny").replace(tcu_requant="fixed-half-up")
    ck = driver.check(tmp_path / "m.onnx", machine=fixed, inputs={"a": a})
    got = ck.result.outputs["y"].reshape(want.shape)
    assert got[0, 0] == -87 and got[0, 1] == want[0, 1]
    e = ck.errors[0]  # the check reports it: half the elements exact, all within 1 LSB
    assert (e.exact_pct, e.within1_pct, e.max_lsb) == (50.0, 100.0, 1.0) and ck.passed


# --- f16 and W4A16 ----------------------------------------------------------------------------
def _f16_mlp_oracle(model, x):
    """The f16 MLP from the ONNX definitions, each op rounding its result to f16 once (MatMul and
    Gemm accumulate in f32; Gemm's bias add after the product's rounding, as torch-mlir splits it)."""
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    f16, f32 = np.float16, np.float32

    def mm(a, b):
        return (a.astype(f32) @ b.astype(f32)).astype(f16)

    def add(a, b):
        return (a.astype(f32) + b.astype(f32)).astype(f16)

    h = np.maximum(add(mm(x, init["W1"]), init["B1"]), 0)
    h = np.maximum(add(mm(h, init["W2"]), init["B2"]), 0)
    return add(mm(h, init["W3"].T), init["B3"])


def test_f16_mlp_accumulates_in_f32_and_rounds_on_store(tmp_path):
    model = qm.f16_mlp()
    onnx.save(model, tmp_path / "m.onnx")
    cr = driver.compile(tmp_path / "m.onnx", machine="tiny")
    tcu = _tcu_instructions(cr.program)
    assert tcu and all((i.a.dtype, i.b.dtype, i.c.dtype) == (DType.F16,) * 3 for i in tcu)
    rng = np.random.default_rng(2)
    for _ in range(3):
        x = rng.standard_normal((4, 16)).astype(np.float16)
        got = driver.run(cr.program, {"x": x}, machine=cr.machine).outputs["y"]
        np.testing.assert_array_equal(got.reshape(4, 10), _f16_mlp_oracle(model, x))
    # onnxruntime computes f16 graphs in f32 (InsertCastTransformer): within the f16 tolerance
    ck = driver.check_compiled(cr, seed=3)
    assert ck.passed, ck.summary()


def test_identity_is_not_classified_as_a_clamp():
    # an f32 -> f16 truncf is the identity on the sample points; it was fused as clamp [-100, 100]
    from m100.passes.graph.common import classify_unary

    assert classify_unary(lambda xs: xs) is None
    assert classify_unary(lambda xs: np.clip(xs, -1.0, 6.0)) == ("clamp", (-1.0, 6.0))


def test_w4a16_blocked_int4_matmul_matches_the_onnx_definition(tmp_path):
    """DequantizeLinear(int4, f16 scales, axis=0, block_size=16) -> MatMul with f16 activations.
    Oracle: onnxruntime with graph optimizations off (its default rewrites the pair into
    MatMulNBits, which quantizes the activations to int8: ~1 % off the ONNX definition)."""
    from m100.frontend.ort_session import ort_session

    model = qm.w4_blocked_matmul()
    onnx.save(model, tmp_path / "m.onnx")
    cr = driver.compile(tmp_path / "m.onnx", machine="tiny")
    sess = ort_session(tmp_path / "m.onnx", optimize=False)
    x = np.random.default_rng(4).standard_normal((4, 64)).astype(np.float16)
    want = sess.run(None, {"x": x})[0]
    got = driver.run(cr.program, {"x": x}, machine=cr.machine).outputs["y"].reshape(want.shape)
    np.testing.assert_array_equal(got, want)
    # the weights stay int4 in DDR (packed, half the bytes of f16) with their f16 scales; the
    # TCU dequantizes them on the fly
    (mm,) = _tcu_instructions(cr.program)
    assert (mm.a.dtype, mm.b.dtype, mm.c.dtype) == (DType.F16, DType.I4, DType.F16)
    assert mm.scale is not None and mm.scale.dtype is DType.F16 and mm.block == 16
    assert sum(len(s.data) for s in cr.program.segments) == 64 * 16 // 2 + 4 * 16 * 2


# --- post-training quantization ------------------------------------------------------------------
def test_ptq_w8a8_mlp_runs_int8_and_stays_close_to_the_float_model(tmp_path):
    from m100.frontend import models, ptq

    fm = models.mlp(batch=4, d_in=16, hidden=32, d_out=10, seed=5)
    rng = np.random.default_rng(6)
    cal = rng.standard_normal((16, 4, 16)).astype(np.float32)
    np.savez(tmp_path / "cal.npz", x=cal)
    q = ptq.quantize_model(fm, "w8a8", ptq.load_calibration(tmp_path / "cal.npz", fm))
    onnx.save(q, tmp_path / "q.onnx")
    ck = driver.check(tmp_path / "q.onnx", machine="tiny", seed=7)
    assert ck.passed and ck.errors[0].exact_pct == 100.0, ck.summary()
    assert all(i.a.dtype is DType.I8 for i in _tcu_instructions(ck.compile.program))
    x = rng.standard_normal((4, 16)).astype(np.float32)
    yq = driver.run(ck.compile.program, {"x": x}, machine=ck.compile.machine).outputs["y"]
    yf = onnxruntime_run(fm, [x])[0]
    assert np.linalg.norm(yq.reshape(yf.shape) - yf) / np.linalg.norm(yf) < 0.05
    errs = dict(ptq.layer_errors(fm, q, [{"x": c} for c in cal[:4]]))
    assert "y" in errs and 0 < errs["y"] < 0.05 and len(errs) >= 4


def test_cli_compile_quantize_w8a8(tmp_path, capsys):
    from m100.frontend import models
    from m100.tools.m100_cli import main as m100

    onnx.save(models.mlp(), tmp_path / "f.onnx")
    np.savez(tmp_path / "cal.npz", x=np.random.default_rng(8).standard_normal((8, 4, 16))
             .astype(np.float32))
    assert m100(["compile", str(tmp_path / "f.onnx"), "--quantize", "w8a8", "--calibration",
                 str(tmp_path / "cal.npz"), "-o", str(tmp_path / "p.m100"), "--machine",
                 "tiny"]) == 0
    out = capsys.readouterr().out
    assert "per-layer relative error" in out and (tmp_path / "p.m100").exists()


@pytest.mark.parametrize("args,msg", [
    (["--quantize", "w8a8"], "needs calibration inputs"),
    (["--quantize", "bf16"], "not supported yet"),
    (["--calibration", "cal.npz"], "--calibration needs --quantize"),
    (["--quantize", "w8a8", "--calibration", "bad.npz"], "no array for model input 'x'"),
])
def test_cli_quantize_errors_are_one_line(tmp_path, capsys, args, msg):
    from m100.frontend import models
    from m100.tools.m100_cli import main as m100

    onnx.save(models.mlp(), tmp_path / "f.onnx")
    np.savez(tmp_path / "bad.npz", y=np.zeros((4, 16), np.float32))
    args = [str(tmp_path / a) if a.endswith(".npz") else a for a in args]
    rc = m100(["compile", str(tmp_path / "f.onnx"), "-o", str(tmp_path / "p.m100")] + args)
    err = capsys.readouterr().err
    assert rc == 1 and msg in err and err.count("\n") == 1, err


def test_ptq_f16_convnet_runs_f16_convolutions(tmp_path):
    # the f16 conv net has f16 -> f32 extf (pooling) generics: the CVU reads f32 anyway
    from m100.frontend import models, ptq

    q = ptq.quantize_model(models.conv_relu_maxpool(), "f16")
    onnx.save(q, tmp_path / "q.onnx")
    ck = driver.check(tmp_path / "q.onnx", machine="tiny", seed=9)
    assert ck.passed, ck.summary()
    convs = [i for i in _tcu_instructions(ck.compile.program) if isinstance(i, Conv2D)]
    assert convs and all(i.x.dtype is DType.F16 and i.w.dtype is DType.F16 for i in convs)


@pytest.mark.slow
def test_qdq_resnet18_matches_the_integer_kernel_oracle():
    """Acceptance of issue 11, QDQ ResNet-18 (quantize_static per-channel S8S8, 64x64): all 21
    contractions int8 on the TCU, output within 1 LSB on >= 99.9 % of the elements of the numpy
    oracle of onnxruntime's integer kernels (``qdq_oracle``: every Conv/Gemm as QLinearConv/QGemm
    compute it, every residual Add as QLinearAdd, the pool as QLinearGlobalAveragePool), and
    bit-exact with it: the TCU requantizes as they do (the f32 product rounded half to even,
    ``Machine.tcu_requant = "f32-rne"``, docs/isa.md section 5), lower-quantized-add computes
    QLinearAdd's f32 expression, lower-quantized-avgpool the pool's. onnxruntime itself
    runs 11 of the 20 convolutions in f32 (docs/graph.md), which moves some outputs by up to 3
    LSB; that figure is reported (bench/quant.py --only qdq), not asserted."""
    from qdq_oracle import qdq_oracle

    model = qm.qdq_resnet18(hw=64)
    cr = driver.compile(model, machine="m100")
    convs = [i for i in _tcu_instructions(cr.program)]
    assert len(convs) >= 21 and all(i.epilogue.requant is not None for i in convs)
    lsb = driver.output_lsb(model, "y")
    rng = np.random.default_rng(123)
    steps, ort_steps, int8_steps, oracle_is_ort = [], [], [], 0
    from m100.frontend.ort_session import ort_session

    sess_int8 = ort_session(model, {"session.qdqisint8allowed": "1"})
    for _ in range(4):
        x = rng.standard_normal((1, 3, 64, 64)).astype(np.float32)
        want = qdq_oracle(model, x)[0]
        ort = onnxruntime_run(model, [x])[0]
        ort_int8 = sess_int8.run(None, {"x": x})[0]  # every conv as S8S8 QLinearConv
        oracle_is_ort += int(np.array_equal(want, ort))
        got = driver.run(cr.program, {"x": x}, machine=cr.machine).outputs["y"].reshape(want.shape)
        np.testing.assert_array_equal(got, want)
        steps.append(np.rint(np.abs(got - want) / lsb).ravel())
        ort_steps.append(np.rint(np.abs(got - ort) / lsb).ravel())
        int8_steps.append(np.rint(np.abs(got - ort_int8.reshape(got.shape)) / lsb).ravel())
    s, o = np.concatenate(steps), np.concatenate(ort_steps)
    assert oracle_is_ort >= 1  # the oracle is onnxruntime's arithmetic (where no f32 conv tips)
    assert np.mean(s <= 1) >= 0.999, (np.mean(s <= 1), np.mean(o <= 1), o.max())
    # onnxruntime itself, told to run S8S8 integer kernels for every conv (docs/graph.md: by
    # default its s8 -> u8 rewrite skips the 11 convs after a fan-out and runs them in f32):
    # the acceptance figure, >= 99.9 % *exact* (bench/quant.py --only qdq: 100 % on 100 inputs)
    assert np.mean(np.concatenate(int8_steps) == 0) >= 0.999


def test_ptq_f16_llama_layer_batch_matmuls_store_f16(tmp_path):
    # the attention batch matmuls of the f16 LLaMA layer accumulate in f32 and store f16 (the
    # batch_matmul lowering refused the fused store stage before)
    from pathlib import Path

    from m100.frontend import ptq

    src = Path(__file__).parents[1] / "data" / "llama_layer_small.onnx"
    onnx.save(ptq.quantize_model(onnx.load(src), "f16"), tmp_path / "q.onnx")
    ck = driver.check(tmp_path / "q.onnx", machine="tiny", seed=3)
    assert ck.passed, ck.summary()
    assert all(i.c.dtype is DType.F16 for i in _tcu_instructions(ck.compile.program))
