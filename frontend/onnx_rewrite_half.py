"""16-bit float ``Softmax`` / ``LogSoftmax`` -> their ONNX function bodies (each step rounded).

ONNX defines ``Softmax`` and ``LogSoftmax`` (opset >= 13) by a function body::

    m = ReduceMax(x, axes=[axis], keepdims=1);  d = Sub(x, m);  e = Exp(d)
    s = ReduceSum(e, axes=[axis], keepdims=1)
    Softmax:    y = Div(e, s)
    LogSoftmax: y = Sub(d, Log(s))

For a float16 / bfloat16 input every value of that body is a float16 / bfloat16 tensor, so the
definition rounds ``d``, ``e`` and ``s`` to the input type (``onnx.reference`` computes it that way,
and the node tests' expected outputs come from it). torch-mlir lowers these ops as PyTorch does:
widened to f32 and rounded once at the end, which differs by a few f16 ulp
(``test_attention_4d_causal_fp16_expanded``: 2 of 192 elements outside the suite's tolerance).
The rewrite emits the body itself, so the linalg carries the roundings; the CVU softmax idiom keeps
them (``Stage(SOFTMAX, iparams=(dtype,))``, docs/isa.md), so the fused softmax stays one CVU op.

float32 is left alone (its body rounds to f32, which is what the CVU computes anyway).
"""

from __future__ import annotations

import numpy as np

_HALF = (10, 16)  # TensorProto.FLOAT16, BFLOAT16


def rewrite_softmax_half(node, types, opset, names, helper, numpy_helper):
    """(nodes, initializers) of the function body of a 16-bit float ``Softmax`` / ``LogSoftmax``
    (opset >= 13), or None for other types / opsets."""
    if opset < 13 or types.get(node.input[0]) not in _HALF:
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    axis = int(attrs.get("axis", -1))
    x, y = node.input[0], node.output[0]
    base = node.name or y
    t = {k: names(f"{node.op_type.lower()}_{k}") for k in ("max", "sub", "exp", "sum", "log")}
    ax = names(f"{node.op_type.lower()}_axes")
    inits = [numpy_helper.from_array(np.array([axis], np.int64), ax)]
    mk = lambda op, ins, out, **kw: helper.make_node(op, ins, [out], name=f"{base}/m100_{op}_{out}", **kw)  # noqa: E731
    red_max = (mk("ReduceMax", [x, ax], t["max"], keepdims=1) if opset >= 18
               else mk("ReduceMax", [x], t["max"], keepdims=1, axes=[axis]))
    nodes = [red_max,
             mk("Sub", [x, t["max"]], t["sub"]),
             mk("Exp", [t["sub"]], t["exp"]),
             mk("ReduceSum", [t["exp"], ax], t["sum"], keepdims=1)]
    if node.op_type == "Softmax":
        nodes.append(mk("Div", [t["exp"], t["sum"]], y))
    else:
        nodes += [mk("Log", [t["sum"]], t["log"]), mk("Sub", [t["sub"], t["log"]], y)]
    return nodes, inits
