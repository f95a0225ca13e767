"""ONNX graph rewrites that work around torch-mlir defects, applied before torch-mlir sees the model.

Run by :func:`m100.frontend.onnx_import.prepare_model` after shape inference (the MatMul rewrite needs
operand ranks). Only the top-level graph is rewritten. Every rewritten node keeps its output name, so
graph outputs and downstream consumers are unchanged.

- ``Gelu(approximate="tanh")``: torch-mlir lowers it with sqrt(2/pi) = 0.797724 (true 0.7978845608).
  Rewritten into primitive ops per the ONNX definition
  ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))`` (x^3 as x*x*x), constants computed in
  float64 and stored in x's element type.
- ``MatMul`` with one 1-D operand and the other of rank >= 3: torch-mlir cannot lower it. Rewritten per
  numpy matmul semantics: a 1-D left operand ``(K,)`` becomes ``(1, K)`` (Unsqueeze axis 0) and the
  inserted dimension -2 is squeezed from the result; a 1-D right operand ``(K,)`` becomes ``(K, 1)``
  (Unsqueeze axis 1) and dimension -1 is squeezed. Other MatMuls are left alone.
- ``Gemm`` with ``alpha != 1`` and no C: torch-mlir drops alpha (issue 10). Rewritten into
  ``Gemm(alpha=1)`` (transA/transB kept) followed by ``Mul`` by the scalar alpha (in A's element
  type). Gemms with C are lowered correctly and left alone.
- ``SpaceToDepth(mode="CRD")`` (opset 25): torch-mlir ignores ``mode`` and computes DCR, a wrong
  result; refused with a :class:`~m100.frontend.onnx_import.FrontendError`.
- ``ReduceLogSumExp`` of float32 (opset >= 13): torch-mlir computes it in f64, which the scheduler
  has no tensors of; rewritten into the numerically stable f32 form
  ``Log(ReduceSum(Exp(x - ReduceMax(x, keepdims=1)))) + ReduceMax(x)`` with the node's axes and
  keepdims (not when it is the identity: empty axes with ``noop_with_empty_axes``).
- ``LpNormalization``, ``InstanceNormalization``, ``GroupNormalization``, ``RMSNormalization``
  (float32): per their ONNX definitions from ops the scheduler runs, by
  :mod:`m100.frontend.onnx_rewrite_norm`.
- ``Hardmax`` (float32, static shape, opset >= 13): torch-mlir's form is an arg-max (a CSU
  routine the scheduler does not lower); rewritten into max, ``x == max``, a prefix count by a
  matmul with an upper-triangular ones matrix and ``1`` at the first maximum.
- ``CenterCropPad`` with a constant ``shape``: torch-mlir computes the window with
  ``tensor.extract``; rewritten into Slice (start ``d // 2``) and a zero Pad per the definition.
- ``Swish`` (float32), ``FlexAttention``: torch-mlir cannot lower them; replaced by their ONNX
  function bodies by :mod:`m100.frontend.onnx_rewrite_functions`.
- ``Softmax`` / ``LogSoftmax`` of float16 / bfloat16 (opset >= 13): torch-mlir computes them in
  f32 and rounds once; the ONNX definition is a function body whose every step rounds to the input
  type. Rewritten into that body by :mod:`m100.frontend.onnx_rewrite_half`.
- ``Attention`` (opset 23/24): torch-mlir cannot lower it; decomposed into MatMul / Softmax /
  masks per the ONNX definition by :mod:`m100.frontend.onnx_rewrite_attention`.
- ``NegativeLogLikelihoodLoss`` / ``SoftmaxCrossEntropyLoss`` (float32): torch-mlir cannot lower
  ``nll_loss_forward`` beyond 2-D (and fails on SCE's constants); a one-hot ``Equal`` against the
  class index, ``Where``, ``ReduceSum`` by :mod:`m100.frontend.onnx_rewrite_training`.
- ``CumSum`` / ``CumProd`` (constant axis, static shape, float32/int32/int64): torch-mlir's
  ``tm_tensor.scan`` (CumProd: nothing) -> a log-step scan of Slice/Concat shifts and Add/Mul by
  :mod:`m100.frontend.onnx_rewrite_scan`.
- ``Dropout`` with a ``training_mode`` input (torch-mlir cannot lower ``aten.dropout``): a seeded
  compile-time mask, ``Where`` (same module).
- ``RNN`` / ``GRU`` / ``LSTM`` (float32): torch-mlir's time loop (``scf.for``) runs on no M100 unit
  and its reverse / bidirectional forms do not lower; unrolled over the static sequence by
  :mod:`m100.frontend.onnx_rewrite_rnn`. Of other types, an ``LSTM`` with peephole weights (input
  ``P``) is refused: torch-mlir drops ``P`` (``test_lstm_with_peepholes`` gave wrong numbers).
"""

