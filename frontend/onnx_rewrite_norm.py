"""ONNX normalizations rewritten into the ops the M100 lowering runs (float32, static shapes).

Called by :func:`m100.frontend.onnx_rewrite.rewrite_for_torch_mlir`; each function takes one node
and returns ``(nodes, initializers)`` replacing it (the node's output names kept), or None to leave
it to torch-mlir.

- ``LpNormalization`` (p 1 or 2, float32): torch-mlir divides by the norm, 0/0 = NaN where the
  ONNX definition gives 0 (``test_l2normalization_axis_0``); rewritten into ReduceL1/L2 and
  ``x / (norm + 1 - sign(norm)) * sign(norm)`` (exactly ``x / norm`` where the norm is not 0).
- ``InstanceNormalization`` (float32, static shape): torch-mlir's form is a norm over H, W that
  the scheduler's norm op (last axis) does not take; rewritten into Reshape ``[N, C, H*W]``,
  LayerNormalization over the last axis, Reshape back, per-channel scale and bias.
- ``GroupNormalization`` (float32, static shape): torch-mlir computes it in f64 (no f64
  tensors in the scheduler); rewritten like InstanceNormalization on ``[N, G, C/G*S]``.
- ``RMSNormalization`` (opset 23, float32): torch-mlir cannot lower it; rewritten per the
  definition into ``x / Sqrt(ReduceMean(x * x, axes = [axis, rank)) + epsilon) * scale``.
"""

from __future__ import annotations

import numpy as np


