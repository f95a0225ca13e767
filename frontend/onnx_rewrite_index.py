"""ONNX rewrites of index-generating ops (issue 12), applied before torch-mlir.

- ``OneHot`` with a constant ``depth`` (an initializer; the node tests bind it): torch-mlir builds
  the class iota with a runtime-sized ``tensor.empty`` and reads ``depth``/``values`` with
  ``tensor.extract`` (no M100 unit runs those). Rewritten per the ONNX definition into
  ``Cast(indices -> int64)`` (non-integer indices are cast, i.e. truncated), negative indices
  ``+ depth``, ``Equal(Unsqueeze(indices, axis), iota)`` with a constant int64 iota laid along
  ``axis``, and ``Where(eq, values[1], values[0])``: an index outside ``[-depth, depth)`` matches
  no class and gives the off value everywhere.
- ``Mod`` of unsigned integers: torch-mlir computes it with ``remsi`` on the signless bits (a
  uint8 200 is read as -56: 200 % 7 gave 0). uint8: the operands are cast to int64 (zero
  extension), the Mod runs signed on the exact values, the result is cast back. uint32/uint64
  graph inputs (range-checked to [0, 2**31) at run time) are left as they are; other uint16/32/64
  Mods are refused with one line (torch-mlir cannot lower their Cast).
- ``EyeLike`` of a static-shape input: the result depends only on the input's shape, ``k`` and
  ``dtype``: replaced by the constant (torch-mlir's form writes the shifted diagonal with a
  ``tensor.insert_slice`` the scheduler does not take).
"""

from __future__ import annotations

import numpy as np


def _attrs(node, helper) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _onehot(node, graph, ranks, names, helper, numpy_helper):
    from onnx import TensorProto

    init = {i.name: i for i in graph.initializer}
    ind, dep, vals = node.input[0], node.input[1], node.input[2]
    if dep not in init or ind not in ranks:
        return None
    d = numpy_helper.to_array(init[dep]).reshape(-1)
    if d.size != 1:
        return None
    depth = int(d[0])  # a non-integer depth is cast to int64 (ONNX)
    if depth < 1:
        return None
    r = ranks[ind]
    axis = int(_attrs(node, helper).get("axis", -1))
    if not -r - 1 <= axis <= r:
        return None
    axis %= r + 1
    base = node.name or node.output[0]
    nodes, inits = [], []

    def const(hint, arr):
        n = names(f"onehot_{hint}")
        inits.append(numpy_helper.from_array(np.asarray(arr), n))
        return n

    def mk(op, ins, hint, **kw):
        out = names(f"onehot_{hint}")
        nodes.append(helper.make_node(op, ins, [out], name=f"{base}/m100_{op}_{hint}", **kw))
        return out

    ci = mk("Cast", [ind], "i64", to=TensorProto.INT64)
    neg = mk("Less", [ci, const("zero", np.array(0, np.int64))], "neg")
    adj = mk("Add", [ci, const("depth", np.array(depth, np.int64))], "adj")
    ni = mk("Where", [neg, adj, ci], "idx")
    un = mk("Unsqueeze", [ni, const("axis", np.array([axis], np.int64))], "unsq")
    shape = [1] * (r + 1)
    shape[axis] = depth
    eq = mk("Equal", [un, const("iota", np.arange(depth, dtype=np.int64).reshape(shape))], "eq")
    one = const("one", np.array([1], np.int64))
    zero = const("zero1", np.array([0], np.int64))
    two = const("two", np.array([2], np.int64))
    on = mk("Slice", [vals, one, two], "on")
    off = mk("Slice", [vals, zero, one], "off")
    nodes.append(helper.make_node("Where", [eq, on, off], [node.output[0]],
                                  name=f"{base}/m100_Where"))
    return nodes, inits


def _eyelike(node, shapes, types, names, helper, numpy_helper):
    shp = shapes.get(node.input[0])
    if shp is None or len(shp) != 2:
        return None
    a = _attrs(node, helper)
    dt = int(a.get("dtype", types.get(node.input[0], 0)))
    try:
        npt = helper.tensor_dtype_to_np_dtype(dt)
    except Exception:  # noqa: BLE001 - an element type numpy has no type for: left alone
        return None
    eye = np.eye(shp[0], shp[1], k=int(a.get("k", 0))).astype(npt)
    n = names("eyelike")
    t = numpy_helper.from_array(eye, n)
    t.data_type = dt
    return [helper.make_node("Identity", [n], [node.output[0]],
                             name=f"{node.name or node.output[0]}/m100_Identity")], [t]


_UNSIGNED = (2, 4, 12, 13)  # TensorProto UINT8, UINT16, UINT32, UINT64


def _mod_unsigned(node, graph, types, names, helper):
    t = types.get(node.input[0])
    if t not in _UNSIGNED or types.get(node.input[1]) != t:
        return None
    from onnx import TensorProto

    if t != TensorProto.UINT8:
        # torch-mlir cannot lower a Cast from uint16/32/64. uint32/uint64 graph inputs are
        # range-checked to [0, 2**31) by the runtime (held as i32), so its remsi is exact on
        # them; a computed value may be a wrapped pattern, and uint16 inputs arrive as the same
        # (possibly negative) i16 bits: refused
        inputs = {i.name for i in graph.input} - {i.name for i in graph.initializer}
        if t != TensorProto.UINT16 and all(x in inputs for x in node.input[:2]):
            return None
        from m100.frontend.onnx_import import FrontendError
        raise FrontendError(f"Mod '{node.name or node.output[0]}' of "
                            f"{TensorProto.DataType.Name(t).lower()} is not supported (torch-mlir "
                            "computes it signed; only uint8, or uint32/uint64 graph inputs)")

    base = node.name or node.output[0]
    a, b, m = names("umod_a"), names("umod_b"), names("umod")
    nodes = [helper.make_node("Cast", [node.input[0]], [a], to=TensorProto.INT64,
                              name=f"{base}/m100_Cast_a"),
             helper.make_node("Cast", [node.input[1]], [b], to=TensorProto.INT64,
                              name=f"{base}/m100_Cast_b"),
             helper.make_node("Mod", [a, b], [m], name=f"{base}/m100_Mod",
                              **{at.name: helper.get_attribute_value(at) for at in node.attribute}),
             helper.make_node("Cast", [m], [node.output[0]], to=t, name=f"{base}/m100_Cast")]
    return nodes, []


def rewrite_index(nodes, graph, names, ranks, types) -> tuple[list, list, int]:
    """(new node list, new initializers, count) of the rewrites above on ``nodes`` (the nodes of
    ``graph``, maybe already rewritten; ``graph`` gives the initializers and value shapes)."""
    if not any(n.op_type in ("OneHot", "EyeLike", "Mod") for n in nodes):
        return list(nodes), [], 0
    from onnx import helper, numpy_helper

    from m100.frontend.onnx_rewrite import _static_shapes, replace_nodes

    shapes = _static_shapes(graph)

    def one(node):
        if node.op_type == "OneHot":
            return _onehot(node, graph, ranks, names, helper, numpy_helper)
        if node.op_type == "EyeLike":
            return _eyelike(node, shapes, types, names, helper, numpy_helper)
        if node.op_type == "Mod":
            return _mod_unsigned(node, graph, types, names, helper)
        return None

    return replace_nodes(nodes, one)