from __future__ import annotations

import math

import numpy as np

from m100.frontend.onnx_rewrite_norm import (group_norm, instance_norm, lp_normalization,
                                             rms_norm)


def _ranks_and_types(graph) -> tuple[dict[str, int], dict[str, int]]:
    ranks: dict[str, int] = {}
    types: dict[str, int] = {}
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        tt = vi.type.tensor_type
        if vi.type.HasField("tensor_type"):
            if tt.elem_type:
                types[vi.name] = tt.elem_type
            if tt.HasField("shape"):
                ranks[vi.name] = len(tt.shape.dim)
    for init in graph.initializer:
        ranks[init.name] = len(init.dims)
        types[init.name] = init.data_type
    return ranks, types


def _static_shapes(graph) -> dict[str, list[int]]:
    """Value name -> its static shape (only fully known shapes)."""
    out: dict[str, list[int]] = {}
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            dims = vi.type.tensor_type.shape.dim
            if all(d.HasField("dim_value") for d in dims):
                out[vi.name] = [d.dim_value for d in dims]
    for init in graph.initializer:
        out[init.name] = list(init.dims)
    return out


class _Names:
    def __init__(self, graph):
        self.used = {init.name for init in graph.initializer}
        self.used |= {v.name for v in list(graph.input) + list(graph.output) + list(graph.value_info)}
        for n in graph.node:
            self.used |= set(n.input) | set(n.output)
            if n.name:
                self.used.add(n.name)
        self.k = 0

    def __call__(self, hint: str) -> str:
        while True:
            self.k += 1
            name = f"_m100_{hint}_{self.k}"
            if name not in self.used:
                self.used.add(name)
                return name


def _opset(model) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return imp.version
    return 0


def _gelu_tanh(node, elem_type, names, helper, numpy_helper):
    """The nodes and scalar initializers computing Gelu(tanh) of node.input[0] into node.output[0]."""
    from onnx import TensorProto

    np_dtype = helper.tensor_dtype_to_np_dtype(elem_type or TensorProto.FLOAT)
    x, y = node.input[0], node.output[0]
    consts = {
        "half": 0.5,
        "one": 1.0,
        "c3": 0.044715,
        "sqrt2pi": math.sqrt(2.0 / math.pi),
    }
    inits, cname = [], {}
    for key, val in consts.items():
        cname[key] = names(f"gelu_{key}")
        inits.append(numpy_helper.from_array(np.array(val, dtype=np_dtype), cname[key]))
    t = {k: names(f"gelu_{k}") for k in ("x2", "x3", "cx3", "inner", "scaled", "tanh", "onep", "hx")}
    base = node.name or y
    mk = lambda op, ins, out, i: helper.make_node(op, ins, [out], name=f"{base}/m100_{op}_{i}")  # noqa: E731
    nodes = [
        mk("Mul", [x, x], t["x2"], 0),
        mk("Mul", [t["x2"], x], t["x3"], 1),
        mk("Mul", [cname["c3"], t["x3"]], t["cx3"], 2),
        mk("Add", [x, t["cx3"]], t["inner"], 3),
        mk("Mul", [cname["sqrt2pi"], t["inner"]], t["scaled"], 4),
        mk("Tanh", [t["scaled"]], t["tanh"], 5),
        mk("Add", [cname["one"], t["tanh"]], t["onep"], 6),
        mk("Mul", [cname["half"], x], t["hx"], 7),
        mk("Mul", [t["hx"], t["onep"]], y, 8),
    ]
    return nodes, inits


def _axes(opset, axes, names, helper, numpy_helper):
    """(extra input list, attribute kwargs, initializers) for Unsqueeze/Squeeze ``axes`` at ``opset``."""
    if opset >= 13:
        name = names("axes")
        return [name], {}, [numpy_helper.from_array(np.array(axes, dtype=np.int64), name)]
    return [], {"axes": axes}, []


