"""Pieces of rank >= 5 tensors (issue 9, found by the SoftmaxCrossEntropyLoss node tests): a
piece's rows must stay inside one index of every dim before the last three, the emitter maps them
as rows of dim -3 (``emit_core.row_index``). ``plan.image_rows`` allowed rows // shape[0], so a
piece of a [3, 5, 6, 6, 5] tensor crossed dim 1 and its DMA walk left the buffer (the pipeline's
verifier refused the program). Oracle: onnxruntime through ``m100 check``."""

import pytest
from onnx import TensorProto, helper

from m100.passes.schedule.plan import image_rows


@pytest.mark.parametrize("mode", ["dataflow", "barrier-all"])
@pytest.mark.parametrize("axis", [1])
def test_logsoftmax_of_a_5d_tensor_matches_onnxruntime(axis, mode):
    from m100.tools import driver
    shape = [3, 5, 6, 6, 5]
    g = helper.make_graph([helper.make_node("LogSoftmax", ["x"], ["y"], axis=axis)], "lsm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    ck = driver.check(m, machine="m100", tpbs=4, sync_mode=mode)
    assert ck.result.reports == [] and ck.problems == [], ck.problems[:3]
    assert ck.passed, ck.summary()


def test_image_rows_of_rank_4_and_5():
    from m100.passes.schedule.examples import GraphBuilder
    b = GraphBuilder()
    x = b.input((3, 5, 6, 6, 5))
    g = b.output(b.eltwise(x))
    assert image_rows(g, g.ops[0]) == 6  # rows of dim -3, not 5 * 6
    b = GraphBuilder()
    x = b.input((2, 7, 9, 4))
    g = b.output(b.eltwise(x))
    assert image_rows(g, g.ops[0]) == 7
