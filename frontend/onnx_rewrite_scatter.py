"""ScatterElements / ScatterND (float32, static shapes) as one-hot masks, before torch-mlir (issue 12).

torch-mlir lowers both to ``tm_tensor.scatter`` (no M100 lowering; max/min of ScatterElements it
cannot lower at all). Per the ONNX definitions, with the target axis of size K (ScatterElements:
``data.shape[axis]``; ScatterND: the ``V = prod(data.shape[:m])`` rows of data viewed as
``[V, D]``, the index tuples flattened to row numbers) and ``k`` the indices (negative ones
``+ K``):

* ``M = Equal(Unsqueeze(k, axis + 1), iota_K)``: update ``j`` hits target ``t`` along ``axis``;
  ``hit = ReduceMax(M) > 0`` over the updates' axis, laid out like the target (zero-padded where
  the updates are shorter than data on the other axes);
* ``none``: the last update of each target wins (the order the ONNX reference loop and the CSU
  scatter routine use): ``W = Where(M, j + 1, 0)``, the one ``j`` with ``W == ReduceMax(W)`` is
  selected, ``ReduceSum`` of the selected update is that update exactly;
* ``add`` / ``mul`` / ``max`` / ``min``: ``data (op) ReduceSum / ReduceProd / ReduceMax / ReduceMin``
  of ``Where(M, updates, neutral)``; an untouched element is ``data`` itself (``Where(hit, ..)``).

Each is dense over ``updates x K`` elements: only when that is at most :data:`MAX_MASK` elements
(else left to torch-mlir and refused as before). An index outside ``[-K, K)`` hits nothing
(ONNX calls it an error; the element keeps ``data``).
"""

from __future__ import annotations

import math

import numpy as np

MAX_MASK = 1 << 22  # elements of the one-hot mask tensor


class _B:
    """Node builder for one rewritten node."""

    def __init__(self, node, opset, names, helper, numpy_helper):
        self.base = node.name or node.output[0]
        self.opset, self.names, self.h, self.nh = opset, names, helper, numpy_helper
        self.nodes, self.inits = [], []

    def const(self, hint, v, dt):
        n = self.names(f"scatter_{hint}")
        self.inits.append(self.nh.from_array(np.asarray(v, dt), n))
        return n

    def op(self, kind, ins, out=None, **kw):
        o = out or self.names(f"scatter_{kind.lower()}")
        self.nodes.append(self.h.make_node(kind, ins, [o], name=f"{self.base}/m100_{kind}_"
                                           f"{len(self.nodes)}", **kw))
        return o

    def reduce(self, kind, x, axis, keepdims):
        if kind == "ReduceSum" or self.opset >= 18:
            return self.op(kind, [x, self.const("axes", [axis], np.int64)], keepdims=keepdims)
        return self.op(kind, [x], axes=[axis], keepdims=keepdims)

    def unsqueeze(self, x, axis):
        if self.opset >= 13:
            return self.op("Unsqueeze", [x, self.const("uaxes", [axis], np.int64)])
        return self.op("Unsqueeze", [x], axes=[axis])


def _core(b: _B, data, k, upd, u_shape, axis, K, s_shape, reduction, out):
    """The scatter of ``upd`` (shape ``u_shape``, rank r) into ``data`` (``s_shape``) along
    ``axis`` at the normalized int64 indices ``k`` (broadcastable to ``u_shape``)."""
    r = len(u_shape)
    shape = [1] * (r + 1)
    shape[axis + 1] = K
    m = b.op("Equal", [b.unsqueeze(k, axis + 1), b.const("iota", np.arange(K).reshape(shape),
                                                          np.int64)])
    vals = b.unsqueeze(upd, axis + 1)
    pads = [0] * (2 * r)
    for d in range(r):
        if d != axis:
            pads[r + d] = s_shape[d] - u_shape[d]

    def place(x, value):  # [.. K ..] laid out like data: zero/neutral padding on the other axes
        if not any(pads):
            return x
        return b.op("Pad", [x, b.const("pads", pads, np.int64), b.const("pv", value, np.float32)],
                    mode="constant")

    hitf = place(b.reduce("ReduceMax", b.op("Cast", [m], to=1), axis, 0), 0.0)
    hit = b.op("Greater", [hitf, b.const("zero", 0.0, np.float32)])
    if reduction == "none":
        zero = b.const("zerof", 0.0, np.float32)
        jshape = [1] * (r + 1)
        jshape[axis] = u_shape[axis]
        j1 = b.const("j1", np.arange(1, u_shape[axis] + 1, dtype=np.float32).reshape(jshape),
                     np.float32)
        w = b.op("Where", [m, j1, zero])
        sel = b.op("And", [m, b.op("Equal", [w, b.reduce("ReduceMax", w, axis, 1)])])
        c = place(b.reduce("ReduceSum", b.op("Where", [sel, vals, zero]), axis, 0), 0.0)
        b.op("Where", [hit, c, data], out)
        return
    red, neutral, comb = {"add": ("ReduceSum", 0.0, "Add"), "mul": ("ReduceProd", 1.0, "Mul"),
                          "max": ("ReduceMax", -math.inf, "Max"),
                          "min": ("ReduceMin", math.inf, "Min")}[reduction]
    c = b.reduce(red, b.op("Where", [m, vals, b.const("neutral", neutral, np.float32)]), axis, 0)
    c = place(c, neutral)
    b.op("Where", [hit, b.op(comb, [data, c]), data], out)


