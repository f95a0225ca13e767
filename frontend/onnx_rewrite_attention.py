"""ONNX ``Attention`` (opset 23/24) -> primitive ONNX ops, before torch-mlir (which cannot lower it).

Follows the ONNX definition (``onnx.reference.ops.op_attention``) for float32 Q/K/V with static
shapes:

* 3-D inputs ``[B, S, heads * d]`` are split into heads (Reshape + Transpose) and merged back;
* ``past_key`` / ``past_value`` are concatenated in front of K / V (axis 2) and returned as
  ``present_key`` / ``present_value``;
* grouped-query attention (``q_num_heads`` a multiple of ``kv_num_heads``): each K/V head is
  repeated for its group (Unsqueeze + Expand + Reshape, ``np.repeat`` on the head axis);
* ``QK = (Q @ K^T) * scale`` (default ``1/sqrt(d)``), then ``softcap * tanh(QK / softcap)``;
* the bias: a float ``attn_mask`` (a boolean one through ``Where(mask, 0, -inf)``; padded with
  ``-inf`` up to the total key length), plus the causal / sliding-window masks, which are
  compile-time constants (``0`` / ``-inf``, aligned bottom-right by the past length);
* the softmax of ``QK + bias``; rows whose bias is ``-inf`` everywhere give 0 (as the definition
  says), with a guard that stays exact: the bias is clamped to ``-FLT_MAX`` and the result multiplied
  by ``sign(relu(rowmax(bias) + FLT_MAX))`` (0 exactly for the fully masked rows; a row whose
  bias is ``-FLT_MAX`` everywhere, finite, would also give 0 instead of a uniform row);
* ``qk_matmul_output_mode`` 0/1 (QK after softcap), 2 (+ bias), 3 (after softmax);
* ``Y = P @ V``.

* ``nonpad_kv_seqlen`` (runtime lengths ``n[b]``, the external/static KV cache): the padding mask
  ``j < n[b]`` and the causal / sliding-window masks aligned bottom-right per batch (query row
  ``i`` at position ``i + n[b] - S``) are computed at run time on the integer lane and added as a
  ``0 / -inf`` bias ``[B, 1, S, L]``.

* float16 / bfloat16 inputs: computed in f32 between Casts (inputs widened exactly, each output
  rounded once to the input type; ``softmax_precision`` is then f32 or wider, no effect).

Refused with one line (:class:`~m100.frontend.onnx_import.FrontendError`): other input types,
``nonpad_kv_seqlen`` with a past cache (undefined), dynamic shapes.
"""

from __future__ import annotations

import math

import numpy as np

FLT_MAX = float(np.finfo(np.float32).max)


def _static_shape(graph, name: str):
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        if vi.name == name and vi.type.HasField("tensor_type"):
            dims = vi.type.tensor_type.shape.dim
            if all(d.HasField("dim_value") for d in dims):
                return [d.dim_value for d in dims]
            return None
    for init in graph.initializer:
        if init.name == name:
            return list(init.dims)
    return None


_HALF = (10, 16)  # TensorProto.FLOAT16, BFLOAT16


def _rewrite_half(node, graph, types, names, helper, numpy_helper):
    """Attention on float16 / bfloat16 Q, K, V (and a float mask / past cache of that type): the
    f32 decomposition between Casts (each input widened exactly, each output rounded once to its
    type; present_key/value round-trip exactly), or None when the types are not one half type."""
    from onnx import TensorProto

    ins = list(node.input) + [""] * (7 - len(node.input))
    half = types.get(ins[0])
    floats = [i for i in (0, 1, 2, 3, 4, 5) if ins[i] and not (i == 3 and types.get(ins[3]) ==
                                                                 TensorProto.BOOL)]
    if half not in _HALF or any(types.get(ins[i]) != half for i in floats):
        return None
    nodes, new_ins, alias, new_types = [], list(ins), {}, dict(types)
    base = node.name or node.output[0]
    for i in floats:
        w = names("attn_f32")
        nodes.append(helper.make_node("Cast", [ins[i]], [w], to=TensorProto.FLOAT,
                                      name=f"{base}/m100_Cast_in{i}"))
        new_ins[i], alias[w], new_types[w] = w, ins[i], TensorProto.FLOAT
    outs = list(node.output)
    new_outs = [names("attn_f32_out") if o else "" for o in outs]
    inner = helper.make_node("Attention", new_ins, new_outs, name=base)
    inner.attribute.extend(a for a in node.attribute if a.name != "softmax_precision")
    sub_nodes, inits = rewrite_attention(inner, graph, new_types, names, helper, numpy_helper,
                                         alias=alias)
    nodes += sub_nodes
    for o, w in zip(outs, new_outs):
        if o:
            nodes.append(helper.make_node("Cast", [w], [o], to=half, name=f"{base}/m100_Cast_{o}"))
    return nodes, inits


