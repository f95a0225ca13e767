"""LLaMA's W8A8 MLP in the TCU epilogues (``from_ir/tcu_post``, ``isa.MatMul.post``): gate's
matmul writes ``silu(gate)``, up's reads it (``post_in``) and writes the int8 quantize of
``silu(gate) * up``; no CVU op and no f16 gate / up result in memory.

How many stages the TCU runs is the machine's ``tcu_post_stages`` (0: none). Oracle: the same
compiled layer on a machine without post stages (the CVU forms), which
``test_silu_mul_quant.py`` checks bit for bit against numpy written from the ONNX definition;
the epilogue's semantics alone against numpy from the definition: ``test/unit/sim/test_tcu_post.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from m100.targets.m100.isa import CvuOp, CvuPipeline, DType, MatMul
from m100.targets.m100.machine import get_machine


def _layer(batch: int):
    from e2e_helpers import tiny_w8a8_prefill_layer
    return tiny_w8a8_prefill_layer(batch)


M100 = get_machine("m100")


@pytest.mark.parametrize("batch", [1, 2])
def test_tiny_w8a8_prefill_layer_mlp_in_the_tcu_epilogues(batch):
    from m100.tools import driver
    cfg, model, feed = _layer(batch)
    got, progs = {}, {}
    for on in (True, False):
        m = M100 if on else M100.replace(tcu_post_stages=0)
        prog = progs[on] = driver.compile(model, machine=m).program
        res = driver.run(prog, feed)
        assert res.ok and not res.reports
        got[on] = res.outputs
    for k in ("y", "kT", "v"):  # the same bits
        np.testing.assert_array_equal(got[True][k], got[False][k])
    assert not [i for _, i in progs[False].instructions() if isinstance(i, MatMul) and i.post]
    ins = [i for _, i in progs[True].instructions()]
    posts = [i for i in ins if isinstance(i, MatMul) and i.post]
    gate = [i for i in posts if i.post_in is None]
    # the residual adds ``h = x + wo`` and ``y = h + down`` (``tcu_post.RESIDUAL``): x / h is
    # the operand
    res = [i for i in posts if [s.op for s in i.post] == [CvuOp.MUL, CvuOp.ADD]]
    up = [i for i in posts if i.post_in is not None and i not in res]
    assert gate and up and res and len(gate) + len(up) + len(res) == len(posts)
    assert all(i.c.dtype is DType.F16 and i.post_in.dtype is DType.F16 and
               i.post[0].iparams == (DType.F16.value,) for i in res)
    # every wo and down piece's columns: its rows x cols of x / h, all of h and y
    assert sum(i.m * i.n for i in res) == 2 * batch * 8 * cfg.hidden
    # no CVU op adds a residual any more
    adds = [i for i in ins if isinstance(i, CvuPipeline) and
            [s.op for s in i.stages] == [CvuOp.ADD]]
    adds_cvu = [i for _, i in progs[False].instructions() if isinstance(i, CvuPipeline) and
                [s.op for s in i.stages] == [CvuOp.ADD]]
    assert len(adds) < len(adds_cvu)
    assert all([s.op for s in i.post] == [CvuOp.MUL, CvuOp.SIGMOID, CvuOp.MUL] and
               i.c.dtype is DType.F16 and i.post[0].iparams == (DType.F16.value,)
               for i in gate)
    assert all([s.op for s in i.post] == [CvuOp.MUL, CvuOp.MUL, CvuOp.DIV, CvuOp.ROUND,
                                          CvuOp.MAX, CvuOp.MIN, CvuOp.FTOI] and
               i.c.dtype is DType.I8 and i.post_in.dtype is DType.F16 for i in up)
    # every up piece's columns: its rows x cols of silu(gate)
    assert sum(i.m * i.n for i in up) == batch * 8 * cfg.ffn
    assert not [i for i in ins if isinstance(i, CvuPipeline) and
                any(s.op is CvuOp.SIGMOID for s in i.stages)]


@pytest.mark.parametrize("stages", [2, 3])
def test_fewer_post_stages_keep_what_does_not_fit_a_cvu_op(stages):
    """A TCU with fewer post stages (``Machine.tcu_post_stages``): 3 take gate's silu and up's
    product, the quantize (5 more) stays a CVU op; 2 take no silu (3 stages). The same bits as
    the CVU forms (a machine without post stages), and no matmul over the machine's count."""
    from m100.tools import driver
    cfg, model, feed = _layer(1)
    got, progs = {}, {}
    for n in (stages, 0):
        prog = progs[n] = driver.compile(model, machine=M100.replace(tcu_post_stages=n)).program
        res = driver.run(prog, feed)
        assert res.ok and not res.reports
        got[n] = res.outputs
    for k in ("y", "kT", "v"):
        np.testing.assert_array_equal(got[stages][k], got[0][k])
    posts = [i for _, i in progs[stages].instructions() if isinstance(i, MatMul) and i.post]
    assert all(len(i.post) <= stages and i.c.dtype is DType.F16 for i in posts)
    if stages == 3:
        assert {len(i.post) for i in posts} == {2, 3}  # gate's silu, up's product


def test_gate_read_twice_keeps_the_cvu_op():
    """A silu whose gate result is read by something else too is not taken (the matmul's
    result would not be the gate any more): ``_silu_post`` wants exactly the silu's two ops;
    the layer then runs its CVU ops as before."""
    from m100.context import make_context
    from m100.frontend import llm, load_onnx
    from m100.passes.graph.m100_graph import M100Graph
    from m100.passes.schedule.from_ir import from_module
    import onnx
    cfg = llm.config("tiny")
    model, _ = llm.build(cfg, "layer", "prefill", context=8, seed=4, quant="w8a8")
    # the gate projection's f16 result: the Cast feeding the Sigmoid; make it an output too
    sig = next(n for n in model.graph.node if n.op_type == "Sigmoid")
    t = onnx.helper.make_tensor_value_info(sig.input[0], onnx.TensorProto.FLOAT16, [8, cfg.ffn])
    model.graph.output.append(t)

    def stages(on):
        ctx = make_context()
        mod = load_onnx(model, ctx)
        M100Graph().apply(ctx, mod)
        irg = from_module(mod, 8, 64, 8 if on else 0)
        return [[s.op for s in irg.lowering[o.name].post] for o in irg.graph.ops
                if o.unit == "tcu.matmul" and irg.lowering[o.name].post]
    # nothing is taken: not the silu, and not up's product either (its silu operand is then a
    # CVU op after up in the graph, not a tensor produced before it)
    # (the residual adds are taken: tcu_post.RESIDUAL)
    assert [s for s in stages(True) if s != [CvuOp.MUL, CvuOp.ADD]] == [] and stages(False) == []
