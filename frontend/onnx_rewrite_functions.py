"""ONNX ops that torch-mlir cannot lower, replaced by their ONNX function body before it runs.

Some ONNX ops are *defined* by a function body of other ONNX ops (the schema carries it; the node
tests' ``*_expanded`` cases are those bodies). For the ops in :data:`EXPAND` torch-mlir has no
lowering at all ("torch-mlir cannot lower ONNX op ..."), while the body lowers and runs exactly:
the node is replaced by the body that ``onnx`` itself expands for the node tests
(``onnx.backend.test.case.node.function_testcase_helper``: the schema's function, or its
context-dependent function built for the node's attributes and input types, at the model's opset;
the node's attributes and their defaults substituted, internal values renamed with a prefix unique
to the node). The node's output names are kept.

- ``Swish`` (opset 24, float32): ``x * Sigmoid(alpha * x)`` (alpha cast to x's type).
- ``FlexAttention`` (ai.onnx.preview 1, float32 / float16): the scaled ``Q @ K^T`` (GQA heads
  expanded), the ``score_mod`` / ``prob_mod`` subgraphs inlined, Softmax, ``@ V`` (node tests: 10
  of the 11 cases pass, float64 is refused; before, none).

Ops whose body needs types or attributes this does not handle stay as they are (torch-mlir then
refuses them in one line naming the op).
"""

from __future__ import annotations

#: op type -> the element types (TensorProto codes) of the first input expanded (those checked by
#: the node tests)
EXPAND: dict[str, tuple[int, ...]] = {"Swish": (1,), "FlexAttention": (1, 10)}
#: the domains of those ops
_DOMAINS = ("", "ai.onnx", "ai.onnx.preview")


def _type_of(graph, name):
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        if vi.name == name and vi.type.HasField("tensor_type"):
            return vi.type
    for init in graph.initializer:
        if init.name == name:
            from onnx import helper

            return helper.make_tensor_type_proto(init.data_type, list(init.dims))
    return None


def rewrite_functions(nodes, graph, opset_imports, names):
    """(nodes, count): each node of :data:`EXPAND` (its first input of an expanded type, every
    input's type known) replaced by its function body."""
    import onnx
    from onnx.backend.test.case.node import function_testcase_helper

    out, count = [], 0
    for node in nodes:
        types = [_type_of(graph, i) for i in node.input if i]
        if node.domain not in _DOMAINS or node.op_type not in EXPAND or not types \
                or any(t is None for t in types) \
                or types[0].tensor_type.elem_type not in EXPAND[node.op_type]:
            out.append(node)
            continue
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        tag = names(f"{node.op_type.lower()}_fn").replace("/", "_")
        expanded, _ = function_testcase_helper(copy, types, tag, list(opset_imports))
        if len(expanded) != 1:  # several function versions: none chosen here
            out.append(node)
            continue
        body = list(expanded[0][0])
        for i, b in enumerate(body):
            b.name = f"{node.name or node.output[0]}/m100_fn_{b.op_type}_{i}"
        out.extend(body)
        count += 1
    return out, count