def rewrite_attention(node, graph, types, names, helper, numpy_helper, alias=None):
    """(nodes, initializers) computing ``node`` (an Attention), or raise FrontendError.
    ``alias``: value name -> the graph value whose static shape it has (the Casts above)."""
    from onnx import TensorProto

    from m100.frontend.onnx_import import FrontendError

    if alias is None:
        half = _rewrite_half(node, graph, types, names, helper, numpy_helper)
        if half is not None:
            return half
    alias = alias or {}

    where = f"Attention '{node.name or node.output[0]}'"
    ins = list(node.input) + [""] * (7 - len(node.input))
    q, k, v, mask, past_k, past_v, nonpad = ins[:7]
    if nonpad and (past_k or past_v):
        raise FrontendError(f"{where}: nonpad_kv_seqlen together with past_key/past_value is "
                            "not defined by ONNX")
    if nonpad and types.get(nonpad) not in (TensorProto.INT64, TensorProto.INT32):
        raise FrontendError(f"{where}: nonpad_kv_seqlen must be int64 or int32")
    for t in (q, k, v, past_k, past_v):
        if t and types.get(t) != TensorProto.FLOAT:
            raise FrontendError(f"{where}: only float32 inputs are supported")
    if mask and types.get(mask) not in (TensorProto.FLOAT, TensorProto.BOOL):
        raise FrontendError(f"{where}: attn_mask must be float32 or bool")
    shapes = {t: _static_shape(graph, alias.get(t, t)) for t in (q, k, v, mask, past_k, past_v)
              if t}
    if any(s is None for s in shapes.values()):
        raise FrontendError(f"{where}: dynamic shapes are not supported")
    a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
    outs = list(node.output) + [""] * (4 - len(node.output))
    nodes, inits = [], []
    base = node.name or node.output[0]

    def const(hint, value, dtype=np.float32):
        n = names(f"attn_{hint}")
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), n))
        return n

    def op(kind, inputs, out=None, **attrs):
        o = out or names(f"attn_{kind.lower()}")
        nodes.append(helper.make_node(kind, inputs, [o], name=f"{base}/m100_{kind}_{len(nodes)}",
                                      **attrs))
        return o

    sq, sk, sv = shapes[q], shapes[k], shapes[v]
    rank = len(sq)
    if rank == 3:
        qh, kvh = int(a.get("q_num_heads", 0)), int(a.get("kv_num_heads", 0))
        if not qh or not kvh:
            raise FrontendError(f"{where}: 3-D inputs need q_num_heads and kv_num_heads")
        B = sq[0]

        def heads(t, s, h):
            r = op("Reshape", [t, const("shape", [B, s[1], h, s[2] // h], np.int64)])
            return op("Transpose", [r], perm=[0, 2, 1, 3])

        q4, k4, v4 = heads(q, sq, qh), heads(k, sk, kvh), heads(v, sv, kvh)
        dq, dv, S = sq[2] // qh, sv[2] // kvh, sq[1]
    elif rank == 4:
        q4, k4, v4 = q, k, v
        B, qh, S, dq = sq
        kvh, dv = sk[1], sv[3]
    else:
        raise FrontendError(f"{where}: Q must be 3-D or 4-D")
    past_len = 0
    if past_k:
        past_len = shapes[past_k][2]
        k4 = op("Concat", [past_k, k4], axis=2)
        v4 = op("Concat", [past_v, v4], axis=2)
    if outs[1]:
        op("Identity", [k4], outs[1])
    if outs[2]:
        op("Identity", [v4], outs[2])
    L = past_len + sk[-2 if rank == 4 else 1]
    if qh != kvh:
        if qh % kvh:
            raise FrontendError(f"{where}: q_num_heads {qh} is not a multiple of kv_num_heads {kvh}")
        g = qh // kvh

        def repeat(t, d):
            u = op("Unsqueeze", [t, const("axes", [2], np.int64)])
            e = op("Expand", [u, const("shape", [B, kvh, g, L, d], np.int64)])
            return op("Reshape", [e, const("shape", [B, qh, L, d], np.int64)])

        k4, v4 = repeat(k4, dq), repeat(v4, dv)
    scale = float(a.get("scale", 1.0 / math.sqrt(dq)))
    qk = op("MatMul", [q4, op("Transpose", [k4], perm=[0, 1, 3, 2])])
    qk = op("Mul", [qk, const("scale", scale)])
    softcap = float(a.get("softcap", 0.0))
    if softcap > 0:
        qk = op("Mul", [op("Tanh", [op("Div", [qk, const("softcap", softcap)])]),
                        const("softcap", softcap)])
    # the static part of the bias: causal and sliding-window masks (0 / -inf), [S, L]
    i_idx = np.arange(S).reshape(S, 1) + past_len
    j_idx = np.arange(L).reshape(1, L)
    allowed = np.ones((S, L), bool)
    causal = bool(int(a.get("is_causal", 0)))
    lw, rw = int(a.get("left_window_size", -1)), int(a.get("right_window_size", -1))
    if causal and not nonpad:
        allowed &= j_idx <= i_idx
    if lw >= 0 and not nonpad:
        allowed &= (i_idx - j_idx) <= lw
    if rw >= 0 and not nonpad:
        allowed &= (j_idx - i_idx) <= rw
    static = np.where(allowed, np.float32(0), np.float32(-np.inf)).astype(np.float32)
    bias, bias_shape = None, None
    if mask:
        ms = shapes[mask]
        m = mask
        if types.get(mask) == TensorProto.BOOL:
            m = op("Where", [mask, const("zero", 0.0), const("neginf", -np.inf)])
        if ms[-1] < L:
            m = op("Concat", [m, const("pad", np.full(ms[:-1] + [L - ms[-1]], -np.inf))], axis=-1)
        bias, bias_shape = m, ms[:-1] + [L]
    if nonpad:
        # per-batch masks from the runtime lengths n[b] (integer lane): the query at row i sits at
        # position p = i + n[b] - S (bottom-right aligned); causal: j <= p; window: p - lw <= j
        # <= p + rw; padding: j < n[b]. Combined into one 0 / -inf bias [B, 1, S, L].
        it = np.int32 if types.get(nonpad) == TensorProto.INT32 else np.int64
        n_b = op("Reshape", [nonpad, const("shape", [B, 1, 1, 1], np.int64)])
        jj = const("kv_index", np.arange(L).reshape(1, 1, 1, L), it)
        ok = op("Less", [jj, n_b])
        if causal or lw >= 0 or rw >= 0:
            pos = op("Add", [n_b, const("q_index", (np.arange(S) - S).reshape(1, 1, S, 1), it)])
            if causal:
                ok = op("And", [ok, op("LessOrEqual", [jj, pos])])
            if lw >= 0:
                ok = op("And", [ok, op("GreaterOrEqual", [jj, op("Sub", [pos, const(
                    "lw", lw, it)])])])
            if rw >= 0:
                ok = op("And", [ok, op("LessOrEqual", [jj, op("Add", [pos, const(
                    "rw", rw, it)])])])
        pad_bias = op("Where", [ok, const("zero", 0.0), const("neginf", -np.inf)])
        if bias is None:
            bias = pad_bias
        else:
            bias = op("Add", [bias, pad_bias])
        bias_shape = list(np.broadcast_shapes(tuple(bias_shape or [1]), (B, 1, S, L)))
    if not allowed.all():
        if bias is None:
            bias, bias_shape = static, [S, L]
        else:
            bias = op("Add", [bias, const("static_mask", static)])
            bias_shape = list(np.broadcast_shapes(tuple(bias_shape), (S, L)))
    scores = qk
    keep = None
    if bias is not None:
        if isinstance(bias, np.ndarray):  # constant: fully masked rows are known now
            dead = np.isneginf(bias).all(axis=-1, keepdims=True)
            safe = np.maximum(bias, np.float32(-FLT_MAX))
            scores = op("Add", [qk, const("bias", safe)])
            if dead.any():
                keep = const("keep", (~dead).astype(np.float32))
            bias = const("bias_raw", bias)
        else:
            rowmax = op("ReduceMax", [bias, const("axes", [-1], np.int64)], keepdims=1)
            keep = op("Sign", [op("Relu", [op("Add", [rowmax, const("fltmax", FLT_MAX)])])])
            safe = op("Max", [bias, const("negmax", -FLT_MAX)])
            scores = op("Add", [qk, safe])
    mode = int(a.get("qk_matmul_output_mode", 0))
    if outs[3] and mode == 2:
        op("Identity", [op("Add", [qk, bias]) if bias is not None else qk], outs[3])
    elif outs[3] and mode in (0, 1):
        op("Identity", [qk], outs[3])
    p = op("Softmax", [scores], axis=-1)
    if keep is not None:
        p = op("Mul", [p, keep])
    if outs[3] and mode == 3:
        op("Identity", [p], outs[3])
    y = op("MatMul", [p, v4])
    if rank == 3:
        t = op("Transpose", [y], perm=[0, 2, 1, 3])
        op("Reshape", [t, const("shape", [B, S, qh * dv], np.int64)], outs[0])
    else:
        op("Identity", [y], outs[0])
    return nodes, inits