def _matmul_vec(node, ranks, opset, names, helper, numpy_helper):
    a, b = node.input[0], node.input[1]
    ra, rb = ranks.get(a), ranks.get(b)
    if ra is None or rb is None:
        return None
    base = node.name or node.output[0]
    if ra == 1 and rb == 1:  # a dot product (torch-mlir: linalg.dot): [1, K] @ [K, 1], squeezed
        ua, ub, prod = names("matmul_row"), names("matmul_col"), names("matmul_prod")
        e0, a0, i0 = _axes(opset, [0], names, helper, numpy_helper)
        e1, a1, i1 = _axes(opset, [1], names, helper, numpy_helper)
        e01, a01, i01 = _axes(opset, [0, 1], names, helper, numpy_helper)
        return [helper.make_node("Unsqueeze", [a, *e0], [ua], name=f"{base}/m100_UnsqueezeA", **a0),
                helper.make_node("Unsqueeze", [b, *e1], [ub], name=f"{base}/m100_UnsqueezeB", **a1),
                helper.make_node("MatMul", [ua, ub], [prod], name=f"{base}/m100_MatMul"),
                helper.make_node("Squeeze", [prod, *e01], [node.output[0]],
                                 name=f"{base}/m100_Squeeze", **a01)], i0 + i1 + i01
    if ra == 1 and rb >= 3:
        vec, unsq_axis, sq_axis, left = a, 0, -2, True
    elif rb == 1 and ra >= 3:
        vec, unsq_axis, sq_axis, left = b, 1, -1, False
    else:
        return None
    mat_vec = names("matmul_vec2d")
    prod = names("matmul_prod")
    extra_u, attr_u, inits_u = _axes(opset, [unsq_axis], names, helper, numpy_helper)
    extra_s, attr_s, inits_s = _axes(opset, [sq_axis], names, helper, numpy_helper)
    unsq = helper.make_node("Unsqueeze", [vec, *extra_u], [mat_vec], name=f"{base}/m100_Unsqueeze", **attr_u)
    ins = [mat_vec, b] if left else [a, mat_vec]
    mm = helper.make_node("MatMul", ins, [prod], name=f"{base}/m100_MatMul")
    sq = helper.make_node("Squeeze", [prod, *extra_s], [node.output[0]], name=f"{base}/m100_Squeeze", **attr_s)
    return [unsq, mm, sq], inits_u + inits_s


def _gemm_alpha(node, elem_type, names, helper, numpy_helper):
    """Gemm with ``alpha != 1`` and no C -> Gemm(alpha=1) then Mul by alpha (None otherwise)."""
    from onnx import TensorProto

    has_c = len(node.input) > 2 and node.input[2] != ""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    alpha = float(attrs.get("alpha", 1.0))
    if has_c or alpha == 1.0:
        return None
    np_dtype = helper.tensor_dtype_to_np_dtype(elem_type or TensorProto.FLOAT)
    base = node.name or node.output[0]
    prod, cname = names("gemm_prod"), names("gemm_alpha")
    attrs["alpha"] = 1.0
    attrs.pop("beta", None)  # beta only scales C, which is absent
    gemm = helper.make_node("Gemm", list(node.input[:2]), [prod], name=f"{base}/m100_Gemm", **attrs)
    mul = helper.make_node("Mul", [prod, cname], [node.output[0]], name=f"{base}/m100_Mul")
    return [gemm, mul], [numpy_helper.from_array(np.array(alpha, dtype=np_dtype), cname)]