def _attrs(node, helper) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _normalized(b: _B, idx, size):
    """int64 indices with the negative ones + ``size`` (a constant or a broadcastable tensor)."""
    from onnx import TensorProto

    k = b.op("Cast", [idx], to=TensorProto.INT64)
    neg = b.op("Less", [k, b.const("z64", 0, np.int64)])
    sz = size if isinstance(size, str) else b.const("size", size, np.int64)
    return b.op("Where", [neg, b.op("Add", [k, sz]), k])


def _scatter_elements(node, b: _B, shapes, reduction):
    data, idx, upd = node.input[:3]
    s, u = shapes.get(data), shapes.get(upd)
    if s is None or u is None or len(s) != len(u) or shapes.get(idx) != u:
        return False
    r = len(s)
    axis = int(_attrs(node, b.h).get("axis", 0)) % r
    if any(u[d] > s[d] for d in range(r)) or math.prod(u) * s[axis] > MAX_MASK:
        return False
    k = _normalized(b, idx, s[axis])
    _core(b, data, k, upd, list(u), axis, s[axis], list(s), reduction, node.output[0])
    return True


def _scatter_nd(node, b: _B, shapes, reduction):
    data, idx, upd = node.input[:3]
    s, ish, u = shapes.get(data), shapes.get(idx), shapes.get(upd)
    if s is None or ish is None or u is None or not ish:
        return False
    m = ish[-1]
    n = math.prod(ish[:-1])
    V, D = math.prod(s[:m]), math.prod(s[m:])
    if not 1 <= m <= len(s) or list(u) != list(ish[:-1]) + list(s[m:]) or n * V * D > MAX_MASK:
        return False
    if V >= 1 << 24:  # the row number travels as f32 through the stride matmul: exact below 2**24
        return False
    strides = [math.prod(s[q + 1:m]) for q in range(m)]
    k2 = b.op("Reshape", [idx, b.const("ishape", [n, m], np.int64)])
    k2 = _normalized(b, k2, b.const("dims", [s[:m]], np.int64))
    flat = b.op("MatMul", [b.op("Cast", [k2], to=1),
                           b.const("strides", np.array(strides).reshape(m, 1), np.float32)])
    from onnx import TensorProto
    flat = b.op("Cast", [flat], to=TensorProto.INT64)  # [n, 1]: exact integers
    d2 = b.op("Reshape", [data, b.const("dshape", [V, D], np.int64)])
    u2 = b.op("Reshape", [upd, b.const("ushape", [n, D], np.int64)])
    y2 = b.names("scatter_y2")
    _core(b, d2, flat, u2, [n, D], 0, V, [V, D], reduction, y2)
    b.op("Reshape", [y2, b.const("oshape", list(s), np.int64)], node.output[0])
    return True


def rewrite_scatter(nodes, graph, names, types, opset) -> tuple[list, list, int]:
    """(new node list, new initializers, count) of the rewrites above on ``nodes``."""
    if not any(n.op_type in ("ScatterElements", "ScatterND") for n in nodes):
        return list(nodes), [], 0
    from onnx import helper, numpy_helper

    from m100.frontend.onnx_rewrite import _static_shapes

    shapes = _static_shapes(graph)
    out, inits, count = [], [], 0
    for node in nodes:
        done = False
        if node.domain in ("", "ai.onnx") and node.op_type in ("ScatterElements", "ScatterND") \
                and types.get(node.input[0]) == 1 and types.get(node.input[2]) == 1:
            red = _attrs(node, helper).get("reduction", b"none")
            red = red.decode() if isinstance(red, bytes) else str(red)
            b = _B(node, opset, names, helper, numpy_helper)
            if red in ("none", "add", "mul", "max", "min"):
                fn = _scatter_elements if node.op_type == "ScatterElements" else _scatter_nd
                done = fn(node, b, shapes, red)
            if done:
                out.extend(b.nodes)
                inits.extend(b.inits)
                count += 1
        if not done:
            out.append(node)
    return out, inits, count
