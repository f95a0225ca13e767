"""``Slice`` with negative steps: a positive-step ``Slice`` of the same elements, then a reversal.

torch-mlir lowers a negative-step ``Slice`` through ``torch.aten.flip`` and dynamic shapes
(``tensor.cast`` to ``?`` dims), which the static M100 schedule refuses. The elements a
negative-step slice selects along an axis of size ``d`` are, per the ONNX definition
(``starts``/``ends`` made non-negative by adding ``d``, then clamped to ``[0, d - 1]`` and
``[-1, d - 1]`` for a negative step)::

    idx = range(start, end, step)            # step < 0: descending

The same set in ascending order is ``range(idx[-1], idx[0] + 1, -step)``: a positive-step slice
(which torch-mlir lowers statically). The result is that slice reversed along the axis: a ``Gather``
with the constant indices ``n - 1, ..., 0`` (an exact copy). Axes with a positive step keep their
``starts``/``ends``/``steps`` as given.

Applies when ``starts``/``ends``/``axes``/``steps`` are constants (initializers), the data's
shape is static and at least one step is negative; an empty selection is left alone (the static
schedule refuses zero-size tensors with its own message).
"""

from __future__ import annotations


def rewrite_negative_step_slice(node, graph, shapes, names, helper, numpy_helper):
    """(nodes, initializers) replacing ``node``, or None to keep it."""
    import numpy as np

    if len(node.input) < 5 or not node.input[4]:
        return None
    init = {i.name: i for i in graph.initializer}
    if any(n and n not in init for n in node.input[1:5]):
        return None
    shp = shapes.get(node.input[0])
    if not shp or any(not isinstance(d, int) or d < 0 for d in shp):
        return None

    def ints(i):
        return [int(v) for v in numpy_helper.to_array(init[node.input[i]]).reshape(-1)]

    starts, ends, steps = ints(1), ints(2), ints(4)
    r = len(shp)
    axes = ints(3) if node.input[3] else list(range(len(starts)))
    if not any(s < 0 for s in steps) or 0 in steps:
        return None
    axes = [a % r for a in axes]
    p_starts, p_ends, p_steps, flip = [], [], [], []
    for a, b, e, s in zip(axes, starts, ends, steps):
        d = shp[a]
        if s > 0:
            p_starts.append(b), p_ends.append(e), p_steps.append(s)
            continue
        b = b + d if b < 0 else b
        e = e + d if e < 0 else e
        b = min(max(b, 0), d - 1)
        e = min(max(e, -1), d - 1)
        idx = range(b, e, s)
        if len(idx) == 0:
            return None
        p_starts.append(idx[-1]), p_ends.append(idx[0] + 1), p_steps.append(-s)
        flip.append((a, len(idx)))
    base = node.name or node.output[0]
    inits = []

    def const(hint, v):
        n = names(f"nsl_{hint}")
        inits.append(numpy_helper.from_array(np.array(v, np.int64), n))
        return n

    cur = names("nsl_pos")
    nodes = [helper.make_node("Slice", [node.input[0], const("starts", p_starts),
                                        const("ends", p_ends), const("axes", axes),
                                        const("steps", p_steps)], [cur],
                              name=f"{base}/m100_SlicePos")]
    for k, (a, n) in enumerate(flip):
        out = node.output[0] if k == len(flip) - 1 else names("nsl_rev")
        nodes.append(helper.make_node("Gather", [cur, const("rev", list(range(n - 1, -1, -1)))],
                                      [out], axis=a, name=f"{base}/m100_Reverse{a}"))
        cur = out
    return nodes, inits
