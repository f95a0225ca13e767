"""ONNX reductions of a 1-D tensor kept as ``[1]`` (``keepdims=1``): ReduceMax / ReduceMin /
ArgMax / ArgMin, rewritten before torch-mlir.

torch-mlir lowers them as a max-with-index reduction to a 0-D tensor followed by a
``tensor.expand_shape`` of that 0-D tensor to ``tensor<1xT>`` with an empty reassociation. MLIR
accepts that form; xDSL's verifier does not ("expected the total number of reassociation dimensions
(0) to equal the expanded type's rank (1)"), so every such model was refused with that message
(found by the integer fuzzer, ``m100.tools.fuzz_int``, seed 13 #3; float inputs too). The input is
unsqueezed to ``[1, n]`` and reduced along axis 1 without keepdims, which gives the ``[1]`` result
directly (the same values and indices). ``noop_with_empty_axes`` and unknown ranks are left alone.

The same 0-D ``expand_shape`` comes from a max taken over the only axis of a 1-D tensor inside
other ops: ``Softmax`` / ``LogSoftmax`` / ``Hardmax`` of a 1-D tensor (its row max) and
``ReduceLogSumExp`` (found by the float fuzzer, seed 805 #35). :func:`rank1_prepass` runs before
the other rewrites (which then see the 2-D form: the f16 softmax, the Hardmax and LogSumExp
decompositions): the op runs on ``Unsqueeze(x, 0)`` along axis 1 and a ``Squeeze`` of axis 0
gives the 1-D result (the same values: one row).
"""

from __future__ import annotations

import numpy as np

OPS = ("ReduceMax", "ReduceMin", "ArgMax", "ArgMin", "ReduceLogSumExp")
ROW_OPS = ("Softmax", "LogSoftmax", "Hardmax")


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


def _axes(v: list[int], opset: int, names, helper, numpy_helper) -> tuple[list, dict, list]:
    """(extra inputs, attributes, initializers) giving Unsqueeze/Squeeze the axes ``v``."""
    if opset >= 13:
        t = numpy_helper.from_array(np.array(v, np.int64), names("rank1_axes"))
        return [t.name], {}, [t]
    return [], {"axes": v}, []


def rewrite_rank1_row(node, ranks: dict, opset: int, names, helper, numpy_helper):
    """(nodes, initializers) of a Softmax / LogSoftmax / Hardmax of a 1-D tensor on its
    ``[1, n]`` form, or None (see the module doc)."""
    if node.op_type not in ROW_OPS or ranks.get(node.input[0]) != 1:
        return None
    a = {at.name: helper.get_attribute_value(at) for at in node.attribute}
    if a.get("axis", -1) not in (0, -1):
        return None
    base = node.name or node.output[0]
    x2, y2 = names("rank1_x"), names("rank1_y")
    ui, ua, inits = _axes([0], opset, names, helper, numpy_helper)
    keep = {k: v for k, v in a.items() if k != "axis"}
    nodes = [helper.make_node("Unsqueeze", [node.input[0]] + ui, [x2],
                              name=f"{base}/m100_Unsqueeze", **ua),
             helper.make_node(node.op_type, [x2], [y2], name=base, axis=1, **keep),
             helper.make_node("Squeeze", [y2] + ui, [node.output[0]],
                              name=f"{base}/m100_Squeeze", **ua)]
    return nodes, inits


def rank1_prepass(nodes, graph, ranks: dict, types: dict, opset: int, names, helper,
                  numpy_helper) -> tuple[list, int]:
    """(nodes, count): :func:`rewrite_rank1_row` and the ReduceLogSumExp case of
    :func:`rewrite_rank1_keepdims` applied to ``nodes``; the new values get their rank, type and
    (when the input's is known) static shape recorded in ``ranks`` / ``types`` /
    ``graph.value_info`` for the rewrites that follow."""
    from m100.frontend.onnx_rewrite import _static_shapes, replace_nodes

    if not any((n.op_type in ROW_OPS or n.op_type == "ReduceLogSumExp") and
               ranks.get(n.input[0]) == 1 for n in nodes):
        return list(nodes), 0
    shapes = _static_shapes(graph)

    def one(node):
        if node.op_type == "ReduceLogSumExp":
            r = rewrite_rank1_keepdims(node, graph, ranks, opset, names, helper, numpy_helper)
        else:
            r = rewrite_rank1_row(node, ranks, opset, names, helper, numpy_helper)
        if r is None:
            return None
        x, t = node.input[0], types.get(node.input[0])
        for n in r[0]:
            if n.op_type == node.op_type and node.op_type in ROW_OPS:
                vals = list(n.input[:1]) + list(n.output)
            elif n.op_type == "Unsqueeze":
                vals = list(n.output)
            else:
                continue
            for v in vals:
                ranks[v] = 2
                if t is not None:
                    types[v] = t
                    if x in shapes:
                        graph.value_info.append(
                            helper.make_tensor_value_info(v, t, [1] + shapes[x]))
        return r

    out, inits, count = replace_nodes(nodes, one)
    graph.initializer.extend(inits)
    return out, count