def _logsumexp(node, opset, names, helper, numpy_helper):
    """ReduceLogSumExp (torch-mlir computes it in f64, which the scheduler has no tensors of) ->
    the stable f32 form ``log(sum(exp(x - max_keep(x)))) + max(x)`` with the node's axes (attribute
    or input) and keepdims; None when it would be the identity (empty axes + noop_with_empty_axes,
    left to torch-mlir)."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    keep = int(attrs.get("keepdims", 1))
    x = node.input[0]
    axes_in = node.input[1:2] if len(node.input) > 1 and node.input[1] else []
    if attrs.get("noop_with_empty_axes", 0) and not axes_in and "axes" not in attrs:
        return None
    ax_attr = {"axes": attrs["axes"]} if "axes" in attrs else {}
    # ReduceSum takes its axes as an input from opset 13 on (the other reductions from 18)
    sum_axes, sum_attr, inits = axes_in, ax_attr, []
    if ax_attr and opset >= 13:
        a = numpy_helper.from_array(np.array(attrs["axes"], np.int64), names("lse_axes"))
        sum_axes, sum_attr, inits = [a.name], {}, [a]
    base = node.name or node.output[0]
    t = {k: names(f"lse_{k}") for k in ("m1", "d", "e", "s", "l", "m2")}
    mk = lambda op, ins, out, **kw: helper.make_node(op, ins, [out], name=f"{base}/m100_{op}_{out}", **kw)  # noqa: E731
    nodes = [
        mk("ReduceMax", [x, *axes_in], t["m1"], keepdims=1, **ax_attr),
        mk("Sub", [x, t["m1"]], t["d"]),
        mk("Exp", [t["d"]], t["e"]),
        mk("ReduceSum", [t["e"], *sum_axes], t["s"], keepdims=keep, **sum_attr),
        mk("Log", [t["s"]], t["l"]),
        mk("ReduceMax", [x, *axes_in], t["m2"], keepdims=keep, **ax_attr),
        mk("Add", [t["l"], t["m2"]], node.output[0]),
    ]
    return nodes, inits


def _center_crop_pad(node, graph, shapes, names, helper, numpy_helper):
    """CenterCropPad with a constant ``shape`` (an initializer) and a static input shape -> Slice
    (the centred window, start ``d // 2``) then Pad with zeros (``d // 2`` before, the rest after),
    per the ONNX definition; torch-mlir's form computes the window with tensor.extract."""
    from onnx import numpy_helper as nh

    init = {i.name: i for i in graph.initializer}
    x, y = node.input[0], node.output[0]
    shp = shapes.get(x)
    if shp is None or node.input[1] not in init:
        return None
    target = [int(v) for v in nh.to_array(init[node.input[1]]).reshape(-1)]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    r = len(shp)
    axes = [int(a) % r for a in attrs.get("axes", list(range(r)))]
    starts, ends, c_axes = [], [], []
    pads = [0] * (2 * r)
    for a, t in zip(axes, target):
        d = shp[a] - t
        if d > 0:
            starts.append(d // 2)
            ends.append(d // 2 + t)
            c_axes.append(a)
        elif d < 0:
            pads[a], pads[r + a] = (-d) // 2, -d - (-d) // 2
    base = node.name or y
    nodes, inits, cur = [], [], x

    def const(hint, v):
        n = names(f"ccp_{hint}")
        inits.append(numpy_helper.from_array(np.array(v, np.int64), n))
        return n

    if c_axes:
        out = y if not any(pads) else names("ccp_crop")
        nodes.append(helper.make_node("Slice", [cur, const("starts", starts), const("ends", ends),
                                                const("axes", c_axes)], [out],
                                      name=f"{base}/m100_Slice"))
        cur = out
    if any(pads):
        nodes.append(helper.make_node("Pad", [cur, const("pads", pads)], [y], mode="constant",
                                      name=f"{base}/m100_Pad"))
    if not nodes:
        nodes.append(helper.make_node("Identity", [x], [y], name=f"{base}/m100_Identity"))
    return nodes, inits


def _hardmax(node, opset, shapes, names, helper, numpy_helper):
    """Hardmax (opset >= 13, float32, static shape) without an arg-max: along the last axis (the
    axis transposed there and back), ``eq = (x == max(x))`` as 0/1, the running count of maxima
    ``c = eq @ U`` (U upper-triangular ones: a TCU matmul, exact on small integers), and
    ``y = eq * relu(1 - |c - 1|)``: 1 exactly at the first maximum (ONNX: the first index)."""
    shp = shapes.get(node.input[0])
    if shp is None or opset < 13:
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    r = len(shp)
    a = int(attrs.get("axis", -1)) % r
    n = shp[a]
    base = node.name or node.output[0]
    inits = []

    def const(hint, v, dt=np.float32):
        nm = names(f"hmax_{hint}")
        inits.append(numpy_helper.from_array(np.asarray(v, dt), nm))
        return nm

    nodes = []

    def op(kind, ins, out=None, **kw):
        o = out or names(f"hmax_{kind.lower()}")
        nodes.append(helper.make_node(kind, ins, [o], name=f"{base}/m100_{kind}_{len(nodes)}", **kw))
        return o

    perm = [d for d in range(r) if d != a] + [a]
    x = node.input[0] if a == r - 1 else op("Transpose", [node.input[0]], perm=perm)
    m = (op("ReduceMax", [x, const("axes", [-1], np.int64)], keepdims=1) if opset >= 18
         else op("ReduceMax", [x], keepdims=1, axes=[-1]))
    eq = op("Cast", [op("Equal", [x, m])], to=1)
    c = op("MatMul", [eq, const("upper", np.triu(np.ones((n, n), np.float32)))])
    one = const("one", 1.0)
    first = op("Relu", [op("Sub", [one, op("Abs", [op("Sub", [c, one])])])])
    inv = [perm.index(d) for d in range(r)]
    if a == r - 1:
        op("Mul", [eq, first], node.output[0])
    else:
        op("Transpose", [op("Mul", [eq, first])], node.output[0], perm=inv)
    return nodes, inits


def _self_compare(node, types, names, helper):
    """Equal / GreaterOrEqual / LessOrEqual of a float tensor with itself -> ``Not(IsNaN(x))``.

    torch-mlir's pipeline folds ``x == x`` to a constant ``true``, which is wrong for NaN elements
    (IEEE: NaN compares unordered, so ``NaN == NaN`` is false): the usual ``x == x`` NaN test
    compiled silently to "no NaN anywhere" (test/e2e/test_miscompiles.py). ``>=`` / ``<=`` are not
    folded today but take the same form so that a future fold cannot bring the bug back; ``IsNaN``
    is lowered without that fold. ``Greater`` / ``Less`` of a value with itself are false for NaN too.
    """
    if len(node.input) != 2 or node.input[0] != node.input[1] or \
            types.get(node.input[0]) not in (1, 10, 11, 16):  # f32, f16, f64, bf16
        return None
    base = node.name or node.output[0]
    nan = names("selfcmp_isnan")
    return [helper.make_node("IsNaN", [node.input[0]], [nan], name=f"{base}/m100_IsNaN"),
            helper.make_node("Not", [nan], [node.output[0]], name=f"{base}/m100_Not")], []


def replace_nodes(nodes, rewrite) -> tuple[list, list, int]:
    """(new node list, new initializers, count): every default-domain node for which
    ``rewrite(node)`` returns ``(nodes, initializers)`` is replaced by those nodes; the rest stay."""
    out, inits, count = [], [], 0
    for node in nodes:
        repl = rewrite(node) if node.domain in ("", "ai.onnx") else None
        if repl is None:
            out.append(node)
        else:
            out.extend(repl[0])
            inits.extend(repl[1])
            count += 1
    return out, inits, count


def rewrite_for_torch_mlir(model):
    """Apply the rewrites above to ``model`` (shape-inferred) in place; return the number rewritten."""
    from onnx import helper, numpy_helper

    graph = model.graph
    # string graph inputs compared by Equal: received as int32 ids (frontend/onnx_rewrite_string.py)
    from m100.frontend.onnx_rewrite_string import string_boundary

    string_count = string_boundary(graph)
    ranks, types = _ranks_and_types(graph)
    names = _Names(graph)
    opset = _opset(model)
    new_nodes, new_inits = [], []
    # ops torch-mlir cannot lower at all, replaced by their ONNX function body (Swish, FlexAttention)
    from m100.frontend.onnx_rewrite_functions import rewrite_functions

    nodes, count = rewrite_functions(graph.node, graph, model.opset_import, names)
    count += string_count
    # ops over the only axis of a 1-D tensor, on their [1, n] form first (the rewrites below
    # then see the 2-D op)
    from m100.frontend.onnx_rewrite_reduce import rank1_prepass

    nodes, n_rank1 = rank1_prepass(nodes, graph, ranks, types, opset, names, helper, numpy_helper)
    count += n_rank1
    for node in nodes:
        repl = None
        if node.domain in ("", "ai.onnx"):
            if node.op_type == "Gelu":
                approx = next((a.s.decode() for a in node.attribute if a.name == "approximate"), "none")
                if approx == "tanh":
                    repl = _gelu_tanh(node, types.get(node.input[0]), names, helper, numpy_helper)
            elif node.op_type in ("Equal", "GreaterOrEqual", "LessOrEqual"):
                repl = _self_compare(node, types, names, helper)
            elif node.op_type == "MatMul":
                repl = _matmul_vec(node, ranks, opset, names, helper, numpy_helper)
            elif node.op_type == "ReduceLogSumExp" and opset >= 13 and \
                    types.get(node.input[0]) == 1:  # float32
                repl = _logsumexp(node, opset, names, helper, numpy_helper)
            elif node.op_type == "LpNormalization" and types.get(node.input[0]) == 1:
                repl = lp_normalization(node, opset, names, helper, numpy_helper)
            elif node.op_type == "InstanceNormalization" and types.get(node.input[0]) == 1 \
                    and opset >= 17:
                repl = instance_norm(node, _static_shapes(graph), names, helper, numpy_helper)
            elif node.op_type == "CenterCropPad" and opset >= 18:
                repl = _center_crop_pad(node, graph, _static_shapes(graph), names, helper,
                                        numpy_helper)
            elif node.op_type == "GroupNormalization" and types.get(node.input[0]) == 1 \
                    and opset >= 18:
                repl = group_norm(node, opset, _static_shapes(graph), names, helper, numpy_helper)
            elif node.op_type == "Hardmax" and types.get(node.input[0]) == 1:
                repl = _hardmax(node, opset, _static_shapes(graph), names, helper, numpy_helper)
            elif node.op_type == "RMSNormalization" and types.get(node.input[0]) == 1 \
                    and opset >= 18:
                repl = rms_norm(node, ranks, names, helper, numpy_helper)
            elif node.op_type in ("Softmax", "LogSoftmax"):
                from m100.frontend.onnx_rewrite_half import rewrite_softmax_half
                repl = rewrite_softmax_half(node, types, opset, names, helper, numpy_helper)
            elif node.op_type == "Attention":
                from m100.frontend.onnx_rewrite_attention import rewrite_attention
                repl = rewrite_attention(node, graph, types, names, helper, numpy_helper)
            elif node.op_type in ("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"):
                from m100.frontend.onnx_rewrite_training import rewrite_loss
                repl = rewrite_loss(node, _static_shapes(graph), types, names, helper, numpy_helper)
            elif node.op_type in ("CumSum", "CumProd") and len(node.input) > 1:
                from m100.frontend.onnx_rewrite_scan import rewrite_scan
                repl = rewrite_scan(node, graph, _static_shapes(graph), types, names, helper,
                                    numpy_helper)
            elif node.op_type == "Dropout":
                from m100.frontend.onnx_rewrite_training import rewrite_dropout
                repl = rewrite_dropout(node, graph, _static_shapes(graph), types, names, helper,
                                       numpy_helper)
            elif node.op_type in ("ReduceMax", "ReduceMin", "ArgMax", "ArgMin"):
                from m100.frontend.onnx_rewrite_reduce import rewrite_rank1_keepdims
                repl = rewrite_rank1_keepdims(node, graph, ranks, opset, names, helper,
                                              numpy_helper)
            elif node.op_type == "Pow":  # integer ** integer by square-and-multiply (exact)
                from m100.frontend.onnx_rewrite_ipow import rewrite_int_pow
                repl = rewrite_int_pow(node, types, names, helper, numpy_helper)
            elif node.op_type == "Mod":  # float fmod=1 through arith.remf (exact)
                from m100.frontend.onnx_rewrite_fmod import rewrite_float_fmod
                repl = rewrite_float_fmod(node, types, names, helper, numpy_helper)
            elif node.op_type == "Slice":  # negative steps: a positive-step Slice + reversal
                from m100.frontend.onnx_rewrite_slice import rewrite_negative_step_slice
                repl = rewrite_negative_step_slice(node, graph, _static_shapes(graph), names,
                                                   helper, numpy_helper)
            elif node.op_type == "Gemm":
                repl = _gemm_alpha(node, types.get(node.input[0]), names, helper, numpy_helper)
            elif node.op_type == "SpaceToDepth":
                mode = next((a.s.decode() for a in node.attribute if a.name == "mode"), "DCR")
                if mode != "DCR":
                    from m100.frontend.onnx_import import FrontendError
                    raise FrontendError(f"SpaceToDepth '{node.name or node.output[0]}': mode {mode} "
                                        "is not supported (torch-mlir lowers every mode as DCR)")
            elif node.op_type in ("RNN", "GRU", "LSTM") and types.get(node.input[0]) == 1:
                from m100.frontend.onnx_rewrite_rnn import rewrite_rnn
                repl = rewrite_rnn(node, graph, _static_shapes(graph), names, helper,
                                   numpy_helper)
            elif node.op_type == "LSTM" and len(node.input) > 7 and node.input[7]:
                from m100.frontend.onnx_import import FrontendError
                raise FrontendError(f"LSTM '{node.name or next((o for o in node.output if o), '')}': peephole weights (input "
                                    "P) are not supported (torch-mlir drops them)")
        if repl is None:
            new_nodes.append(node)
        else:
            new_nodes.extend(repl[0])
            new_inits.extend(repl[1])
            count += 1
    # index-generating ops (issue 12): OneHot with a constant depth, EyeLike of a static shape
    # (frontend/onnx_rewrite_index.py)
    from m100.frontend.onnx_rewrite_index import rewrite_index

    new_nodes, i_inits, i_count = rewrite_index(new_nodes, graph, names, ranks, types)
    new_inits += i_inits
    count += i_count
    # padded int8/uint8 MaxPool: an explicit Pad by the type's smallest value (torch-mlir pads
    # some by 0), before the unsigned flip below (frontend/onnx_rewrite_pool.py)
    from m100.frontend.onnx_rewrite_pool import integer_maxpool_pads

    new_nodes, i_inits, i_count = integer_maxpool_pads(new_nodes, graph, names, types)
    new_inits += i_inits
    count += i_count
    # unsigned-integer ops torch-mlir lowers signed (frontend/onnx_rewrite_unsigned.py)
    from m100.frontend.onnx_rewrite_unsigned import rewrite_unsigned

    new_nodes, i_inits, i_count = rewrite_unsigned(new_nodes, graph, names, types, opset)
    new_inits += i_inits
    count += i_count
    # Cast to int16/uint16 as a table Gather (torch-mlir has no such Cast;
    # frontend/onnx_rewrite_cast16.py)
    from m100.frontend.onnx_rewrite_cast16 import rewrite_cast16

    new_nodes, i_inits, i_count = rewrite_cast16(new_nodes, names, types, opset)
    new_inits += i_inits
    count += i_count
    # ScatterElements / ScatterND as one-hot masks, 3-D pooling as two 2-D poolings,
    # CausalConvWithState / LinearAttention per their definitions (frontend/onnx_rewrite_*.py)
    from m100.frontend.onnx_rewrite_pool3d import rewrite_pool3d
    from m100.frontend.onnx_rewrite_recurrent import rewrite_recurrent
    from m100.frontend.onnx_rewrite_scatter import rewrite_scatter

    reinfer = False
    for rw in (lambda ns: rewrite_scatter(ns, graph, names, types, opset),
               lambda ns: rewrite_pool3d(ns, graph, names),
               lambda ns: rewrite_recurrent(ns, graph, names, types)):
        new_nodes, i_inits, i_count = rw(new_nodes)
        new_inits += i_inits
        count += i_count
        reinfer = reinfer or bool(i_count)
    if count:
        graph.ClearField("node")
        graph.node.extend(new_nodes)
        graph.initializer.extend(new_inits)
    if reinfer:  # the vision rewrites below read the shapes of the new 2-D poolings
        import onnx

        model.CopyFrom(onnx.shape_inference.infer_shapes(model, strict_mode=False))
        graph = model.graph
    # vision operators (issue 12): 1-D -> 2-D, LRN, LpPool, Resize, reflect/edge Pad,
    # ConvTranspose, dilated MaxPool, AveragePool without the padding (frontend/onnx_rewrite_vision.py)
    from m100.frontend.onnx_rewrite_vision import rewrite_vision

    count += rewrite_vision(model, names)
    graph = model.graph
    # quantized operators (issue 11): QLinearConv/QLinearMatMul -> QDQ, int4 DequantizeLinear and
    # MatMulNBits -> float weights (frontend/onnx_rewrite_quant.py)
    from m100.frontend.onnx_rewrite_quant import rewrite_quantized

    q_nodes, q_inits, q_count, dead = rewrite_quantized(graph, names, ranks, types)
    if q_count:
        graph.ClearField("node")
        graph.node.extend(q_nodes)
        kept = [i for i in graph.initializer if i.name not in dead]
        graph.ClearField("initializer")
        graph.initializer.extend(kept + q_inits)
        new_inits = new_inits + q_inits
        count += q_count
    if count and new_inits:
        if model.ir_version < 4:  # initializers must also be graph inputs before IR version 4
            graph.input.extend(
                helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in new_inits
            )
    return count
