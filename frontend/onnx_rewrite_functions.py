"""ONNX ops that torch-mlir cannot lower, replaced by their ONNX function body before it runs.

Some ONNX ops are *defined* by a function body of other ONNX ops (the schema carries it; the node
tests' ``*_expanded`` cases are those bodies). For the ops in :data:`EXPAND` torch-mlir has no
lowering at all ("torch-mlir cannot lower ONNX op ..."), while the body lowers and runs exactly:
the node is replaced by the body that ``onnx`` itself expands for the node tests
(``onnx.backend.test.case.node.function_testcase_helper``: the schema's function, or its
context-dependent function built for the node's attributes and input types, at the model's opset;
the node's attributes and their defaults substituted, internal values renamed with a prefix unique
to the node). The node's output names are kept.

- ``Swish`` (opset 24, float32 / float16): ``x * Sigmoid(alpha * x)`` (alpha cast to x's type).
- ``SwiGLU`` (opset 28, float32 / float16): ``Swish_alpha(A) * B``; its body calls ``Swish``, which
  is expanded in turn (below).
- ``FlexAttention`` (ai.onnx.preview 1, float32 / float16): the scaled ``Q @ K^T`` (GQA heads
  expanded), the ``score_mod`` / ``prob_mod`` subgraphs inlined, Softmax, ``@ V`` (node tests: 10
  of the 11 cases pass, float64 is refused; before, none).

**Nested bodies.** A body may call another op of :data:`EXPAND` (SwiGLU's calls Swish), whose
inputs may be values internal to the body: their types are not in the graph. The body is then
type-inferred on its own (:func:`_body_types`: a model of just the body, its inputs typed as the
node's inputs, through ``onnx.shape_inference`` in strict mode), and its nodes are expanded again
with those types, up to :data:`MAX_DEPTH` levels. (``onnx.inliner`` inlines model-local functions
only, not schema function bodies, so it does not apply.)

Ops whose body needs types or attributes this does not handle stay as they are (torch-mlir then
refuses them in one line naming the op).
"""

from __future__ import annotations

#: op type -> the element types (TensorProto codes) of the first input expanded (those checked by
#: the node tests: float32 = 1, float16 = 10)
EXPAND: dict[str, tuple[int, ...]] = {"Swish": (1, 10), "SwiGLU": (1, 10),
                                      "FlexAttention": (1, 10)}
#: the domains of those ops
_DOMAINS = ("", "ai.onnx", "ai.onnx.preview")
#: how deep function bodies are expanded inside expanded bodies
MAX_DEPTH = 4


def _graph_types(graph) -> dict:
    """value name -> TypeProto of the tensors whose type the graph records."""
    from onnx import helper

    out = {init.name: helper.make_tensor_type_proto(init.data_type, list(init.dims))
           for init in graph.initializer}
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            out.setdefault(vi.name, vi.type)
    return out


def _expandable(node, types: dict):
    """The input types of ``node`` if it is to be expanded, else None."""
    if node.domain not in _DOMAINS or node.op_type not in EXPAND:
        return None
    in_types = [types.get(i) for i in node.input if i]
    if not in_types or any(t is None for t in in_types) \
            or in_types[0].tensor_type.elem_type not in EXPAND[node.op_type]:
        return None
    return in_types


def _body_types(node, in_types, body, opset_imports) -> dict:
    """value name -> TypeProto of every value of ``body`` (the expansion of ``node``, whose inputs
    have types ``in_types``), by ONNX shape inference of the body alone; {} if it fails (the
    nested ops then stay unexpanded and are refused later naming them)."""
    import onnx
    from onnx import helper

    inputs = [helper.make_value_info(name, t) for name, t in zip([i for i in node.input if i],
                                                                 in_types)]
    outputs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
    g = helper.make_graph(body, "m100_fn_body", inputs, outputs)
    m = helper.make_model(g, opset_imports=list(opset_imports))
    try:
        inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    except Exception:  # noqa: BLE001 -- an un-inferable body: leave its nested ops alone
        return {}
    return _graph_types(inferred.graph)


def _expand_nodes(nodes, types: dict, opset_imports, names, depth: int):
    out, count = [], 0
    for node in nodes:
        in_types = _expandable(node, types) if depth < MAX_DEPTH else None
        body = _expand_one(node, in_types, opset_imports, names) if in_types else None
        if body is None:
            out.append(node)
            continue
        count += 1
        if any(b.op_type in EXPAND and b.domain in _DOMAINS for b in body):
            inner = _body_types(node, in_types, body, opset_imports)
            body, n = _expand_nodes(body, inner, opset_imports, names, depth + 1)
            count += n
        out.extend(body)
    return out, count


def _expand_one(node, in_types, opset_imports, names):
    """The function body replacing ``node`` (its nodes named after it), or None."""
    import onnx
    from onnx.backend.test.case.node import function_testcase_helper

    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    tag = names(f"{node.op_type.lower()}_fn").replace("/", "_")
    expanded, _ = function_testcase_helper(copy, in_types, tag, list(opset_imports))
    if len(expanded) != 1:  # several function versions: none chosen here
        return None
    body = list(expanded[0][0])
    for i, b in enumerate(body):
        b.name = f"{node.name or node.output[0]}/m100_fn_{b.op_type}_{i}"
    return body


def rewrite_functions(nodes, graph, opset_imports, names):
    """(nodes, count): each node of :data:`EXPAND` (its first input of an expanded type, every
    input's type known) replaced by its function body, and the ops of :data:`EXPAND` inside that
    body expanded in turn (count: every node expanded, nested ones included)."""
    return _expand_nodes(list(nodes), _graph_types(graph), opset_imports, names, 0)
