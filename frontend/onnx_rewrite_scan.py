"""ONNX ``CumSum`` / ``CumProd`` -> a log-step scan of primitive ONNX ops, before torch-mlir (issue 12).

torch-mlir lowers CumSum to ``tm_tensor.scan`` (a sequential loop the M100 does not compile) and
cannot lower CumProd at all. Run by :func:`m100.frontend.onnx_rewrite.rewrite_for_torch_mlir`
(top-level graph, after shape inference); every rewritten node keeps its output name.

With a constant ``axis`` (an initializer; the ONNX backend binds a graph-input axis, a shape
parameter) and a static shape, along the axis of length ``n``:

* ``exclusive``: the input shifted by one first (the identity element, 0 or 1, in front);
* then ``ceil(log2 n)`` steps ``y = y (+ or *) shift(y, s)`` for ``s = 1, 2, 4, ...``, where
  ``shift`` is a Concat of an identity block of ``s`` rows with the first ``n - s`` rows of ``y``
  (a Slice; DMAs only) -- the Hillis-Steele scan: element ``i`` ends up combining elements
  ``i - 2^k + 1 .. i``, i.e. every element before it once;
* ``reverse``: the same with the shift running the other way (the identity block after the last
  ``n - s`` rows).

Each step is one elementwise CVU op on the whole tensor. Integer (int32; int64 held as checked
int32) results are exact (an overflow faults, as every integer CVU result). Floating-point
results add (multiply) in a tree order where ONNX Runtime goes sequentially: each is exact up to
f32 rounding of a different association (within the node tests' tolerance), not bit-identical.

Refused in one line: float64 (the M100 has no f64; never computed in f32 silently), float16 /
bfloat16 (a rounding per step would differ from a sequential f16 sum). Left to torch-mlir (which
refuses them): a runtime axis, dynamic shapes, other types.
"""

from __future__ import annotations

import numpy as np

_OK_TYPES = {1: np.float32, 6: np.int32, 7: np.int64}  # FLOAT, INT32, INT64


def rewrite_scan(node, graph, shapes, types, names, helper, numpy_helper):
    """(nodes, initializers) computing a CumSum / CumProd ``node``, or None (left to torch-mlir)."""
    from onnx import numpy_helper as nh

    x, axis_name = node.input[0], node.input[1]
    shape = shapes.get(x)
    np_t = _OK_TYPES.get(types.get(x))
    inits = {i.name: i for i in graph.initializer}
    if types.get(x) in (10, 11, 16):  # FLOAT16, DOUBLE, BFLOAT16
        from onnx import helper as _h

        from m100.frontend.onnx_import import FrontendError
        tname = np.dtype(_h.tensor_dtype_to_np_dtype(types[x])).name
        raise FrontendError(f"{node.op_type} '{node.name or node.output[0]}': {tname} is not "
                            "supported (float32, int32 and int64 are)")
    if shape is None or np_t is None or axis_name not in inits or not shape:
        return None
    r = len(shape)
    axis = int(nh.to_array(inits[axis_name]).reshape(-1)[0])
    if not -r <= axis < r:
        from m100.frontend.onnx_import import FrontendError
        raise FrontendError(f"{node.op_type} '{node.name or node.output[0]}': axis {axis} is "
                            f"out of range for rank {r}")
    axis %= r
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    exclusive, reverse = int(attrs.get("exclusive", 0)), int(attrs.get("reverse", 0))
    n = shape[axis]
    combine = "Add" if node.op_type == "CumSum" else "Mul"
    ident_val = 0 if node.op_type == "CumSum" else 1
    base = node.name or node.output[0]
    nodes, new_inits = [], []

    def const(hint, value, dtype=np.int64):
        nm = names(f"scan_{hint}")
        new_inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), nm))
        return nm

    def op(kind, ins, out=None, **kw):
        o = out or names(f"scan_{kind.lower()}")
        nodes.append(helper.make_node(kind, ins, [o], name=f"{base}/m100_{kind}_{len(nodes)}", **kw))
        return o

    ax = const("axis", [axis])

    def shift(y, s):
        """y moved by s along the axis (towards the end, or the start when reversed), the
        identity element filling the s vacated rows."""
        blk = list(shape)
        blk[axis] = s
        fill = const("ident", np.full(blk, ident_val, np_t), np_t)
        if reverse:
            body = op("Slice", [y, const("start", [s]), const("end", [n]), ax])
            return op("Concat", [body, fill], axis=axis)
        body = op("Slice", [y, const("start", [0]), const("end", [n - s]), ax])
        return op("Concat", [fill, body], axis=axis)

    y = node.input[0]
    if exclusive:
        y = shift(y, 1) if n > 1 else const("ident_all", np.full(shape, ident_val, np_t), np_t)
    steps = []
    s = 1
    while s < n:
        steps.append(s)
        s *= 2
    if not steps:
        op("Identity", [y], node.output[0])
        return nodes, new_inits
    for i, s in enumerate(steps):
        y = op(combine, [y, shift(y, s)], node.output[0] if i == len(steps) - 1 else None)
    return nodes, new_inits
