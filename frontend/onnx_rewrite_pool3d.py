"""3-D MaxPool / AveragePool as two 2-D poolings, before torch-mlir (issue 12).

A 3-D window is a box, so the pooling separates: ``[N, C, D, H, W]`` is viewed as
``[N, C*D, H, W]`` and pooled over (H, W) with the node's H/W kernel, strides, dilations, pads,
``ceil_mode`` and ``count_include_pad``; the result viewed as ``[N, C, D, OH*OW]`` is pooled over
D with a ``kd x 1`` window (the D parameters), and reshaped to ``[N, C, OD, OH, OW]``.

* MaxPool: the max over a box is the max over D of the max over (H, W) (padding never wins).
* AveragePool: the ONNX divisor (the window's elements inside the input, or inside input + pads
  for ``count_include_pad``, clipped at the end for ``ceil_mode``) is a product of one count per
  axis, so ``sum / (cD * cHW) = avg_D(avg_HW)`` exactly in real arithmetic (f32 rounds twice).

Both 2-D poolings then take the 2-D paths (:mod:`.onnx_rewrite_vision` for dilations, padding,
``ceil_mode``; the CVU pool stage). Left alone (torch-mlir's 3-D form, refused by the
scheduler): the MaxPool Indices output, ``storage_order``, unknown shapes, a dilated MaxPool
window of more than 16 H x W taps (compile time).
"""

from __future__ import annotations

import numpy as np


def _pool3d(node, shapes, names, helper, numpy_helper):
    x, y = node.input[0], node.output[0]
    s, ys = shapes.get(x), shapes.get(y)
    if s is None or ys is None or len(s) != 5 or len(ys) != 5:
        return None
    if node.op_type == "MaxPool" and len(node.output) > 1 and node.output[1]:
        return None
    a = {at.name: helper.get_attribute_value(at) for at in node.attribute}
    if a.get("storage_order", 0):
        return None
    ks = list(a["kernel_shape"])
    st = list(a.get("strides", [1, 1, 1]))
    dl = list(a.get("dilations", [1, 1, 1]))
    pads = list(a.get("pads", [0] * 6))
    if node.op_type == "MaxPool" and any(v != 1 for v in dl) and ks[1] * ks[2] > 16:
        # a dilated H/W window becomes one DMA slice per tap and a Max of all of them: a 5x5 one
        # (test_maxpool_3d_dilations_use_ref_impl_large) outran the node-test time limit
        return None
    common = {k: v for k, v in a.items() if k in ("auto_pad", "ceil_mode", "count_include_pad")}
    n, c, d, h, w = s
    od, oh, ow = ys[2:]
    base = node.name or y
    nodes, inits = [], []

    def shape(hint, v):
        nm = names(f"pool3d_{hint}")
        inits.append(numpy_helper.from_array(np.array(v, np.int64), nm))
        return nm

    def mk(op, ins, out=None, **kw):
        o = out or names(f"pool3d_{op.lower()}")
        nodes.append(helper.make_node(op, ins, [o], name=f"{base}/m100_{op}_{len(nodes)}", **kw))
        return o

    explicit = a.get("auto_pad", b"NOTSET") in (b"NOTSET", "NOTSET")
    p_hw = {"pads": [pads[1], pads[2], pads[4], pads[5]]} if explicit else {}
    p_d = {"pads": [pads[0], 0, pads[3], 0]} if explicit else {}
    # dilations only where the node has them (AveragePool takes the attribute from opset 19)
    dil_hw = {"dilations": dl[1:]} if "dilations" in a else {}
    dil_d = {"dilations": [dl[0], 1]} if "dilations" in a else {}
    hw = mk(node.op_type, [mk("Reshape", [x, shape("s1", [n, c * d, h, w])])],
            kernel_shape=ks[1:], strides=st[1:], **dil_hw, **p_hw, **common)
    dd = mk(node.op_type, [mk("Reshape", [hw, shape("s2", [n, c, d, oh * ow])])],
            kernel_shape=[ks[0], 1], strides=[st[0], 1], **dil_d, **p_d, **common)
    mk("Reshape", [dd, shape("s3", [n, c, od, oh, ow])], y)
    return nodes, inits


def rewrite_pool3d(nodes, graph, names) -> tuple[list, list, int]:
    """(new node list, new initializers, count) of the rewrite above on ``nodes``."""
    if not any(nd.op_type in ("MaxPool", "AveragePool") for nd in nodes):
        return list(nodes), [], 0
    from onnx import helper, numpy_helper

    from m100.frontend.onnx_rewrite import _static_shapes, replace_nodes

    shapes = _static_shapes(graph)
    return replace_nodes(nodes, lambda node: _pool3d(node, shapes, names, helper, numpy_helper)
                         if node.op_type in ("MaxPool", "AveragePool") else None)
