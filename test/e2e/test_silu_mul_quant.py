"""LLaMA's MLP ``silu(gate) * up`` runs as ONE CVU op (``from_ir/silu.silu_tail``): stages
``SIGMOID`` (the 16-bit body), ``MUL`` (x * s, rounded to the 16-bit type where the graph rounds
it: ``iparams``, docs/isa.md), ``MUL`` (* up), reading gate and up; the W8A8 quantize after it is
its own op, or with ``silu.TAIL_QUANTIZE`` (A/B, off by default) the same op's next stages
(8 stages, int8 out). Before: the product was an op of its own.

Oracle: numpy from the ONNX definition, op by op in the model's type (``exp(-x)``, ``1 + e``,
``1 / d``, ``g * s`` and ``. * up`` each rounded to f16 for an f16 model), then ``QuantizeLinear``
(``round_half_even(x / scale)`` saturated to int8): the interpreter's result must be identical.
The inputs are chosen so that computing the products in f32 and rounding once gives other int8
values (the test fails without the roundings).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper

from m100.targets.m100.isa import CvuOp, DType
from m100.tools.onnx_backend import M100Backend

SHAPE = (16, 64)
SCALE = 1.0 / 32


def _model(dt, extra_out: bool = False):
    et = TP.FLOAT16 if dt == np.float16 else TP.FLOAT
    nodes = [h.make_node("Sigmoid", ["g"], ["s"]), h.make_node("Mul", ["g", "s"], ["a"]),
             h.make_node("Mul", ["a", "u"], ["m"]),
             h.make_node("QuantizeLinear", ["m", "sc", "zp"], ["y"])]
    outs = [h.make_tensor_value_info("y", TP.INT8, list(SHAPE))]
    if extra_out:  # the product is read twice: it stays its own op
        outs.append(h.make_tensor_value_info("m", et, list(SHAPE)))
    g = h.make_graph(nodes, "smq", [h.make_tensor_value_info("g", et, list(SHAPE)),
                                    h.make_tensor_value_info("u", et, list(SHAPE))], outs,
                     [numpy_helper.from_array(np.asarray(SCALE, dt), "sc"),
                      numpy_helper.from_array(np.asarray(0, np.int8), "zp")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 21)])
    m.ir_version = 10
    return m


def _inputs(dt):
    rng = np.random.default_rng(7)
    g = (rng.standard_normal(SHAPE) * 3).astype(dt)
    u = (rng.standard_normal(SHAPE) * 3).astype(dt)
    g.flat[:8] = [0.0, -0.0, 30.0, -30.0, 11.0, -11.0, 8.0, -8.0]
    u.flat[:8] = [1.0, 1.0, 60.0, 2.0, -60.0, 3.0, 0.5, 0.25]  # saturations both ways
    return g, u


def _definition(g, u):
    """silu(g) * u op by op in g's type, then QuantizeLinear (ties to even, saturated)."""
    one = g.dtype.type(1)
    with np.errstate(all="ignore"):
        m = g * (one / (np.exp(-g) + one)) * u
        q = np.rint(m.astype(np.float32) / np.float32(SCALE))
    return np.clip(q, -128, 127).astype(np.int8)


@pytest.fixture(params=[False, True], ids=["product", "quantize-too"])
def tail_q(request, monkeypatch):
    from m100.passes.schedule.from_ir import silu
    monkeypatch.setattr(silu, "TAIL_QUANTIZE", request.param)
    return request.param


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_silu_mul_quant_bit_exact(dtype, tail_q):
    dt = np.dtype(dtype)
    g, u = _inputs(dt)
    got = M100Backend.prepare(_model(dt), machine="tiny").run([g, u])[0]
    want = _definition(g, u)
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, want)
    if dt == np.float16:  # the roundings matter on these inputs: f32 products rounded once differ
        with np.errstate(all="ignore"):
            g32, u32 = g.astype(np.float32), u.astype(np.float32)
            s = np.float32(1) / (np.exp(-g) + np.float16(1))  # the 16-bit sigmoid
            once = np.rint((g32 * s.astype(np.float32) * u32).astype(np.float16)
                           .astype(np.float32) * 32)
        assert (np.clip(once, -128, 127).astype(np.int8) != want).any()


def test_product_read_twice_stays_separate(tail_q):
    g, u = _inputs(np.float16)
    y, m = M100Backend.prepare(_model(np.float16, extra_out=True), machine="tiny").run([g, u])
    np.testing.assert_array_equal(y, _definition(g, u))
    one = np.float16(1)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(m, g * (one / (np.exp(-g) + one)) * u)


def _ops(model):
    from m100.context import make_context
    from m100.frontend import load_onnx
    from m100.passes.graph.m100_graph import M100Graph
    from m100.passes.schedule.from_ir import from_module

    ctx = make_context()
    mod = load_onnx(model, ctx)
    M100Graph().apply(ctx, mod)
    irg = from_module(mod, 8, 64)
    return irg, irg.graph.ops


