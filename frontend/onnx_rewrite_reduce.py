"""ONNX reductions of a 1-D tensor kept as ``[1]`` (``keepdims=1``): ReduceMax / ReduceMin /
ArgMax / ArgMin, rewritten before torch-mlir.

torch-mlir lowers them as a max-with-index reduction to a 0-D tensor followed by a
``tensor.expand_shape`` of that 0-D tensor to ``tensor<1xT>`` with an empty reassociation. MLIR
accepts that form; xDSL's verifier does not ("expected the total number of reassociation dimensions
(0) to equal the expanded type's rank (1)"), so every such model was refused with that message
(found by the integer fuzzer, ``m100.tools.fuzz_int``, seed 13 #3; float inputs too). The input is
unsqueezed to ``[1, n]`` and reduced along axis 1 without keepdims, which gives the ``[1]`` result
directly (the same values and indices). ``noop_with_empty_axes`` and unknown ranks are left alone.
"""

from __future__ import annotations

import numpy as np

OPS = ("ReduceMax", "ReduceMin", "ArgMax", "ArgMin")


def _const(graph, name: str, numpy_helper):
    for init in graph.initializer:
        if init.name == name:
            return numpy_helper.to_array(init)
    for n in graph.node:
        if n.op_type == "Constant" and n.output[0] == name and n.attribute \
                and n.attribute[0].name == "value":
            return numpy_helper.to_array(n.attribute[0].t)
    return None


def rewrite_rank1_keepdims(node, graph, ranks: dict, opset: int, names, helper, numpy_helper):
    """(nodes, initializers) replacing ``node``, or None (see the module doc)."""
    if node.op_type not in OPS or ranks.get(node.input[0]) != 1:
        return None
    a = {at.name: helper.get_attribute_value(at) for at in node.attribute}
    if not a.get("keepdims", 1) or a.get("noop_with_empty_axes", 0):
        return None
    reduce_ = node.op_type.startswith("Reduce")
    if reduce_ and len(node.input) > 1 and node.input[1]:
        axes = _const(graph, node.input[1], numpy_helper)
        if axes is None or [int(v) for v in np.ravel(axes)] not in ([0], [-1]):
            return None
    elif reduce_ and a.get("axes", [0]) not in ([0], [-1]):
        return None
    elif not reduce_ and a.get("axis", 0) not in (0, -1):
        return None
    base = node.name or node.output[0]
    x2 = names("rank1_x")
    inits = [numpy_helper.from_array(np.array([0], np.int64), names("rank1_axes0"))]
    nodes = [helper.make_node("Unsqueeze", [node.input[0], inits[0].name], [x2],
                              name=f"{base}/m100_Unsqueeze")]
    keep = {k: v for k, v in a.items() if k not in ("keepdims", "axes", "axis")}
    if reduce_ and opset >= 18:
        inits.append(numpy_helper.from_array(np.array([1], np.int64), names("rank1_axes1")))
        nodes.append(helper.make_node(node.op_type, [x2, inits[1].name], [node.output[0]],
                                      name=base, keepdims=0, **keep))
    elif reduce_:
        nodes.append(helper.make_node(node.op_type, [x2], [node.output[0]], name=base,
                                      keepdims=0, axes=[1], **keep))
    else:
        nodes.append(helper.make_node(node.op_type, [x2], [node.output[0]], name=base,
                                      keepdims=0, axis=1, **keep))
    return nodes, inits
