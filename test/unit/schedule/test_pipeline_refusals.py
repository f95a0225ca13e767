"""Pipelines whose planned HBSM footprint fits but whose program did not pack (session 25, ptest;
docs/fuzz.md "the refusals"): the heads family's refusals (the slow tier's 5, the campaign's 1) are
two-stage pipelines on ``tiny``, and a program that fits exists -- the data-parallel strategy's.

* (a) a MatMul fed by an elementwise stage in its segment with K chunked: the tile plan counted
  its activation as two K chunks (2 x 8 rows x 128 x 4 B), the emitter copies the band's rows
  whole from the producer pieces (8 x 1024 x 4 B = 32 KB, ``kinds/tcu``: a streamed input
  arrives with all of K): TPB 0 peaked at 72 KB of 64 KB, planned 57 KB. Fixed: such a stage's
  activation slots are row tiles of all of K (``timeline.STREAMED_ACT_WHOLE``); the seven
  models' programs are the same bytes.
* (b) an elementwise producer (16-row pieces) whose consumer reads it in 8-row pieces: the wave
  order emits band ``b`` of both stages in wave ``b``, so the producer runs ahead and its third
  output is written while the consumer has not yet copied the first (its slot wait,
  ``out_wait``, sees only the readers emitted so far): 5 buffers of 16 KB live, 4 planned.
  Not fixed (the wave order would have to follow the stages' band rates): a strict xfail, so a
  fix shows up as XPASS (then drop the mark).

Oracle: onnxruntime (race checks on), for the data-parallel program and the default ("auto") one.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from m100.passes.backend.hbsm_pack import HbsmOverflow


def _model(nodes, inputs, out_shape, inits=()):
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _graph(kind: str):
    rng = np.random.default_rng(5)
    if kind == "a":  # Sigmoid -> MatMul [16, 1024] @ [1024, 16]
        m = _model([helper.make_node("Sigmoid", ["x"], ["g"]),
                    helper.make_node("MatMul", ["g", "w"], ["y"])],
                   [("x", [16, 1024]), ("w", [1024, 16])], [16, 16])
    else:  # Tanh -> Add (a [256] constant) -> MatMul [128, 256] @ [256, 128]
        c = numpy_helper.from_array(rng.standard_normal(256).astype(np.float32), "c")
        m = _model([helper.make_node("Tanh", ["x"], ["t"]), helper.make_node("Add", ["t", "c"], ["u"]),
                    helper.make_node("MatMul", ["u", "w"], ["y"])],
                   [("x", [128, 256]), ("w", [256, 128])], [128, 128], [c])
    feeds = [rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
             .astype(np.float32) for i in m.graph.input]
    return m, feeds


def _compile_check(kind: str, strategy: str) -> None:
    from m100.frontend.mlir_load import shared_context
    from m100.tools import driver
    from m100.tools.fuzz_onnx import compare_outputs, oracle_run
    m, feeds = _graph(kind)
    want = oracle_run(m, feeds)
    module, _ = driver.load_model(m, shared_context())
    cr = driver.compile(module, machine="tiny", strategy=strategy)
    syms = [s.name for s in cr.program.symbols if s.role == "input"]
    res = driver.run(cr.program, dict(zip(syms, feeds, strict=True)))
    assert res.ok and not res.reports, res.reports[:3]
    bad, worst = compare_outputs(list(res.outputs.values()), want)
    assert not bad, bad


@pytest.mark.parametrize("kind", ["a", "b"])
def test_a_fitting_program_exists(kind):
    _compile_check(kind, "data-parallel")


@pytest.mark.parametrize("kind", [
    "a", pytest.param("b", marks=pytest.mark.xfail(
        strict=True, raises=HbsmOverflow,
        reason="hbsm-allocate: the producer runs ahead of its slower consumer (docstring, b)"))])
def test_auto_packs(kind):
    _compile_check(kind, "auto")


def test_streamed_activation_counted_whole(monkeypatch):
    """(a) with the activation counted per K chunk (the switch off): the refusal comes back."""
    from m100.passes.schedule import timeline
    monkeypatch.setattr(timeline, "STREAMED_ACT_WHOLE", False)
    with pytest.raises(HbsmOverflow, match="does not fit"):
        _compile_check("a", "auto")