def test_silu_mul_is_one_cvu_op_the_quantize_its_own():
    """The default: the product joins the silu op (its last MUL rounded by the f16 store), the
    quantize stays its own op."""
    irg, ops = _ops(_model(np.float16))
    st = [[(s.op, s.iparams) for s in irg.lowering[o.name].stages] for o in ops]
    r16 = (DType.F16.value,)
    assert st == [[(CvuOp.SIGMOID, r16), (CvuOp.MUL, r16), (CvuOp.MUL, ())],
                  [(CvuOp.DIV, r16), (CvuOp.ROUND, ()), (CvuOp.MAX, ()), (CvuOp.MIN, ()),
                   (CvuOp.FTOI, ())]]
    assert ops[0].inputs == tuple(irg.inputs)


def test_silu_mul_quant_is_one_cvu_op(monkeypatch):
    from m100.passes.schedule.from_ir import silu
    monkeypatch.setattr(silu, "TAIL_QUANTIZE", True)
    irg, ops = _ops(_model(np.float16))
    assert [o.unit for o in ops] == ["cvu.elementwise"]
    assert ops[0].inputs == tuple(irg.inputs)
    st = irg.lowering[ops[0].name].stages
    assert [s.op for s in st] == [CvuOp.SIGMOID, CvuOp.MUL, CvuOp.MUL, CvuOp.DIV, CvuOp.ROUND,
                                  CvuOp.MAX, CvuOp.MIN, CvuOp.FTOI]
    assert [s.iparams for s in st[:3]] == [(DType.F16.value,)] * 3
    assert irg.graph.tensors[ops[0].outputs[0]].dtype == "i8"


def test_f32_silu_mul_is_one_cvu_op():
    """f32: the quantize is a ``quant.qcast`` (its own op); the product joins, no roundings."""
    irg, ops = _ops(_model(np.float32))
    st = [[(s.op, s.iparams) for s in irg.lowering[o.name].stages] for o in ops]
    assert st[0] == [(CvuOp.SIGMOID, ()), (CvuOp.MUL, ()), (CvuOp.MUL, ())]
    assert ops[0].inputs == tuple(irg.inputs) and len(ops) == 2


def test_silu_mul_quant_over_the_stage_limit_is_two_ops(monkeypatch):
    """A CVU op of at most 7 stages: the quantize stays its own op (the product still joins)."""
    from m100.context import make_context
    from m100.frontend import load_onnx
    from m100.passes.graph.m100_graph import M100Graph
    from m100.passes.schedule.from_ir import from_module, silu
    monkeypatch.setattr(silu, "TAIL_QUANTIZE", True)

    ctx = make_context()
    mod = load_onnx(_model(np.float16), ctx)
    M100Graph().apply(ctx, mod)
    irg = from_module(mod, 7, 64)
    st = [[s.op for s in irg.lowering[o.name].stages] for o in irg.graph.ops]
    assert st == [[CvuOp.SIGMOID, CvuOp.MUL, CvuOp.MUL],
                  [CvuOp.DIV, CvuOp.ROUND, CvuOp.MAX, CvuOp.MIN, CvuOp.FTOI]]
    assert irg.lowering[irg.graph.ops[0].name].stages[2].iparams == ()  # the store rounds


@pytest.mark.parametrize("batch", [1, 2])
def test_tiny_w8a8_prefill_layer_same_bits_as_three_ops(batch, monkeypatch):
    """The compiled tiny W8A8 prefill layer (weights as constants) gives the same bits on y, kT
    and v with the MLP's ``quantize(silu(gate) * up)`` as one CVU op (8 stages, int8 out), with
    ``silu(gate) * up`` as one op (3 stages, f16 out; the default) and with the three ops before
    (``silu_tail`` off) -- the CVU forms, on a machine without TCU post stages (which compute
    them in the TCU epilogues: ``test_tcu_post.py``)."""
    from e2e_helpers import tiny_w8a8_prefill_layer

    from m100.passes.schedule.from_ir import silu
    from m100.targets.m100.isa import CvuPipeline
    from m100.targets.m100.machine import get_machine
    from m100.tools import driver
    machine = get_machine("m100").replace(tcu_post_stages=0)
    _, model, feed = tiny_w8a8_prefill_layer(batch)
    got, smq = {}, {}
    tail = silu.silu_tail
    for mode in ("quantize-too", "product", "off"):
        monkeypatch.setattr(silu, "TAIL_QUANTIZE", mode == "quantize-too")
        if mode == "off":
            monkeypatch.setattr(silu, "silu_tail", lambda ctx, root, where: ([], None, ()))
        prog = driver.compile(model, machine=machine).program
        smq[mode] = [i for _, i in prog.instructions() if isinstance(i, CvuPipeline)
                     and [s.op for s in i.stages][:3] == [CvuOp.SIGMOID, CvuOp.MUL, CvuOp.MUL]]
        res = driver.run(prog, feed)
        assert res.ok and not res.reports
        got[mode] = res.outputs
    assert silu.silu_tail is not tail and smq["product"] and not smq["off"]
    assert all(len(i.stages) == 8 and len(i.inputs) == 2 and i.output.dtype is DType.I8
               for i in smq["quantize-too"])
    assert all(len(i.stages) == 3 and len(i.inputs) == 2 and i.output.dtype is DType.F16
               for i in smq["product"])
    for mode in ("product", "off"):
        for k in ("y", "kT", "v"):
            np.testing.assert_array_equal(got[mode][k], got["quantize-too"][k])
