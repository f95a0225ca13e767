"""Function-body expansion before torch-mlir (``frontend/onnx_rewrite_functions.py``), nested bodies
included: SwiGLU's body calls Swish, whose input types are those of the body's values.

The rewritten graphs are evaluated with ONNX's reference evaluator and compared with numpy written
from the operator definitions (``Swish_alpha(a) = a * sigmoid(alpha * a)``, ``SwiGLU = Swish(A) * B``);
the whole stack (compile + interpreter) is in ``test/e2e/test_swiglu.py`` and the node tests.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

from m100.frontend.onnx_rewrite import _Names
from m100.frontend.onnx_rewrite_functions import _body_types, _expand_one, rewrite_functions


def _swiglu_model(elem=T.FLOAT, alpha=0.75, gate_of_matmul=False):
    nodes = [h.make_node("SwiGLU", ["g", "b"], ["y"], name="glu", alpha=alpha)]
    ins = [h.make_tensor_value_info("a", elem, [4, 6]), h.make_tensor_value_info("b", elem, [4, 6])]
    if gate_of_matmul:  # the gate is an internal value of the graph (typed by shape inference)
        nodes.insert(0, h.make_node("MatMul", ["a", "w"], ["g"]))
        ins.append(h.make_tensor_value_info("w", elem, [6, 6]))
    else:
        nodes.insert(0, h.make_node("Identity", ["a"], ["g"]))
    g = h.make_graph(nodes, "m", ins, [h.make_tensor_value_info("y", elem, [4, 6])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 28)])
    return onnx.shape_inference.infer_shapes(m, strict_mode=True)


def _expanded(model):
    graph = model.graph
    nodes, count = rewrite_functions(graph.node, graph, model.opset_import, _Names(graph))
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out, count


def _swish(a, alpha):
    return a / (1 + np.exp(-alpha * a))


@pytest.mark.parametrize("elem,dt,tol", [(T.FLOAT, np.float32, 1e-6), (T.FLOAT16, np.float16, 2e-3)])
@pytest.mark.parametrize("gate_of_matmul", [False, True])
def test_swiglu_expanded_twice_matches_the_definition(elem, dt, tol, gate_of_matmul):
    model = _swiglu_model(elem, alpha=0.75, gate_of_matmul=gate_of_matmul)
    out, count = _expanded(model)
    ops = [n.op_type for n in out.graph.node]
    assert count == 2, ops  # SwiGLU, then the Swish of its body
    assert "SwiGLU" not in ops and "Swish" not in ops, ops
    assert out.graph.node[-1].output[0] == "y"  # the node's output name is kept
    onnx.checker.check_model(out, full_check=True)
    rng = np.random.default_rng(0)
    feeds = {"a": rng.uniform(-4, 4, (4, 6)).astype(dt), "b": rng.uniform(-2, 2, (4, 6)).astype(dt)}
    if gate_of_matmul:
        feeds["w"] = rng.uniform(-0.5, 0.5, (6, 6)).astype(dt)
    (got,) = ReferenceEvaluator(out).run(None, feeds)
    a = feeds["a"].astype(np.float64)
    gate = a @ feeds["w"].astype(np.float64) if gate_of_matmul else a
    want = _swish(gate, 0.75) * feeds["b"].astype(np.float64)
    assert got.dtype == dt
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


def test_body_types_type_the_body_internal_values():
    """The types of the SwiGLU body's own values (SwishGate) come from inferring the body alone."""
    model = _swiglu_model(T.FLOAT16)
    node = model.graph.node[1]
    f16 = h.make_tensor_type_proto(T.FLOAT16, [4, 6])
    body = _expand_one(node, [f16, f16], model.opset_import, _Names(model.graph))
    internal = [o for n in body for o in n.output if o != "y"]
    assert internal, [n.op_type for n in body]
    types = _body_types(node, [f16, f16], body, model.opset_import)
    for name in internal + ["y"]:
        t = types[name].tensor_type
        assert t.elem_type == T.FLOAT16 and [d.dim_value for d in t.shape.dim] == [4, 6], name


def test_uninferable_body_leaves_the_nested_op():
    """A body that shape inference rejects (here its inputs of shapes that do not broadcast) gives
    no types: the nested Swish is not expanded (torch-mlir then refuses it naming it), never
    guessed."""
    model = _swiglu_model(T.FLOAT)
    node = model.graph.node[1]
    f32, bad = (h.make_tensor_type_proto(T.FLOAT, s) for s in ([4, 6], [5, 7]))
    body = _expand_one(node, [f32, f32], model.opset_import, _Names(model.graph))
    assert _body_types(node, [f32, f32], body, model.opset_import)  # consistent: typed
    assert _body_types(node, [f32, bad], body, model.opset_import) == {}


def test_unknown_input_type_is_not_expanded():
    model = _swiglu_model(T.FLOAT)
    del model.graph.value_info[:]  # g (the Identity's output) has no recorded type
    out, count = _expanded(model)
    assert count == 0 and [n.op_type for n in out.graph.node] == ["Identity", "SwiGLU"]