def lp_normalization(node, opset, names, helper, numpy_helper):
    """LpNormalization (p = 1 or 2) -> ``x / d * sign(norm)`` with ``d = norm + 1 - sign(norm)``:
    the ONNX definition gives 0 where the norm is 0 (torch-mlir divides: 0/0 = NaN)."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    p, axis = int(attrs.get("p", 2)), int(attrs.get("axis", -1))
    if p not in (1, 2):
        return None
    x, y = node.input[0], node.output[0]
    base = node.name or y
    t = {k: names(f"lpn_{k}") for k in ("norm", "sg", "one_m", "d", "q")}
    one = names("lpn_one")
    red = "ReduceL2" if p == 2 else "ReduceL1"
    if opset >= 18:
        ax = names("lpn_axes")
        inits = [numpy_helper.from_array(np.array([axis], np.int64), ax)]
        rnode = helper.make_node(red, [x, ax], [t["norm"]], keepdims=1, name=f"{base}/m100_{red}")
    else:
        inits = []
        rnode = helper.make_node(red, [x], [t["norm"]], axes=[axis], keepdims=1,
                                 name=f"{base}/m100_{red}")
    inits.append(numpy_helper.from_array(np.array(1.0, np.float32), one))
    mk = lambda op, ins, out: helper.make_node(op, ins, [out], name=f"{base}/m100_{op}_{out}")  # noqa: E731
    nodes = [rnode, mk("Sign", [t["norm"]], t["sg"]), mk("Sub", [one, t["sg"]], t["one_m"]),
             mk("Add", [t["norm"], t["one_m"]], t["d"]), mk("Div", [x, t["d"]], t["q"]),
             mk("Mul", [t["q"], t["sg"]], y)]
    return nodes, inits


def instance_norm(node, shapes, names, helper, numpy_helper):
    """InstanceNormalization of a static-shape float32 ``[N, C, ...]`` -> Reshape ``[N, C, S]``,
    LayerNormalization over the last axis (no affine; a last-axis norm is one CVU op),
    Reshape back, per-channel ``* scale + bias`` (the ONNX definition, same epsilon)."""
    shp = shapes.get(node.input[0])
    if shp is None or len(shp) < 3:
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    eps = float(attrs.get("epsilon", 1e-5))
    n, c = shp[0], shp[1]
    sp = int(np.prod(shp[2:]))
    base = node.name or node.output[0]
    t = {k: names(f"inorm_{k}") for k in ("flat", "norm", "back", "scaled", "s3", "b3",
                                              "shape1", "shape2", "cshape", "ones")}
    inits = [numpy_helper.from_array(np.array([n, c, sp], np.int64), t["shape1"]),
             numpy_helper.from_array(np.array(shp, np.int64), t["shape2"]),
             numpy_helper.from_array(np.array([c] + [1] * (len(shp) - 2), np.int64), t["cshape"]),
             numpy_helper.from_array(np.ones(sp, np.float32), t["ones"])]
    mk = lambda op, ins, out, **kw: helper.make_node(op, ins, [out], name=f"{base}/m100_{op}_{out}", **kw)  # noqa: E731
    nodes = [mk("Reshape", [node.input[0], t["shape1"]], t["flat"]),
             mk("LayerNormalization", [t["flat"], t["ones"]], t["norm"], axis=-1, epsilon=eps),
             mk("Reshape", [t["norm"], t["shape2"]], t["back"]),
             mk("Reshape", [node.input[1], t["cshape"]], t["s3"]),
             mk("Reshape", [node.input[2], t["cshape"]], t["b3"]),
             mk("Mul", [t["back"], t["s3"]], t["scaled"]),
             mk("Add", [t["scaled"], t["b3"]], node.output[0])]
    return nodes, inits


def rms_norm(node, ranks, names, helper, numpy_helper):
    """RMSNormalization of float32 ``x`` (rank known) -> ``x / Sqrt(ReduceMean(x * x) + eps) * scale``
    over the axes ``[axis, rank)`` (keepdims), as the ONNX definition computes it in float32."""
    rank = ranks.get(node.input[0])
    if rank is None:
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if int(attrs.get("stash_type", 1)) != 1:
        return None
    axis = int(attrs.get("axis", -1))
    axis = axis + rank if axis < 0 else axis
    eps = float(attrs.get("epsilon", 1e-5))
    base = node.name or node.output[0]
    t = {k: names(f"rms_{k}") for k in ("sq", "mean", "axes", "eps", "var", "rms", "norm")}
    inits = [numpy_helper.from_array(np.arange(axis, rank, dtype=np.int64), t["axes"]),
             numpy_helper.from_array(np.array(eps, np.float32), t["eps"])]
    mk = lambda op, ins, out, **kw: helper.make_node(op, ins, [out], name=f"{base}/m100_{op}_{out}", **kw)  # noqa: E731
    x = node.input[0]
    nodes = [mk("Mul", [x, x], t["sq"]),
             mk("ReduceMean", [t["sq"], t["axes"]], t["mean"], keepdims=1),
             mk("Add", [t["mean"], t["eps"]], t["var"]),
             mk("Sqrt", [t["var"]], t["rms"]),
             mk("Div", [x, t["rms"]], t["norm"]),
             mk("Mul", [t["norm"], node.input[1]], node.output[0])]
    return nodes, inits


def group_norm(node, opset, shapes, names, helper, numpy_helper):
    """GroupNormalization of a static-shape float32 ``[N, C, ...]`` -> Reshape ``[N, G, C/G*S]``,
    LayerNormalization over the last axis (no affine), Reshape ``[N, G, C/G, S]``, ``* scale +
    bias`` (per channel from opset 21, per group before), Reshape back (the ONNX definition)."""
    shp = shapes.get(node.input[0])
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    g = int(attrs.get("num_groups", 0))
    if shp is None or len(shp) < 3 or not g or shp[1] % g:
        return None
    eps = float(attrs.get("epsilon", 1e-5))
    n, c = shp[0], shp[1]
    sp = int(np.prod(shp[2:]))
    per_channel = opset >= 21
    base = node.name or node.output[0]
    t = {k: names(f"gnorm_{k}") for k in ("flat", "norm", "grp", "scaled", "aff", "s", "b",
                                              "shape1", "shape2", "shape3", "pshape", "ones")}
    pshape = [g, c // g, 1] if per_channel else [g, 1, 1]
    inits = [numpy_helper.from_array(np.array([n, g, c // g * sp], np.int64), t["shape1"]),
             numpy_helper.from_array(np.array([n, g, c // g, sp], np.int64), t["shape2"]),
             numpy_helper.from_array(np.array(shp, np.int64), t["shape3"]),
             numpy_helper.from_array(np.array(pshape, np.int64), t["pshape"]),
             numpy_helper.from_array(np.ones(c // g * sp, np.float32), t["ones"])]
    mk = lambda op, ins, out, **kw: helper.make_node(op, ins, [out], name=f"{base}/m100_{op}_{out}", **kw)  # noqa: E731
    nodes = [mk("Reshape", [node.input[0], t["shape1"]], t["flat"]),
             mk("LayerNormalization", [t["flat"], t["ones"]], t["norm"], axis=-1, epsilon=eps),
             mk("Reshape", [t["norm"], t["shape2"]], t["grp"]),
             mk("Reshape", [node.input[1], t["pshape"]], t["s"]),
             mk("Reshape", [node.input[2], t["pshape"]], t["b"]),
             mk("Mul", [t["grp"], t["s"]], t["scaled"]),
             mk("Add", [t["scaled"], t["b"]], t["aff"]),
             mk("Reshape", [t["aff"], t["shape3"]], node.output[0])]
    return nodes, inits
