"""ONNX rewrites of index-generating ops (issue 12), applied before torch-mlir.

- ``OneHot`` with a constant ``depth`` (an initializer; the node tests bind it): torch-mlir builds
  the class iota with a runtime-sized ``tensor.empty`` and reads ``depth``/``values`` with
  ``tensor.extract`` (no M100 unit runs those). Rewritten per the ONNX definition into
  ``Cast(indices -> int64)`` (non-integer indices are cast, i.e. truncated), negative indices
  ``+ depth``, ``Equal(Unsqueeze(indices, axis), iota)`` with a constant int64 iota laid along
  ``axis``, and ``Where(eq, values[1], values[0])``: an index outside ``[-depth, depth)`` matches
  no class and gives the off value everywhere.
- ``Gather`` / ``GatherElements`` / ``GatherND`` (batch_dims 0) with constant indices (an
  initializer or a Constant) into a static-shape float tensor: the scheduler's gather reads its indices
  from the program's inputs, so a constant index tensor was refused with an internal message. The
  selected element positions are computed at compile time (numpy's take / take_along_axis /
  fancy indexing of an iota, negative indices wrapped) and become runs of consecutive positions
  of the flattened input: ``Concat(Slice(Reshape(x, [-1]), run)...)``, reshaped to the output --
  data movement only (DMAs). An index out of range, or more than :data:`MAX_RUNS` runs, is
  refused in one line naming the op.
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


#: most runs of consecutive positions a constant-index gather becomes (one Slice each)
MAX_RUNS = 256
_FLOATS = (1, 10, 16)  # TensorProto FLOAT, FLOAT16, BFLOAT16


def _constants(graph, numpy_helper) -> dict:
    out = {t.name: t for t in graph.initializer}
    for n in graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            out[n.output[0]] = n.attribute[0].t
    return {k: numpy_helper.to_array(v) for k, v in out.items()}


def _gather_const(node, graph, shapes, types, consts, names, helper, numpy_helper):
    from m100.frontend.onnx_import import FrontendError

    data, idx_name = node.input[0], node.input[1]
    dshape = shapes.get(data)
    if idx_name not in consts or data in consts or not dshape or types.get(data) not in _FLOATS:
        return None  # (integer data: shape arithmetic, which torch-mlir folds)
    a = _attrs(node, helper)
    op, where = node.op_type, f"{node.op_type} '{node.name or node.output[0]}'"
    idx = consts[idx_name].astype(np.int64)
    pos = np.arange(int(np.prod(dshape)), dtype=np.int64).reshape(dshape)
    if op == "GatherND":
        if int(a.get("batch_dims", 0)) or idx.ndim == 0 or idx.shape[-1] > len(dshape):
            return None
        dims = np.array(dshape[:idx.shape[-1]], np.int64)
        bad = (idx < -dims) | (idx >= dims)
        idx = np.where(idx < 0, idx + dims, idx)
    else:
        axis = int(a.get("axis", 0))
        axis = axis + len(dshape) if axis < 0 else axis
        n = dshape[axis]
        bad = (idx < -n) | (idx >= n)
        idx = np.where(idx < 0, idx + n, idx)
    if bad.any():
        raise FrontendError(f"{where}: constant index out of range for input '{data}' of shape "
                            f"{list(dshape)}")
    if op == "Gather":
        sel = np.take(pos, idx, axis=axis)
    elif op == "GatherElements":
        if idx.ndim != len(dshape):
            return None
        sel = np.take_along_axis(pos, idx, axis=axis)
    else:
        sel = pos[tuple(np.moveaxis(idx, -1, 0))]
    flat = sel.reshape(-1)
    if flat.size == 0:
        return None
    cuts = np.flatnonzero(np.diff(flat) != 1) + 1
    runs = list(zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [flat.size]])))
    if len(runs) > MAX_RUNS:
        raise FrontendError(f"{where}: constant indices that select {len(runs)} separate runs of "
                            f"elements (more than {MAX_RUNS}) are not supported")
    base, nodes, inits = node.name or node.output[0], [], []

    def const(hint, value):
        nm = names(f"gather_{hint}")
        inits.append(numpy_helper.from_array(np.asarray(value, np.int64), nm))
        return nm

    def mk(op_type, inputs, out=None, **kw):
        o = out or names(f"gather_{op_type.lower()}")
        nodes.append(helper.make_node(op_type, inputs, [o],
                                      name=f"{base}/m100_{op_type}_{len(nodes)}", **kw))
        return o

    x = mk("Reshape", [data, const("flat", [-1])])
    parts = [mk("Slice", [x, const("s", [flat[b]]), const("e", [flat[e - 1] + 1]), const("a", [0])])
             for b, e in runs]
    cat = parts[0] if len(parts) == 1 else mk("Concat", parts, axis=0)
    mk("Reshape", [cat, const("shape", list(sel.shape))], node.output[0])
    return nodes, inits


def rewrite_index(nodes, graph, names, ranks, types) -> tuple[list, list, int]:
    """(new node list, new initializers, count) of the rewrites above on ``nodes`` (the nodes of
    ``graph``, maybe already rewritten; ``graph`` gives the initializers and value shapes)."""
    gathers = ("Gather", "GatherElements", "GatherND")
    if not any(n.op_type in ("OneHot", "EyeLike") + gathers for n in nodes):
        return list(nodes), [], 0
    from onnx import helper, numpy_helper

    from m100.frontend.onnx_rewrite import _static_shapes, replace_nodes

    shapes = _static_shapes(graph)
    consts = _constants(graph, numpy_helper) if any(n.op_type in gathers for n in nodes) else {}

    def one(node):
        if node.op_type in gathers and node.domain in ("", "ai.onnx"):
            return _gather_const(node, graph, shapes, types, consts, names, helper,
                                     numpy_helper)
        if node.op_type == "OneHot":
            return _onehot(node, graph, ranks, names, helper, numpy_helper)
        if node.op_type == "EyeLike":
            return _eyelike(node, shapes, types, names, helper, numpy_helper)
        return None

    return replace_nodes(nodes, one)
